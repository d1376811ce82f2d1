package logrec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Entries: one commit's records as one byte string, the form in which a
// commit log kept elsewhere than in the WAL's segment files (a log in the
// backend itself, txn/blog) stores a commit. Each record is laid out as a
// WAL frame's payload is (see doc.go), with LSN 0 and the commit's
// transaction id; the whole is checked by a CRC32C, so a torn or altered
// entry is refused, never replayed.
//
//	entry  := version(1) crc32c(4, over the rest) uvarint(txnID) uvarint(n) n × (uvarint(len) record)
//	record := type(1) uvarint(0) uvarint(txnID) body

// entryVersion is the first byte of every entry.
const entryVersion byte = 1

// ErrCorruptEntry is wrapped by DecodeEntry's errors.
var ErrCorruptEntry = errors.New("logrec: corrupt commit entry")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeEntry is txnID's records recs as one entry. The records are
// checked by Validate.
func EncodeEntry(txnID uint64, recs []Record) ([]byte, error) {
	if err := Validate(recs); err != nil {
		return nil, err
	}
	body := binary.AppendUvarint(nil, txnID)
	body = binary.AppendUvarint(body, uint64(len(recs)))
	for i := range recs {
		r := &recs[i]
		body = binary.AppendUvarint(body, uint64(1+1+uvarintLen(txnID)+r.BodySize()))
		body = append(body, r.WireType(), 0)
		body = binary.AppendUvarint(body, txnID)
		body = r.AppendBody(body)
	}
	out := make([]byte, 5, 5+len(body))
	out[0] = entryVersion
	binary.LittleEndian.PutUint32(out[1:], crc32.Checksum(body, castagnoli))
	return append(out, body...), nil
}

// DecodeEntry inverts EncodeEntry. It is as strict as Decode: whatever it
// accepts, EncodeEntry gives back byte for byte.
func DecodeEntry(b []byte) (txnID uint64, recs []Record, err error) {
	if len(b) < 5 || b[0] != entryVersion {
		return 0, nil, fmt.Errorf("%w: %d bytes, version %v", ErrCorruptEntry, len(b), b[:min(len(b), 1)])
	}
	body := b[5:]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[1:5]) {
		return 0, nil, fmt.Errorf("%w: checksum mismatch", ErrCorruptEntry)
	}
	txnID, n := binary.Uvarint(body)
	if n <= 0 {
		return 0, nil, fmt.Errorf("%w: transaction id", ErrCorruptEntry)
	}
	body = body[n:]
	count, n := binary.Uvarint(body)
	if n <= 0 || count > uint64(len(body)) {
		return 0, nil, fmt.Errorf("%w: record count", ErrCorruptEntry)
	}
	body = body[n:]
	recs = make([]Record, 0, count)
	for i := uint64(0); i < count; i++ {
		size, n := binary.Uvarint(body)
		if n <= 0 || size > uint64(len(body)-n) {
			return 0, nil, fmt.Errorf("%w: record %d's length", ErrCorruptEntry, i)
		}
		r, err := decodeEntryRecord(body[n:n+int(size)], txnID)
		if err != nil {
			return 0, nil, fmt.Errorf("%w: record %d: %w", ErrCorruptEntry, i, err)
		}
		recs = append(recs, r)
		body = body[n+int(size):]
	}
	if len(body) != 0 {
		return 0, nil, fmt.Errorf("%w: %d bytes after the records", ErrCorruptEntry, len(body))
	}
	if err := Validate(recs); err != nil {
		return 0, nil, fmt.Errorf("%w: %w", ErrCorruptEntry, err)
	}
	return txnID, recs, nil
}

// decodeEntryRecord parses one record of an entry of transaction txnID:
// its type byte, LSN 0, txnID, then the body.
func decodeEntryRecord(p []byte, txnID uint64) (Record, error) {
	if len(p) == 0 {
		return Record{}, fmt.Errorf("%w: empty record", ErrMalformed)
	}
	lsn, n, err := uvarint(p[1:])
	if err != nil {
		return Record{}, fmt.Errorf("%w: LSN: %w", ErrMalformed, err)
	}
	rest := p[1+n:]
	id, n, err := uvarint(rest)
	if err != nil {
		return Record{}, fmt.Errorf("%w: transaction id: %w", ErrMalformed, err)
	}
	if lsn != 0 || id != txnID {
		return Record{}, fmt.Errorf("%w: LSN %d and transaction %d in an entry of transaction %d (want LSN 0)", ErrMalformed, lsn, id, txnID)
	}
	return Decode(p[0], rest[n:])
}
