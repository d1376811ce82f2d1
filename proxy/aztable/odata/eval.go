package odata

import (
	"bytes"
	"cmp"
	"math"
	"strings"
	"time"

	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

// truth is three-valued: a comparison whose property is missing from the
// entity, or holds a value of another type, is unknown rather than false.
// Azure only compares like types and never matches a missing property —
// "Opt ne 'x'" skips entities without Opt — and unknown is how that stays
// true under not: "not (Opt eq 'x')" skips them as well, like SQL's NULL.
// and / or follow Kleene's rules; only a definite true selects an entity.
type truth int8

const (
	isFalse truth = iota
	isTrue
	isUnknown
)

func truthOf(b bool) truth {
	if b {
		return isTrue
	}
	return isFalse
}

func (c *Compare) Eval(e *tablecodec.Entity) bool      { return c.eval(e) == isTrue }
func (b *BoolProperty) Eval(e *tablecodec.Entity) bool { return b.eval(e) == isTrue }
func (c *Const) Eval(e *tablecodec.Entity) bool        { return c.Value }
func (a *And) Eval(e *tablecodec.Entity) bool          { return a.eval(e) == isTrue }
func (o *Or) Eval(e *tablecodec.Entity) bool           { return o.eval(e) == isTrue }
func (n *Not) Eval(e *tablecodec.Entity) bool          { return n.eval(e) == isTrue }

func (c *Const) eval(*tablecodec.Entity) truth { return truthOf(c.Value) }

func (a *And) eval(e *tablecodec.Entity) truth {
	l := a.L.eval(e)
	if l == isFalse {
		return isFalse
	}
	r := a.R.eval(e)
	if r == isFalse {
		return isFalse
	}
	if l == isUnknown || r == isUnknown {
		return isUnknown
	}
	return isTrue
}

func (o *Or) eval(e *tablecodec.Entity) truth {
	l := o.L.eval(e)
	if l == isTrue {
		return isTrue
	}
	r := o.R.eval(e)
	if r == isTrue {
		return isTrue
	}
	if l == isUnknown || r == isUnknown {
		return isUnknown
	}
	return isFalse
}

func (n *Not) eval(e *tablecodec.Entity) truth {
	switch n.X.eval(e) {
	case isTrue:
		return isFalse
	case isFalse:
		return isTrue
	}
	return isUnknown
}

// lookup finds a property, the system ones included.
func lookup(e *tablecodec.Entity, name string) (tablecodec.Property, bool) {
	switch name {
	case "PartitionKey":
		return tablecodec.Property{Name: name, Type: tablecodec.EdmString, Value: e.PartitionKey}, true
	case "RowKey":
		return tablecodec.Property{Name: name, Type: tablecodec.EdmString, Value: e.RowKey}, true
	case "Timestamp":
		return tablecodec.Property{Name: name, Type: tablecodec.EdmDateTime, Value: e.Timestamp}, true
	}
	return e.Get(name)
}

func (b *BoolProperty) eval(e *tablecodec.Entity) truth {
	p, ok := lookup(e, b.Property)
	if !ok || p.Type != tablecodec.EdmBoolean {
		return isUnknown
	}
	return truthOf(p.Value.(bool))
}

// unordered is the comparison result involving NaN: only ne holds.
const unordered = 2

func (c *Compare) eval(e *tablecodec.Entity) truth {
	p, ok := lookup(e, c.Property)
	if !ok {
		return isUnknown
	}
	r, ok := compareValues(p, c.Value)
	if !ok {
		return isUnknown
	}
	if r == unordered {
		return truthOf(c.Op == Ne)
	}
	switch c.Op {
	case Eq:
		return truthOf(r == 0)
	case Ne:
		return truthOf(r != 0)
	case Gt:
		return truthOf(r > 0)
	case Ge:
		return truthOf(r >= 0)
	case Lt:
		return truthOf(r < 0)
	}
	return truthOf(r <= 0) // Le
}

func isNumeric(t tablecodec.EdmType) bool {
	return t == tablecodec.EdmInt32 || t == tablecodec.EdmInt64 || t == tablecodec.EdmDouble
}

// compareValues orders a property value against a literal: -1, 0, 1, or
// unordered (NaN); ok is false when the types are not comparable. Int32,
// Int64 and Double compare numerically with each other (exactly, even for
// int64 values a double cannot represent); other types only with
// themselves. Strings compare ordinally by UTF-8 bytes, the key order.
func compareValues(p tablecodec.Property, lit Literal) (int, bool) {
	if isNumeric(p.Type) && isNumeric(lit.Type) {
		return compareNumbers(p.Value, lit.Value), true
	}
	if p.Type != lit.Type {
		return 0, false
	}
	switch v := p.Value.(type) {
	case string:
		return strings.Compare(v, lit.Value.(string)), true
	case bool:
		w := lit.Value.(bool)
		switch {
		case v == w:
			return 0, true
		case w:
			return -1, true
		}
		return 1, true
	case time.Time:
		return cmp.Compare(tablecodec.Ticks(v), tablecodec.Ticks(lit.Value.(time.Time))), true
	case tablecodec.GUID:
		w := lit.Value.(tablecodec.GUID)
		return bytes.Compare(v[:], w[:]), true
	case []byte:
		return bytes.Compare(v, lit.Value.([]byte)), true
	}
	return 0, false
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int32:
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

func compareNumbers(a, b any) int {
	ai, aInt := asInt(a)
	bi, bInt := asInt(b)
	switch {
	case aInt && bInt:
		return cmp.Compare(ai, bi)
	case aInt:
		if r := compareFloatInt(b.(float64), ai); r != unordered {
			return -r
		}
		return unordered
	case bInt:
		return compareFloatInt(a.(float64), bi)
	}
	af, bf := a.(float64), b.(float64)
	if math.IsNaN(af) || math.IsNaN(bf) {
		return unordered
	}
	return cmp.Compare(af, bf)
}

// compareFloatInt orders f against i without rounding i to a double.
func compareFloatInt(f float64, i int64) int {
	switch {
	case math.IsNaN(f):
		return unordered
	case f >= 1<<63:
		return 1
	case f < -(1 << 63):
		return -1
	}
	t := math.Trunc(f) // now exactly representable as int64
	if c := cmp.Compare(int64(t), i); c != 0 {
		return c
	}
	return cmp.Compare(f, t) // the fraction decides
}
