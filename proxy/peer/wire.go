package peer

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/txn"
)

// The peer messages are protocol buffers written and read by hand with
// protowire (no generated code): each is a Go struct with an append and a
// parse function. Optional bytes (a value that may be absent, a range's
// open end) are told from empty ones by the field's presence. A parser
// skips fields it does not know, so a newer peer may add some.

// request is one message a client sends on a transaction stream: the
// first begins the remote transaction (kind 0), each later one is an
// operation. Deadline (Unix nanoseconds, 0 none) bounds the operation.
type request struct {
	readOnly bool
	op       txn.Op
	deadline int64
}

// reply answers one operation.
type reply struct {
	res txn.Result
	err *wireError
}

// readRequest is a read of the owner's latest committed state, for the
// buffer of a node that does not own the keyspace (cache.Options.Source).
type readRequest struct {
	ks         adapters.Keyspace
	keys       [][]byte // Get
	rangeRead  bool     // GetRange over [start, end)
	start, end []byte
	limit      int
}

type readReply struct {
	recs []adapters.Record
	more bool
	err  *wireError
}

// wireError is an error sent to a peer: its message and which of
// wireErrors it matches, so errors.Is works on the other side.
type wireError struct {
	mask uint64
	msg  string
}

// wireErrors are the errors a peer's answer can match, by position (a
// bit of wireError.mask each): append only.
var wireErrors = []error{
	txn.ErrConflict, txn.ErrStoreAborted, txn.ErrExists, txn.ErrNotFound, txn.ErrDone,
	txn.ErrAborted, txn.ErrIdleTimeout, txn.ErrReadOnly, txn.ErrClosed, txn.ErrBackpressure,
	txn.ErrNotLeaseHolder, txn.ErrLeaseUnavailable, txn.ErrCommitLog, txn.ErrNotOwner, txn.ErrOwnersDiffer,
	txn.ErrOwnerUnavailable, txn.ErrInvalidKey, txn.ErrKeyTooLarge, txn.ErrValueTooLarge, txn.ErrUnknownKeyspace,
	txn.ErrStore, txn.ErrBufferClosed, txn.ErrOneKeyspace, txn.ErrPastRead, txn.ErrUnflushed,
	adapters.ErrUnavailable, adapters.ErrUnknownOutcome, adapters.ErrInvalid, adapters.ErrConflict, adapters.ErrAborted,
	adapters.ErrClosed, context.DeadlineExceeded, context.Canceled,
}

func toWire(err error) *wireError {
	if err == nil {
		return nil
	}
	w := &wireError{msg: err.Error()}
	for i, e := range wireErrors {
		if errors.Is(err, e) {
			w.mask |= 1 << i
		}
	}
	return w
}

// remoteError is an error a peer answered.
type remoteError wireError

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Is(target error) bool {
	for i, w := range wireErrors {
		if e.mask&(1<<i) != 0 && w == target {
			return true
		}
	}
	return false
}

func (w *wireError) err() error {
	if w == nil {
		return nil
	}
	return (*remoteError)(w)
}

// Field numbers.
const (
	fReqKind, fReqReadOnly, fReqKeyspace, fReqKey, fReqValue, fReqEnd, fReqLimit, fReqKeys, fReqDeadline = 1, 2, 3, 4, 5, 6, 7, 8, 9

	fRepValue, fRepExists, fRepKnown, fRepValues, fRepRecords, fRepNext, fRepKeyspace, fRepCommitted, fRepErr = 1, 2, 3, 4, 5, 6, 7, 8, 9

	fReadKeyspace, fReadKeys, fReadRange, fReadStart, fReadEnd, fReadLimit = 1, 2, 3, 4, 5, 6
	fReadRecords, fReadMore, fReadErr                                      = 1, 2, 3

	fRecKey, fRecValue, fRecVersion          = 1, 2, 3
	fValPresent, fValBytes                   = 1, 2
	fChgOp, fChgKeyspace, fChgKey, fChgValue = 1, 2, 3, 4
	fErrMask, fErrMsg                        = 1, 2
)

const (
	maxLimit = 1 << 31 // a limit or a count past this is malformed
	maxKind  = 255

	varintType, bytesType = protowire.VarintType, protowire.BytesType

	errBadMessage = wireParseError("malformed peer message")
	errBadField   = wireParseError("malformed peer message field")
)

type wireParseError string

func (e wireParseError) Error() string { return "peer: " + string(e) }

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, bytesType)
	return protowire.AppendBytes(b, v)
}

// appendOpt appends v if it is non-nil (present, maybe empty).
func appendOpt(b []byte, num protowire.Number, v []byte) []byte {
	if v == nil {
		return b
	}
	return appendBytes(b, num, v)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, varintType)
	return protowire.AppendVarint(b, v)
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	return appendVarint(b, num, protowire.EncodeBool(v))
}

func (r *request) marshal() []byte {
	var b []byte
	b = appendVarint(b, fReqKind, uint64(r.op.Kind))
	b = appendBool(b, fReqReadOnly, r.readOnly)
	b = appendOpt(b, fReqKeyspace, []byte(r.op.Keyspace))
	b = appendOpt(b, fReqKey, r.op.Key)
	b = appendOpt(b, fReqValue, r.op.Value)
	b = appendOpt(b, fReqEnd, r.op.End)
	b = appendVarint(b, fReqLimit, uint64(r.op.Limit))
	for _, k := range r.op.Keys {
		b = appendBytes(b, fReqKeys, k)
	}
	return appendVarint(b, fReqDeadline, uint64(r.deadline))
}

func (r *reply) marshal() []byte {
	var b []byte
	res := &r.res
	b = appendOpt(b, fRepValue, res.Value)
	b = appendBool(b, fRepExists, res.Exists)
	b = appendBool(b, fRepKnown, res.Known)
	for _, v := range res.Values {
		var m []byte
		m = appendBool(m, fValPresent, v != nil)
		m = appendOpt(m, fValBytes, v)
		b = appendBytes(b, fRepValues, m)
	}
	for _, rec := range res.Records {
		b = appendBytes(b, fRepRecords, marshalRecord(rec))
	}
	b = appendOpt(b, fRepNext, res.Next)
	b = appendOpt(b, fRepKeyspace, []byte(res.Keyspace))
	for _, c := range res.Committed {
		var m []byte
		m = appendVarint(m, fChgOp, uint64(c.Op)+1)
		m = appendOpt(m, fChgKeyspace, []byte(c.Keyspace))
		m = appendOpt(m, fChgKey, c.Key)
		m = appendOpt(m, fChgValue, c.Value)
		b = appendBytes(b, fRepCommitted, m)
	}
	return appendErr(b, fRepErr, r.err)
}

func (r *readRequest) marshal() []byte {
	var b []byte
	b = appendOpt(b, fReadKeyspace, []byte(r.ks))
	for _, k := range r.keys {
		b = appendBytes(b, fReadKeys, k)
	}
	b = appendBool(b, fReadRange, r.rangeRead)
	b = appendOpt(b, fReadStart, r.start)
	b = appendOpt(b, fReadEnd, r.end)
	return appendVarint(b, fReadLimit, uint64(r.limit))
}

func (r *readReply) marshal() []byte {
	var b []byte
	for _, rec := range r.recs {
		b = appendBytes(b, fReadRecords, marshalRecord(rec))
	}
	b = appendBool(b, fReadMore, r.more)
	return appendErr(b, fReadErr, r.err)
}

func marshalRecord(rec adapters.Record) []byte {
	var m []byte
	m = appendOpt(m, fRecKey, rec.Key)
	m = appendOpt(m, fRecValue, rec.Value)
	return appendOpt(m, fRecVersion, []byte(rec.Version))
}

func appendErr(b []byte, num protowire.Number, w *wireError) []byte {
	if w == nil {
		return b
	}
	var m []byte
	m = appendVarint(m, fErrMask, w.mask)
	m = appendBytes(m, fErrMsg, []byte(w.msg))
	return appendBytes(b, num, m)
}

// fields calls f with each field of b: its number, type, the varint (for
// a varint) or the bytes (for bytes, a fresh copy); fields of other types
// are skipped.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v uint64, bs []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errBadMessage
		}
		b = b[n:]
		var v uint64
		var bs []byte
		switch typ {
		case varintType:
			v, n = protowire.ConsumeVarint(b)
		case bytesType:
			var raw []byte
			raw, n = protowire.ConsumeBytes(b)
			if n >= 0 {
				bs = append([]byte{}, raw...)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errBadMessage
			}
			b = b[n:]
			continue
		}
		if n < 0 {
			return errBadMessage
		}
		b = b[n:]
		if err := f(num, typ, v, bs); err != nil {
			return err
		}
	}
	return nil
}

// want checks a known field has the type its number says.
func want(typ, is protowire.Type) error {
	if typ != is {
		return errBadField
	}
	return nil
}

func (r *request) unmarshal(b []byte) error {
	*r = request{}
	return fields(b, func(num protowire.Number, typ protowire.Type, v uint64, bs []byte) error {
		switch num {
		case fReqKind:
			if v > maxKind {
				return errBadField
			}
			r.op.Kind = txn.OpKind(v)
			return want(typ, varintType)
		case fReqReadOnly:
			r.readOnly = v != 0
			return want(typ, varintType)
		case fReqKeyspace:
			r.op.Keyspace = adapters.Keyspace(bs)
			return want(typ, bytesType)
		case fReqKey:
			r.op.Key = bs
			return want(typ, bytesType)
		case fReqValue:
			r.op.Value = bs
			return want(typ, bytesType)
		case fReqEnd:
			r.op.End = bs
			return want(typ, bytesType)
		case fReqLimit:
			if v >= maxLimit {
				return errBadField
			}
			r.op.Limit = int(v)
			return want(typ, varintType)
		case fReqKeys:
			r.op.Keys = append(r.op.Keys, bs)
			return want(typ, bytesType)
		case fReqDeadline:
			r.deadline = int64(v)
			return want(typ, varintType)
		}
		return nil
	})
}

func (r *reply) unmarshal(b []byte) error {
	*r = reply{}
	res := &r.res
	return fields(b, func(num protowire.Number, typ protowire.Type, v uint64, bs []byte) error {
		switch num {
		case fRepValue:
			res.Value = bs
			return want(typ, bytesType)
		case fRepExists:
			res.Exists = v != 0
			return want(typ, varintType)
		case fRepKnown:
			res.Known = v != 0
			return want(typ, varintType)
		case fRepValues:
			val, err := unmarshalValue(bs)
			res.Values = append(res.Values, val)
			return errors.Join(want(typ, bytesType), err)
		case fRepRecords:
			rec, err := unmarshalRecord(bs)
			res.Records = append(res.Records, rec)
			return errors.Join(want(typ, bytesType), err)
		case fRepNext:
			res.Next = bs
			return want(typ, bytesType)
		case fRepKeyspace:
			res.Keyspace = adapters.Keyspace(bs)
			return want(typ, bytesType)
		case fRepCommitted:
			c, err := unmarshalChange(bs)
			res.Committed = append(res.Committed, c)
			return errors.Join(want(typ, bytesType), err)
		case fRepErr:
			w, err := unmarshalErr(bs)
			r.err = w
			return errors.Join(want(typ, bytesType), err)
		}
		return nil
	})
}

func (r *readRequest) unmarshal(b []byte) error {
	*r = readRequest{}
	return fields(b, func(num protowire.Number, typ protowire.Type, v uint64, bs []byte) error {
		switch num {
		case fReadKeyspace:
			r.ks = adapters.Keyspace(bs)
			return want(typ, bytesType)
		case fReadKeys:
			r.keys = append(r.keys, bs)
			return want(typ, bytesType)
		case fReadRange:
			r.rangeRead = v != 0
			return want(typ, varintType)
		case fReadStart:
			r.start = bs
			return want(typ, bytesType)
		case fReadEnd:
			r.end = bs
			return want(typ, bytesType)
		case fReadLimit:
			if v >= maxLimit {
				return errBadField
			}
			r.limit = int(v)
			return want(typ, varintType)
		}
		return nil
	})
}

func (r *readReply) unmarshal(b []byte) error {
	*r = readReply{}
	return fields(b, func(num protowire.Number, typ protowire.Type, v uint64, bs []byte) error {
		switch num {
		case fReadRecords:
			rec, err := unmarshalRecord(bs)
			r.recs = append(r.recs, rec)
			return errors.Join(want(typ, bytesType), err)
		case fReadMore:
			r.more = v != 0
			return want(typ, varintType)
		case fReadErr:
			w, err := unmarshalErr(bs)
			r.err = w
			return errors.Join(want(typ, bytesType), err)
		}
		return nil
	})
}

func unmarshalValue(b []byte) ([]byte, error) {
	var present bool
	var val []byte
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, bs []byte) error {
		switch num {
		case fValPresent:
			present = v != 0
			return want(typ, varintType)
		case fValBytes:
			val = bs
			return want(typ, bytesType)
		}
		return nil
	})
	switch {
	case !present:
		return nil, err
	case val == nil:
		return []byte{}, err
	}
	return val, err
}

func unmarshalRecord(b []byte) (adapters.Record, error) {
	var rec adapters.Record
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, bs []byte) error {
		switch num {
		case fRecKey:
			rec.Key = bs
			return want(typ, bytesType)
		case fRecValue:
			rec.Value = bs
			return want(typ, bytesType)
		case fRecVersion:
			rec.Version = adapters.Version(bs)
			return want(typ, bytesType)
		}
		return nil
	})
	return rec, err
}

func unmarshalChange(b []byte) (txn.Change, error) {
	var c txn.Change
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, bs []byte) error {
		switch num {
		case fChgOp:
			if v == 0 || v > maxKind {
				return errBadField
			}
			c.Op = txn.ChangeOp(v - 1)
			return want(typ, varintType)
		case fChgKeyspace:
			c.Keyspace = adapters.Keyspace(bs)
			return want(typ, bytesType)
		case fChgKey:
			c.Key = bs
			return want(typ, bytesType)
		case fChgValue:
			c.Value = bs
			return want(typ, bytesType)
		}
		return nil
	})
	return c, err
}

func unmarshalErr(b []byte) (*wireError, error) {
	w := &wireError{}
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, bs []byte) error {
		switch num {
		case fErrMask:
			w.mask = v
			return want(typ, varintType)
		case fErrMsg:
			w.msg = string(bs)
			return want(typ, bytesType)
		}
		return nil
	})
	if w.msg == "" {
		w.msg = "peer: error without a message"
	}
	return w, err
}

// message is what the peer codec carries: one of the types above.
type message interface {
	marshal() []byte
	unmarshal([]byte) error
}

// codec is the gRPC codec of the peer service: it (un)marshals messages,
// nothing else. Both ends force it, so its name never travels as a
// content-subtype another server could misread.
type codec struct{}

func (codec) Name() string { return "nemopeer" }

func (codec) Marshal(v any) ([]byte, error) {
	m, ok := v.(message)
	if !ok {
		return nil, fmt.Errorf("peer: cannot marshal %T", v)
	}
	return m.marshal(), nil
}

func (codec) Unmarshal(data []byte, v any) error {
	m, ok := v.(message)
	if !ok {
		return fmt.Errorf("peer: cannot unmarshal into %T", v)
	}
	return m.unmarshal(data)
}
