package dscodec

import (
	"bytes"
	"errors"
	"fmt"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/encoding/protowire"
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

// The EntityResult fields EncodeValue writes, in the order it writes them
// (deterministic marshaling orders fields by number).
const (
	entityField  protowire.Number = 1
	versionField protowire.Number = 4
)

// ValueVersion is the version an engine value holds (0: none), read from
// its top-level fields without decoding the entity.
func ValueVersion(b []byte) (int64, error) {
	var v int64
	err := eachField(b, func(num protowire.Number, typ protowire.Type, field []byte) {
		if num == versionField && typ == protowire.VarintType {
			// Checked by eachField; the last occurrence wins, as in
			// proto.Unmarshal. The tag is consumed as written: a
			// non-minimal one (0xa0 0x00 for 0x20) is longer than
			// SizeTag says, and proto.Unmarshal takes it.
			_, _, n := protowire.ConsumeTag(field)
			x, _ := protowire.ConsumeVarint(field[n:])
			v = int64(x)
		}
	})
	return v, err
}

// WithVersion returns engine value b holding version v instead of its own,
// without decoding the entity: for a value EncodeValue made (of a result
// with no fields unknown to datastorepb), the bytes EncodeValue makes of
// the same value with version v.
func WithVersion(b []byte, v int64) ([]byte, error) {
	out := make([]byte, 0, len(b)+protowire.SizeTag(versionField)+protowire.SizeVarint(uint64(v)))
	placed := v == 0 // proto3 leaves a zero version out
	place := func() {
		out = protowire.AppendTag(out, versionField, protowire.VarintType)
		out = protowire.AppendVarint(out, uint64(v))
		placed = true
	}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, field []byte) {
		if num > versionField && !placed {
			place()
		}
		if num != versionField || typ != protowire.VarintType {
			out = append(out, field...)
		}
	})
	if err != nil {
		return nil, err
	}
	if !placed {
		place()
	}
	return out, nil
}

// eachField calls fn with each top-level field of engine value b, in
// order: its number, its wire type and its bytes, tag included. It fails
// unless b is a well-formed message holding an entity (whose own bytes it
// does not check). A field of a wire type other than its own is, as
// proto.Unmarshal takes it, an unknown field: the callers match number
// and type.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, field []byte)) error {
	entity := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %w", ErrInvalidValue, protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return fmt.Errorf("%w: %w", ErrInvalidValue, protowire.ParseError(m))
		}
		entity = entity || num == entityField && typ == protowire.BytesType
		fn(num, typ, b[:n+m])
		b = b[n+m:]
	}
	if !entity {
		return fmt.Errorf("%w: no entity", ErrInvalidValue)
	}
	return nil
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
