package logrec

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestEntryRoundTrip(t *testing.T) {
	recs := sampleRecords()
	b, err := EncodeEntry(1<<40+3, recs)
	if err != nil {
		t.Fatal(err)
	}
	id, got, err := DecodeEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	if id != 1<<40+3 || len(got) != len(recs) {
		t.Fatalf("decoded txn %d with %d records, want %d", id, len(got), len(recs))
	}
	for i := range recs {
		if !equalRecord(got[i], recs[i]) {
			t.Fatalf("record %d: %+v, want %+v", i, got[i], recs[i])
		}
	}
	// An empty commit (a transaction of keyspace operations only has
	// records; none at all is still an entry).
	if b, err := EncodeEntry(5, nil); err != nil {
		t.Fatal(err)
	} else if id, got, err := DecodeEntry(b); err != nil || id != 5 || len(got) != 0 {
		t.Fatalf("empty entry: %d %v %v", id, got, err)
	}
}

// Every single-byte change and every truncation of an entry is refused
// with ErrCorruptEntry, never decoded.
func TestEntryCorruptionRefused(t *testing.T) {
	b, err := EncodeEntry(9, sampleRecords()[:4])
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x5a
		if _, _, err := DecodeEntry(c); !errors.Is(err, ErrCorruptEntry) {
			t.Fatalf("byte %d altered: %v, want ErrCorruptEntry", i, err)
		}
	}
	for n := range b {
		if _, _, err := DecodeEntry(b[:n]); !errors.Is(err, ErrCorruptEntry) {
			t.Fatalf("truncated to %d bytes: %v, want ErrCorruptEntry", n, err)
		}
	}
	if _, err := EncodeEntry(1, []Record{{Type: 3}}); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("a commit record in an entry: %v, want ErrInvalidRecord", err)
	}
}

// TestGoldenEntries: the entries in testdata/entries.txt, written by the
// encoder before it moved here from package wal (commit e667273), decode,
// and encode back byte for byte.
func TestGoldenEntries(t *testing.T) {
	b, err := os.ReadFile("testdata/entries.txt")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) < 10 {
		t.Fatalf("%d golden entries", len(lines))
	}
	types := map[byte]int{}
	for _, line := range lines {
		idText, hexText, _ := strings.Cut(line, " ")
		wantID, err := strconv.ParseUint(idText, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		entry, err := hex.DecodeString(hexText)
		if err != nil {
			t.Fatal(err)
		}
		id, recs, err := DecodeEntry(entry)
		if err != nil || id != wantID {
			t.Fatalf("entry of txn %d: decoded txn %d, %v", wantID, id, err)
		}
		for i := range recs {
			types[recs[i].WireType()]++
		}
		again, err := EncodeEntry(id, recs)
		if err != nil || !bytes.Equal(again, entry) {
			t.Fatalf("entry of txn %d re-encodes to %x, %v; want %x", id, again, err, entry)
		}
	}
	for _, typ := range []byte{1, 2, 5, 6, 7, 8, 9} {
		if types[typ] == 0 {
			t.Errorf("no record of type %d in the golden entries: %v", typ, types)
		}
	}
}

// FuzzDecodeEntry: arbitrary bytes never panic the decoder, and what it
// accepts encodes back to exactly the input.
func FuzzDecodeEntry(f *testing.F) {
	recs := sampleRecords()
	for i := 0; i <= len(recs); i += 3 {
		b, err := EncodeEntry(uint64(i), recs[:i])
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		id, recs, err := DecodeEntry(data)
		if err != nil {
			if !errors.Is(err, ErrCorruptEntry) {
				t.Fatalf("error %v does not wrap ErrCorruptEntry", err)
			}
			return
		}
		again, err := EncodeEntry(id, recs)
		if err != nil {
			t.Fatalf("decoded records do not encode: %v", err)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("entry %x decoded to txn %d, %d records, which encode to %x", data, id, len(recs), again)
		}
	})
}
