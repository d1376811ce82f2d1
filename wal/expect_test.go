package wal

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

const goldenExpectPath = "testdata/golden-expect.wal"

func expectPut(ks, key, val string, kind ExpectKind, ver string) Record {
	r := putRec(ks, key, val)
	r.ExpectKind, r.ExpectVersion = kind, ver
	return r
}

func expectDel(ks, key string, kind ExpectKind, ver string) Record {
	r := delRec(ks, key)
	r.ExpectKind, r.ExpectVersion = kind, ver
	return r
}

// goldenExpectLog writes the log that testdata/golden-expect.wal holds:
// puts and deletes with and without expectations, side by side.
func goldenExpectLog(t *testing.T) ([]byte, []txn) {
	dir := t.TempDir()
	l := mustOpen(t, testOptions(t, dir))
	txns := []txn{
		mustAppend(t, l, 1, expectPut("orders", "a", "alpha", ExpectAbsent, ""), putRec("orders", "b", "beta")),
		mustAppend(t, l, 2, expectPut("orders", "a", "alpha2", ExpectVersion, "17"), expectDel("orders", "b", ExpectVersion, `W/"datetime'2024-05-01T10%3A00%3A00.1234567Z'"`)),
		mustAppend(t, l, 1<<40, expectDel("p/ns", "\x00\x01\xff", ExpectAbsent, ""), delRec("p/ns", "x"), expectPut("p/ns", "y", "", ExpectVersion, "1")),
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, segmentName(1)))
	if err != nil {
		t.Fatal(err)
	}
	return b, txns
}

// TestGoldenExpect pins the put-expect and delete-expect layouts on disk,
// as TestGolden does for the rest.
func TestGoldenExpect(t *testing.T) {
	got, txns := goldenExpectLog(t)
	if *update {
		if err := os.WriteFile(goldenExpectPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(goldenExpectPath)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGoldenExpect -update once to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the encoder no longer writes %s. A format change needs a migration, not -update.", goldenExpectPath)
	}
	types := map[byte]int{}
	for _, f := range frames(t, want) {
		types[want[f.off+headerSize]]++
	}
	if types[wirePutExpect] != 3 || types[wireDeleteExpect] != 2 || types[byte(RecordPut)] != 1 || types[byte(RecordDelete)] != 1 {
		t.Fatalf("golden-expect type bytes: %v", types)
	}
	dir := t.TempDir()
	writeSegment(t, dir, 1, want)
	l := mustOpen(t, testOptions(t, dir))
	defer l.Close()
	checkReplay(t, replayAll(t, l, 0), txns)
}

// TestOldFormatReplays opens a log written before expectations existed
// (testdata/golden.wal): its puts and deletes replay with ExpectAny, and
// records with expectations appended after it replay with theirs, from
// the same segment and across a reopen.
func TestOldFormatReplays(t *testing.T) {
	old, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	_, txns := goldenLog(t)
	for _, x := range txns {
		for _, r := range x.recs {
			if r.ExpectKind != ExpectAny || r.ExpectVersion != "" {
				t.Fatalf("golden.wal record with an expectation: %+v", r)
			}
		}
	}
	dir := t.TempDir()
	writeSegment(t, dir, 1, old)
	opts := testOptions(t, dir)
	l := mustOpen(t, opts)
	checkReplay(t, replayAll(t, l, 0), txns[2:])
	want := append(txns[2:len(txns):len(txns)],
		mustAppend(t, l, 6, expectPut("orders", "d", "delta2", ExpectVersion, "3"), expectDel("orders", "e", ExpectAbsent, "")),
		mustAppend(t, l, 7, putRec("orders", "f", "phi")),
	)
	checkReplay(t, replayAll(t, l, 0), want)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, opts)
	defer l.Close()
	checkReplay(t, replayAll(t, l, 0), want)
	if segs := segmentFiles(t, dir); len(segs) != 1 {
		t.Fatalf("%d segments, want the old one only", len(segs))
	}
}
