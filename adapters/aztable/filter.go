package aztable

import (
	"bytes"
	"strings"
)

// boundKind says what "at or after this bound" means for a key.
type boundKind uint8

const (
	unbounded boundKind = iota
	partGE              // PartitionKey >= pk
	partGT              // PartitionKey > pk
	rowGE               // (PartitionKey, RowKey) >= (pk, rk)
	rowGT               // (PartitionKey, RowKey) > (pk, rk)
)

// bound is the smallest entity position at or after an arbitrary byte
// string in tablecodec key order. Range ends are not always encoded keys:
// they are partition prefixes and ends, successors (key ‖ 0x00), or any
// bytes the buffer computed, and every one of them lies in a gap between
// two positions, which parseBound finds.
type bound struct {
	kind   boundKind
	pk, rk string
}

// parseBound inverts the tablecodec key layout (escaped PK ‖ 00 01 ‖
// escaped RK, with 00 FF for a literal zero byte) as far as b goes.
func parseBound(b []byte) bound {
	var buf []byte
	i := 0
	for {
		if i == len(b) {
			if len(buf) == 0 {
				return bound{kind: unbounded}
			}
			// A proper prefix of the escaped partition key: every key of
			// partition buf is above it, every smaller partition below.
			return bound{kind: partGE, pk: string(buf)}
		}
		if b[i] != 0 {
			buf = append(buf, b[i])
			i++
			continue
		}
		if i+1 == len(b) {
			return bound{kind: partGE, pk: string(buf)}
		}
		switch b[i+1] {
		case 0xFF:
			buf = append(buf, 0)
			i += 2
			continue
		case 0x01:
			return parseRowBound(string(buf), b[i+2:])
		case 0x00:
			return bound{kind: partGE, pk: string(buf)} // below 00 01: the partition's first key is above
		}
		return bound{kind: partGT, pk: string(buf)} // 00 02.. 00 FE: past the partition's last key
	}
}

func parseRowBound(pk string, b []byte) bound {
	var buf []byte
	for j := 0; j < len(b); j++ {
		if b[j] != 0 {
			buf = append(buf, b[j])
			continue
		}
		if j+1 < len(b) && b[j+1] == 0xFF {
			buf = append(buf, 0)
			j++
			continue
		}
		// The row key followed by a zero byte that does not start an
		// escaped zero: above the row key itself, below each longer one.
		return bound{kind: rowGT, pk: pk, rk: string(buf)}
	}
	if len(buf) == 0 {
		return bound{kind: partGE, pk: pk}
	}
	return bound{kind: rowGE, pk: pk, rk: string(buf)}
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// partitionOf returns the partition a start bound begins in, when the
// bound pins one.
func (b bound) partition() (string, bool) {
	switch b.kind {
	case partGE, rowGE, rowGT:
		return b.pk, true
	}
	return "", false
}

// RangeFilter returns the OData $filter selecting the entities whose keys
// lie in [start, end) (end nil: unbounded), and empty when no key can. An
// empty filter with empty false selects everything. A range inside one
// partition becomes "PartitionKey eq ... and RowKey ..." (a partition
// range scan in the service); others compare (PartitionKey, RowKey) pairs.
func RangeFilter(start, end []byte) (filter string, empty bool) {
	if end != nil && (len(end) == 0 || bytes.Compare(start, end) >= 0) {
		return "", true
	}
	lo := parseBound(start)
	hi := bound{kind: unbounded}
	if end != nil {
		hi = parseBound(end)
		if hi.kind == unbounded || (hi.kind == partGE && hi.pk == "") {
			return "", true // nothing is below the first key
		}
	}
	if p, ok := lo.partition(); ok && hi.kind != unbounded && hi.kind != partGE && hi.pk == p {
		conds := []string{"PartitionKey eq " + quote(p)}
		switch lo.kind {
		case rowGE:
			conds = append(conds, "RowKey ge "+quote(lo.rk))
		case rowGT:
			conds = append(conds, "RowKey gt "+quote(lo.rk))
		}
		switch hi.kind {
		case rowGE:
			conds = append(conds, "RowKey lt "+quote(hi.rk))
		case rowGT:
			conds = append(conds, "RowKey le "+quote(hi.rk))
		}
		return strings.Join(conds, " and "), false
	}
	var conds []string
	switch lo.kind {
	case partGE:
		conds = append(conds, "PartitionKey ge "+quote(lo.pk))
	case partGT:
		conds = append(conds, "PartitionKey gt "+quote(lo.pk))
	case rowGE:
		conds = append(conds, "(PartitionKey gt "+quote(lo.pk)+" or (PartitionKey eq "+quote(lo.pk)+" and RowKey ge "+quote(lo.rk)+"))")
	case rowGT:
		conds = append(conds, "(PartitionKey gt "+quote(lo.pk)+" or (PartitionKey eq "+quote(lo.pk)+" and RowKey gt "+quote(lo.rk)+"))")
	}
	switch hi.kind {
	case partGE:
		conds = append(conds, "PartitionKey lt "+quote(hi.pk))
	case partGT:
		conds = append(conds, "PartitionKey le "+quote(hi.pk))
	case rowGE:
		conds = append(conds, "(PartitionKey lt "+quote(hi.pk)+" or (PartitionKey eq "+quote(hi.pk)+" and RowKey lt "+quote(hi.rk)+"))")
	case rowGT:
		conds = append(conds, "(PartitionKey lt "+quote(hi.pk)+" or (PartitionKey eq "+quote(hi.pk)+" and RowKey le "+quote(hi.rk)+"))")
	}
	return strings.Join(conds, " and "), false
}
