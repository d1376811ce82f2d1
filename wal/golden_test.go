package wal

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Golden logs written by the encoder of commit e667273, from before the
// engine's record format moved to txn/logrec: testdata/golden.wal,
// testdata/golden-expect.wal, and testdata/golden, three segments holding
// every record type the engine writes, commits and a checkpoint.
// testdata/golden/records.txt lists the commits (and, for txn/logrec's
// tests, the records) they replay to.
var goldenLogs = []struct {
	name  string
	files []string // segment files, in order
}{
	{"golden.wal", []string{"testdata/golden.wal"}},
	{"golden-expect.wal", []string{"testdata/golden-expect.wal"}},
	{"golden", []string{"testdata/golden/0000000000000001.wal", "testdata/golden/0000000000000019.wal", "testdata/golden/000000000000001c.wal"}},
}

// TestGoldenFramesReencode: every frame of the golden segments decodes
// and encodes back to exactly its bytes, and the rest of each segment is
// zeros.
func TestGoldenFramesReencode(t *testing.T) {
	for _, g := range goldenLogs {
		for _, path := range g.files {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var again []byte
			types := map[byte]int{}
			for _, f := range frames(t, b) {
				again = appendFrame(again, &f.rec)
				types[f.rec.typ]++
			}
			if !bytes.Equal(again, b[:len(again)]) || bytes.ContainsFunc(b[len(again):], func(r rune) bool { return r != 0 }) {
				t.Fatalf("%s: its %d frames re-encode to different bytes", path, len(frames(t, b)))
			}
			t.Logf("%s: frame types %v", path, types)
		}
	}
}

// TestGoldenRewrite: a log opened on each golden log replays to the
// commits records.txt lists, and appending what it replays to a new log,
// with the checkpoint at the same place, writes the same segment files
// byte for byte.
func TestGoldenRewrite(t *testing.T) {
	for _, g := range goldenLogs {
		t.Run(g.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, path := range g.files {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, filepath.Base(path)), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if g.name == "golden.wal" || g.name == "golden-expect.wal" {
				if err := os.Rename(filepath.Join(dir, g.name), filepath.Join(dir, segmentName(1))); err != nil {
					t.Fatal(err)
				}
			}
			l := mustOpen(t, testOptions(t, dir))
			ckpt := l.LastCheckpoint()
			txns := replayAll(t, l, 1)
			if g.name == "golden" {
				var lines []string
				for _, x := range txns {
					lines = append(lines, fmt.Sprintf("commit txn=%d lsn=%d records=%d", x.id, x.lsn, len(x.recs)))
				}
				lines = append(lines, fmt.Sprintf("checkpoint=%d next=%d", ckpt, l.NextLSN()))
				want, err := os.ReadFile("testdata/golden/records.txt")
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.Join(lines, "\n"); !strings.HasPrefix(string(want), got+"\n") {
					t.Fatalf("golden replays to\n%s\nrecords.txt says\n%s", got, want)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}

			out := t.TempDir()
			l = mustOpen(t, testOptions(t, out))
			for _, x := range txns {
				if ckpt != 0 && l.NextLSN() == ckpt && l.LastCheckpoint() < ckpt {
					if err := l.Checkpoint(ckpt); err != nil {
						t.Fatal(err)
					}
				}
				if lsn, err := l.Append(context.Background(), x.id, x.recs); err != nil || lsn != x.lsn {
					t.Fatalf("append of txn %d: LSN %d, %v; want LSN %d", x.id, lsn, err, x.lsn)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			segs := segmentFiles(t, out)
			if len(segs) != len(g.files) {
				t.Fatalf("rewritten as %d segments, want %d", len(segs), len(g.files))
			}
			for i, s := range segs {
				got, err := os.ReadFile(filepath.Join(out, s.name))
				if err != nil {
					t.Fatal(err)
				}
				want, _ := os.ReadFile(g.files[i])
				if !bytes.Equal(got, want) {
					t.Fatalf("segment %s rewritten differs from %s", s.name, g.files[i])
				}
			}
		})
	}
}
