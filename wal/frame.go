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
	errEndOfLog   = errors.New("end of log")
	errShort      = errors.New("frame extends past the end of the data")
	errBadHeader  = errors.New("zero length with a non-zero checksum")
	errTooLarge   = errors.New("frame length exceeds the maximum record size")
	errBadCRC     = errors.New("checksum mismatch")
	errBadPad     = errors.New("non-zero padding")
	errBadPayload = errors.New("malformed frame payload")
)

// Frame types: a payload's first byte. The log owns commit and
// checkpoint frames; every other type in 1..maxDataType is a data frame,
// whose meaning is its writer's (Data). 0 is never a type, so that a zeroed
// payload is damage, and types above maxDataType are refused so that
// repair still takes most garbage for damage.
const (
	typeCommit     byte = 3
	typeCheckpoint byte = 4
	maxDataType    byte = 63
)

// isDataType reports whether t is a data frame's type.
func isDataType(t byte) bool {
	return t != 0 && t <= maxDataType && t != typeCommit && t != typeCheckpoint
}

// isFrameType reports whether t may start a payload.
func isFrameType(t byte) bool { return t != 0 && t <= maxDataType }

// Data is one of a transaction's records as the log stores it: a type
// byte its writer chooses (1 to 63, except 3 and 4, which are the log's
// commit and checkpoint frames) and a body the log does not look into.
// Append takes them; Replay hands them back, type and body as appended.
type Data struct {
	Type byte
	Body []byte
}

// maxPayload bounds one frame's payload. It keeps a garbage length field
// from making the reader allocate gigabytes, and is far above any entity
// either backend accepts (1 MiB).
const maxPayload = 64 << 20

// frame is a frame's payload: its type, its LSN, then the transaction id
// (data and commit frames) or the checkpoint LSN (checkpoint frames), then
// a data frame's body.
//
//	payload := type(1) uvarint(lsn) uvarint(id) body
type frame struct {
	typ  byte
	lsn  uint64
	id   uint64
	body []byte
}

// payloadSize is the exact encoded size of f's payload.
func payloadSize(f *frame) int {
	return 1 + uvarintLen(f.lsn) + uvarintLen(f.id) + len(f.body)
}

// appendPayload appends f's payload to b.
func appendPayload(b []byte, f *frame) []byte {
	b = append(b, f.typ)
	b = binary.AppendUvarint(b, f.lsn)
	b = binary.AppendUvarint(b, f.id)
	return append(b, f.body...)
}

// decodePayload parses one payload. It is strict — non-minimal varints,
// unknown types and bytes after a commit or checkpoint are errors — so
// that every accepted payload re-encodes to exactly the same bytes. The
// body aliases p.
func decodePayload(p []byte) (frame, error) {
	var f frame
	if len(p) == 0 {
		return frame{}, fmt.Errorf("%w: empty payload", errBadPayload)
	}
	f.typ = p[0]
	if !isFrameType(f.typ) {
		return frame{}, fmt.Errorf("%w: unknown frame type %d", errBadPayload, f.typ)
	}
	rest := p[1:]
	for _, v := range []*uint64{&f.lsn, &f.id} {
		n, err := uvarint(rest, v)
		if err != nil {
			return frame{}, fmt.Errorf("%w: %w", errBadPayload, err)
		}
		rest = rest[n:]
	}
	if isDataType(f.typ) {
		f.body = rest
	} else if len(rest) != 0 {
		return frame{}, fmt.Errorf("%w: %d trailing bytes after a type %d frame", errBadPayload, len(rest), f.typ)
	}
	return f, nil
}

// uvarint reads a minimal uvarint at the start of b into v and returns
// its length.
func uvarint(b []byte, v *uint64) (int, error) {
	x, n := binary.Uvarint(b)
	switch {
	case n == 0:
		return 0, errors.New("truncated varint")
	case n < 0:
		return 0, errors.New("varint overflows 64 bits")
	case n > 1 && b[n-1] == 0:
		// A trailing 0x00 group adds nothing: accepting it would let two
		// byte strings decode to the same frame.
		return 0, errors.New("non-minimal varint")
	}
	*v = x
	return n, nil
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// frameSize is the on-disk size of a frame with an n-byte payload.
func frameSize(n int) int {
	return (headerSize + n + frameAlign - 1) &^ (frameAlign - 1)
}

// appendFrame appends f as one frame: header, payload, zero padding.
func appendFrame(b []byte, f *frame) []byte {
	start := len(b)
	b = append(b, make([]byte, headerSize)...)
	b = appendPayload(b, f)
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

// decodeFrame decodes the frame at the start of b and returns its payload
// and the frame's size including padding. The payload's body aliases b.
func decodeFrame(b []byte) (frame, int, error) {
	size, err := frameLen(b)
	if err != nil {
		return frame{}, 0, err
	}
	if len(b) < size {
		return frame{}, 0, errShort
	}
	n := int(binary.LittleEndian.Uint32(b))
	payload := b[headerSize : headerSize+n]
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return frame{}, 0, errBadCRC
	}
	for _, c := range b[headerSize+n : size] {
		if c != 0 {
			return frame{}, 0, errBadPad
		}
	}
	r, err := decodePayload(payload)
	if err != nil {
		return frame{}, 0, err
	}
	return r, size, nil
}
