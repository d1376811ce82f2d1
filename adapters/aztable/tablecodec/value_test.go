package tablecodec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"
)

// equalEntity compares entities exactly: doubles by bit pattern (NaN and -0
// included), times by instant, nil and empty byte slices alike.
func equalEntity(t *testing.T, got, want *Entity) {
	t.Helper()
	if got.PartitionKey != want.PartitionKey || got.RowKey != want.RowKey || got.ETag != want.ETag {
		t.Fatalf("keys/etag: got %q %q %q, want %q %q %q", got.PartitionKey, got.RowKey, got.ETag, want.PartitionKey, want.RowKey, want.ETag)
	}
	if !got.Timestamp.Equal(want.Timestamp) || got.Timestamp.IsZero() != want.Timestamp.IsZero() {
		t.Fatalf("timestamp: got %v, want %v", got.Timestamp, want.Timestamp)
	}
	if len(got.Props) != len(want.Props) {
		t.Fatalf("got %d props, want %d: %+v", len(got.Props), len(want.Props), got.Props)
	}
	for i, w := range want.Props {
		g := got.Props[i]
		if g.Name != w.Name || g.Type != w.Type {
			t.Fatalf("prop %d: got %q %v, want %q %v", i, g.Name, g.Type, w.Name, w.Type)
		}
		if !equalValue(g.Value, w.Value) {
			t.Fatalf("prop %q: got %#v, want %#v", w.Name, g.Value, w.Value)
		}
	}
}

func equalValue(a, b any) bool {
	switch av := a.(type) {
	case float64:
		bv, ok := b.(float64)
		return ok && math.Float64bits(av) == math.Float64bits(bv)
	case time.Time:
		bv, ok := b.(time.Time)
		return ok && av.Equal(bv)
	case []byte:
		bv, ok := b.([]byte)
		return ok && bytes.Equal(av, bv)
	}
	return a == b
}

func mustTime(s string) time.Time {
	t, err := ParseDateTime(s)
	if err != nil {
		panic(err)
	}
	return t
}

func everyTypeEntity() *Entity {
	return &Entity{
		PartitionKey: "pk\x00", RowKey: "",
		Timestamp: mustTime("2026-12-02T08:09:46.2133931Z"),
		ETag:      `W/"datetime'2026-12-02T08%3A09%3A46.2133931Z'"`,
		Props: []Property{
			{"Str", EdmString, "hello é"},
			{"Empty", EdmString, ""},
			{"I32", EdmInt32, int32(math.MinInt32)},
			{"I32max", EdmInt32, int32(math.MaxInt32)},
			{"I64", EdmInt64, int64(math.MinInt64)},
			{"I64max", EdmInt64, int64(math.MaxInt64)},
			{"Dbl", EdmDouble, 3.25},
			{"NegZero", EdmDouble, math.Copysign(0, -1)},
			{"NaN", EdmDouble, math.NaN()},
			{"Inf", EdmDouble, math.Inf(1)},
			{"NInf", EdmDouble, math.Inf(-1)},
			{"T", EdmBoolean, true},
			{"F", EdmBoolean, false},
			{"When", EdmDateTime, mustTime("2024-05-06T07:08:09.1234567Z")},
			{"Old", EdmDateTime, mustTime("1601-01-01T00:00:00Z")},
			{"G", EdmGuid, GUID{0x0b, 0x1c, 0x2d, 0x3e, 0x4f, 0x50, 0x61, 0x72, 0x83, 0x94, 0xa5, 0xb6, 0xc7, 0xd8, 0xe9, 0xf0}},
			{"Bin", EdmBinary, []byte{0, 1, 2, 0xfa}},
			{"NoBin", EdmBinary, []byte{}},
		},
	}
}

func TestEntityRoundTripEveryType(t *testing.T) {
	e := everyTypeEntity()
	got, err := DecodeEntity(EncodeEntity(e))
	if err != nil {
		t.Fatal(err)
	}
	equalEntity(t, got, e)
	if got.Timestamp.Location() != time.UTC {
		t.Errorf("decoded Timestamp not UTC: %v", got.Timestamp.Location())
	}
}

func TestEntityRoundTripZeroValues(t *testing.T) {
	e := &Entity{}
	got, err := DecodeEntity(EncodeEntity(e))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Timestamp.IsZero() || got.Timestamp != (time.Time{}) || got.Props != nil {
		t.Fatalf("zero entity decoded as %+v", got)
	}
}

func TestEncodeDropsSubTickPrecision(t *testing.T) {
	ts := time.Date(2024, 1, 1, 0, 0, 0, 123456789, time.UTC)
	e := &Entity{Props: []Property{{"T", EdmDateTime, ts}}}
	got, err := DecodeEntity(EncodeEntity(e))
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2024, 1, 1, 0, 0, 0, 123456700, time.UTC); !got.Props[0].Value.(time.Time).Equal(want) {
		t.Fatalf("got %v, want %v", got.Props[0].Value, want)
	}
}

func TestDecodeEntityRejects(t *testing.T) {
	valid := EncodeEntity(everyTypeEntity())
	int32Overflow := append([]byte{formatV1, 0, 0, 0, 0, 1, 1, 'x', byte(EdmInt32)}, binary.AppendVarint(nil, math.MaxInt32+1)...)
	cases := map[string][]byte{
		"empty":          nil,
		"version":        {0x02, 0, 0, 0, 0, 0},
		"truncated":      valid[:len(valid)-1],
		"trailing":       append(append([]byte{}, valid...), 0),
		"bad type":       {formatV1, 0, 0, 0, 0, 1, 1, 'x', 99, 0},
		"bad bool":       {formatV1, 0, 0, 0, 0, 1, 1, 'x', byte(EdmBoolean), 2},
		"short guid":     {formatV1, 0, 0, 0, 0, 1, 1, 'x', byte(EdmGuid), 1, 2},
		"huge count":     {formatV1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x0f},
		"long string":    {formatV1, 10, 'a'},
		"int32 overflow": int32Overflow,
	}
	for name, b := range cases {
		if _, err := DecodeEntity(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: error = %v, want ErrCorrupt", name, err)
		}
	}
}

// genEntity builds an entity deterministically from fuzz input, so the
// fuzzer explores names, types and values through the bytes it mutates.
func genEntity(data []byte) *Entity {
	r := &byteReader{b: data}
	e := &Entity{PartitionKey: r.str(), RowKey: r.str(), ETag: r.str()}
	if r.byte()&1 == 1 {
		e.Timestamp = FromTicks(int64(r.u64() % uint64(Ticks(time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC)))))
	}
	for n := int(r.byte() % 12); n > 0 && !r.done(); n-- {
		p := Property{Name: r.str(), Type: EdmType(1 + r.byte()%8)}
		switch p.Type {
		case EdmString:
			p.Value = r.str()
		case EdmInt32:
			p.Value = int32(r.u64())
		case EdmInt64:
			p.Value = int64(r.u64())
		case EdmDouble:
			p.Value = math.Float64frombits(r.u64())
		case EdmBoolean:
			p.Value = r.byte()&1 == 1
		case EdmDateTime:
			p.Value = FromTicks(int64(r.u64() >> 2))
		case EdmGuid:
			var g GUID
			for i := range g {
				g[i] = r.byte()
			}
			p.Value = g
		case EdmBinary:
			p.Value = []byte(r.str())
		}
		e.Props = append(e.Props, p)
	}
	return e
}

type byteReader struct {
	b []byte
	i int
}

func (r *byteReader) done() bool { return r.i >= len(r.b) }

func (r *byteReader) byte() byte {
	if r.done() {
		return 0
	}
	r.i++
	return r.b[r.i-1]
}

func (r *byteReader) u64() uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(r.byte())
	}
	return v
}

func (r *byteReader) str() string {
	n := int(r.byte() % 16)
	start := min(r.i, len(r.b))
	end := min(start+n, len(r.b))
	r.i = end
	return string(r.b[start:end])
}

func FuzzEntityRoundTrip(f *testing.F) {
	f.Add([]byte{})
	f.Add(EncodeEntity(everyTypeEntity()))
	f.Add([]byte("\x03pk1\x03rk1\x00\x01\x00\x00\x01\x02\x03\x04\x05\x06\x07\x08\x06\x01a\x00\x04\x7f\xf8\x00\x00\x00\x00\x00\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		e := genEntity(data)
		enc := EncodeEntity(e)
		got, err := DecodeEntity(enc)
		if err != nil {
			t.Fatalf("DecodeEntity(EncodeEntity(%+v)): %v", e, err)
		}
		equalEntity(t, got, e)
		// The raw input as an encoded value: rejected or stable.
		if d, err := DecodeEntity(data); err == nil {
			again, err := DecodeEntity(EncodeEntity(d))
			if err != nil {
				t.Fatalf("re-decode: %v", err)
			}
			equalEntity(t, again, d)
		}
	})
}

func BenchmarkEncodeEntity(b *testing.B) {
	e := everyTypeEntity()
	b.ReportAllocs()
	for b.Loop() {
		EncodeEntity(e)
	}
}

func BenchmarkDecodeEntity(b *testing.B) {
	enc := EncodeEntity(everyTypeEntity())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeEntity(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEncodeEntityFormatIsPinned guards the on-disk format: values live in
// the WAL and the embedded store, so a change here needs a new version byte.
func TestEncodeEntityFormatIsPinned(t *testing.T) {
	e := &Entity{PartitionKey: "p", RowKey: "r", ETag: "e", Timestamp: FromTicks(1), Props: []Property{
		{"S", EdmString, "hi"},
		{"I", EdmInt32, int32(-1)},
		{"B", EdmBoolean, true},
		{"D", EdmDouble, 1.0},
	}}
	want := []byte{
		formatV1, 1, 'p', 1, 'r', 2 /* zigzag(1) */, 1, 'e', 4,
		1, 'S', byte(EdmString), 2, 'h', 'i',
		1, 'I', byte(EdmInt32), 1, /* zigzag(-1) */
		1, 'B', byte(EdmBoolean), 1,
		1, 'D', byte(EdmDouble), 0x3f, 0xf0, 0, 0, 0, 0, 0, 0,
	}
	if got := EncodeEntity(e); !bytes.Equal(got, want) {
		t.Fatalf("EncodeEntity = %x, want %x", got, want)
	}
}
