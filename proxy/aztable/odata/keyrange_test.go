package odata

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

func inRange(r Range, k []byte) bool {
	return bytes.Compare(k, r.Start) >= 0 && (r.End == nil || bytes.Compare(k, r.End) < 0)
}

// checkKeyRange asserts KeyRange's contract over a set of entities: every
// entity the filter selects has its key in the range, and when exact every
// entity in the range is selected.
func checkKeyRange(t *testing.T, x Expr, es []*tablecodec.Entity) {
	t.Helper()
	r, exact := KeyRange(x)
	for _, e := range es {
		k := tablecodec.EncodeKey(e.PartitionKey, e.RowKey)
		in, sel := inRange(r, k), x.Eval(e)
		if sel && !in {
			t.Fatalf("%q selects %s/%s outside range [%x, %x)", x, e.PartitionKey, e.RowKey, r.Start, r.End)
		}
		if exact && in && !sel {
			t.Fatalf("%q: range [%x, %x) claimed exact but holds unselected %s/%s", x, r.Start, r.End, e.PartitionKey, e.RowKey)
		}
	}
	if r.Empty() {
		for _, e := range es {
			if x.Eval(e) {
				t.Fatalf("%q: empty range but selects %s/%s", x, e.PartitionKey, e.RowKey)
			}
		}
	}
}

// sampleEntities is a grid of keys over an alphabet with the edge cases
// (empty, 0x00, prefixes) and one Boolean property.
func sampleEntities() []*tablecodec.Entity {
	keys := []string{"", "\x00", "a", "a\x00", "ab", "b", "é"}
	var es []*tablecodec.Entity
	for i, pk := range keys {
		for j, rk := range keys {
			es = append(es, &tablecodec.Entity{PartitionKey: pk, RowKey: rk, Props: []tablecodec.Property{
				{Name: "B", Type: tablecodec.EdmBoolean, Value: (i+j)%2 == 0},
			}})
		}
	}
	return es
}

func TestKeyRange(t *testing.T) {
	pfx, end := tablecodec.PartitionPrefix, tablecodec.PartitionEnd
	key := tablecodec.EncodeKey
	succ := func(b []byte) []byte { return append(b, 0) }
	for _, tc := range []struct {
		filter string
		want   Range
		exact  bool
	}{
		{"", Range{}, true},
		{"B", Range{}, false},
		{"PartitionKey eq 'p1'", Range{pfx("p1"), end("p1")}, true},
		{"'p1' eq PartitionKey", Range{pfx("p1"), end("p1")}, true},
		{"PartitionKey eq 'p1' and RowKey eq 'r1'", Range{key("p1", "r1"), succ(key("p1", "r1"))}, true},
		{"PartitionKey eq 'p1' and RowKey ge 'r03' and RowKey lt 'r07'", Range{key("p1", "r03"), key("p1", "r07")}, true},
		{"PartitionKey eq 'p1' and RowKey gt 'r03' and RowKey le 'r07'", Range{succ(key("p1", "r03")), succ(key("p1", "r07"))}, true},
		{"RowKey gt 'a' and PartitionKey eq 'p'", Range{succ(key("p", "a")), end("p")}, true},
		{"PartitionKey eq 'p' and RowKey ge 'a' and RowKey ge 'b' and RowKey lt 'z' and RowKey lt 'y'", Range{key("p", "b"), key("p", "y")}, true},
		{"PartitionKey eq 'p' and RowKey ge 'b' and RowKey gt 'b'", Range{succ(key("p", "b")), end("p")}, true},
		{"PartitionKey eq 'p' and RowKey ne 'b'", Range{pfx("p"), end("p")}, false},
		{"PartitionKey eq 'range' and RowKey ge 'r005' and RowKey lt 'r020' and Tag eq 'odd'", Range{key("range", "r005"), key("range", "r020")}, false},
		{"PartitionKey ge 'a' and PartitionKey lt 'c'", Range{pfx("a"), pfx("c")}, true},
		{"PartitionKey gt 'a' and PartitionKey le 'c'", Range{end("a"), end("c")}, true},
		{"PartitionKey gt 'a'", Range{Start: end("a")}, true},
		{"PartitionKey lt 'a'", Range{End: pfx("a")}, true},
		{"PartitionKey ge 'a' and PartitionKey le 'a'", Range{pfx("a"), end("a")}, true},
		{"PartitionKey ge 'a' and RowKey eq 'x'", Range{Start: pfx("a")}, false},
		{"RowKey eq 'x'", Range{}, false},
		{"PartitionKey eq 'a' or PartitionKey eq 'b'", Range{}, false},
		{"not (PartitionKey ne 'a')", Range{}, false},
		{"PartitionKey eq 1", Range{}, false},
	} {
		x, err := Parse(tc.filter)
		if err != nil {
			t.Fatal(err)
		}
		r, exact := KeyRange(x)
		if !bytes.Equal(r.Start, tc.want.Start) || !bytes.Equal(r.End, tc.want.End) || (r.End == nil) != (tc.want.End == nil) || exact != tc.exact {
			t.Errorf("KeyRange(%q) = [%x, %x) exact=%v, want [%x, %x) exact=%v", tc.filter, r.Start, r.End, exact, tc.want.Start, tc.want.End, tc.exact)
		}
	}
}

func TestKeyRangeEmpty(t *testing.T) {
	for _, f := range []string{
		"PartitionKey eq 'a' and PartitionKey eq 'b'",
		"PartitionKey gt 'b' and PartitionKey lt 'a'",
		"PartitionKey eq 'a' and RowKey gt 'x' and RowKey lt 'x'",
		"PartitionKey eq 'a' and RowKey gt 'x' and RowKey le 'x'",
		"PartitionKey gt 'a' and PartitionKey lt 'a'",
	} {
		x, err := Parse(f)
		if err != nil {
			t.Fatal(err)
		}
		if r, _ := KeyRange(x); !r.Empty() {
			t.Errorf("KeyRange(%q) = [%x, %x), want empty", f, r.Start, r.End)
		}
	}
}

// TestKeyRangeRandom builds random conjunctions of key conditions (plus an
// occasional residual) and checks the contract over the sample grid.
func TestKeyRangeRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	vals := []string{"", "a", "a''", "ab", "b", "é"} // already quote-escaped
	ops := []string{"eq", "ne", "gt", "ge", "lt", "le"}
	es := sampleEntities()
	es = append(es, &tablecodec.Entity{PartitionKey: "a'", RowKey: "a'"})
	for range 3000 {
		f := ""
		for n := 1 + r.IntN(4); n > 0; n-- {
			if f != "" {
				f += " and "
			}
			switch r.IntN(5) {
			case 0:
				f += "B"
			case 1, 2:
				f += fmt.Sprintf("PartitionKey %s '%s'", ops[r.IntN(6)], vals[r.IntN(len(vals))])
			default:
				f += fmt.Sprintf("RowKey %s '%s'", ops[r.IntN(6)], vals[r.IntN(len(vals))])
			}
		}
		x, err := Parse(f)
		if err != nil {
			t.Fatalf("Parse(%q): %v", f, err)
		}
		checkKeyRange(t, x, es)
	}
}
