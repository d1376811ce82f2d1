package aztable

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

// Azure commit log layout (package txn/blog): the reserved table LogTable,
// one partition per table, whose PartitionKey is the lower-cased table name
// (Azure table names are case-insensitive, as the lease's RowKey). In it,
// RowKey LogFenceRow is the fence (properties Epoch, Token and Last, Int64,
// and Holder, String) and each entry part is the entity with RowKey
// "e<seq: 16 hex digits>-<part: 4 hex digits>" (so rows sort by seq, then
// part, and all of them before the fence) and properties Seq (Int64), Part
// (Int32) and the data in Binary properties D0, D1, ... of at most 64 KiB
// each. The fence and the entries share the partition, so one entity group
// transaction writes them together.
const (
	LogTable    = "nemolog"
	LogFenceRow = "fence"
)

// logReserved are the tables nemo keeps its own records in: they have no
// log (nor lease) of their own.
var logReserved = []string{LogTable, LeaseTable}

// Limits of the Azure log. An entity group transaction holds 100
// operations and 4 MiB of request body; entry data is sent as base64 (4/3
// of its size) and each operation adds about 1 KiB of headers, so the
// bytes of a call (keys and encoded values, about the data's size) stay at
// 2.5 MiB. An entity holds at most 1 MiB and a Binary property 64 KiB: a
// part carries 12 such properties, 768 KiB, which leaves a quarter of the
// entity for its keys and property overhead.
const (
	logCallBytes   = 5 << 19 // 2.5 MiB
	logRecordBytes = 12 * tablecodec.MaxValueBytes
	logPartLimit   = 1 << 16 // parts are spelled in 4 hex digits
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
	logData   = "D" // D0, D1, ...
)

// LogLayout says where the commit log of an Azure table lives and how its
// records are spelled (see LogTable). It implements txn/blog's Codec.
type LogLayout struct{}

// LogCodec returns the layout of the Azure commit log.
func LogCodec() LogLayout { return LogLayout{} }

func (LogLayout) partition(ks adapters.Keyspace) (string, bool) {
	if ks == "" || ks == tablecodec.TablesKeyspace {
		return "", false
	}
	for _, r := range logReserved {
		if strings.EqualFold(string(ks), r) {
			return "", false
		}
	}
	return strings.ToLower(string(ks)), true
}

// Keyspace is LogTable for a table that can have a log, "" for the table
// catalog and nemo's own tables.
func (c LogLayout) Keyspace(ks adapters.Keyspace) adapters.Keyspace {
	if _, ok := c.partition(ks); !ok {
		return ""
	}
	return LogTable
}

// FenceKey is the key of the fence of ks's log; nil when ks has none.
func (c LogLayout) FenceKey(ks adapters.Keyspace) []byte {
	pk, ok := c.partition(ks)
	if !ok {
		return nil
	}
	return tablecodec.EncodeKey(pk, LogFenceRow)
}

func logEntryRow(seq uint64, part int) string { return fmt.Sprintf("e%016x-%04x", seq, part) }

// EntryKey is the key of part part of entry seq of ks's log; nil when ks
// has no log or part is out of range.
func (c LogLayout) EntryKey(ks adapters.Keyspace, seq uint64, part int) []byte {
	pk, ok := c.partition(ks)
	if !ok || part < 0 || part >= logPartLimit {
		return nil
	}
	return tablecodec.EncodeKey(pk, logEntryRow(seq, part))
}

// EntryRange is the range holding exactly the entries of ks's log: the
// rows from "e" up to "f" (the fence, "fence", is above it).
func (c LogLayout) EntryRange(ks adapters.Keyspace) (start, end []byte) {
	pk, ok := c.partition(ks)
	if !ok {
		return nil, nil
	}
	return tablecodec.EncodeKey(pk, "e"), tablecodec.EncodeKey(pk, "f")
}

// Limits are those of an entity group transaction and an entity.
func (LogLayout) Limits() adapters.LogLimits {
	return adapters.LogLimits{CallRecords: MaxBatchOps, CallBytes: logCallBytes, RecordBytes: logRecordBytes}
}

func logInt64(name string, v uint64) (tablecodec.Property, error) {
	if v > 1<<63-1 {
		return tablecodec.Property{}, fmt.Errorf("aztable: log %s %d does not fit an Int64: %w", name, v, adapters.ErrInvalid)
	}
	return tablecodec.Property{Name: name, Type: tablecodec.EdmInt64, Value: int64(v)}, nil
}

// EncodeFence is the entity of ks's fence f.
func (c LogLayout) EncodeFence(ks adapters.Keyspace, f adapters.LogFence) ([]byte, error) {
	pk, ok := c.partition(ks)
	if !ok {
		return nil, fmt.Errorf("aztable: table %q has no log: %w", ks, adapters.ErrInvalid)
	}
	e := &tablecodec.Entity{PartitionKey: pk, RowKey: LogFenceRow}
	for _, p := range []struct {
		name string
		v    uint64
	}{{logEpoch, f.Epoch}, {logToken, f.Token}, {logLast, f.Last}} {
		prop, err := logInt64(p.name, p.v)
		if err != nil {
			return nil, err
		}
		e.Props = append(e.Props, prop)
	}
	e.Props = append(e.Props, tablecodec.Property{Name: logHolder, Type: tablecodec.EdmString, Value: f.Holder},
		tablecodec.Property{Name: logKS, Type: tablecodec.EdmString, Value: string(ks)})
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("aztable: log fence: %w: %w", adapters.ErrInvalid, err)
	}
	return tablecodec.EncodeEntity(e), nil
}

// logUint reads a non-negative Int64 (or Int32) property of a log record.
func logUint(e *tablecodec.Entity, name string) (uint64, error) {
	return uintProp(e, name, adapters.ErrBadLogRecord)
}

// uintProp reads a non-negative Int64 (or Int32) property of one of
// nemo's own records (a lease, a log), refusing anything else with bad.
func uintProp(e *tablecodec.Entity, name string, bad error) (uint64, error) {
	p, ok := e.Get(name)
	var v int64
	switch {
	case ok && p.Type == tablecodec.EdmInt64:
		v = p.Value.(int64)
	case ok && p.Type == tablecodec.EdmInt32:
		v = int64(p.Value.(int32))
	default:
		return 0, fmt.Errorf("%w: no integer %s", bad, name)
	}
	if v < 0 {
		return 0, fmt.Errorf("%w: negative %s %d", bad, name, v)
	}
	return uint64(v), nil
}

// DecodeFence inverts EncodeFence.
func (LogLayout) DecodeFence(b []byte) (adapters.LogFence, error) {
	e, err := tablecodec.DecodeEntity(b)
	if err != nil {
		return adapters.LogFence{}, fmt.Errorf("%w: %w", adapters.ErrBadLogRecord, err)
	}
	if e.RowKey != LogFenceRow {
		return adapters.LogFence{}, fmt.Errorf("%w: row %q is not a fence", adapters.ErrBadLogRecord, e.RowKey)
	}
	var f adapters.LogFence
	for _, p := range []struct {
		name string
		v    *uint64
	}{{logEpoch, &f.Epoch}, {logToken, &f.Token}, {logLast, &f.Last}} {
		if *p.v, err = logUint(e, p.name); err != nil {
			return adapters.LogFence{}, err
		}
	}
	h, ok := e.Get(logHolder)
	if !ok || h.Type != tablecodec.EdmString {
		return adapters.LogFence{}, fmt.Errorf("%w: no string %s", adapters.ErrBadLogRecord, logHolder)
	}
	// As Azure would take it again (UTF-8, at most 64 KiB).
	if err := (&tablecodec.Entity{Props: []tablecodec.Property{h}}).Validate(); err != nil {
		return adapters.LogFence{}, fmt.Errorf("%w: %w", adapters.ErrBadLogRecord, err)
	}
	f.Holder = h.Value.(string)
	if k, ok := e.Get(logKS); ok && k.Type == tablecodec.EdmString {
		f.Keyspace = adapters.Keyspace(k.Value.(string))
	}
	return f, nil
}

// Logs is every log of the account's: the whole table LogTable.
func (LogLayout) Logs(adapters.Keyspace) (start, end []byte) { return nil, nil }

// EncodeEntry is the entity of part part of entry seq of ks's log, its data
// (at most Limits().RecordBytes) split over Binary properties D0, D1, ...
func (c LogLayout) EncodeEntry(ks adapters.Keyspace, seq uint64, part int, data []byte) ([]byte, error) {
	pk, ok := c.partition(ks)
	switch {
	case !ok:
		return nil, fmt.Errorf("aztable: table %q has no log: %w", ks, adapters.ErrInvalid)
	case part < 0 || part >= logPartLimit:
		return nil, fmt.Errorf("aztable: log entry part %d out of range: %w", part, adapters.ErrInvalid)
	case len(data) > logRecordBytes:
		return nil, fmt.Errorf("aztable: log entry part of %d bytes, at most %d: %w", len(data), logRecordBytes, adapters.ErrInvalid)
	}
	sp, err := logInt64(logSeq, seq)
	if err != nil {
		return nil, err
	}
	e := &tablecodec.Entity{PartitionKey: pk, RowKey: logEntryRow(seq, part), Props: []tablecodec.Property{
		sp, {Name: logPart, Type: tablecodec.EdmInt32, Value: int32(part)},
	}}
	for i := 0; i*tablecodec.MaxValueBytes < len(data); i++ {
		chunk := data[i*tablecodec.MaxValueBytes : min(len(data), (i+1)*tablecodec.MaxValueBytes)]
		e.Props = append(e.Props, tablecodec.Property{Name: logData + strconv.Itoa(i), Type: tablecodec.EdmBinary, Value: chunk})
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("aztable: log entry: %w: %w", adapters.ErrInvalid, err)
	}
	return tablecodec.EncodeEntity(e), nil
}

// DecodeEntry inverts EncodeEntry: the data is D0, D1, ... in order (no
// gap, no other property), each but the last a whole 64 KiB, none empty.
func (LogLayout) DecodeEntry(b []byte) (seq uint64, part int, data []byte, err error) {
	e, err := tablecodec.DecodeEntity(b)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("%w: %w", adapters.ErrBadLogRecord, err)
	}
	if seq, err = logUint(e, logSeq); err != nil {
		return 0, 0, nil, err
	}
	p, err := logUint(e, logPart)
	if err != nil {
		return 0, 0, nil, err
	}
	if p >= logPartLimit || e.RowKey != logEntryRow(seq, int(p)) {
		return 0, 0, nil, fmt.Errorf("%w: row %q does not hold seq %d part %d", adapters.ErrBadLogRecord, e.RowKey, seq, p)
	}
	chunks, err := logChunks(e)
	if err != nil {
		return 0, 0, nil, err
	}
	data = make([]byte, 0, len(chunks)*tablecodec.MaxValueBytes)
	for i, c := range chunks {
		if len(c) == 0 || len(c) > tablecodec.MaxValueBytes || i < len(chunks)-1 && len(c) != tablecodec.MaxValueBytes {
			return 0, 0, nil, fmt.Errorf("%w: %s%d holds %d bytes, not a whole chunk", adapters.ErrBadLogRecord, logData, i, len(c))
		}
		data = append(data, c...)
	}
	return seq, int(p), data, nil
}

// logChunks returns the data properties of an entry entity, in order.
func logChunks(e *tablecodec.Entity) ([][]byte, error) {
	var chunks [][]byte
	for _, p := range e.Props {
		if p.Name == logSeq || p.Name == logPart {
			continue
		}
		i, err := strconv.Atoi(strings.TrimPrefix(p.Name, logData))
		if !strings.HasPrefix(p.Name, logData) || err != nil || i < 0 || i >= logRecordBytes/tablecodec.MaxValueBytes ||
			strconv.Itoa(i) != p.Name[len(logData):] {
			return nil, fmt.Errorf("%w: unexpected property %q", adapters.ErrBadLogRecord, p.Name)
		}
		if p.Type != tablecodec.EdmBinary {
			return nil, fmt.Errorf("%w: %s is not Binary", adapters.ErrBadLogRecord, p.Name)
		}
		for len(chunks) <= i {
			chunks = append(chunks, nil)
		}
		if chunks[i] != nil {
			return nil, fmt.Errorf("%w: %s twice", adapters.ErrBadLogRecord, p.Name)
		}
		chunks[i] = p.Value.([]byte)
		if chunks[i] == nil {
			chunks[i] = []byte{}
		}
	}
	for i, c := range chunks {
		if c == nil {
			return nil, fmt.Errorf("%w: no %s%d", adapters.ErrBadLogRecord, logData, i)
		}
	}
	return chunks, nil
}
