package dscodec

import (
	"bytes"
	"errors"
	"testing"

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
