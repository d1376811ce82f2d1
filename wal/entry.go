package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Entries: one commit's records as one byte string, the form in which a
// commit log kept elsewhere than in this package's segment files (a log in
// the backend itself, txn/blog) stores a commit. The records are the ones
// Append takes, in the same encoding as in a segment, with the commit's
// transaction id; the whole is checked by a CRC32C, so a torn or altered
// entry is refused, never replayed.
//
//	entry := version(1) crc32c(4, over the rest) uvarint(txnID) uvarint(n) n × (uvarint(len) payload)

// entryVersion is the first byte of every entry.
const entryVersion byte = 1

// ErrCorruptEntry is wrapped by DecodeEntry's errors.
var ErrCorruptEntry = errors.New("wal: corrupt commit entry")

// EncodeEntry is txnID's records recs as one entry. The records are
// checked as Append checks them; their LSN and TxnID fields are ignored.
func EncodeEntry(txnID uint64, recs []Record) ([]byte, error) {
	if err := validate(recs); err != nil {
		return nil, err
	}
	body := binary.AppendUvarint(nil, txnID)
	body = binary.AppendUvarint(body, uint64(len(recs)))
	for i := range recs {
		r := recs[i]
		r.LSN, r.TxnID = 0, txnID
		p := appendPayload(nil, &r)
		body = binary.AppendUvarint(body, uint64(len(p)))
		body = append(body, p...)
	}
	out := make([]byte, 5, 5+len(body))
	out[0] = entryVersion
	binary.LittleEndian.PutUint32(out[1:], crc32.Checksum(body, castagnoli))
	return append(out, body...), nil
}

// DecodeEntry inverts EncodeEntry.
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
		if n <= 0 || size > uint64(len(body)-n) || size > maxPayload {
			return 0, nil, fmt.Errorf("%w: record %d's length", ErrCorruptEntry, i)
		}
		r, err := decodePayload(body[n : n+int(size)])
		if err != nil {
			return 0, nil, fmt.Errorf("%w: record %d: %w", ErrCorruptEntry, i, err)
		}
		r.TxnID = txnID
		recs = append(recs, r)
		body = body[n+int(size):]
	}
	if len(body) != 0 {
		return 0, nil, fmt.Errorf("%w: %d bytes after the records", ErrCorruptEntry, len(body))
	}
	if err := validate(recs); err != nil {
		return 0, nil, fmt.Errorf("%w: %w", ErrCorruptEntry, err)
	}
	return txnID, recs, nil
}
