package wal

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.wal from the current encoder")

const goldenPath = "testdata/golden.wal"

// goldenLog writes the log that testdata/golden.wal holds and returns the
// bytes of its one segment and the transactions in it. It covers every
// record type, empty values, binary keys and multi-byte varints.
func goldenLog(t testing.TB) ([]byte, []txn) {
	dir := t.TempDir()
	l := mustOpen(t, testOptions(t, dir))
	txns := []txn{
		mustAppend(t, l, 1, putRec("orders", "a", "alpha")),
		mustAppend(t, l, 2, putRec("orders", "b", "beta"), delRec("orders", "a"), putRec("orders", "c", "")),
	}
	if err := l.Checkpoint(l.NextLSN()); err != nil {
		t.Fatal(err)
	}
	txns = append(txns,
		mustAppend(t, l, 1<<40, putRec("p/ns", "\x00\x01\xff", value(200, 3))),
		mustAppend(t, l, 4, delRec("orders", "b")),
		mustAppend(t, l, 5, putRec("orders", "d", "delta"), putRec("orders", "e", "epsilon")),
	)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, segmentName(1)))
	if err != nil {
		t.Fatal(err)
	}
	return b, txns
}

// TestGolden pins the on-disk format: the encoder must reproduce the
// checked-in log byte for byte, and the decoder must read it back.
func TestGolden(t *testing.T) {
	got, txns := goldenLog(t)
	if *update {
		if err := os.WriteFile(goldenPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGolden -update once to create it)", err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		t.Fatalf("the encoder no longer writes %s: first difference at byte %d (len %d vs %d). "+
			"A format change needs a migration, not -update.", goldenPath, i, len(got), len(want))
	}
	dir := t.TempDir()
	writeSegment(t, dir, 1, want)
	l := mustOpen(t, testOptions(t, dir))
	defer l.Close()
	if l.LastCheckpoint() != 7 || l.NextLSN() != 15 {
		t.Fatalf("golden log: checkpoint %d, next %d; want 7, 15", l.LastCheckpoint(), l.NextLSN())
	}
	checkReplay(t, replayAll(t, l, 1), txns)
	checkReplay(t, replayAll(t, l, 0), txns[2:])
}

func writeSegment(t *testing.T, dir string, first uint64, b []byte) string {
	t.Helper()
	path := filepath.Join(dir, segmentName(first))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

type frameInfo struct {
	off, size int
	rec       frame
}

func frames(t *testing.T, b []byte) []frameInfo {
	var fs []frameInfo
	for off := 0; ; {
		r, n, err := decodeFrame(b[off:])
		if err != nil {
			return fs
		}
		fs = append(fs, frameInfo{off, n, r})
		off += n
	}
}

func TestRepair(t *testing.T) {
	golden, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	_, txns := goldenLog(t)
	fr := frames(t, golden)
	last := fr[len(fr)-1]    // commit of txn 5
	lastPut := fr[len(fr)-2] // second put of txn 5
	txn5 := fr[len(fr)-3].off
	end := last.off + last.size
	mid := fr[7] // the put of the 1<<40 transaction
	if mid.rec.id != 1<<40 || last.rec.typ != typeCommit || fr[len(fr)-3].rec.id != 5 {
		t.Fatalf("golden layout changed: %+v %+v", mid.rec, last.rec)
	}
	edit := func(f func(b []byte)) []byte { b := bytes.Clone(golden); f(b); return b }
	allButLast := txns[:4]

	cases := []struct {
		name    string
		segment []byte
		// want is what Replay(1) returns after Open; corruptAt >= 0
		// means Open must refuse, naming that byte offset.
		want      []txn
		repaired  bool
		cutAt     int // end of the kept data
		corruptAt int
	}{
		{"zero-filled tail", golden, txns, false, end, -1},
		{"truncated mid-header", golden[:last.off+4], allButLast, true, txn5, -1},
		{"truncated mid-payload", golden[:lastPut.off+12], allButLast, true, txn5, -1},
		{"torn last record (commit missing)", edit(func(b []byte) { clear(b[last.off:end]) }), allButLast, true, txn5, -1},
		{"torn last frame (half written)", edit(func(b []byte) { clear(b[last.off+8 : end]) }), allButLast, true, txn5, -1},
		{"bad crc in last frame", edit(func(b []byte) { b[last.off+9] ^= 0x40 }), allButLast, true, txn5, -1},
		{"garbage right after the last frame", edit(func(b []byte) { copy(b[end:], "\xde\xad\xbe\xef garbage") }), txns, true, end, -1},
		{"garbage in the zero-filled region", edit(func(b []byte) { copy(b[end+512:], "\xff\xff\xff\xff") }), txns, true, end, -1},
		{"torn middle record", edit(func(b []byte) { clear(b[mid.off+mid.size/2 : mid.off+mid.size]) }), nil, false, 0, mid.off},
		{"bad crc followed by valid frames", edit(func(b []byte) { b[fr[2].off+10] ^= 1 }), nil, false, 0, fr[2].off},
		{"zeroed frame followed by valid frames", edit(func(b []byte) { clear(b[mid.off : mid.off+mid.size]) }), nil, false, 0, mid.off},
		{"valid frame beyond the end marker", edit(func(b []byte) { copy(b[end+256:], golden[last.off:end]) }), nil, false, 0, end},
		{"lsn out of sequence", edit(func(b []byte) {
			r := last.rec
			r.lsn = 20
			copy(b[last.off:], appendFrame(nil, &r))
		}), nil, false, 0, last.off},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeSegment(t, dir, 1, c.segment)
			l, err := Open(testOptions(t, dir))
			if c.corruptAt >= 0 {
				if err == nil {
					l.Close()
					t.Fatal("Open accepted a corrupt log")
				}
				checkCorrupt(t, err, segmentName(1), c.corruptAt)
				if after, _ := os.ReadFile(path); !bytes.Equal(after, c.segment) {
					t.Fatal("a refused Open modified the segment")
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			checkReplay(t, replayAll(t, l, 1), c.want)
			broken, err := os.ReadFile(path + ".broken")
			if c.repaired != (err == nil) {
				t.Fatalf("repaired=%v but .broken copy: %v", c.repaired, err)
			}
			if c.repaired && !bytes.Equal(broken, c.segment) {
				t.Fatal(".broken is not a copy of the damaged segment")
			}
			next := mustAppend(t, l, 77, putRec("after", "repair", "ok"))
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(after) != minSegmentSize || !bytes.Equal(after[:c.cutAt], golden[:c.cutAt]) {
				t.Fatalf("segment after repair: %d bytes, kept prefix intact: %v", len(after), bytes.Equal(after[:c.cutAt], golden[:c.cutAt]))
			}
			if got := frames(t, after); got[len(got)-1].rec.lsn != next.lsn || got[len(got)-2].off != c.cutAt {
				t.Fatalf("the next append was not written at the cut point %d", c.cutAt)
			}
			// Reopening the repaired log is clean: no second repair.
			l = mustOpen(t, testOptions(t, dir))
			defer l.Close()
			checkReplay(t, replayAll(t, l, 1), append(append([]txn{}, c.want...), next))
			if _, err := os.Stat(path + ".broken.1"); !errors.Is(err, os.ErrNotExist) {
				t.Fatal("reopening a repaired log repaired it again")
			}
		})
	}
}

func checkCorrupt(t *testing.T, err error, file string, off int) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("got %v, want ErrCorrupt", err)
	}
	if msg := err.Error(); !strings.Contains(msg, file) || !strings.Contains(msg, fmt.Sprintf("offset %d:", off)) {
		t.Fatalf("error %q does not name %s and offset %d", msg, file, off)
	}
}

// TestCorruptionOutsideTheLastSegment: damage that would count as a torn
// tail in the last segment is refused in an earlier one, because writes
// there were all acknowledged before the log rotated.
func TestCorruptionOutsideTheLastSegment(t *testing.T) {
	golden, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	fr := frames(t, golden)
	last := fr[len(fr)-1]
	end := last.off + last.size
	for _, c := range []struct {
		name string
		edit func(b []byte)
		at   int
	}{
		{"bad crc in its last frame", func(b []byte) { b[last.off+9] ^= 1 }, last.off},
		{"garbage after its end", func(b []byte) { b[end+100] = 7 }, end + 100},
		{"uncommitted transaction at its end", func(b []byte) { clear(b[last.off:end]) }, fr[len(fr)-3].off},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			seg := bytes.Clone(golden)
			c.edit(seg)
			writeSegment(t, dir, 1, seg)
			writeSegment(t, dir, last.rec.lsn+1, make([]byte, minSegmentSize))
			_, err := Open(testOptions(t, dir))
			checkCorrupt(t, err, segmentName(1), c.at)
		})
	}
	t.Run("missing segment", func(t *testing.T) {
		dir := t.TempDir()
		writeSegment(t, dir, 1, golden)
		writeSegment(t, dir, 100, make([]byte, minSegmentSize))
		_, err := Open(testOptions(t, dir))
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), segmentName(100)) {
			t.Fatalf("got %v, want ErrCorrupt naming %s", err, segmentName(100))
		}
	})
	t.Run("clean two segments", func(t *testing.T) {
		dir := t.TempDir()
		writeSegment(t, dir, 1, golden)
		writeSegment(t, dir, last.rec.lsn+1, make([]byte, minSegmentSize))
		l := mustOpen(t, testOptions(t, dir))
		defer l.Close()
		if l.NextLSN() != last.rec.lsn+1 {
			t.Fatalf("NextLSN %d, want %d", l.NextLSN(), last.rec.lsn+1)
		}
	})
}
