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

// AppendResult appends to dst the wire encoding of engine value b as a
// datastorepb.EntityResult whose entity's key is key (a marshalled
// datastorepb.Key) instead of its own, without decoding the entity: what
// proto.Marshal makes of DecodeValue(b) with that key, the fields in the
// value's order. A frontend answers a read with it from the buffer's bytes
// (as unknown fields of an empty EntityResult, which marshalling writes
// as they are). Like eachField it checks the value's top-level fields and
// the entity's, not what they hold.
func AppendResult(dst, b, key []byte) ([]byte, error) {
	var err error
	keyed := false
	ferr := eachField(b, func(num protowire.Number, typ protowire.Type, field []byte) {
		if num != entityField || typ != protowire.BytesType || err != nil {
			dst = append(dst, field...)
			return
		}
		_, _, n := protowire.ConsumeTag(field)
		entity, _ := protowire.ConsumeBytes(field[n:])
		dst, err = appendRekeyed(dst, entity, key, !keyed)
		keyed = true // a repeated entity is merged into the first: keyed once
	})
	if err := errors.Join(ferr, err); err != nil {
		return nil, err
	}
	return dst, nil
}

// entityKeyField is datastorepb.Entity's key.
const entityKeyField protowire.Number = 1

// appendRekeyed appends the entity field of a result holding entity (its
// bytes) with key in place of its own key, or with none unless withKey.
func appendRekeyed(dst, entity, key []byte, withKey bool) ([]byte, error) {
	size := 0
	if withKey {
		size = protowire.SizeTag(entityKeyField) + protowire.SizeBytes(len(key))
	}
	// A key field of another wire type is an unknown field: kept.
	isKey := func(num protowire.Number, typ protowire.Type) bool {
		return num == entityKeyField && typ == protowire.BytesType
	}
	if err := walkFields(entity, func(num protowire.Number, typ protowire.Type, field []byte) {
		if !isKey(num, typ) {
			size += len(field)
		}
	}); err != nil {
		return nil, fmt.Errorf("%w: entity: %w", ErrInvalidValue, err)
	}
	dst = protowire.AppendTag(dst, entityField, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(size))
	if withKey {
		dst = protowire.AppendTag(dst, entityKeyField, protowire.BytesType)
		dst = protowire.AppendBytes(dst, key)
	}
	_ = walkFields(entity, func(num protowire.Number, typ protowire.Type, field []byte) {
		if !isKey(num, typ) {
			dst = append(dst, field...)
		}
	})
	return dst, nil
}

// eachField calls fn with each top-level field of engine value b, in
// order: its number, its wire type and its bytes, tag included. It fails
// unless b is a well-formed message holding an entity (whose own bytes it
// does not check). A field of a wire type other than its own is, as
// proto.Unmarshal takes it, an unknown field: the callers match number
// and type.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, field []byte)) error {
	entity := false
	err := walkFields(b, func(num protowire.Number, typ protowire.Type, field []byte) {
		entity = entity || num == entityField && typ == protowire.BytesType
		fn(num, typ, field)
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidValue, err)
	}
	if !entity {
		return fmt.Errorf("%w: no entity", ErrInvalidValue)
	}
	return nil
}

// walkFields calls fn with each field of message b, in order: its number,
// its wire type and its bytes, tag included. It fails unless b is a
// well-formed message.
func walkFields(b []byte, fn func(num protowire.Number, typ protowire.Type, field []byte)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return protowire.ParseError(m)
		}
		fn(num, typ, b[:n+m])
		b = b[n+m:]
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
