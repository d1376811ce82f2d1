package odata

import (
	"bytes"
	"cmp"
	"math"
	"strings"
	"time"

	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

// Eval implementations. A comparison whose property is missing from the
// entity, or holds a value of another type, is false: the service compares
// only like types and never matches a missing property ("Opt ne 'x'"
// skips entities without Opt). not, and and or are plain boolean logic on
// top, so "not (Opt eq 'x')" does select entities without Opt, as the
// service (and Azurite) answer.
func (c *Const) Eval(*tablecodec.Entity) bool { return c.Value }

func (a *And) Eval(e *tablecodec.Entity) bool { return a.L.Eval(e) && a.R.Eval(e) }

func (o *Or) Eval(e *tablecodec.Entity) bool { return o.L.Eval(e) || o.R.Eval(e) }

func (n *Not) Eval(e *tablecodec.Entity) bool { return !n.X.Eval(e) }

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

// Eval is true when the property is an Edm.Boolean holding true.
func (b *BoolProperty) Eval(e *tablecodec.Entity) bool {
	p, ok := lookup(e, b.Property)
	return ok && p.Type == tablecodec.EdmBoolean && p.Value.(bool)
}

// unordered is the comparison result involving NaN: only ne holds.
const unordered = 2

// Eval applies the comparison; see compareValues for what compares.
func (c *Compare) Eval(e *tablecodec.Entity) bool {
	p, ok := lookup(e, c.Property)
	if !ok {
		return false
	}
	r, ok := compareValues(p, c.Value)
	if !ok {
		return false
	}
	if r == unordered {
		return c.Op == Ne
	}
	switch c.Op {
	case Eq:
		return r == 0
	case Ne:
		return r != 0
	case Gt:
		return r > 0
	case Ge:
		return r >= 0
	case Lt:
		return r < 0
	}
	return r <= 0 // Le
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
