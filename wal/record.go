package wal

import (
	"encoding/binary"
	"fmt"
)

// RecordType says what a log record means.
type RecordType uint8

// Record types. The numeric values are part of the on-disk format.
const (
	// RecordPut writes Value under (Keyspace, Key).
	RecordPut RecordType = 1
	// RecordDelete writes a tombstone for (Keyspace, Key); it has no value.
	RecordDelete RecordType = 2
	// RecordCommit ends transaction TxnID; it has no keyspace, key or value.
	RecordCommit RecordType = 3
	// RecordCheckpoint states that every record with an LSN below its
	// checkpoint LSN is in the store. The log writes it; callers never
	// append one.
	RecordCheckpoint RecordType = 4
	// RecordCreateKeyspace creates Keyspace (a table) in the store before
	// any later write of it reaches the store; it has no key or value.
	RecordCreateKeyspace RecordType = 5
	// RecordDropKeyspace deletes Keyspace and every record of it, in the
	// buffer and in the store: replay discards the keyspace's earlier
	// records and drops it in the store before any later access. It has
	// no key or value.
	RecordDropKeyspace RecordType = 6
	// RecordWriteBack says that the store confirmed a write-back of
	// (Keyspace, Key): it holds the value (or delete) whose digest is
	// Digest, at the version (or absence) the expectation fields name.
	// It has no value.
	RecordWriteBack RecordType = 9
)

// Wire types of a put or delete that carries an expectation (a Record of
// type RecordPut or RecordDelete whose Expect is not ExpectAny). They are
// never a Record's Type: the encoder picks them, the decoder maps them
// back, so callers see puts and deletes only.
const (
	wirePutExpect    = 7
	wireDeleteExpect = 8
)

// lastRecordType is the highest type byte the format defines.
const lastRecordType = byte(RecordWriteBack)

// ExpectKind says what the writer knew the store to hold for the key
// before a put or delete (its base). The values are part of the on-disk
// format; they match adapters.ExpectKind, which the txn package maps.
type ExpectKind uint8

const (
	// ExpectAny: nothing known (a blind write). Such a record is encoded
	// as a plain put or delete, exactly as before expectations existed.
	ExpectAny ExpectKind = 0
	// ExpectAbsent: the key was absent.
	ExpectAbsent ExpectKind = 1
	// ExpectVersion: the key existed at ExpectVersion.
	ExpectVersion ExpectKind = 2
)

func (k ExpectKind) String() string {
	switch k {
	case ExpectAny:
		return "any"
	case ExpectAbsent:
		return "absent"
	case ExpectVersion:
		return "version"
	}
	return fmt.Sprintf("ExpectKind(%d)", uint8(k))
}

// maxExpectVersion bounds an expected version's length (store versions are
// ETags and decimal numbers: tens of bytes).
const maxExpectVersion = 1 << 10

// isData reports whether t is one of a transaction's own records (what
// Append takes and Replay hands back), as opposed to the log's markers.
func (t RecordType) isData() bool {
	switch t {
	case RecordPut, RecordDelete, RecordCreateKeyspace, RecordDropKeyspace, RecordWriteBack:
		return true
	}
	return false
}

// isKeyspaceOp reports whether t is a keyspace lifecycle record (no key).
func (t RecordType) isKeyspaceOp() bool {
	return t == RecordCreateKeyspace || t == RecordDropKeyspace
}

func (t RecordType) String() string {
	switch t {
	case RecordPut:
		return "put"
	case RecordDelete:
		return "delete"
	case RecordCommit:
		return "commit"
	case RecordCheckpoint:
		return "checkpoint"
	case RecordCreateKeyspace:
		return "create-keyspace"
	case RecordDropKeyspace:
		return "drop-keyspace"
	case RecordWriteBack:
		return "write-back"
	}
	return fmt.Sprintf("RecordType(%d)", uint8(t))
}

// Record is one logical redo record. Append assigns LSN and TxnID; callers
// fill Type, Keyspace, Key and Value.
type Record struct {
	LSN      uint64
	TxnID    uint64
	Type     RecordType
	Keyspace string
	Key      []byte
	Value    []byte
	// ExpectKind and ExpectVersion (puts and deletes only) are what the
	// writer knew the store to hold for the key before this write: replay
	// hands them back so that write-back stays conditional after a
	// restart. ExpectVersion is set exactly when ExpectKind is
	// ExpectVersion.
	ExpectKind    ExpectKind
	ExpectVersion string
	// Prior (with an expectation only; 0: none) identifies the value the
	// key's record still held unwritten when this write committed: a
	// write-back of it may have been in flight, and may have landed before
	// a crash although its own record is behind a checkpoint, so replay
	// must count it as the writer's own.
	Prior uint64
	// Digest (RecordWriteBack only, never 0) identifies the value or
	// delete written back.
	Digest uint64

	// checkpoint is the checkpoint LSN carried by a RecordCheckpoint
	// record. It is unexported because checkpoint records never leave the
	// package: LastCheckpoint reports the value.
	checkpoint uint64
}

// maxPayload bounds one encoded record. It keeps a garbage length field from
// making the reader allocate gigabytes, and is far above any entity either
// backend accepts (1 MiB).
const maxPayload = 64 << 20

// payloadSize is the exact encoded size of r's payload.
func payloadSize(r *Record) int {
	n := 1 + uvarintLen(r.LSN)
	switch r.Type {
	case RecordCheckpoint:
		return n + uvarintLen(r.checkpoint)
	case RecordCommit:
		return n + uvarintLen(r.TxnID)
	}
	n += uvarintLen(r.TxnID) + uvarintLen(uint64(len(r.Keyspace))) + len(r.Keyspace)
	if r.Type.isKeyspaceOp() {
		return n
	}
	n += uvarintLen(uint64(len(r.Key))) + len(r.Key)
	if r.Type == RecordPut {
		n += uvarintLen(uint64(len(r.Value))) + len(r.Value)
	}
	if _, ok, hash := r.expectation(); ok {
		n++
		if r.ExpectKind == ExpectVersion {
			n += uvarintLen(uint64(len(r.ExpectVersion))) + len(r.ExpectVersion)
		}
		if hash != 0 {
			n += 8
		}
	}
	return n
}

// expectation is how r's expectation is encoded after its key and value:
// whether it is written at all, its kind byte, then the version (with kind
// ExpectVersion) and the 8-byte hash, if not 0. A write-back record always
// has it (its kind may be ExpectAny) and its hash is the Digest; a put or
// delete has it only with an expectation, and its hash is the Prior,
// flagged in the kind byte.
func (r *Record) expectation() (kind byte, ok bool, hash uint64) {
	switch {
	case r.Type == RecordWriteBack:
		return byte(r.ExpectKind), true, r.Digest
	case r.ExpectKind == ExpectAny:
		return 0, false, 0
	case r.Prior != 0:
		return byte(r.ExpectKind) | expectPrior, true, r.Prior
	}
	return byte(r.ExpectKind), true, 0
}

// expectPrior flags, in the expect kind byte, that an 8-byte Prior follows.
const expectPrior = 0x80

// wireType is the type byte r is encoded with: a put or delete with an
// expectation takes its -expect type.
func (r *Record) wireType() byte {
	if r.ExpectKind != ExpectAny {
		switch r.Type {
		case RecordPut:
			return wirePutExpect
		case RecordDelete:
			return wireDeleteExpect
		}
	}
	return byte(r.Type)
}

// appendPayload appends r's payload encoding to b. The layout depends on
// the type (see doc.go) so that commit markers cost a few bytes.
func appendPayload(b []byte, r *Record) []byte {
	b = append(b, r.wireType())
	b = binary.AppendUvarint(b, r.LSN)
	switch r.Type {
	case RecordCheckpoint:
		return binary.AppendUvarint(b, r.checkpoint)
	case RecordCommit:
		return binary.AppendUvarint(b, r.TxnID)
	}
	b = binary.AppendUvarint(b, r.TxnID)
	b = binary.AppendUvarint(b, uint64(len(r.Keyspace)))
	b = append(b, r.Keyspace...)
	if r.Type.isKeyspaceOp() {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(r.Key)))
	b = append(b, r.Key...)
	if r.Type == RecordPut {
		b = binary.AppendUvarint(b, uint64(len(r.Value)))
		b = append(b, r.Value...)
	}
	if kind, ok, hash := r.expectation(); ok {
		b = append(b, kind)
		if r.ExpectKind == ExpectVersion {
			b = binary.AppendUvarint(b, uint64(len(r.ExpectVersion)))
			b = append(b, r.ExpectVersion...)
		}
		if hash != 0 {
			b = binary.BigEndian.AppendUint64(b, hash)
		}
	}
	return b
}

// decodePayload parses one payload. It is strict — non-minimal varints,
// unknown types and trailing bytes are errors — so that every accepted
// payload re-encodes to exactly the same bytes. Key and Value alias p; a Put
// always has a non-nil Value so "present with an empty value" survives.
func decodePayload(p []byte) (Record, error) {
	var r Record
	d := decoder{b: p}
	wire := d.byte()
	r.Type = RecordType(wire)
	expect := false
	switch wire {
	case wirePutExpect:
		r.Type, expect = RecordPut, true
	case wireDeleteExpect:
		r.Type, expect = RecordDelete, true
	}
	r.LSN = d.uvarint()
	switch r.Type {
	case RecordCheckpoint:
		r.checkpoint = d.uvarint()
	case RecordCommit:
		r.TxnID = d.uvarint()
	case RecordPut, RecordDelete:
		r.TxnID = d.uvarint()
		r.Keyspace = string(d.bytes())
		r.Key = d.bytes()
		if r.Type == RecordPut {
			r.Value = d.bytes()
			if r.Value == nil {
				r.Value = []byte{}
			}
		}
		if expect {
			d.expect(&r)
		}
	case RecordCreateKeyspace, RecordDropKeyspace:
		r.TxnID = d.uvarint()
		r.Keyspace = string(d.bytes())
	case RecordWriteBack:
		r.TxnID = d.uvarint()
		r.Keyspace = string(d.bytes())
		r.Key = d.bytes()
		d.sent(&r)
	default:
		if d.err == nil {
			d.err = fmt.Errorf("unknown record type %d", p[0])
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes after %s record", len(d.b), r.Type)
	}
	if d.err != nil {
		return Record{}, fmt.Errorf("%w: %w", errBadRecord, d.err)
	}
	return r, nil
}

// decoder consumes a payload front to back, remembering the first error so
// decodePayload reads as a straight line.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.err = fmt.Errorf("empty payload")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	switch {
	case n == 0:
		d.err = fmt.Errorf("truncated varint")
		return 0
	case n < 0:
		d.err = fmt.Errorf("varint overflows 64 bits")
		return 0
	case n > 1 && d.b[n-1] == 0:
		// A trailing 0x00 group adds nothing: accepting it would let two
		// byte strings decode to the same record.
		d.err = fmt.Errorf("non-minimal varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// expect reads the expectation of a put-expect or delete-expect record:
// absent, or a version that is not empty. ExpectAny is refused: such a
// record is written as a plain put or delete, so accepting it here would
// give one record two encodings.
func (d *decoder) expect(r *Record) {
	kb := d.byte()
	if d.err != nil {
		return
	}
	k := ExpectKind(kb &^ expectPrior)
	switch k {
	case ExpectAbsent:
	case ExpectVersion:
		r.ExpectVersion = d.version()
	default:
		d.err = fmt.Errorf("expect kind %s in a %s-expect record", k, r.Type)
		return
	}
	r.ExpectKind = k
	if kb&expectPrior != 0 {
		r.Prior = d.hash("prior value hash")
	}
}

// sent reads the rest of a write-back record: its expectation (any,
// absent, or a version that is not empty) and its digest (not 0).
func (d *decoder) sent(r *Record) {
	k := ExpectKind(d.byte())
	switch k {
	case ExpectAny, ExpectAbsent:
	case ExpectVersion:
		r.ExpectVersion = d.version()
	default:
		if d.err == nil {
			d.err = fmt.Errorf("expect kind %s in a write-back record", k)
		}
		return
	}
	r.ExpectKind = k
	r.Digest = d.hash("write-back digest")
}

// version reads an expected version: not empty, at most maxExpectVersion
// bytes.
func (d *decoder) version() string {
	v := d.bytes()
	switch {
	case d.err != nil:
	case len(v) == 0:
		d.err = fmt.Errorf("empty expected version")
	case len(v) > maxExpectVersion:
		d.err = fmt.Errorf("expected version of %d bytes, the maximum is %d", len(v), maxExpectVersion)
	default:
		return string(v)
	}
	return ""
}

// hash reads an 8-byte big-endian hash, which is never 0 (0 is written as
// none); what names it in errors.
func (d *decoder) hash(what string) uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.err = fmt.Errorf("%s cut short: %d bytes", what, len(d.b))
		return 0
	}
	h := binary.BigEndian.Uint64(d.b[:8])
	d.b = d.b[8:]
	if h == 0 {
		d.err = fmt.Errorf("a zero %s is written as none", what)
	}
	return h
}

// bytes reads a uvarint length and that many bytes; empty yields nil.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("length %d exceeds the %d remaining bytes", n, len(d.b))
		return nil
	}
	if n == 0 {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
