package tablecodec

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Binary value layout (version 1), all integers varints unless noted:
//
//	0x01                       format version
//	uvarint len, bytes         PartitionKey
//	uvarint len, bytes         RowKey
//	varint                     Timestamp as 100 ns ticks since 0001-01-01 UTC
//	uvarint len, bytes         ETag
//	uvarint n                  property count, then n times:
//	  uvarint len, bytes       name
//	  byte                     EdmType
//	  value                    String/Binary: uvarint len, bytes
//	                           Int32/Int64/DateTime(ticks): zigzag varint
//	                           Double: 8 bytes big-endian IEEE 754 bits
//	                           Boolean: 0x00 or 0x01
//	                           Guid: 16 bytes
//
// The keys are repeated in the value so that a value decodes on its own (the
// WAL and the write-back path see values without parsing keys).
const formatV1 = 0x01

// zeroTicks is Ticks(time.Time{}): 0001-01-01 is tick 0. It decodes to
// time.Time{} itself so that an unset Timestamp stays IsZero and DeepEqual.
const zeroTicks = 0

// EncodeEntity returns the binary value of e. It does not validate e (see
// Entity.Validate); a property whose Value has the wrong Go type for its
// Type panics, since only this package's parsers and tests build entities.
// DateTimes are stored at 100 ns precision.
func EncodeEntity(e *Entity) []byte {
	n := 1 + 3*binary.MaxVarintLen64 + len(e.PartitionKey) + len(e.RowKey) + len(e.ETag) + binary.MaxVarintLen64
	for _, p := range e.Props {
		n += binary.MaxVarintLen64 + len(p.Name) + 1 + binary.MaxVarintLen64 + 16
		switch v := p.Value.(type) {
		case string:
			n += len(v)
		case []byte:
			n += len(v)
		}
	}
	b := make([]byte, 0, n)
	b = append(b, formatV1)
	b = appendString(b, e.PartitionKey)
	b = appendString(b, e.RowKey)
	b = binary.AppendVarint(b, Ticks(e.Timestamp))
	b = appendString(b, e.ETag)
	b = binary.AppendUvarint(b, uint64(len(e.Props)))
	for _, p := range e.Props {
		b = appendString(b, p.Name)
		b = append(b, byte(p.Type))
		switch p.Type {
		case EdmString:
			b = appendString(b, p.Value.(string))
		case EdmBinary:
			v := p.Value.([]byte)
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		case EdmInt32:
			b = binary.AppendVarint(b, int64(p.Value.(int32)))
		case EdmInt64:
			b = binary.AppendVarint(b, p.Value.(int64))
		case EdmDateTime:
			b = binary.AppendVarint(b, Ticks(p.Value.(time.Time)))
		case EdmDouble:
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(p.Value.(float64)))
		case EdmBoolean:
			if p.Value.(bool) {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		case EdmGuid:
			g := p.Value.(GUID)
			b = append(b, g[:]...)
		default:
			panic(fmt.Sprintf("tablecodec: EncodeEntity: property %q has invalid type %v", p.Name, p.Type))
		}
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads the binary format; the first error sticks.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: at byte %d: %s", ErrCorrupt, d.off, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) bytes(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail("length %d past end", n)
		return nil
	}
	v := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return v
}

func (d *decoder) str() string { return string(d.bytes(d.uvarint())) }

func (d *decoder) byte1() byte {
	v := d.bytes(1)
	if v == nil {
		return 0
	}
	return v[0]
}

// DecodeEntity parses a value produced by EncodeEntity. Any malformed input
// yields an error wrapping ErrCorrupt, never a panic.
func DecodeEntity(b []byte) (*Entity, error) {
	d := &decoder{b: b}
	if v := d.byte1(); d.err == nil && v != formatV1 {
		return nil, fmt.Errorf("%w: unknown format version %d", ErrCorrupt, v)
	}
	e := &Entity{PartitionKey: d.str(), RowKey: d.str()}
	if ts := d.varint(); ts != zeroTicks {
		e.Timestamp = FromTicks(ts)
	}
	e.ETag = d.str()
	n := d.uvarint()
	if d.err == nil && n > uint64(len(b)-d.off) { // every property takes at least 2 bytes
		d.fail("property count %d exceeds input", n)
	}
	if d.err == nil && n > 0 {
		e.Props = make([]Property, 0, n)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		p := Property{Name: d.str(), Type: EdmType(d.byte1())}
		switch p.Type {
		case EdmString:
			p.Value = d.str()
		case EdmBinary:
			p.Value = append([]byte{}, d.bytes(d.uvarint())...)
		case EdmInt32:
			v := d.varint()
			if v < math.MinInt32 || v > math.MaxInt32 {
				d.fail("Int32 %d out of range", v)
			}
			p.Value = int32(v)
		case EdmInt64:
			p.Value = d.varint()
		case EdmDateTime:
			p.Value = FromTicks(d.varint())
		case EdmDouble:
			p.Value = math.Float64frombits(binary.BigEndian.Uint64(pad8(d.bytes(8))))
		case EdmBoolean:
			switch d.byte1() {
			case 0:
				p.Value = false
			case 1:
				p.Value = true
			default:
				d.fail("bad boolean")
			}
		case EdmGuid:
			var g GUID
			copy(g[:], d.bytes(16))
			p.Value = g
		default:
			d.fail("unknown type %d", p.Type)
		}
		e.Props = append(e.Props, p)
	}
	if d.err == nil && d.off != len(b) {
		d.fail("%d trailing bytes", len(b)-d.off)
	}
	if d.err != nil {
		return nil, d.err
	}
	return e, nil
}

// pad8 lets a failed read (nil) decode harmlessly; the decoder's error is
// already set in that case.
func pad8(b []byte) []byte {
	if len(b) == 8 {
		return b
	}
	return make([]byte, 8)
}
