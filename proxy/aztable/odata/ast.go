package odata

import (
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

// Expr is a parsed $filter expression. Its String form parses back to an
// equal Expr.
type Expr interface {
	// Eval reports whether the entity satisfies the filter.
	Eval(e *tablecodec.Entity) bool
	String() string
	prec() int
}

// Operator precedence, loosest first; used to print minimal parentheses.
const (
	precOr = iota + 1
	precAnd
	precUnary
)

// Op is a comparison operator.
type Op uint8

// The six comparison operators.
const (
	Eq Op = iota + 1
	Ne
	Gt
	Ge
	Lt
	Le
)

var opNames = [...]string{Eq: "eq", Ne: "ne", Gt: "gt", Ge: "ge", Lt: "lt", Le: "le"}

func (o Op) String() string { return opNames[o] }

// flip returns the operator that keeps the meaning when the operands swap
// sides ('a' lt X  ==  X gt 'a').
func (o Op) flip() Op {
	switch o {
	case Gt:
		return Lt
	case Ge:
		return Le
	case Lt:
		return Gt
	case Le:
		return Ge
	}
	return o
}

// Literal is a typed constant. Value has the Go type tablecodec.Property
// uses for Type.
type Literal struct {
	Type  tablecodec.EdmType
	Value any
}

func (l Literal) String() string {
	switch v := l.Value.(type) {
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case int32:
		return strconv.FormatInt(int64(v), 10)
	case int64:
		return strconv.FormatInt(v, 10) + "L"
	case float64:
		s := strconv.FormatFloat(v, 'g', -1, 64)
		if !strings.ContainsAny(s, ".e") {
			s += ".0"
		}
		return s
	case bool:
		return strconv.FormatBool(v)
	case time.Time:
		return "datetime'" + tablecodec.FormatDateTime(v) + "'"
	case tablecodec.GUID:
		return "guid'" + v.String() + "'"
	case []byte:
		return "X'" + hex.EncodeToString(v) + "'"
	}
	return "?"
}

// Compare is "Property Op Literal". A filter written literal-first is
// normalised to this form when parsed.
type Compare struct {
	Property string
	Op       Op
	Value    Literal
}

// BoolProperty is a bare Boolean property used as a condition ("B",
// "not B"): true when the property is Edm.Boolean true.
type BoolProperty struct{ Property string }

// Const is a constant condition: the literal true or false, and the empty
// filter (which is true).
type Const struct{ Value bool }

// And is L and R.
type And struct{ L, R Expr }

// Or is L or R.
type Or struct{ L, R Expr }

// Not is not X.
type Not struct{ X Expr }

func (c *Compare) String() string {
	return c.Property + " " + c.Op.String() + " " + c.Value.String()
}
func (b *BoolProperty) String() string { return b.Property }
func (c *Const) String() string        { return strconv.FormatBool(c.Value) }
func (a *And) String() string          { return binary(a.L, "and", a.R, precAnd) }
func (o *Or) String() string           { return binary(o.L, "or", o.R, precOr) }
func (n *Not) String() string {
	if n.X.prec() == precUnary {
		return "not " + n.X.String()
	}
	return "not (" + n.X.String() + ")"
}

// binary prints a left-associative operator: the left operand needs
// parentheses only when it binds more loosely, the right one also when it
// is the same operator (a or (b or c) is a different tree from a or b or c).
func binary(l Expr, op string, r Expr, p int) string {
	ls, rs := l.String(), r.String()
	if l.prec() < p {
		ls = "(" + ls + ")"
	}
	if r.prec() <= p {
		rs = "(" + rs + ")"
	}
	return ls + " " + op + " " + rs
}

func (*Compare) prec() int      { return precUnary }
func (*BoolProperty) prec() int { return precUnary }
func (*Const) prec() int        { return precUnary }
func (*Not) prec() int          { return precUnary }
func (*And) prec() int          { return precAnd }
func (*Or) prec() int           { return precOr }

// Range is a half-open interval of encoded keys (tablecodec.EncodeKey):
// Start inclusive (nil = from the first key), End exclusive (nil = no upper
// bound) — the adapters.Store GetRange convention.
type Range struct {
	Start, End []byte
}

// Empty reports whether the range contains no key at all.
func (r Range) Empty() bool {
	return r.End != nil && string(r.Start) >= string(r.End)
}
