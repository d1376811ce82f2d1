package odata

import (
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

// bound is one side of a string interval; set is false when unbounded.
type bound struct {
	set       bool
	val       string
	inclusive bool
}

// interval is the set of strings between lo and hi.
type interval struct{ lo, hi bound }

// tighten intersects the interval with "x op v".
func (iv *interval) tighten(op Op, v string) {
	switch op {
	case Eq:
		iv.raiseLo(v, true)
		iv.lowerHi(v, true)
	case Gt:
		iv.raiseLo(v, false)
	case Ge:
		iv.raiseLo(v, true)
	case Lt:
		iv.lowerHi(v, false)
	case Le:
		iv.lowerHi(v, true)
	}
}

func (iv *interval) raiseLo(v string, incl bool) {
	if !iv.lo.set || v > iv.lo.val || (v == iv.lo.val && !incl) {
		iv.lo = bound{set: true, val: v, inclusive: incl}
	}
}

func (iv *interval) lowerHi(v string, incl bool) {
	if !iv.hi.set || v < iv.hi.val || (v == iv.hi.val && !incl) {
		iv.hi = bound{set: true, val: v, inclusive: incl}
	}
}

// point reports whether the interval holds exactly one string.
func (iv *interval) point() (string, bool) {
	if iv.lo.set && iv.hi.set && iv.lo.inclusive && iv.hi.inclusive && iv.lo.val == iv.hi.val {
		return iv.lo.val, true
	}
	return "", false
}

// conjuncts flattens the top-level and-tree of x.
func conjuncts(x Expr, out []Expr) []Expr {
	if a, ok := x.(*And); ok {
		return conjuncts(a.R, conjuncts(a.L, out))
	}
	return append(out, x)
}

// keyCompare returns the comparison if c is a range-usable condition on
// PartitionKey or RowKey: a string literal and any operator but ne.
func keyCompare(x Expr) (*Compare, bool) {
	c, ok := x.(*Compare)
	if !ok || c.Op == Ne || c.Value.Type != tablecodec.EdmString {
		return nil, false
	}
	return c, c.Property == "PartitionKey" || c.Property == "RowKey"
}

// KeyRange returns the smallest encoded-key range that the conditions of
// x's top-level conjunction on PartitionKey (eq, ranges) and — once the
// partition is pinned to one value — on RowKey imply. Every entity x
// selects lies in r. exact reports that the range alone answers the filter:
// every conjunct was absorbed, so no entity in r needs evaluating. With
// exact false the caller evaluates x on each entity of r. An empty r
// (r.Empty()) means x selects nothing.
func KeyRange(x Expr) (r Range, exact bool) {
	var pk, rk interval
	var rowConds int
	exact = true
	for _, c := range conjuncts(x, nil) {
		if k, ok := c.(*Const); ok && k.Value {
			continue // the empty filter, or a literal "true"
		}
		kc, ok := keyCompare(c)
		switch {
		case !ok:
			exact = false
		case kc.Property == "PartitionKey":
			pk.tighten(kc.Op, kc.Value.Value.(string))
		default:
			rk.tighten(kc.Op, kc.Value.Value.(string))
			rowConds++
		}
	}
	if p, ok := pk.point(); ok {
		return partitionRange(p, rk), exact
	}
	if rowConds > 0 {
		exact = false // row bounds only form a range inside one partition
	}
	if pk.lo.set {
		if pk.lo.inclusive {
			r.Start = tablecodec.PartitionPrefix(pk.lo.val)
		} else {
			r.Start = tablecodec.PartitionEnd(pk.lo.val)
		}
	}
	if pk.hi.set {
		if pk.hi.inclusive {
			r.End = tablecodec.PartitionEnd(pk.hi.val)
		} else {
			r.End = tablecodec.PartitionPrefix(pk.hi.val)
		}
	}
	return r, exact
}

// partitionRange is the key range of RowKey interval rk within partition p.
func partitionRange(p string, rk interval) Range {
	r := Range{Start: tablecodec.PartitionPrefix(p), End: tablecodec.PartitionEnd(p)}
	if rk.lo.set {
		r.Start = tablecodec.EncodeKey(p, rk.lo.val)
		if !rk.lo.inclusive {
			r.Start = append(r.Start, 0) // the successor: first key above
		}
	}
	if rk.hi.set {
		r.End = tablecodec.EncodeKey(p, rk.hi.val)
		if rk.hi.inclusive {
			r.End = append(r.End, 0)
		}
	}
	return r
}
