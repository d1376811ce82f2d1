package dscodec

import (
	"bytes"
	"errors"
	"fmt"
	"math"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/proto"

	"github.com/nemocache/nemo/adapters"
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

// SameEntity reports whether two engine values hold the same entity (key
// and properties), ignoring what the service stamps on what it stores:
// the version, create time and update time. An entity written through nemo
// and the same entity read back from Datastore differ only there. Doubles
// compare by value (0 and -0 alike, NaN equal to NaN). Values that do not
// decode are compared as bytes.
func SameEntity(a, b []byte) bool { return bytes.Equal(canonical(a), canonical(b)) }

// Digest is a hash of what SameEntity compares (adapters.Digest): two
// values SameEntity calls the same have the same digest.
func Digest(v []byte) uint64 { return adapters.Digest(canonical(v)) }

// canonical is the deterministic encoding of v's entity alone (no version
// or times), every double zero as +0 and every NaN as one NaN. A value
// that does not decode is itself.
func canonical(v []byte) []byte {
	r, err := DecodeValue(v)
	if err != nil {
		return v
	}
	for _, p := range r.Entity.Properties {
		canonicalDoubles(p)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r.Entity)
	if err != nil {
		return v
	}
	return b
}

// canonicalDoubles rewrites the doubles in v (and in the arrays and
// entities it holds) to one spelling per value.
func canonicalDoubles(v *datastorepb.Value) {
	switch x := v.GetValueType().(type) {
	case *datastorepb.Value_DoubleValue:
		switch {
		case math.IsNaN(x.DoubleValue):
			x.DoubleValue = math.NaN()
		case x.DoubleValue == 0:
			x.DoubleValue = 0
		}
	case *datastorepb.Value_ArrayValue:
		for _, e := range x.ArrayValue.GetValues() {
			canonicalDoubles(e)
		}
	case *datastorepb.Value_EntityValue:
		for _, e := range x.EntityValue.GetProperties() {
			canonicalDoubles(e)
		}
	}
}
