package blog

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/nemocache/nemo/adapters"
)

// Codec says where the log of a keyspace lives and how its records are
// spelled; each adapter provides one (aztable.LogCodec(),
// datastore.LogCodec()), and RawCodec serves the embedded store and tests.
type Codec interface {
	// Keyspace is the keyspace holding ks's log; "" when ks has none.
	Keyspace(ks adapters.Keyspace) adapters.Keyspace
	// FenceKey is the key of ks's fence in Keyspace(ks).
	FenceKey(ks adapters.Keyspace) []byte
	// EntryKey is the key of part part of entry seq (seq >= 1); keys order
	// by (seq, part). nil when seq or part is out of the codec's range.
	EntryKey(ks adapters.Keyspace, seq uint64, part int) []byte
	// EntryRange is [start, end): it holds exactly ks's entries.
	EntryRange(ks adapters.Keyspace) (start, end []byte)
	EncodeFence(ks adapters.Keyspace, f Fence) ([]byte, error)
	// DecodeFence inverts EncodeFence; a value that is not a fence is an
	// error wrapping adapters.ErrBadLogRecord.
	DecodeFence(b []byte) (Fence, error)
	// EncodeEntry encodes part part of entry seq, data at most
	// Limits().RecordBytes.
	EncodeEntry(ks adapters.Keyspace, seq uint64, part int, data []byte) ([]byte, error)
	// DecodeEntry inverts EncodeEntry; a value that is not an entry is an
	// error wrapping adapters.ErrBadLogRecord.
	DecodeEntry(b []byte) (seq uint64, part int, data []byte, err error)
	// Limits is what one atomic call and one record may hold in this
	// backend.
	Limits() Limits
	// Logs is [start, end) of lks, a keyspace that Keyspace returns: the
	// part holding every log kept there (fences and entries) and nothing
	// else (nil, nil: all of lks).
	Logs(lks adapters.Keyspace) (start, end []byte)
}

// Fence is the fence record of a log (see adapters.LogFence: the owner's
// Epoch, the Token of the Open that wrote it, Holder, and Last, the last
// seq appended).
type Fence = adapters.LogFence

// Limits are a backend's limits (see adapters.LogLimits).
type Limits = adapters.LogLimits

// ErrBadRecord: a stored value is not a log record.
var ErrBadRecord = adapters.ErrBadLogRecord

type rawCodec struct{ lks adapters.Keyspace }

// RawCodec keeps the log of every keyspace in keyspace lks: key
// uvarint(len(ks)) ‖ ks ‖ 'f' for the fence (as JSON), ‖ 'e' ‖ seq (8 bytes,
// big-endian) ‖ part (4 bytes) for an entry (its value: 'E', seq, part,
// data). Its limits are those of the embedded store, which has none worth
// the name: 1,000 records and 64 MiB a call, 4 MiB a record.
func RawCodec(lks adapters.Keyspace) Codec { return rawCodec{lks} }

func (c rawCodec) prefix(ks adapters.Keyspace) []byte {
	if ks == "" || ks == c.lks {
		return nil
	}
	return append(binary.AppendUvarint(nil, uint64(len(ks))), ks...)
}

func (c rawCodec) Keyspace(ks adapters.Keyspace) adapters.Keyspace {
	if c.prefix(ks) == nil {
		return ""
	}
	return c.lks
}

func (c rawCodec) FenceKey(ks adapters.Keyspace) []byte {
	if p := c.prefix(ks); p != nil {
		return append(p, 'f')
	}
	return nil
}

func (c rawCodec) EntryKey(ks adapters.Keyspace, seq uint64, part int) []byte {
	p := c.prefix(ks)
	if p == nil || part < 0 || part > 1<<31-1 {
		return nil
	}
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(append(p, 'e'), seq), uint32(part))
}

func (c rawCodec) EntryRange(ks adapters.Keyspace) (start, end []byte) {
	p := c.prefix(ks)
	if p == nil {
		return nil, nil
	}
	return append(p, 'e'), append(p[:len(p):len(p)], 'f')
}

func (rawCodec) Limits() Limits {
	return Limits{CallRecords: 1000, CallBytes: 64 << 20, RecordBytes: 4 << 20}
}

type rawFence struct {
	Epoch    uint64            `json:"epoch"`
	Token    uint64            `json:"token"`
	Holder   string            `json:"holder"`
	Last     uint64            `json:"last"`
	Keyspace adapters.Keyspace `json:"keyspace,omitempty"`
}

func (rawCodec) EncodeFence(ks adapters.Keyspace, f Fence) ([]byte, error) {
	f.Keyspace = ks
	return json.Marshal(rawFence(f))
}

func (rawCodec) Logs(adapters.Keyspace) (start, end []byte) { return nil, nil }

func (rawCodec) DecodeFence(b []byte) (Fence, error) {
	var f rawFence
	if err := json.Unmarshal(b, &f); err != nil {
		return Fence{}, fmt.Errorf("%w: %w", ErrBadRecord, err)
	}
	return Fence(f), nil
}

const rawEntryHeader = 1 + 8 + 4

func (c rawCodec) EncodeEntry(ks adapters.Keyspace, seq uint64, part int, data []byte) ([]byte, error) {
	if c.prefix(ks) == nil || part < 0 || part > 1<<31-1 || len(data) > c.Limits().RecordBytes {
		return nil, fmt.Errorf("blog: raw entry %q seq %d part %d of %d bytes: %w", ks, seq, part, len(data), adapters.ErrInvalid)
	}
	b := make([]byte, 0, rawEntryHeader+len(data))
	b = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(append(b, 'E'), seq), uint32(part))
	return append(b, data...), nil
}

func (c rawCodec) DecodeEntry(b []byte) (uint64, int, []byte, error) {
	if len(b) < rawEntryHeader || b[0] != 'E' {
		return 0, 0, nil, fmt.Errorf("%w: not a raw entry", ErrBadRecord)
	}
	part := binary.BigEndian.Uint32(b[9:])
	if part > 1<<31-1 || len(b)-rawEntryHeader > c.Limits().RecordBytes {
		return 0, 0, nil, fmt.Errorf("%w: part %d of %d bytes", ErrBadRecord, part, len(b)-rawEntryHeader)
	}
	return binary.BigEndian.Uint64(b[1:]), int(part), append([]byte{}, b[rawEntryHeader:]...), nil
}
