package dscodec

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/proto"
)

// compareRule compares two paths by Datastore's documented key order,
// written independently of the encoding: element by element; an element
// compares by kind (UTF-8 bytes), then every numeric id before every name,
// ids numerically, names by UTF-8 bytes; a path that is a prefix of the
// other (its ancestor) sorts first.
func compareRule(a, b []*datastorepb.Key_PathElement) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		x, y := a[i], b[i]
		if c := strings.Compare(x.GetKind(), y.GetKind()); c != 0 {
			return c
		}
		_, xName := x.IdType.(*datastorepb.Key_PathElement_Name)
		_, yName := y.IdType.(*datastorepb.Key_PathElement_Name)
		switch {
		case !xName && yName:
			return -1
		case xName && !yName:
			return 1
		case xName:
			if c := strings.Compare(x.GetName(), y.GetName()); c != 0 {
				return c
			}
		default:
			if c := cmp.Compare(x.GetId(), y.GetId()); c != 0 {
				return c
			}
		}
	}
	return cmp.Compare(len(a), len(b))
}

// parsePath reads the reference notation: K:1/P:"x".
func parsePath(t testing.TB, s string) []*datastorepb.Key_PathElement {
	t.Helper()
	var path []*datastorepb.Key_PathElement
	for _, el := range strings.Split(s, "/") {
		kind, id, ok := strings.Cut(el, ":")
		if !ok {
			t.Fatalf("bad element %q", el)
		}
		e := &datastorepb.Key_PathElement{Kind: kind}
		if name, err := strconv.Unquote(id); err == nil {
			e.IdType = &datastorepb.Key_PathElement_Name{Name: name}
		} else {
			n, err := strconv.ParseInt(id, 10, 64)
			if err != nil {
				t.Fatalf("bad id %q", id)
			}
			e.IdType = &datastorepb.Key_PathElement_Id{Id: n}
		}
		path = append(path, e)
	}
	return path
}

// emulatorOrder is the kindless key order observed on Google's Datastore
// emulator (shared/reference/datastore-key-order-emulator.txt).
var emulatorOrder = []string{
	`J:1`, `K:1`, `K:2`, `K:10`, `K:100`, `K:9223372036854775807`, `K:"10"`, `K:"Z"`, `K:"a"`,
	`K:"aa"`, `K:"b"`, `K:"~"`, `K:"é"`, `L:1`, `P:7`, `P:7/A:1`, `P:7/K:5`, `P:7/K:"c"`,
	`P:7/P:"x"`, `P:"x"`, `P:"x"/K:3`,
}

func TestEncodeMatchesEmulatorOrder(t *testing.T) {
	var prev []byte
	for i, s := range emulatorOrder {
		p := parsePath(t, s)
		b, err := EncodePath(p)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if i > 0 && bytes.Compare(prev, b) >= 0 {
			t.Errorf("%s does not sort after %s", s, emulatorOrder[i-1])
		}
		if i > 0 && compareRule(parsePath(t, emulatorOrder[i-1]), p) >= 0 {
			t.Errorf("rule comparator disagrees with the emulator at %s", s)
		}
		prev = b
	}
}

func TestEncodeEdgeCases(t *testing.T) {
	order := [][]*datastorepb.Key_PathElement{
		{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: math.MinInt64}}},
		{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: -1}}},
		{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: 1}}},
		{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: 1}}, {Kind: "\x00", IdType: &datastorepb.Key_PathElement_Id{Id: 1}}},
		{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: 1}}, {Kind: "A", IdType: &datastorepb.Key_PathElement_Id{Id: 1}}},
		{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: math.MaxInt64}}},
		{{Kind: "K", IdType: &datastorepb.Key_PathElement_Name{Name: "\x00"}}},
		{{Kind: "K", IdType: &datastorepb.Key_PathElement_Name{Name: "\x00\x00"}}},
		{{Kind: "K", IdType: &datastorepb.Key_PathElement_Name{Name: "\x01"}}},
		{{Kind: "K", IdType: &datastorepb.Key_PathElement_Name{Name: "a"}}},
		{{Kind: "K", IdType: &datastorepb.Key_PathElement_Name{Name: "a\x00"}}},
		{{Kind: "K", IdType: &datastorepb.Key_PathElement_Name{Name: "a\x00b"}}},
		{{Kind: "K", IdType: &datastorepb.Key_PathElement_Name{Name: "a\x01"}}},
		{{Kind: "K\x00", IdType: &datastorepb.Key_PathElement_Id{Id: 1}}},
		{{Kind: "Ka", IdType: &datastorepb.Key_PathElement_Id{Id: 1}}},
	}
	for i := 1; i < len(order); i++ {
		a, _ := EncodePath(order[i-1])
		b, err := EncodePath(order[i])
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Compare(a, b) >= 0 || compareRule(order[i-1], order[i]) >= 0 {
			t.Errorf("case %d: %q !< %q", i, a, b)
		}
	}
	// A parent's subtree ends before the next sibling.
	parent, _ := EncodePath(order[2])
	child, _ := EncodePath(order[4])
	next, _ := EncodePath(order[5])
	if end := SubtreeEnd(parent); bytes.Compare(child, end) >= 0 || bytes.Compare(end, next) >= 0 {
		t.Errorf("SubtreeEnd does not bound the subtree")
	}
}

func TestEncodeRejects(t *testing.T) {
	for name, p := range map[string][]*datastorepb.Key_PathElement{
		"empty":      nil,
		"no kind":    {{IdType: &datastorepb.Key_PathElement_Id{Id: 1}}},
		"incomplete": {{Kind: "K"}},
		"zero id":    {{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{}}},
		"empty name": {{Kind: "K", IdType: &datastorepb.Key_PathElement_Name{}}},
		"bad utf8":   {{Kind: "K\xff", IdType: &datastorepb.Key_PathElement_Id{Id: 1}}},
		"bad name":   {{Kind: "K", IdType: &datastorepb.Key_PathElement_Name{Name: "\xc3"}}},
	} {
		if _, err := EncodePath(p); err == nil {
			t.Errorf("%s: encoded", name)
		} else if !errors.Is(err, ErrInvalidKey) && !errors.Is(err, ErrIncompleteKey) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := EncodePath([]*datastorepb.Key_PathElement{{Kind: "K"}}); !errors.Is(err, ErrIncompleteKey) {
		t.Errorf("incomplete key: %v", err)
	}
	for _, b := range []string{"", "K", "K\x00\x01", "K\x00\x01\x03", "K\x00\x01\x01\x00", "K\x00\x02\x01",
		"\x00\x01\x01\x80\x00\x00\x00\x00\x00\x00\x01", "K\x00\x01\x01\x80\x00\x00\x00\x00\x00\x00\x00",
		"K\x00\x01\x02\x00\x01", "K\x00\x01\x02a", "K\x00\x01\x01\x80\x00\x00\x00\x00\x00\x00\x01x"} {
		if _, err := DecodePath([]byte(b)); err == nil {
			t.Errorf("decoded %q", b)
		}
	}
}

func TestDecodePrefix(t *testing.T) {
	k := parsePath(t, `P:7/K:"c"`)
	enc, _ := EncodePath(k)
	for _, tc := range []struct {
		in   []byte
		n    int
		rest string
	}{
		{enc, 2, ""},
		{append(bytes.Clone(enc), 0), 2, "\x00"},
		{SubtreeEnd(enc), 2, "\xff"},
		{enc[:len(enc)-1], 1, string(enc[12 : len(enc)-1])},
		{nil, 0, ""},
	} {
		path, rest := DecodePrefix(tc.in)
		if len(path) != tc.n || string(rest) != tc.rest {
			t.Errorf("DecodePrefix(%q) = %d elements, rest %q; want %d, %q", tc.in, len(path), rest, tc.n, tc.rest)
		}
		if compareRule(path, k[:tc.n]) != 0 {
			t.Errorf("DecodePrefix(%q) decoded %v", tc.in, path)
		}
	}
}

// pathFrom builds a path from fuzz bytes, drawing kinds and names from small
// alphabets (so pairs share prefixes often) with zero bytes and multibyte
// UTF-8 among them.
func pathFrom(b []byte) []*datastorepb.Key_PathElement {
	next := func() byte {
		if len(b) == 0 {
			return 0
		}
		c := b[0]
		b = b[1:]
		return c
	}
	kinds := []string{"A", "K", "K\x00", "Ka", "é", "~", "\x00"}
	names := []string{"a", "a\x00", "a\x00b", "aa", "b", "\x00", "Z", "é", "10", "\x01"}
	n := 1 + int(next()%4)
	path := make([]*datastorepb.Key_PathElement, n)
	for i := range path {
		c := next()
		e := &datastorepb.Key_PathElement{Kind: kinds[int(c>>4)%len(kinds)]}
		if c&1 == 0 {
			var raw [8]byte
			for j := range raw {
				raw[j] = next()
			}
			id := int64(binary.BigEndian.Uint64(raw[:]))
			if c&2 == 0 {
				id %= 1000 // small ids collide, exercising equal elements
			}
			if id == 0 {
				id = 1
			}
			e.IdType = &datastorepb.Key_PathElement_Id{Id: id}
		} else {
			e.IdType = &datastorepb.Key_PathElement_Name{Name: names[int(next())%len(names)]}
		}
		path[i] = e
	}
	return path
}

func FuzzKeyRoundTrip(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 7})
	f.Add([]byte{3, 0x11, 5, 0x23, 0, 0, 0, 0, 0, 0, 0, 1, 0x31, 2})
	f.Add([]byte("K\x00\x01\x02a\x00\xffb\x00\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := pathFrom(data)
		enc, err := EncodePath(p)
		if err != nil {
			t.Fatalf("encode %v: %v", p, err)
		}
		got, err := DecodePath(enc)
		if err != nil {
			t.Fatalf("decode %q: %v", enc, err)
		}
		if len(got) != len(p) {
			t.Fatalf("round trip changed length")
		}
		for i := range p {
			if !proto.Equal(got[i], p[i]) {
				t.Fatalf("element %d: %v != %v", i, got[i], p[i])
			}
		}
		// Raw bytes that decode must re-encode to themselves (canonical).
		if q, err := DecodePath(data); err == nil {
			re, err := EncodePath(q)
			if err != nil || !bytes.Equal(re, data) {
				t.Fatalf("non-canonical decode of %q: %q, %v", data, re, err)
			}
		}
	})
}

func FuzzKeyOrder(f *testing.F) {
	f.Add([]byte{0, 0x10, 1}, []byte{0, 0x11, 1})
	f.Add([]byte{1, 0x10, 1, 0x11, 3}, []byte{0, 0x10, 1})
	f.Add([]byte{0, 0x13, 0, 0, 0, 0, 0, 0, 0, 9}, []byte{0, 0x13, 0x80, 0, 0, 0, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		pa, pb := pathFrom(a), pathFrom(b)
		ea, _ := EncodePath(pa)
		eb, _ := EncodePath(pb)
		if got, want := bytes.Compare(ea, eb), compareRule(pa, pb); got != want {
			t.Fatalf("byte order %d, rule order %d for %v vs %v", got, want, pa, pb)
		}
	})
}
