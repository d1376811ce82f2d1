package odata

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

func str(v string) Literal  { return Literal{tablecodec.EdmString, v} }
func i32(v int32) Literal   { return Literal{tablecodec.EdmInt32, v} }
func i64(v int64) Literal   { return Literal{tablecodec.EdmInt64, v} }
func dbl(v float64) Literal { return Literal{tablecodec.EdmDouble, v} }
func cmpx(p string, op Op, l Literal) *Compare {
	return &Compare{Property: p, Op: op, Value: l}
}

func TestParseValid(t *testing.T) {
	guid, _ := tablecodec.ParseGUID("00000004-1111-2222-3333-444444444444")
	for _, tc := range []struct {
		in   string
		want Expr
		str  string // canonical String(); "" means same as in
	}{
		{"PartitionKey eq 'p1'", cmpx("PartitionKey", Eq, str("p1")), ""},
		{"S eq 'o''brien'", cmpx("S", Eq, str("o'brien")), ""},
		{"S eq ''", cmpx("S", Eq, str("")), ""},
		{"I le -1", cmpx("I", Le, i32(-1)), ""},
		{"I eq 3L", cmpx("I", Eq, i64(3)), ""},
		{"L eq 30000000000", cmpx("L", Eq, i64(30000000000)), "L eq 30000000000L"},
		{"D lt 1.0", cmpx("D", Lt, dbl(1)), ""},
		{"D eq 2.5", cmpx("D", Eq, dbl(2.5)), ""},
		{"D gt 1e10", cmpx("D", Gt, dbl(1e10)), "D gt 1e+10"},
		{"D gt -1.5E-3", cmpx("D", Gt, dbl(-0.0015)), "D gt -0.0015"},
		{"B eq true", cmpx("B", Eq, Literal{tablecodec.EdmBoolean, true}), ""},
		{"B", &BoolProperty{"B"}, ""},
		{"not B", &Not{&BoolProperty{"B"}}, ""},
		{"true", &Const{true}, ""},
		{"", &Const{true}, "true"},
		{"   ", &Const{true}, "true"},
		{"T ge datetime'2024-01-05T00:00:00Z'", cmpx("T", Ge, Literal{tablecodec.EdmDateTime, time.Date(2024, 1, 5, 0, 0, 0, 0, time.UTC)}), ""},
		{"T eq datetime'2024-01-01T00:00:00.0000001Z'", cmpx("T", Eq, Literal{tablecodec.EdmDateTime, time.Date(2024, 1, 1, 0, 0, 0, 100, time.UTC)}), ""},
		{"T eq datetime'2024-01-01T00:00:00.1230000Z'", cmpx("T", Eq, Literal{tablecodec.EdmDateTime, time.Date(2024, 1, 1, 0, 0, 0, 123000000, time.UTC)}), "T eq datetime'2024-01-01T00:00:00.123Z'"},
		{"G eq guid'00000004-1111-2222-3333-444444444444'", cmpx("G", Eq, Literal{tablecodec.EdmGuid, guid}), ""},
		{"Bin eq X'04ab'", cmpx("Bin", Eq, Literal{tablecodec.EdmBinary, []byte{4, 0xab}}), ""},
		{"Bin eq binary'04AB'", cmpx("Bin", Eq, Literal{tablecodec.EdmBinary, []byte{4, 0xab}}), "Bin eq X'04ab'"},
		{"'p1' lt PartitionKey", cmpx("PartitionKey", Gt, str("p1")), "PartitionKey gt 'p1'"},
		{"PartitionKey EQ 'p1'", cmpx("PartitionKey", Eq, str("p1")), "PartitionKey eq 'p1'"},
		{"(I eq 1)or(I eq 2)", &Or{cmpx("I", Eq, i32(1)), cmpx("I", Eq, i32(2))}, "I eq 1 or I eq 2"},
		{"a eq 1 or b eq 2 and c eq 3", &Or{cmpx("a", Eq, i32(1)), &And{cmpx("b", Eq, i32(2)), cmpx("c", Eq, i32(3))}}, ""},
		{"(a eq 1 or b eq 2) and c eq 3", &And{&Or{cmpx("a", Eq, i32(1)), cmpx("b", Eq, i32(2))}, cmpx("c", Eq, i32(3))}, ""},
		{"a eq 1 and (b eq 2 and c eq 3)", &And{cmpx("a", Eq, i32(1)), &And{cmpx("b", Eq, i32(2)), cmpx("c", Eq, i32(3))}}, ""},
		{"not (I lt 5)", &Not{cmpx("I", Lt, i32(5))}, "not I lt 5"},
		{"not I lt 5 and B", &And{&Not{cmpx("I", Lt, i32(5))}, &BoolProperty{"B"}}, ""},
		{"not (a or b)", &Not{&Or{&BoolProperty{"a"}, &BoolProperty{"b"}}}, ""},
		{"eq eq 1", cmpx("eq", Eq, i32(1)), ""},
		{"_x1 ne 'a'", cmpx("_x1", Ne, str("a")), ""},
	} {
		got, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
		wantStr := tc.str
		if wantStr == "" {
			wantStr = tc.in
		}
		if got.String() != wantStr {
			t.Errorf("Parse(%q).String() = %q, want %q", tc.in, got.String(), wantStr)
		}
	}
}

func TestParseInvalid(t *testing.T) {
	for _, tc := range []struct {
		in  string
		pos int
	}{
		{"PartitionKey eq", 15},          // wire log #56
		{"startswith(S,'name')", 0},      // functions are not supported
		{"I add 1 eq 4", 2},              // arithmetic is not supported
		{`S eq "name3"`, 5},              // Azure rejects double quotes
		{"S eq 'abc", 5},                 // unterminated
		{"I eq 1 and", 10},               // dangling and
		{"(I eq 1", 7},                   // missing )
		{"I eq 1)", 6},                   // extra )
		{"I eq J", 2},                    // property vs property
		{"1 eq 1", 2},                    // literal vs literal
		{"1", 0},                         // literal alone
		{"I eq 1 eq 2", 7},               // chained comparison
		{"(I) eq 1", 4},                  // parenthesised operand
		{"I eq 99999999999999999999", 5}, // int64 overflow
		{"I eq 1.5L", 5},                 // L on a double
		{"D eq 1e999", 5},                // double overflow
		{"D eq 1.", 5},                   // malformed number
		{"D eq .5", 5},                   // no leading digit
		{"I eq 1x", 5},                   // glued identifier
		{"T eq datetime'yesterday'", 5},  // bad datetime
		{"G eq guid'123'", 5},            // bad guid
		{"Bin eq X'abc'", 7},             // odd hex
		{"S eq foo'x'", 5},               // unknown prefix
		{"and eq 1", 0},                  // reserved word as property
		{"I eq null", 2},                 // Azure rejects null (Azure/Azurite#2471)
		{"I eq 1 & J eq 2", 7},           // stray character
		{"not", 3},                       // missing operand
		{"I -eq 1", 2},                   // stray '-'
	} {
		_, err := Parse(tc.in)
		var se *SyntaxError
		if !errors.As(err, &se) || !errors.Is(err, ErrInvalidFilter) {
			t.Errorf("Parse(%q) error = %v, want a *SyntaxError", tc.in, err)
			continue
		}
		if se.Pos != tc.pos {
			t.Errorf("Parse(%q) error at %d (%v), want position %d", tc.in, se.Pos, err, tc.pos)
		}
	}
}

func TestParseDepthLimit(t *testing.T) {
	deep := ""
	for range maxDepth + 1 {
		deep += "("
	}
	if _, err := Parse(deep + "B"); !errors.Is(err, ErrInvalidFilter) {
		t.Fatalf("deep nesting: %v", err)
	}
	ok := ""
	for range maxDepth {
		ok += "not "
	}
	if _, err := Parse(ok + "B"); err != nil {
		t.Fatalf("nesting at the limit: %v", err)
	}
}

func TestParseSelect(t *testing.T) {
	for in, want := range map[string][]string{
		"":                    nil,
		"*":                   nil,
		"RowKey,N,Missing":    {"RowKey", "N", "Missing"},
		" S , Opt,L,T ":       {"S", "Opt", "L", "T"},
		"PartitionKey":        {"PartitionKey"},
		"Timestamp,Timestamp": {"Timestamp", "Timestamp"},
	} {
		got, err := ParseSelect(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseSelect(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"a,,b", "a,", "1a", "a-b", "a b"} {
		if _, err := ParseSelect(in); !errors.Is(err, ErrInvalidSelect) {
			t.Errorf("ParseSelect(%q) error = %v, want ErrInvalidSelect", in, err)
		}
	}
}

func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{
		"PartitionKey eq 'p1' and RowKey ge 'r03' and RowKey lt 'r07'",
		"(PartitionKey eq 'p1' or PartitionKey eq 'p2') and I lt 2",
		"not (B eq true) or T ge datetime'2024-01-05T00:00:00.1234567Z'",
		"G ne guid'00000004-1111-2222-3333-444444444444' and Bin eq X'04ab'",
		"L eq 30000000000L or D gt -1.5e-7 or S eq 'o''brien'",
		"'a' lt RowKey",
	} {
		f.Add(s)
	}
	entities := sampleEntities()
	f.Fuzz(func(t *testing.T, s string) {
		x, err := Parse(s)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) || se.Pos < 0 || se.Pos > len(s) {
				t.Fatalf("Parse(%q): bad error %v", s, err)
			}
			return
		}
		printed := x.String()
		y, err := Parse(printed)
		if err != nil {
			t.Fatalf("Parse(%q) printed as %q, which does not parse: %v", s, printed, err)
		}
		if !reflect.DeepEqual(x, y) {
			t.Fatalf("Parse(%q) = %#v, re-parse of %q = %#v", s, x, printed, y)
		}
		if y.String() != printed {
			t.Fatalf("String not stable: %q then %q", printed, y.String())
		}
		checkKeyRange(t, x, entities)
	})
}
