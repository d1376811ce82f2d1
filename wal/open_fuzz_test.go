package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"testing"
)

// FuzzOpen damages the golden segment (testdata/golden.wal) as a disk or
// a crash could: the input is a list of edits, each a 4-byte offset and a
// byte to XOR there, and a final length to cut the segment to. Whatever
// the damage, Open must either refuse with ErrCorrupt and leave the
// segment as it found it, or open a log whose replay is a prefix of the
// golden transactions, each exactly as appended (a damaged tail may lose
// its last commits, as a torn write would; nothing may be invented,
// reordered or altered), and which then appends and reopens cleanly.
func FuzzOpen(f *testing.F) {
	golden, err := os.ReadFile(goldenPath)
	if err != nil {
		f.Fatal(err)
	}
	edit := func(off uint32, x byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, off)
		return append(b, x)
	}
	f.Add([]byte{}, uint32(len(golden)))
	f.Add(edit(9, 1), uint32(len(golden)))
	f.Add(edit(200, 0x80), uint32(len(golden)))
	f.Add(append(edit(40, 0xff), edit(3000, 7)...), uint32(len(golden)))
	f.Add([]byte{}, uint32(150))
	_, txns := goldenLog(f)
	f.Fuzz(func(t *testing.T, edits []byte, cut uint32) {
		seg := bytes.Clone(golden)
		for ; len(edits) >= 5; edits = edits[5:] {
			off := int(binary.BigEndian.Uint32(edits) % uint32(len(seg)))
			seg[off] ^= edits[4]
		}
		seg = seg[:min(int(cut), len(seg))]
		dir := t.TempDir()
		path := writeSegment(t, dir, 1, seg)
		l, err := Open(testOptions(t, dir))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open of a damaged segment: %v, want ErrCorrupt", err)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, seg) {
				t.Fatal("a refused Open modified the segment")
			}
			return
		}
		got := replayAll(t, l, 1)
		if len(got) > len(txns) {
			l.Close()
			t.Fatalf("replayed %d transactions from a log of %d", len(got), len(txns))
		}
		checkReplay(t, got, txns[:len(got)])
		next := mustAppend(t, l, 77, putRec("after", "damage", "ok"))
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = mustOpen(t, testOptions(t, dir))
		defer l.Close()
		checkReplay(t, replayAll(t, l, 1), append(txns[:len(got):len(got)], next))
	})
}
