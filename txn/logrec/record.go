package logrec

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Errors of the package, wrapped with %w; compare with errors.Is.
var (
	// ErrInvalidRecord means a record cannot be encoded (Validate).
	ErrInvalidRecord = errors.New("logrec: invalid record")
	// ErrMalformed means a record's type byte and body do not decode
	// (Decode).
	ErrMalformed = errors.New("logrec: malformed record")
)

// RecordType says what a log record means.
type RecordType uint8

// Record types. The numeric values are part of the on-disk format: they
// are the type bytes of records without an expectation. 3 and 4 are not
// record types: the WAL device reserves them for its commit and checkpoint
// frames (package wal).
const (
	// RecordPut writes Value under (Keyspace, Key).
	RecordPut RecordType = 1
	// RecordDelete writes a tombstone for (Keyspace, Key); it has no value.
	RecordDelete RecordType = 2
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
	case RecordCreateKeyspace:
		return "create-keyspace"
	case RecordDropKeyspace:
		return "drop-keyspace"
	case RecordWriteBack:
		return "write-back"
	}
	return fmt.Sprintf("RecordType(%d)", uint8(t))
}

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

// Record is one logical redo record of a transaction: what the engine
// logs. Where it is logged (the LSN and transaction id of a WAL frame, an
// entry's transaction id) is the log's business, not the record's.
type Record struct {
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
}

// Validate checks that every record of recs can be encoded, and that
// decoding it gives it back: ErrInvalidRecord otherwise.
func Validate(recs []Record) error {
	for i := range recs {
		if err := recs[i].check(); err != nil {
			return fmt.Errorf("%w: record %d: %w", ErrInvalidRecord, i, err)
		}
	}
	return nil
}

// check is Validate for one record.
func (r *Record) check() error {
	switch {
	case r.Type != RecordPut && r.Type != RecordDelete && !r.Type.isKeyspaceOp() && r.Type != RecordWriteBack:
		return fmt.Errorf("type %s, want put, delete, create-keyspace, drop-keyspace or write-back", r.Type)
	case (r.Type == RecordDelete || r.Type == RecordWriteBack) && len(r.Value) != 0:
		return fmt.Errorf("a %s carries no value", r.Type)
	case (r.Type == RecordWriteBack) != (r.Digest != 0):
		return errors.New("a digest goes with a write-back record, and only there")
	case r.Type == RecordWriteBack && r.Prior != 0:
		return errors.New("a write-back record carries no prior")
	case r.Type.isKeyspaceOp() && (len(r.Key) != 0 || len(r.Value) != 0):
		return fmt.Errorf("a %s carries no key or value", r.Type)
	case r.Type.isKeyspaceOp() && r.Keyspace == "":
		return fmt.Errorf("a %s needs a keyspace", r.Type)
	case r.Type.isKeyspaceOp() && (r.ExpectKind != ExpectAny || r.ExpectVersion != ""):
		return fmt.Errorf("a %s carries no expectation", r.Type)
	case r.ExpectKind > ExpectVersion:
		return fmt.Errorf("unknown expect kind %d", r.ExpectKind)
	case (r.ExpectKind == ExpectVersion) != (r.ExpectVersion != ""):
		return fmt.Errorf("expect kind %s with version %q (a version goes with kind version, and only there)", r.ExpectKind, r.ExpectVersion)
	case r.Prior != 0 && r.ExpectKind == ExpectAny:
		return errors.New("a prior value hash goes with an expectation")
	case len(r.ExpectVersion) > maxExpectVersion:
		return fmt.Errorf("expected version of %d bytes, the maximum is %d", len(r.ExpectVersion), maxExpectVersion)
	}
	return nil
}

// BodySize is the exact size of r's body (AppendBody).
func (r *Record) BodySize() int {
	n := uvarintLen(uint64(len(r.Keyspace))) + len(r.Keyspace)
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

// WireType is the type byte r is encoded with: its Type, except that a
// put or delete with an expectation takes its -expect type (7 or 8).
func (r *Record) WireType() byte {
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

// AppendBody appends r's body to b: what follows the type byte and the
// log's own header (see doc.go). r should have passed Validate.
func (r *Record) AppendBody(b []byte) []byte {
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

// Decode parses the record of wire type wire and body body. It is strict —
// non-minimal varints, unknown types, trailing bytes and records Validate
// refuses are errors — so that every accepted record is valid and
// re-encodes (WireType, AppendBody) to exactly the same bytes. Key and Value alias body; a put always has a non-nil
// Value so "present with an empty value" survives. Errors wrap
// ErrMalformed.
func Decode(wire byte, body []byte) (Record, error) {
	var r Record
	d := decoder{b: body}
	r.Type = RecordType(wire)
	expect := false
	switch wire {
	case wirePutExpect:
		r.Type, expect = RecordPut, true
	case wireDeleteExpect:
		r.Type, expect = RecordDelete, true
	}
	switch r.Type {
	case RecordPut, RecordDelete:
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
		r.Keyspace = string(d.bytes())
	case RecordWriteBack:
		r.Keyspace = string(d.bytes())
		r.Key = d.bytes()
		d.sent(&r)
	default:
		d.err = fmt.Errorf("unknown record type %d", wire)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes after %s record", len(d.b), r.Type)
	}
	if d.err == nil {
		// What Append could not have logged (a keyspace operation with
		// no keyspace) is not a record either.
		d.err = r.check()
	}
	if d.err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrMalformed, d.err)
	}
	return r, nil
}

// decoder consumes a body front to back, remembering the first error so
// Decode reads as a straight line.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.err = fmt.Errorf("record cut short")
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
	v, n, err := uvarint(d.b)
	if err != nil {
		d.err = err
		return 0
	}
	d.b = d.b[n:]
	return v
}

// uvarint reads a minimal uvarint at the start of b and its length.
func uvarint(b []byte) (uint64, int, error) {
	v, n := binary.Uvarint(b)
	switch {
	case n == 0:
		return 0, 0, fmt.Errorf("truncated varint")
	case n < 0:
		return 0, 0, fmt.Errorf("varint overflows 64 bits")
	case n > 1 && b[n-1] == 0:
		// A trailing 0x00 group adds nothing: accepting it would let two
		// byte strings decode to the same record.
		return 0, 0, fmt.Errorf("non-minimal varint")
	}
	return v, n, nil
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
