package datastore

import (
	"fmt"

	"cloud.google.com/go/datastore/apiv1/datastorepb"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

// Datastore commit log layout (package txn/blog): in the default namespace
// of the partition's project and database (as the leases), the fence is the
// entity LogKind/<namespace> (the default namespace, whose name "" is not a
// legal key name, is spelled "(default)", which no namespace can be), with
// integer properties Epoch, Token and Last and string property Holder, all
// unindexed. Each entry part is its child LogEntryKind/<id>, id = seq<<12 |
// part (ids are > 0 since seqs start at 1, order by seq then part, and fit
// an int64 for every seq below 2^51), with integer properties Seq and Part
// and the data in the unindexed blob property Data. The fence and its
// entries are one entity group, so one transaction writes them together
// (legacy Datastore takes at most 25 groups in one).
const (
	LogKind      = "NemoLog"
	LogEntryKind = "NemoLogEntry"
)

// logDefaultName names the log of the default namespace.
const logDefaultName = "(default)"

// Limits of the Datastore log: a commit holds 500 mutations and 10 MiB,
// but both emulators take gRPC messages of at most 4 MiB (a bigger commit
// is refused with RESOURCE_EXHAUSTED), so a call's keys and values stay
// at 3.5 MiB; an entity holds at most 1,048,572 bytes, of which a part's
// data takes at most 960 KiB, leaving room for the key and the property
// names.
const (
	logCallBytes   = 7 << 19 // 3.5 MiB
	logRecordBytes = 1<<20 - 64<<10
	logPartBits    = 12
	logMaxSeq      = 1<<(63-logPartBits) - 1
)

// Property names of log records.
const (
	logEpoch  = "Epoch"
	logToken  = "Token"
	logHolder = "Holder"
	logLast   = "Last"
	logKS     = "Keyspace"
	logSeq    = "Seq"
	logPart   = "Part"
	logData   = "Data"
)

// LogLayout says where the commit log of a Datastore partition lives and
// how its records are spelled (see LogKind). It implements txn/blog's
// Codec.
type LogLayout struct{}

// LogCodec returns the layout of the Datastore commit log.
func LogCodec() LogLayout { return LogLayout{} }

// logParent is the fence's path element for ks.
func logParent(ks adapters.Keyspace) (*datastorepb.Key_PathElement, bool) {
	p, err := dscodec.ParseKeyspace(ks)
	if err != nil {
		return nil, false
	}
	name := p.Namespace
	if name == "" {
		name = logDefaultName
	}
	return &datastorepb.Key_PathElement{Kind: LogKind, IdType: &datastorepb.Key_PathElement_Name{Name: name}}, true
}

func logEntryID(seq uint64, part int) int64 { return int64(seq<<logPartBits | uint64(part)) }

func logEntryElement(seq uint64, part int) *datastorepb.Key_PathElement {
	return &datastorepb.Key_PathElement{Kind: LogEntryKind, IdType: &datastorepb.Key_PathElement_Id{Id: logEntryID(seq, part)}}
}

// Keyspace is the default namespace of ks's project and database; "" when
// ks is not a Datastore partition.
func (LogLayout) Keyspace(ks adapters.Keyspace) adapters.Keyspace {
	p, err := dscodec.ParseKeyspace(ks)
	if err != nil {
		return ""
	}
	p.Namespace = ""
	return p.Keyspace()
}

// FenceKey is the key of the fence of ks's log; nil when ks has none.
func (LogLayout) FenceKey(ks adapters.Keyspace) []byte {
	parent, ok := logParent(ks)
	if !ok {
		return nil
	}
	k, err := dscodec.EncodePath([]*datastorepb.Key_PathElement{parent})
	if err != nil {
		return nil
	}
	return k
}

// EntryKey is the key of part part of entry seq of ks's log; nil when ks
// has no log or seq or part is out of range.
func (LogLayout) EntryKey(ks adapters.Keyspace, seq uint64, part int) []byte {
	parent, ok := logParent(ks)
	if !ok || seq == 0 || seq > logMaxSeq || part < 0 || part >= 1<<logPartBits {
		return nil
	}
	k, err := dscodec.EncodePath([]*datastorepb.Key_PathElement{parent, logEntryElement(seq, part)})
	if err != nil {
		return nil
	}
	return k
}

// EntryRange is the range holding exactly the entries of ks's log: the
// fence's children of kind LogEntryKind with ids from 1 up, and nothing
// else (the fence sorts before it, other kinds and names outside it).
func (c LogLayout) EntryRange(ks adapters.Keyspace) (start, end []byte) {
	parent, ok := logParent(ks)
	if !ok {
		return nil, nil
	}
	first := &datastorepb.Key_PathElement{Kind: LogEntryKind, IdType: &datastorepb.Key_PathElement_Id{Id: 1}}
	last := &datastorepb.Key_PathElement{Kind: LogEntryKind, IdType: &datastorepb.Key_PathElement_Id{Id: 1<<63 - 1}}
	start, err := dscodec.EncodePath([]*datastorepb.Key_PathElement{parent, first})
	if err != nil {
		return nil, nil
	}
	top, err := dscodec.EncodePath([]*datastorepb.Key_PathElement{parent, last})
	if err != nil {
		return nil, nil
	}
	return start, dscodec.SubtreeEnd(top)
}

// Limits are those of a commit (as the emulators take it) and an entity.
func (LogLayout) Limits() adapters.LogLimits {
	return adapters.LogLimits{CallRecords: MaxAtomic, CallBytes: logCallBytes, RecordBytes: logRecordBytes}
}

func logInt(name string, v uint64) (*datastorepb.Value, error) {
	if v > 1<<63-1 {
		return nil, fmt.Errorf("datastore: log %s %d does not fit an integer: %w", name, v, adapters.ErrInvalid)
	}
	return &datastorepb.Value{ValueType: &datastorepb.Value_IntegerValue{IntegerValue: int64(v)}, ExcludeFromIndexes: true}, nil
}

// EncodeFence is the entity of ks's fence f.
func (LogLayout) EncodeFence(ks adapters.Keyspace, f adapters.LogFence) ([]byte, error) {
	if _, ok := logParent(ks); !ok {
		return nil, fmt.Errorf("datastore: keyspace %q has no log: %w", ks, adapters.ErrInvalid)
	}
	props := map[string]*datastorepb.Value{
		logHolder: {ValueType: &datastorepb.Value_StringValue{StringValue: f.Holder}, ExcludeFromIndexes: true},
		logKS:     {ValueType: &datastorepb.Value_StringValue{StringValue: string(ks)}, ExcludeFromIndexes: true},
	}
	for name, v := range map[string]uint64{logEpoch: f.Epoch, logToken: f.Token, logLast: f.Last} {
		iv, err := logInt(name, v)
		if err != nil {
			return nil, err
		}
		props[name] = iv
	}
	return dscodec.EncodeValue(&datastorepb.EntityResult{Entity: &datastorepb.Entity{Properties: props}})
}

// logUint reads a non-negative integer property.
func logUint(props map[string]*datastorepb.Value, name string) (uint64, error) {
	v, ok := props[name].GetValueType().(*datastorepb.Value_IntegerValue)
	if !ok || v.IntegerValue < 0 {
		return 0, fmt.Errorf("%w: no non-negative integer %s", adapters.ErrBadLogRecord, name)
	}
	return uint64(v.IntegerValue), nil
}

// DecodeFence inverts EncodeFence.
func (LogLayout) DecodeFence(b []byte) (adapters.LogFence, error) {
	er, err := dscodec.DecodeValue(b)
	if err != nil {
		return adapters.LogFence{}, fmt.Errorf("%w: %w", adapters.ErrBadLogRecord, err)
	}
	props := er.GetEntity().GetProperties()
	var f adapters.LogFence
	for _, p := range []struct {
		name string
		v    *uint64
	}{{logEpoch, &f.Epoch}, {logToken, &f.Token}, {logLast, &f.Last}} {
		if *p.v, err = logUint(props, p.name); err != nil {
			return adapters.LogFence{}, err
		}
	}
	h, ok := props[logHolder].GetValueType().(*datastorepb.Value_StringValue)
	if !ok {
		return adapters.LogFence{}, fmt.Errorf("%w: no string %s", adapters.ErrBadLogRecord, logHolder)
	}
	f.Holder = h.StringValue
	if k, ok := props[logKS].GetValueType().(*datastorepb.Value_StringValue); ok {
		f.Keyspace = adapters.Keyspace(k.StringValue)
	}
	return f, nil
}

// Logs is the part of a database's default namespace (lks) that holds
// every log of the database's and nothing else: the keys whose first
// element's kind is LogKind (fences, and their entries below them).
func (LogLayout) Logs(adapters.Keyspace) (start, end []byte) {
	k, err := dscodec.EncodePath([]*datastorepb.Key_PathElement{{Kind: LogKind, IdType: &datastorepb.Key_PathElement_Id{Id: 1}}})
	if err != nil {
		return nil, nil
	}
	// The kind's encoding ends 0x00 0x01 (its terminator), then the
	// element's tag: every key of the kind starts with the kind's bytes.
	n := len(LogKind) + 2
	return k[:n], append(k[:n-1:n-1], 0x02)
}

// EncodeEntry is the entity of part part of entry seq of ks's log, its data
// (at most Limits().RecordBytes) in one unindexed blob.
func (LogLayout) EncodeEntry(ks adapters.Keyspace, seq uint64, part int, data []byte) ([]byte, error) {
	_, ok := logParent(ks)
	switch {
	case !ok:
		return nil, fmt.Errorf("datastore: keyspace %q has no log: %w", ks, adapters.ErrInvalid)
	case seq == 0 || seq > logMaxSeq || part < 0 || part >= 1<<logPartBits:
		return nil, fmt.Errorf("datastore: log entry seq %d part %d out of range: %w", seq, part, adapters.ErrInvalid)
	case len(data) > logRecordBytes:
		return nil, fmt.Errorf("datastore: log entry part of %d bytes, at most %d: %w", len(data), logRecordBytes, adapters.ErrInvalid)
	}
	if data == nil {
		data = []byte{}
	}
	e := &datastorepb.Entity{Properties: map[string]*datastorepb.Value{
		logSeq:  {ValueType: &datastorepb.Value_IntegerValue{IntegerValue: int64(seq)}, ExcludeFromIndexes: true},
		logPart: {ValueType: &datastorepb.Value_IntegerValue{IntegerValue: int64(part)}, ExcludeFromIndexes: true},
		logData: {ValueType: &datastorepb.Value_BlobValue{BlobValue: data}, ExcludeFromIndexes: true},
	}}
	return dscodec.EncodeValue(&datastorepb.EntityResult{Entity: e})
}

// DecodeEntry inverts EncodeEntry. A value read from the store carries the
// entity's key, which must then be the entry's own.
func (LogLayout) DecodeEntry(b []byte) (seq uint64, part int, data []byte, err error) {
	er, err := dscodec.DecodeValue(b)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("%w: %w", adapters.ErrBadLogRecord, err)
	}
	props := er.GetEntity().GetProperties()
	if seq, err = logUint(props, logSeq); err != nil {
		return 0, 0, nil, err
	}
	p, err := logUint(props, logPart)
	if err != nil {
		return 0, 0, nil, err
	}
	if seq == 0 || seq > logMaxSeq || p >= 1<<logPartBits {
		return 0, 0, nil, fmt.Errorf("%w: seq %d part %d out of range", adapters.ErrBadLogRecord, seq, p)
	}
	if path := er.GetEntity().GetKey().GetPath(); len(path) > 0 {
		last := path[len(path)-1]
		if last.GetKind() != LogEntryKind || last.GetId() != logEntryID(seq, int(p)) {
			return 0, 0, nil, fmt.Errorf("%w: entity %v does not hold seq %d part %d", adapters.ErrBadLogRecord, last, seq, p)
		}
	}
	d, ok := props[logData].GetValueType().(*datastorepb.Value_BlobValue)
	if !ok {
		return 0, 0, nil, fmt.Errorf("%w: no blob %s", adapters.ErrBadLogRecord, logData)
	}
	data = d.BlobValue
	if len(data) > logRecordBytes {
		return 0, 0, nil, fmt.Errorf("%w: %d bytes of data, at most %d", adapters.ErrBadLogRecord, len(data), logRecordBytes)
	}
	if data == nil {
		data = []byte{}
	}
	return seq, int(p), data, nil
}
