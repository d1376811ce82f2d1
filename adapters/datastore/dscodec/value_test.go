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
