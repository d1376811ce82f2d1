package wal

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goldenAllDir holds a multi-segment log written by the encoder as it was
// before the format moved to txn/logrec (commit e667273): every record
// type, with and without expectations and priors, keyspace operations,
// write-back records, commits and a checkpoint. records.txt lists what it
// replays to; txn/logrec's tests replay it through the split packages.
const goldenAllDir = "testdata/golden"

// goldenAllTxns are the transactions of testdata/golden, appended in order;
// a nil entry stands for a checkpoint at the next LSN.
func goldenAllTxns() []txn {
	big := bytes.Repeat([]byte("0123456789"), 100)
	rec := func(r Record) Record { return r }
	return []txn{
		{id: 1, recs: []Record{rec(Record{Type: RecordCreateKeyspace, Keyspace: "orders"})}},
		{id: 2, recs: []Record{
			putRec("orders", "a", "alpha"),
			putRec("orders", "empty", ""),
			delRec("orders", "gone"),
			rec(Record{Type: RecordPut, Keyspace: "orders", Key: []byte("b"), Value: []byte("beta"), ExpectKind: ExpectAbsent}),
			rec(Record{Type: RecordPut, Keyspace: "orders", Key: []byte("c"), Value: []byte("gamma"), ExpectKind: ExpectVersion, ExpectVersion: `W/"datetime'2024-05-01T10%3A00%3A00.1234567Z'"`}),
			rec(Record{Type: RecordDelete, Keyspace: "orders", Key: []byte("d"), ExpectKind: ExpectAbsent}),
			rec(Record{Type: RecordDelete, Keyspace: "orders", Key: []byte("e"), ExpectKind: ExpectVersion, ExpectVersion: "17"}),
		}},
		{id: 0, recs: []Record{
			rec(Record{Type: RecordWriteBack, Keyspace: "orders", Key: []byte("a"), Digest: 0x0102030405060708}),
			rec(Record{Type: RecordWriteBack, Keyspace: "orders", Key: []byte("b"), ExpectKind: ExpectAbsent, Digest: 1}),
			rec(Record{Type: RecordWriteBack, Keyspace: "orders", Key: []byte("c"), ExpectKind: ExpectVersion, ExpectVersion: "18", Digest: 0xfedcba9876543210}),
		}},
		{}, // checkpoint
		{id: 1 << 40, recs: []Record{
			rec(Record{Type: RecordPut, Keyspace: "p/ns", Key: []byte{0, 1, 0xff}, Value: big, ExpectKind: ExpectVersion, ExpectVersion: "9", Prior: 0x0123456789abcdef}),
			rec(Record{Type: RecordDelete, Keyspace: "p/ns", Key: []byte("x"), ExpectKind: ExpectAbsent, Prior: 1}),
			rec(Record{Type: RecordPut, Keyspace: "p/ns", Key: []byte("y"), Value: []byte{}, ExpectKind: ExpectAbsent, Prior: 1<<64 - 1}),
			rec(Record{Type: RecordDelete, Keyspace: "p/ns", Key: []byte("z"), ExpectKind: ExpectVersion, ExpectVersion: "1", Prior: 42}),
		}},
		{id: 5, recs: nil}, // an empty commit
		{id: 6, recs: []Record{putRec("p/ns", "big1", string(big)), putRec("p/ns", "big2", string(big))}},
		{id: 7, recs: []Record{putRec("p/ns", "big3", string(big)), putRec("p/ns", "big4", string(big))}},
		{id: 8, recs: []Record{putRec("p/ns", "big5", string(big)), putRec("p/ns", "big6", string(big))}},
		{id: 9, recs: []Record{rec(Record{Type: RecordDropKeyspace, Keyspace: "orders"}), rec(Record{Type: RecordCreateKeyspace, Keyspace: "orders"})}},
		{id: 1<<64 - 1, recs: []Record{putRec("orders", "last", "omega")}},
	}
}

// goldenRecordLine is how records.txt shows one replayed record.
func goldenRecordLine(txnID, commitLSN uint64, r Record) string {
	return fmt.Sprintf("txn=%d commit=%d type=%s ks=%q key=%q value=%q expect=%s version=%q prior=%#x digest=%#x",
		txnID, commitLSN, r.Type, r.Keyspace, r.Key, r.Value, r.ExpectKind, r.ExpectVersion, r.Prior, r.Digest)
}

// TestGoldenAllWrite writes testdata/golden (run with -update-all once,
// on the encoder of commit e667273).
func TestGoldenAllWrite(t *testing.T) {
	if !*updateAll {
		t.Skip("-update-all not set")
	}
	dir := t.TempDir()
	l := mustOpen(t, testOptions(t, dir))
	var lines []string
	for _, x := range goldenAllTxns() {
		if x.recs == nil && x.id == 0 {
			if err := l.Checkpoint(l.NextLSN()); err != nil {
				t.Fatal(err)
			}
			continue
		}
		lsn, err := l.Append(context.Background(), x.id, x.recs)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, fmt.Sprintf("commit txn=%d lsn=%d records=%d", x.id, lsn, len(x.recs)))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, testOptions(t, dir))
	lines = append(lines, fmt.Sprintf("checkpoint=%d next=%d", l.LastCheckpoint(), l.NextLSN()))
	if err := l.Replay(1, func(id uint64, recs []Record) error {
		for _, r := range recs {
			lines = append(lines, goldenRecordLine(id, recs[len(recs)-1].LSN+1, r))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := os.RemoveAll(goldenAllDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(goldenAllDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range segmentFiles(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, s.name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(goldenAllDir, s.name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(goldenAllDir, "records.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Entries of the backend log (txn/blog), one per line: txn id, hex.
	var ents []string
	for _, x := range goldenAllTxns() {
		if x.recs == nil && x.id == 0 {
			continue
		}
		b, err := EncodeEntry(x.id, x.recs)
		if err != nil {
			t.Fatal(err)
		}
		ents = append(ents, fmt.Sprintf("%d %s", x.id, hex.EncodeToString(b)))
	}
	// What the older golden segments replay to, from LSN 1.
	for _, name := range []string{"golden.wal", "golden-expect.wal"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		d := t.TempDir()
		writeSegment(t, d, 1, b)
		l := mustOpen(t, testOptions(t, d))
		var lines []string
		if err := l.Replay(1, func(id uint64, recs []Record) error {
			for _, r := range recs {
				lines = append(lines, goldenRecordLine(id, recs[len(recs)-1].LSN+1, r))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		l.Close()
		out := filepath.Join(goldenAllDir, strings.TrimSuffix(name, ".wal")+".records.txt")
		if err := os.WriteFile(out, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile("../txn/logrec/testdata/entries.txt", []byte(strings.Join(ents, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
