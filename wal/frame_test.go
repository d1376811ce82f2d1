package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"
)

func sampleRecords() []Record {
	return []Record{
		{LSN: 1, TxnID: 7, Type: RecordPut, Keyspace: "orders", Key: []byte("k1"), Value: []byte("v1")},
		{LSN: 2, TxnID: 7, Type: RecordPut, Keyspace: "orders", Key: []byte("k2"), Value: []byte{}},
		{LSN: 300, TxnID: 1 << 40, Type: RecordDelete, Keyspace: "p/ns", Key: []byte{0, 1, 0xff}},
		{LSN: 1<<64 - 1, TxnID: 1<<64 - 1, Type: RecordCommit},
		{LSN: 9, Type: RecordCheckpoint, checkpoint: 5},
		{LSN: 10, TxnID: 0, Type: RecordPut, Value: bytes.Repeat([]byte("x"), 1000)},
		{LSN: 11, TxnID: 8, Type: RecordCreateKeyspace, Keyspace: "orders"},
		{LSN: 12, TxnID: 9, Type: RecordDropKeyspace, Keyspace: "orders"},
		{LSN: 13, TxnID: 10, Type: RecordPut, Keyspace: "orders", Key: []byte("k1"), Value: []byte("v2"),
			ExpectKind: ExpectVersion, ExpectVersion: "W/\"datetime'2024-01-01T00%3A00%3A00Z'\""},
		{LSN: 14, TxnID: 10, Type: RecordPut, Keyspace: "orders", Key: []byte("k3"), Value: []byte{}, ExpectKind: ExpectAbsent},
		{LSN: 1 << 35, TxnID: 1 << 50, Type: RecordDelete, Keyspace: "p/ns", Key: []byte{0, 1, 0xff},
			ExpectKind: ExpectVersion, ExpectVersion: "1234567890123"},
		{LSN: 16, TxnID: 11, Type: RecordDelete, Keyspace: "orders", Key: []byte("k4"), ExpectKind: ExpectAbsent},
		{LSN: 17, TxnID: 12, Type: RecordPut, Keyspace: "orders", Key: []byte("k5"), Value: []byte("v5"),
			ExpectKind: ExpectVersion, ExpectVersion: "9", Prior: 0x0123456789abcdef},
		{LSN: 18, TxnID: 12, Type: RecordDelete, Keyspace: "orders", Key: []byte("k6"), ExpectKind: ExpectAbsent, Prior: 1},
		{LSN: 19, Type: RecordWriteBack, Keyspace: "orders", Key: []byte("k5"), ExpectKind: ExpectVersion, ExpectVersion: "9", Digest: 0xfedcba9876543210},
		{LSN: 20, Type: RecordWriteBack, Keyspace: "orders", Key: []byte("k6"), ExpectKind: ExpectAbsent, Digest: 1},
		{LSN: 21, Type: RecordWriteBack, Keyspace: "orders", Key: []byte("k7"), Digest: 2},
	}
}

func equalRecord(a, b Record) bool {
	return a.LSN == b.LSN && a.TxnID == b.TxnID && a.Type == b.Type && a.Keyspace == b.Keyspace &&
		bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Value, b.Value) && a.checkpoint == b.checkpoint &&
		a.ExpectKind == b.ExpectKind && a.ExpectVersion == b.ExpectVersion && a.Prior == b.Prior && a.Digest == b.Digest &&
		(a.Type != RecordPut || b.Value != nil)
}

func TestFrameRoundTrip(t *testing.T) {
	var log []byte
	recs := sampleRecords()
	for i := range recs {
		start := len(log)
		log = appendFrame(log, &recs[i])
		if got, want := len(log)-start, frameSize(payloadSize(&recs[i])); got != want {
			t.Fatalf("record %d: frame is %d bytes, frameSize(payloadSize) says %d", i, got, want)
		}
		if len(log)%frameAlign != 0 {
			t.Fatalf("record %d: frame ends at unaligned offset %d", i, len(log))
		}
	}
	off := 0
	for i, want := range recs {
		got, n, err := decodeFrame(log[off:])
		if err != nil {
			t.Fatalf("record %d at %d: %v", i, off, err)
		}
		if !equalRecord(got, want) {
			t.Fatalf("record %d: got %+v, want %+v", i, got, want)
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
	r := Record{LSN: 3, TxnID: 4, Type: RecordPut, Keyspace: "ks", Key: []byte("key"), Value: []byte("v")}
	good := appendFrame(nil, &r)
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
		{"unknown type", reframe([]byte{9, 1, 1}), errBadRecord},
		{"type zero", reframe([]byte{0, 1, 1}), errBadRecord},
		{"non-minimal varint", reframe([]byte{3, 0x81, 0x00, 1}), errBadRecord},
		{"trailing byte", reframe([]byte{3, 1, 1, 0}), errBadRecord},
		{"length past end", reframe([]byte{2, 1, 1, 5, 'a'}), errBadRecord},
		{"truncated varint", reframe([]byte{3, 1, 0x80}), errBadRecord},
		{"varint overflow", reframe([]byte{3, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}), errBadRecord},
		{"type past the last", reframe([]byte{9, 1, 1, 0, 0}), errBadRecord},
		{"put-expect of any", reframe([]byte{7, 1, 1, 1, 'k', 1, 'a', 1, 'v', 0}), errBadRecord},
		{"put-expect, unknown kind", reframe([]byte{7, 1, 1, 1, 'k', 1, 'a', 1, 'v', 3}), errBadRecord},
		{"put-expect, no kind", reframe([]byte{7, 1, 1, 1, 'k', 1, 'a', 1, 'v'}), errBadRecord},
		{"put-expect, empty version", reframe([]byte{7, 1, 1, 1, 'k', 1, 'a', 1, 'v', 2, 0}), errBadRecord},
		{"put-expect, version cut short", reframe([]byte{7, 1, 1, 1, 'k', 1, 'a', 1, 'v', 2, 3, '1'}), errBadRecord},
		{"put-expect, version length non-minimal", reframe([]byte{7, 1, 1, 1, 'k', 1, 'a', 1, 'v', 2, 0x81, 0, '1'}), errBadRecord},
		{"put-expect, absent with a version", reframe([]byte{7, 1, 1, 1, 'k', 1, 'a', 1, 'v', 1, 1, '1'}), errBadRecord},
		{"del-expect, trailing byte", reframe([]byte{8, 1, 1, 1, 'k', 1, 'a', 1, 0}), errBadRecord},
		{"del-expect of any", reframe([]byte{8, 1, 1, 1, 'k', 1, 'a', 0}), errBadRecord},
		{"del-expect with a value", reframe([]byte{8, 1, 1, 1, 'k', 1, 'a', 1, 'v', 1}), errBadRecord},
		{"put-expect, version too long", reframe(append([]byte{7, 1, 1, 1, 'k', 1, 'a', 1, 'v', 2, 0x81, 0x08}, bytes.Repeat([]byte{'9'}, maxExpectVersion+1)...)), errBadRecord},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := decodeFrame(c.frame); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

// FuzzDecode feeds arbitrary bytes to the frame decoder and, wrapped in a
// valid header, to the payload decoder. Neither may panic, and whatever
// they accept must re-encode to exactly the input.
func FuzzDecode(f *testing.F) {
	recs := sampleRecords()
	for i := range recs {
		f.Add(appendFrame(nil, &recs[i]))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if r, n, err := decodeFrame(data); err == nil {
			if again := appendFrame(nil, &r); !bytes.Equal(again, data[:n]) {
				t.Fatalf("frame %x decoded to %+v, which encodes to %x", data[:n], r, again)
			}
		}
		if len(data) > maxPayload {
			return
		}
		r, err := decodePayload(data)
		if err != nil {
			if !errors.Is(err, errBadRecord) {
				t.Fatalf("payload error %v does not wrap errBadRecord", err)
			}
			return
		}
		if again := appendPayload(nil, &r); !bytes.Equal(again, data) {
			t.Fatalf("payload %x decoded to %+v, which encodes to %x", data, r, again)
		}
		if payloadSize(&r) != len(data) {
			t.Fatalf("payloadSize = %d, encoding is %d bytes", payloadSize(&r), len(data))
		}
	})
}

// TestExpectEncoding pins the expect layouts byte for byte, and checks
// that a write with no expectation is encoded exactly as before
// expectations existed (type 1 or 2, nothing appended).
func TestExpectEncoding(t *testing.T) {
	base := []byte{1, 2, 1, 'k', 1, 'a'} // lsn 1, txn 2, ks "k", key "a"
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cases := []struct {
		name string
		rec  Record
		want []byte
	}{
		{"put", Record{Type: RecordPut}, cat([]byte{1}, base, []byte{1, 'v'})},
		{"delete", Record{Type: RecordDelete}, cat([]byte{2}, base)},
		{"put, absent", Record{Type: RecordPut, ExpectKind: ExpectAbsent}, cat([]byte{7}, base, []byte{1, 'v', 1})},
		{"put, version", Record{Type: RecordPut, ExpectKind: ExpectVersion, ExpectVersion: "42"}, cat([]byte{7}, base, []byte{1, 'v', 2, 2, '4', '2'})},
		{"delete, absent", Record{Type: RecordDelete, ExpectKind: ExpectAbsent}, cat([]byte{8}, base, []byte{1})},
		{"delete, version", Record{Type: RecordDelete, ExpectKind: ExpectVersion, ExpectVersion: "7"}, cat([]byte{8}, base, []byte{2, 1, '7'})},
		{"put, version, prior", Record{Type: RecordPut, ExpectKind: ExpectVersion, ExpectVersion: "42", Prior: 0x0102030405060708},
			cat([]byte{7}, base, []byte{1, 'v', 0x82, 2, '4', '2', 1, 2, 3, 4, 5, 6, 7, 8})},
		{"delete, absent, prior", Record{Type: RecordDelete, ExpectKind: ExpectAbsent, Prior: 9},
			cat([]byte{8}, base, []byte{0x81, 0, 0, 0, 0, 0, 0, 0, 9})},
		{"write-back, any", Record{Type: RecordWriteBack, Digest: 0x0102030405060708},
			cat([]byte{9}, base, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8})},
		{"write-back, absent", Record{Type: RecordWriteBack, ExpectKind: ExpectAbsent, Digest: 1},
			cat([]byte{9}, base, []byte{1, 0, 0, 0, 0, 0, 0, 0, 1})},
		{"write-back, version", Record{Type: RecordWriteBack, ExpectKind: ExpectVersion, ExpectVersion: "42", Digest: 2},
			cat([]byte{9}, base, []byte{2, 2, '4', '2', 0, 0, 0, 0, 0, 0, 0, 2})},
	}
	for _, c := range cases {
		r := c.rec
		r.LSN, r.TxnID, r.Keyspace, r.Key = 1, 2, "k", []byte("a")
		if r.Type == RecordPut {
			r.Value = []byte("v")
		}
		got := appendPayload(nil, &r)
		if !bytes.Equal(got, c.want) {
			t.Errorf("%s: encoded %x, want %x", c.name, got, c.want)
			continue
		}
		if payloadSize(&r) != len(got) {
			t.Errorf("%s: payloadSize %d, encoding is %d bytes", c.name, payloadSize(&r), len(got))
		}
		back, err := decodePayload(got)
		if err != nil || !equalRecord(back, r) {
			t.Errorf("%s: decoded %+v, %v; want %+v", c.name, back, err, r)
		}
		if back.Type != c.rec.Type {
			t.Errorf("%s: decoded type %s, want %s (the -expect wire types are never a Record's type)", c.name, back.Type, c.rec.Type)
		}
	}
}

func TestRecordTypeString(t *testing.T) {
	for typ, want := range map[RecordType]string{RecordPut: "put", RecordDelete: "delete", RecordCommit: "commit", RecordCheckpoint: "checkpoint",
		RecordCreateKeyspace: "create-keyspace", RecordDropKeyspace: "drop-keyspace", RecordWriteBack: "write-back"} {
		if typ.String() != want {
			t.Errorf("%d.String() = %q, want %q", typ, typ.String(), want)
		}
	}
	if s := RecordType(42).String(); !strings.Contains(s, "42") {
		t.Errorf("unknown type string %q", s)
	}
}

// TestPriorRejects: a prior hash that is cut short, or zero (written as
// none), does not decode.
func TestPriorRejects(t *testing.T) {
	base := []byte{8, 1, 2, 1, 'k', 1, 'a'} // delete-expect, lsn 1, txn 2, ks "k", key "a"
	for name, tail := range map[string][]byte{
		"short": {0x81, 1, 2, 3},
		"zero":  {0x81, 0, 0, 0, 0, 0, 0, 0, 0},
		"kind":  {0x83, 0, 0, 0, 0, 0, 0, 0, 1},
	} {
		if r, err := decodePayload(append(append([]byte{}, base...), tail...)); err == nil {
			t.Errorf("%s: decoded %+v", name, r)
		}
	}
}

// TestWriteBackRejects: a write-back record's digest cut short or zero,
// an unknown expect kind or an empty version does not decode, and Append
// refuses a digest anywhere else and a write-back record without one.
func TestWriteBackRejects(t *testing.T) {
	base := []byte{9, 1, 2, 1, 'k', 1, 'a'} // write-back, lsn 1, txn 2, ks "k", key "a"
	for name, tail := range map[string][]byte{
		"short":         {1, 1, 2, 3},
		"zero":          {1, 0, 0, 0, 0, 0, 0, 0, 0},
		"kind":          {3, 0, 0, 0, 0, 0, 0, 0, 1},
		"prior flag":    {0x81, 0, 0, 0, 0, 0, 0, 0, 1},
		"empty version": {2, 0, 0, 0, 0, 0, 0, 0, 0, 1},
		"trailing":      {1, 0, 0, 0, 0, 0, 0, 0, 1, 0},
	} {
		if r, err := decodePayload(append(append([]byte{}, base...), tail...)); err == nil {
			t.Errorf("%s: decoded %+v", name, r)
		}
	}
	for name, r := range map[string]Record{
		"no digest":        {Type: RecordWriteBack, Keyspace: "k", Key: []byte("a")},
		"digest on a put":  {Type: RecordPut, Keyspace: "k", Key: []byte("a"), Value: []byte("v"), Digest: 1},
		"value":            {Type: RecordWriteBack, Keyspace: "k", Key: []byte("a"), Value: []byte("v"), Digest: 1},
		"prior":            {Type: RecordWriteBack, Keyspace: "k", Key: []byte("a"), ExpectKind: ExpectAbsent, Digest: 1, Prior: 2},
		"version, no kind": {Type: RecordWriteBack, Keyspace: "k", Key: []byte("a"), ExpectVersion: "7", Digest: 1},
	} {
		if err := validate([]Record{r}); !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("%s: validate = %v, want ErrInvalidRecord", name, err)
		}
	}
}
