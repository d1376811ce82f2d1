package dscodec

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestValueRoundTrip(t *testing.T) {
	r := &datastorepb.EntityResult{
		Entity: &datastorepb.Entity{
			Key: &datastorepb.Key{Path: []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: 3}}}},
			Properties: map[string]*datastorepb.Value{
				"a": {ValueType: &datastorepb.Value_IntegerValue{IntegerValue: 7}},
				"b": {ValueType: &datastorepb.Value_StringValue{StringValue: "x"}, ExcludeFromIndexes: true},
				"c": {ValueType: &datastorepb.Value_NullValue{}},
			},
		},
		Version:    42,
		CreateTime: timestamppb.New(timestamppb.Now().AsTime()),
		UpdateTime: timestamppb.Now(),
		Cursor:     []byte("dropped"),
	}
	b, err := EncodeValue(r)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := EncodeValue(r)
	if !bytes.Equal(b, b2) {
		t.Fatal("encoding is not deterministic")
	}
	got, err := DecodeValue(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Cursor != nil {
		t.Error("cursor was stored")
	}
	got.Cursor = r.Cursor
	if !proto.Equal(got, r) {
		t.Errorf("round trip: %v != %v", got, r)
	}
	if _, err := DecodeValue([]byte{0xff}); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("garbage decoded: %v", err)
	}
	if _, err := DecodeValue(nil); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("empty value decoded: %v", err)
	}
	if _, err := EncodeValue(&datastorepb.EntityResult{}); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("no entity encoded: %v", err)
	}
}

func TestSameEntity(t *testing.T) {
	entity := func(n int64) *datastorepb.Entity {
		return &datastorepb.Entity{
			Key:        &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: "p"}, Path: []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: 3}}}},
			Properties: map[string]*datastorepb.Value{"n": {ValueType: &datastorepb.Value_IntegerValue{IntegerValue: n}}},
		}
	}
	enc := func(e *datastorepb.Entity, version int64, at time.Time) []byte {
		t.Helper()
		b, err := EncodeValue(&datastorepb.EntityResult{Entity: e, Version: version, CreateTime: timestamppb.New(at), UpdateTime: timestamppb.New(at)})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t0, t1 := time.Unix(1, 0), time.Unix(2, 0)
	other := entity(7)
	other.Key.Path[0].IdType = &datastorepb.Key_PathElement_Id{Id: 4}
	for _, tc := range []struct {
		name string
		a, b []byte
		want bool
	}{
		{"identical", enc(entity(7), 1, t0), enc(entity(7), 1, t0), true},
		{"other version and times", enc(entity(7), 1, t0), enc(entity(7), 99, t1), true},
		{"other property value", enc(entity(7), 1, t0), enc(entity(8), 1, t0), false},
		{"other key", enc(entity(7), 1, t0), enc(other, 1, t0), false},
		{"equal junk", []byte("junk"), []byte("junk"), true},
		{"other junk", []byte("junk"), []byte("junk!"), false},
		{"junk and entity", []byte("junk"), enc(entity(7), 1, t0), false},
	} {
		if got := SameEntity(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: SameEntity = %v, want %v", tc.name, got, tc.want)
		}
		if got := SameEntity(tc.b, tc.a); got != tc.want {
			t.Errorf("%s (swapped): SameEntity = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// versionCases are engine values with and without each optional field.
func versionCases(t testing.TB) [][]byte {
	key := &datastorepb.Key{Path: []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Name{Name: "n"}}}}
	at := timestamppb.New(time.Unix(1700000000, 123000))
	var out [][]byte
	for _, r := range []*datastorepb.EntityResult{
		{Entity: &datastorepb.Entity{}},
		{Entity: &datastorepb.Entity{Key: key}, Version: 7},
		{Entity: &datastorepb.Entity{Key: key, Properties: map[string]*datastorepb.Value{
			"a": {ValueType: &datastorepb.Value_StringValue{StringValue: string(make([]byte, 1024))}},
			"b": {ValueType: &datastorepb.Value_IntegerValue{IntegerValue: -1}},
		}}, Version: 1 << 40, CreateTime: at, UpdateTime: at},
		{Entity: &datastorepb.Entity{Key: key}, CreateTime: at},
		{Entity: &datastorepb.Entity{Key: key}, Version: -3, UpdateTime: at},
	} {
		b, err := EncodeValue(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// checkVersion checks ValueVersion and WithVersion on an engine value b
// that DecodeValue decodes to r: both agree with it, and on the canonical
// encoding of r WithVersion gives exactly EncodeValue's bytes.
func checkVersion(t *testing.T, b []byte, r *datastorepb.EntityResult, v int64) {
	t.Helper()
	if got, err := ValueVersion(b); err == nil && got != r.Version {
		t.Fatalf("ValueVersion(%x) = %d, decoded %d", b, got, r.Version)
	}
	if got, err := WithVersion(b, v); err == nil {
		d, err := DecodeValue(got)
		if err != nil {
			t.Fatalf("WithVersion(%x, %d) = %x, which does not decode: %v", b, v, got, err)
		}
		want := proto.Clone(r).(*datastorepb.EntityResult)
		want.Version = v
		if !proto.Equal(d, want) {
			t.Fatalf("WithVersion(%x, %d) decodes to %v, want %v", b, v, d, want)
		}
	}
	canon, err := EncodeValue(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.ProtoReflect().GetUnknown()) > 0 {
		return // EncodeValue writes unknown fields last, WithVersion leaves them in place
	}
	if got, err := ValueVersion(canon); err != nil || got != r.Version {
		t.Fatalf("ValueVersion(EncodeValue(%v)) = %d, %v", r, got, err)
	}
	got, err := WithVersion(canon, v)
	if err != nil {
		t.Fatalf("WithVersion(EncodeValue(%v), %d): %v", r, v, err)
	}
	stamped := proto.Clone(r).(*datastorepb.EntityResult)
	stamped.Version = v
	want, err := EncodeValue(stamped)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("WithVersion(EncodeValue(%v), %d) = %x, EncodeValue gives %x", r, v, got, want)
	}
}

func TestValueVersion(t *testing.T) {
	for _, b := range versionCases(t) {
		r, err := DecodeValue(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []int64{0, 1, 7, 1<<40 + 1, -1, 1<<63 - 1} {
			checkVersion(t, b, r, v)
		}
		checkResult(t, b, r)
	}
	for _, bad := range [][]byte{
		nil,
		{0xff},
		{0x20, 0x07},       // a version, no entity
		{0x08, 0x01},       // an entity of the varint wire type
		{0x0a, 0x05, 0x00}, // a truncated entity
	} {
		if _, err := ValueVersion(bad); !errors.Is(err, ErrInvalidValue) {
			t.Errorf("ValueVersion(%x): %v", bad, err)
		}
		if _, err := WithVersion(bad, 3); !errors.Is(err, ErrInvalidValue) {
			t.Errorf("WithVersion(%x): %v", bad, err)
		}
		if _, err := AppendResult(nil, bad, nil); !errors.Is(err, ErrInvalidValue) {
			t.Errorf("AppendResult(%x): %v", bad, err)
		}
	}
	// An entity whose fields do not parse: the one value AppendResult
	// looks into.
	if _, err := AppendResult(nil, []byte{0x0a, 0x01, 0xff}, nil); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("AppendResult of a broken entity: %v", err)
	}
}

func FuzzValueFields(f *testing.F) {
	for _, b := range versionCases(f) {
		f.Add(b, int64(5), "k")
	}
	f.Add([]byte{0x0a, 0x00, 0x20, 0x01, 0x20, 0x02}, int64(9), "")              // a repeated version: the last wins
	f.Add([]byte{0x0a, 0x02, 0x0a, 0x00, 0x0a, 0x02, 0x1a, 0x00}, int64(1), "x") // a repeated entity: merged
	f.Add([]byte{0x0a, 0x00, 0x22, 0x00}, int64(2), "")                          // a version of the bytes wire type: an unknown field
	f.Add([]byte{0x0a, 0x02, 0x08, 0x01}, int64(2), "")                          // an entity key of the varint wire type: the same
	f.Fuzz(func(t *testing.T, b []byte, v int64, _ string) {
		r, err := DecodeValue(b)
		if err != nil {
			return
		}
		checkVersion(t, b, r, v)
		checkResult(t, b, r)
	})
}

// checkResult checks AppendResult(b) against DecodeValue(b) (r) with the
// entity's key replaced.
func checkResult(t *testing.T, b []byte, r *datastorepb.EntityResult) {
	t.Helper()
	key := &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: "p"},
		Path: []*datastorepb.Key_PathElement{{Kind: "Other", IdType: &datastorepb.Key_PathElement_Name{Name: "n"}}}}
	kb, err := proto.Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := AppendResult([]byte("prefix"), b, kb)
	if err != nil {
		t.Fatalf("AppendResult(%x): %v", b, err)
	}
	if !bytes.HasPrefix(got, []byte("prefix")) {
		t.Fatalf("AppendResult lost what it appends to: %x", got)
	}
	var res datastorepb.EntityResult
	if err := proto.Unmarshal(got[len("prefix"):], &res); err != nil {
		t.Fatalf("AppendResult(%x) = %x does not decode: %v", b, got, err)
	}
	want := proto.Clone(r).(*datastorepb.EntityResult)
	want.Entity.Key = key
	if !proto.Equal(&res, want) {
		t.Fatalf("AppendResult(%x) decodes to %v, want %v", b, &res, want)
	}
}
