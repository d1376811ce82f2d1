package wal

import (
	"bytes"
	"errors"
	"testing"
)

// dataRecords are the records of sampleRecords an entry may hold (not
// commits or checkpoints), as one transaction's.
func dataRecords() []Record {
	var out []Record
	for _, r := range sampleRecords() {
		if r.Type.isData() {
			out = append(out, r)
		}
	}
	return out
}

func TestEntryRoundTrip(t *testing.T) {
	recs := dataRecords()
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
		want := recs[i]
		want.LSN, want.TxnID = 0, id
		if !equalRecord(got[i], want) {
			t.Fatalf("record %d: %+v, want %+v", i, got[i], want)
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
	b, err := EncodeEntry(9, dataRecords()[:4])
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
	if _, err := EncodeEntry(1, []Record{{Type: RecordCommit}}); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("a commit record in an entry: %v, want ErrInvalidRecord", err)
	}
}

// FuzzDecodeEntry: arbitrary bytes never panic the decoder, and what it
// accepts encodes back to exactly the input.
func FuzzDecodeEntry(f *testing.F) {
	recs := dataRecords()
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
