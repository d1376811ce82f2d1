package logrec

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func sampleRecords() []Record {
	return []Record{
		{Type: RecordPut, Keyspace: "orders", Key: []byte("k1"), Value: []byte("v1")},
		{Type: RecordPut, Keyspace: "orders", Key: []byte("k2"), Value: []byte{}},
		{Type: RecordDelete, Keyspace: "p/ns", Key: []byte{0, 1, 0xff}},
		{Type: RecordPut, Value: bytes.Repeat([]byte("x"), 1000)},
		{Type: RecordCreateKeyspace, Keyspace: "orders"},
		{Type: RecordDropKeyspace, Keyspace: "orders"},
		{Type: RecordPut, Keyspace: "orders", Key: []byte("k1"), Value: []byte("v2"),
			ExpectKind: ExpectVersion, ExpectVersion: "W/\"datetime'2024-01-01T00%3A00%3A00Z'\""},
		{Type: RecordPut, Keyspace: "orders", Key: []byte("k3"), Value: []byte{}, ExpectKind: ExpectAbsent},
		{Type: RecordDelete, Keyspace: "p/ns", Key: []byte{0, 1, 0xff}, ExpectKind: ExpectVersion, ExpectVersion: "1234567890123"},
		{Type: RecordDelete, Keyspace: "orders", Key: []byte("k4"), ExpectKind: ExpectAbsent},
		{Type: RecordPut, Keyspace: "orders", Key: []byte("k5"), Value: []byte("v5"),
			ExpectKind: ExpectVersion, ExpectVersion: "9", Prior: 0x0123456789abcdef},
		{Type: RecordDelete, Keyspace: "orders", Key: []byte("k6"), ExpectKind: ExpectAbsent, Prior: 1},
		{Type: RecordWriteBack, Keyspace: "orders", Key: []byte("k5"), ExpectKind: ExpectVersion, ExpectVersion: "9", Digest: 0xfedcba9876543210},
		{Type: RecordWriteBack, Keyspace: "orders", Key: []byte("k6"), ExpectKind: ExpectAbsent, Digest: 1},
		{Type: RecordWriteBack, Keyspace: "orders", Key: []byte("k7"), Digest: 2},
	}
}

func equalRecord(a, b Record) bool {
	return a.Type == b.Type && a.Keyspace == b.Keyspace &&
		bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Value, b.Value) &&
		a.ExpectKind == b.ExpectKind && a.ExpectVersion == b.ExpectVersion && a.Prior == b.Prior && a.Digest == b.Digest &&
		(a.Type != RecordPut || b.Value != nil)
}

// encode is r's type byte followed by its body, the input FuzzDecode takes.
func encode(r *Record) []byte { return r.AppendBody([]byte{r.WireType()}) }

func TestRoundTrip(t *testing.T) {
	recs := sampleRecords()
	if err := Validate(recs); err != nil {
		t.Fatal(err)
	}
	for i, want := range recs {
		b := encode(&want)
		if len(b)-1 != want.BodySize() {
			t.Fatalf("record %d: body is %d bytes, BodySize says %d", i, len(b)-1, want.BodySize())
		}
		got, err := Decode(b[0], b[1:])
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !equalRecord(got, want) {
			t.Fatalf("record %d: got %+v, want %+v", i, got, want)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	cases := []struct {
		name string
		rec  []byte // type byte, then body
	}{
		{"type zero", []byte{0, 1, 'k'}},
		{"drop with no keyspace", []byte{6, 0}},
		{"create with no keyspace", []byte{5, 0}},
		{"commit type", []byte{3}},
		{"checkpoint type", []byte{4}},
		{"type past the last", []byte{10, 1, 'k'}},
		{"empty put", []byte{1}},
		{"non-minimal varint", []byte{5, 0x81, 0x00, 'k'}},
		{"trailing byte", []byte{5, 1, 'k', 0}},
		{"length past end", []byte{2, 5, 'a'}},
		{"truncated varint", []byte{5, 0x80}},
		{"varint overflow", []byte{5, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
		{"put-expect of any", []byte{7, 1, 'k', 1, 'a', 1, 'v', 0}},
		{"put-expect, unknown kind", []byte{7, 1, 'k', 1, 'a', 1, 'v', 3}},
		{"put-expect, no kind", []byte{7, 1, 'k', 1, 'a', 1, 'v'}},
		{"put-expect, empty version", []byte{7, 1, 'k', 1, 'a', 1, 'v', 2, 0}},
		{"put-expect, version cut short", []byte{7, 1, 'k', 1, 'a', 1, 'v', 2, 3, '1'}},
		{"put-expect, version length non-minimal", []byte{7, 1, 'k', 1, 'a', 1, 'v', 2, 0x81, 0, '1'}},
		{"put-expect, absent with a version", []byte{7, 1, 'k', 1, 'a', 1, 'v', 1, 1, '1'}},
		{"del-expect, trailing byte", []byte{8, 1, 'k', 1, 'a', 1, 0}},
		{"del-expect of any", []byte{8, 1, 'k', 1, 'a', 0}},
		{"del-expect with a value", []byte{8, 1, 'k', 1, 'a', 1, 'v', 1}},
		{"put-expect, version too long", append([]byte{7, 1, 'k', 1, 'a', 1, 'v', 2, 0x81, 0x08}, bytes.Repeat([]byte{'9'}, maxExpectVersion+1)...)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if r, err := Decode(c.rec[0], c.rec[1:]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %+v, %v; want ErrMalformed", r, err)
			}
		})
	}
}

// TestExpectEncoding pins the expect layouts byte for byte, and checks
// that a write with no expectation is encoded exactly as before
// expectations existed (type 1 or 2, nothing appended).
func TestExpectEncoding(t *testing.T) {
	base := []byte{1, 'k', 1, 'a'} // ks "k", key "a"
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cases := []struct {
		name string
		rec  Record
		want []byte // type byte, then body
	}{
		{"put", Record{Type: RecordPut}, cat([]byte{1}, base, []byte{1, 'v'})},
		{"delete", Record{Type: RecordDelete}, cat([]byte{2}, base)},
		{"put, absent", Record{Type: RecordPut, ExpectKind: ExpectAbsent}, cat([]byte{7}, base, []byte{1, 'v', 1})},
		{"put, version", Record{Type: RecordPut, ExpectKind: ExpectVersion, ExpectVersion: "42"}, cat([]byte{7}, base, []byte{1, 'v', 2, 2, '4', '2'})},
		{"delete, absent", Record{Type: RecordDelete, ExpectKind: ExpectAbsent}, cat([]byte{8}, base, []byte{1})},
		{"delete, version", Record{Type: RecordDelete, ExpectKind: ExpectVersion, ExpectVersion: "7"}, cat([]byte{8}, base, []byte{2, 1, '7'})},
		{"put, version, prior", Record{Type: RecordPut, ExpectKind: ExpectVersion, ExpectVersion: "42", Prior: 0x0102030405060708},
			cat([]byte{7}, base, []byte{1, 'v', 0x82, 2, '4', '2', 1, 2, 3, 4, 5, 6, 7, 8})},
		{"delete, absent, prior", Record{Type: RecordDelete, ExpectKind: ExpectAbsent, Prior: 9},
			cat([]byte{8}, base, []byte{0x81, 0, 0, 0, 0, 0, 0, 0, 9})},
		{"write-back, any", Record{Type: RecordWriteBack, Digest: 0x0102030405060708},
			cat([]byte{9}, base, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8})},
		{"write-back, absent", Record{Type: RecordWriteBack, ExpectKind: ExpectAbsent, Digest: 1},
			cat([]byte{9}, base, []byte{1, 0, 0, 0, 0, 0, 0, 0, 1})},
		{"write-back, version", Record{Type: RecordWriteBack, ExpectKind: ExpectVersion, ExpectVersion: "42", Digest: 2},
			cat([]byte{9}, base, []byte{2, 2, '4', '2', 0, 0, 0, 0, 0, 0, 0, 2})},
	}
	for _, c := range cases {
		r := c.rec
		r.Keyspace, r.Key = "k", []byte("a")
		if r.Type == RecordPut {
			r.Value = []byte("v")
		}
		got := encode(&r)
		if !bytes.Equal(got, c.want) {
			t.Errorf("%s: encoded %x, want %x", c.name, got, c.want)
			continue
		}
		if r.BodySize() != len(got)-1 {
			t.Errorf("%s: BodySize %d, body is %d bytes", c.name, r.BodySize(), len(got)-1)
		}
		back, err := Decode(got[0], got[1:])
		if err != nil || !equalRecord(back, r) {
			t.Errorf("%s: decoded %+v, %v; want %+v", c.name, back, err, r)
		}
		if back.Type != c.rec.Type {
			t.Errorf("%s: decoded type %s, want %s (the -expect wire types are never a Record's type)", c.name, back.Type, c.rec.Type)
		}
	}
}

func TestRecordTypeString(t *testing.T) {
	for typ, want := range map[RecordType]string{RecordPut: "put", RecordDelete: "delete",
		RecordCreateKeyspace: "create-keyspace", RecordDropKeyspace: "drop-keyspace", RecordWriteBack: "write-back"} {
		if typ.String() != want {
			t.Errorf("%d.String() = %q, want %q", typ, typ.String(), want)
		}
	}
	if s := RecordType(42).String(); !strings.Contains(s, "42") {
		t.Errorf("unknown type string %q", s)
	}
}

// TestPriorRejects: a prior hash that is cut short, or zero (written as
// none), does not decode.
func TestPriorRejects(t *testing.T) {
	base := []byte{1, 'k', 1, 'a'} // ks "k", key "a"
	for name, tail := range map[string][]byte{
		"short": {0x81, 1, 2, 3},
		"zero":  {0x81, 0, 0, 0, 0, 0, 0, 0, 0},
		"kind":  {0x83, 0, 0, 0, 0, 0, 0, 0, 1},
	} {
		if r, err := Decode(wireDeleteExpect, append(append([]byte{}, base...), tail...)); err == nil {
			t.Errorf("%s: decoded %+v", name, r)
		}
	}
}

// TestWriteBackRejects: a write-back record's digest cut short or zero,
// an unknown expect kind or an empty version does not decode, and
// Validate refuses a digest anywhere else and a write-back record without
// one.
func TestWriteBackRejects(t *testing.T) {
	base := []byte{1, 'k', 1, 'a'} // ks "k", key "a"
	for name, tail := range map[string][]byte{
		"short":         {1, 1, 2, 3},
		"zero":          {1, 0, 0, 0, 0, 0, 0, 0, 0},
		"kind":          {3, 0, 0, 0, 0, 0, 0, 0, 1},
		"prior flag":    {0x81, 0, 0, 0, 0, 0, 0, 0, 1},
		"empty version": {2, 0, 0, 0, 0, 0, 0, 0, 0, 1},
		"trailing":      {1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
	} {
		if r, err := Decode(byte(RecordWriteBack), append(append([]byte{}, base...), tail...)); err == nil {
			t.Errorf("%s: decoded %+v", name, r)
		}
	}
	for name, r := range map[string]Record{
		"no digest":        {Type: RecordWriteBack, Keyspace: "k", Key: []byte("a")},
		"digest on a put":  {Type: RecordPut, Keyspace: "k", Key: []byte("a"), Value: []byte("v"), Digest: 1},
		"value":            {Type: RecordWriteBack, Keyspace: "k", Key: []byte("a"), Value: []byte("v"), Digest: 1},
		"prior":            {Type: RecordWriteBack, Keyspace: "k", Key: []byte("a"), ExpectKind: ExpectAbsent, Digest: 1, Prior: 2},
		"version, no kind": {Type: RecordWriteBack, Keyspace: "k", Key: []byte("a"), ExpectVersion: "7", Digest: 1},
	} {
		if err := Validate([]Record{r}); !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("%s: Validate = %v, want ErrInvalidRecord", name, err)
		}
	}
}

// TestValidateRejects: records the format cannot carry, or that would not
// decode to themselves, are refused.
func TestValidateRejects(t *testing.T) {
	for name, r := range map[string]Record{
		"type 0":               {Keyspace: "k"},
		"commit type":          {Type: 3},
		"checkpoint type":      {Type: 4},
		"delete with a value":  {Type: RecordDelete, Keyspace: "k", Key: []byte("a"), Value: []byte("v")},
		"keyspace op with key": {Type: RecordCreateKeyspace, Keyspace: "k", Key: []byte("a")},
		"keyspace op, no name": {Type: RecordDropKeyspace},
		"keyspace op, expect":  {Type: RecordCreateKeyspace, Keyspace: "k", ExpectKind: ExpectAbsent},
		"unknown expect kind":  {Type: RecordPut, Keyspace: "k", ExpectKind: 3},
		"kind version, none":   {Type: RecordPut, Keyspace: "k", ExpectKind: ExpectVersion},
		"prior without expect": {Type: RecordPut, Keyspace: "k", Prior: 1},
		"version too long":     {Type: RecordPut, Keyspace: "k", ExpectKind: ExpectVersion, ExpectVersion: strings.Repeat("9", maxExpectVersion+1)},
	} {
		if err := Validate([]Record{r}); !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("%s: Validate = %v, want ErrInvalidRecord", name, err)
		}
	}
}

// FuzzDecode feeds arbitrary bytes to the record decoder, the first as
// the type byte and the rest as the body. It may not panic, and whatever
// it accepts must be valid and re-encode to exactly the input.
func FuzzDecode(f *testing.F) {
	recs := sampleRecords()
	for i := range recs {
		f.Add(encode(&recs[i]))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		r, err := Decode(data[0], data[1:])
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if err := Validate([]Record{r}); err != nil {
			t.Fatalf("%x decoded to %+v, which is not valid: %v", data, r, err)
		}
		if again := encode(&r); !bytes.Equal(again, data) {
			t.Fatalf("%x decoded to %+v, which encodes to %x", data, r, again)
		}
		if r.BodySize() != len(data)-1 {
			t.Fatalf("BodySize = %d, body is %d bytes", r.BodySize(), len(data)-1)
		}
	})
}
