package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

func sampleFrames() []frame {
	return []frame{
		{typ: 1, lsn: 1, id: 7, body: putRec("orders", "k1", "v1").Body},
		{typ: 1, lsn: 2, id: 7, body: []byte{}},
		{typ: 2, lsn: 300, id: 1 << 40, body: delRec("p/ns", "\x00\x01\xff").Body},
		{typ: typeCommit, lsn: 1<<64 - 1, id: 1<<64 - 1},
		{typ: typeCheckpoint, lsn: 9, id: 5},
		{typ: 1, lsn: 10, id: 0, body: bytes.Repeat([]byte("x"), 1000)},
		{typ: 5, lsn: 11, id: 8, body: []byte{6, 'o', 'r', 'd', 'e', 'r', 's'}},
		{typ: 9, lsn: 1 << 35, id: 1 << 50, body: []byte{0xff, 0}},
		{typ: maxDataType, lsn: 12, id: 9, body: []byte{0}},
	}
}

func equalFrame(a, b frame) bool {
	return a.typ == b.typ && a.lsn == b.lsn && a.id == b.id && bytes.Equal(a.body, b.body)
}

func TestFrameRoundTrip(t *testing.T) {
	var log []byte
	fs := sampleFrames()
	for i := range fs {
		start := len(log)
		log = appendFrame(log, &fs[i])
		if got, want := len(log)-start, frameSize(payloadSize(&fs[i])); got != want {
			t.Fatalf("frame %d: %d bytes, frameSize(payloadSize) says %d", i, got, want)
		}
		if len(log)%frameAlign != 0 {
			t.Fatalf("frame %d: ends at unaligned offset %d", i, len(log))
		}
	}
	off := 0
	for i, want := range fs {
		got, n, err := decodeFrame(log[off:])
		if err != nil {
			t.Fatalf("frame %d at %d: %v", i, off, err)
		}
		if !equalFrame(got, want) {
			t.Fatalf("frame %d: got %+v, want %+v", i, got, want)
		}
		off += n
	}
	if off != len(log) {
		t.Fatalf("consumed %d of %d bytes", off, len(log))
	}
	if _, _, err := decodeFrame(make([]byte, 16)); !errors.Is(err, errEndOfLog) {
		t.Fatalf("zero header: got %v, want end of log", err)
	}
}

func TestFrameRejects(t *testing.T) {
	good := appendFrame(nil, &frame{typ: 1, lsn: 3, id: 4, body: putRec("ks", "key", "v").Body})
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	reframe := func(payload []byte) []byte {
		b := make([]byte, headerSize, frameSize(len(payload)))
		binary.LittleEndian.PutUint32(b, uint32(len(payload)))
		binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(payload, castagnoli))
		b = append(b, payload...)
		return append(b, make([]byte, frameSize(len(payload))-len(b))...)
	}
	cases := []struct {
		name  string
		frame []byte
		want  error
	}{
		{"flipped payload byte", mutate(func(b []byte) []byte { b[12] ^= 1; return b }), errBadCRC},
		{"flipped crc", mutate(func(b []byte) []byte { b[5] ^= 1; return b }), errBadCRC},
		{"cut short", good[:len(good)-8], errShort},
		{"header only", good[:5], errShort},
		{"non-zero padding", mutate(func(b []byte) []byte { b[len(b)-1] = 1; return b }), errBadPad},
		{"zero length, crc set", []byte{0, 0, 0, 0, 1, 0, 0, 0}, errBadHeader},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, errTooLarge},
		{"type past the last", reframe([]byte{maxDataType + 1, 1, 1}), errBadPayload},
		{"type 0xff", reframe([]byte{0xff, 1, 1}), errBadPayload},
		{"type zero", reframe([]byte{0, 1, 1}), errBadPayload},
		{"non-minimal lsn", reframe([]byte{3, 0x81, 0x00, 1}), errBadPayload},
		{"non-minimal txn", reframe([]byte{1, 1, 0x81, 0x00, 1}), errBadPayload},
		{"commit, trailing byte", reframe([]byte{3, 1, 1, 0}), errBadPayload},
		{"checkpoint, trailing byte", reframe([]byte{4, 1, 1, 0}), errBadPayload},
		{"no txn", reframe([]byte{2, 1}), errBadPayload},
		{"truncated varint", reframe([]byte{3, 1, 0x80}), errBadPayload},
		{"varint overflow", reframe([]byte{3, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}), errBadPayload},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := decodeFrame(c.frame); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

// FuzzDecode feeds arbitrary bytes to the frame decoder and, as they are,
// to the payload decoder. Neither may panic, and whatever they accept
// must re-encode to exactly the input.
func FuzzDecode(f *testing.F) {
	fs := sampleFrames()
	for i := range fs {
		f.Add(appendFrame(nil, &fs[i]))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if fr, n, err := decodeFrame(data); err == nil {
			if again := appendFrame(nil, &fr); !bytes.Equal(again, data[:n]) {
				t.Fatalf("frame %x decoded to %+v, which encodes to %x", data[:n], fr, again)
			}
		}
		if len(data) > maxPayload {
			return
		}
		fr, err := decodePayload(data)
		if err != nil {
			if !errors.Is(err, errBadPayload) {
				t.Fatalf("payload error %v does not wrap errBadPayload", err)
			}
			return
		}
		if again := appendPayload(nil, &fr); !bytes.Equal(again, data) {
			t.Fatalf("payload %x decoded to %+v, which encodes to %x", data, fr, again)
		}
		if payloadSize(&fr) != len(data) {
			t.Fatalf("payloadSize = %d, encoding is %d bytes", payloadSize(&fr), len(data))
		}
		if isDataType(fr.typ) && validate([]Data{{Type: fr.typ, Body: fr.body}}) != nil {
			t.Fatalf("data frame %+v decodes, but Append refuses it", fr)
		}
	})
}
