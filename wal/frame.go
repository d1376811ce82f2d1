package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// headerSize is the frame header: payload length, then CRC32C of the payload.
const headerSize = 8

// frameAlign is the alignment of every frame start. Aligned frames let the
// corruption check probe for a valid frame at every 8-byte offset after a
// damaged one, and a zero header can only ever mean "end of log".
const frameAlign = 8

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Internal frame errors. They never escape the package bare: the segment
// reader wraps them in ErrCorrupt with the file name and offset, or repairs.
var (
	errEndOfLog  = errors.New("end of log")
	errShort     = errors.New("frame extends past the end of the data")
	errBadHeader = errors.New("zero length with a non-zero checksum")
	errTooLarge  = errors.New("frame length exceeds the maximum record size")
	errBadCRC    = errors.New("checksum mismatch")
	errBadPad    = errors.New("non-zero padding")
	errBadRecord = errors.New("malformed record")
)

// frameSize is the on-disk size of a frame with an n-byte payload.
func frameSize(n int) int {
	return (headerSize + n + frameAlign - 1) &^ (frameAlign - 1)
}

// appendFrame appends r as one frame: header, payload, zero padding.
func appendFrame(b []byte, r *Record) []byte {
	start := len(b)
	b = append(b, make([]byte, headerSize)...)
	b = appendPayload(b, r)
	payload := b[start+headerSize:]
	n := len(payload)
	binary.LittleEndian.PutUint32(b[start:], uint32(n))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(payload, castagnoli))
	return append(b, make([]byte, frameSize(n)-headerSize-n)...)
}

// frameLen reads the header at the start of b and returns the full frame
// size it announces. errEndOfLog means an all-zero header.
func frameLen(b []byte) (int, error) {
	if len(b) < headerSize {
		return 0, errShort
	}
	n := binary.LittleEndian.Uint32(b)
	if n == 0 {
		if binary.LittleEndian.Uint32(b[4:]) != 0 {
			return 0, errBadHeader
		}
		return 0, errEndOfLog
	}
	if n > maxPayload {
		return 0, fmt.Errorf("%w: %d bytes", errTooLarge, n)
	}
	return frameSize(int(n)), nil
}

// countFrames walks the frame headers of b, which must be whole frames
// (no end-of-log header), and returns how many there are.
func countFrames(b []byte) (uint64, error) {
	var n uint64
	for off := 0; off < len(b); n++ {
		size, err := frameLen(b[off:])
		if err != nil {
			return n, fmt.Errorf("frame %d at offset %d: %w", n, off, err)
		}
		if off+size > len(b) {
			return n, fmt.Errorf("frame %d at offset %d: %w", n, off, errShort)
		}
		off += size
	}
	return n, nil
}

// decodeFrame decodes the frame at the start of b and returns the record and
// the frame's size including padding. The record's Key and Value alias b.
func decodeFrame(b []byte) (Record, int, error) {
	size, err := frameLen(b)
	if err != nil {
		return Record{}, 0, err
	}
	if len(b) < size {
		return Record{}, 0, errShort
	}
	n := int(binary.LittleEndian.Uint32(b))
	payload := b[headerSize : headerSize+n]
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return Record{}, 0, errBadCRC
	}
	for _, c := range b[headerSize+n : size] {
		if c != 0 {
			return Record{}, 0, errBadPad
		}
	}
	r, err := decodePayload(payload)
	if err != nil {
		return Record{}, 0, err
	}
	return r, size, nil
}
