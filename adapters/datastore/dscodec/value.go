package dscodec

import (
	"bytes"
	"errors"
	"fmt"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/proto"
)

// ErrInvalidValue: an engine value is not an encoded entity.
var ErrInvalidValue = errors.New("dscodec: invalid entity value")

// EncodeValue is the engine value of an entity: the deterministic protobuf
// encoding of a datastorepb.EntityResult holding the entity (with its key)
// and its version, create time and update time. The cursor field is never
// stored.
func EncodeValue(r *datastorepb.EntityResult) ([]byte, error) {
	if r == nil || r.Entity == nil {
		return nil, fmt.Errorf("%w: no entity", ErrInvalidValue)
	}
	v := &datastorepb.EntityResult{Entity: r.Entity, Version: r.Version, CreateTime: r.CreateTime, UpdateTime: r.UpdateTime}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidValue, err)
	}
	return b, nil
}

// DecodeValue inverts EncodeValue.
func DecodeValue(b []byte) (*datastorepb.EntityResult, error) {
	r := &datastorepb.EntityResult{}
	if err := proto.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidValue, err)
	}
	if r.Entity == nil {
		return nil, fmt.Errorf("%w: no entity", ErrInvalidValue)
	}
	return r, nil
}

// Unstamped returns the deterministic encoding of an engine value's entity
// alone, without what the service stamps on what it stores (version,
// create and update time): two values SameEntity finds the same give the
// same bytes. A value that does not decode is returned as it is.
func Unstamped(v []byte) []byte {
	r, err := DecodeValue(v)
	if err != nil {
		return v
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r.Entity)
	if err != nil {
		return v
	}
	return b
}

// SameEntity reports whether two engine values hold the same entity (key
// and properties), ignoring what the service stamps on what it stores:
// the version, create time and update time. An entity written through nemo
// and the same entity read back from Datastore differ only there. Values
// that do not decode are compared as bytes.
func SameEntity(a, b []byte) bool {
	ra, err1 := DecodeValue(a)
	rb, err2 := DecodeValue(b)
	if err1 != nil || err2 != nil {
		return bytes.Equal(a, b)
	}
	return proto.Equal(ra.Entity, rb.Entity)
}
