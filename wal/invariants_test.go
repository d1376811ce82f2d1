//go:build invariants || race

package wal

import (
	"testing"

	"github.com/nemocache/nemo/internal/invariants/invariantstest"
)

// TestInvariantsFire: the log's assertions catch a batch that breaks its
// framing or LSN order, and a truncation beyond what a checkpoint
// promised; a well-formed batch and a covered truncation pass.
func TestInvariantsFire(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, testOptions(t, dir))
	defer l.Close()
	big := value(minSegmentSize/3, 1)
	for i := uint64(1); ; i++ {
		mustAppend(t, l, i, putRec("t", "k", big))
		l.writeMu.Lock()
		n := len(l.segs)
		l.writeMu.Unlock()
		if n >= 3 {
			break
		}
		if i > 20 {
			t.Fatal("no third segment after 20 appends")
		}
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	r := frame{typ: 1, body: putRec("t", "a", "1").Body}
	two := appendFrame(appendFrame(nil, &r), &r)
	l.assertBatch(two, l.next+2) // whole frames, one per LSN: no panic
	invariantstest.MustViolate(t, "a torn frame", func() { l.assertBatch(two[:len(two)-frameAlign], l.next+2) })
	invariantstest.MustViolate(t, "more LSNs than frames", func() { l.assertBatch(two, l.next+3) })
	invariantstest.MustViolate(t, "a batch that skips LSNs", func() {
		l.next++
		defer func() { l.next-- }()
		l.assertBatch(two, l.next+2)
	})
	invariantstest.MustViolate(t, "a batch off a frame boundary", func() {
		l.off++
		defer func() { l.off-- }()
		l.assertBatch(two, l.next+2)
	})
	// Nothing is checkpointed: removing the first segment would drop
	// commits the store may not have.
	invariantstest.MustViolate(t, "truncation beyond the checkpoint", func() { _ = l.removeBelow(l.segs[1].first) })
	if len(l.segs) < 3 {
		t.Fatalf("the refused truncation removed segments: %d left", len(l.segs))
	}
	l.promised = l.segs[1].first
	if err := l.removeBelow(l.segs[1].first); err != nil || len(l.segs) < 2 {
		t.Fatalf("truncation below the promised checkpoint: %v, %d segments", err, len(l.segs))
	}
}
