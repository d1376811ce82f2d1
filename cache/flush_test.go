package cache

import (
	"errors"
	"testing"

	"github.com/nemocache/nemo/adapters"
)

// TestFlushedSince: the check a checkpoint makes before its log goes
// below the records dirty at its mark. A record left dirty and unchanged
// fails it; one written back passes, and so does one changed since (its
// newer write is logged after the mark).
func TestFlushedSince(t *testing.T) {
	e := newEnv(t, PolicyNemo, "a=1", `a=1 R g1 d | b=2 R g1 d`)
	m := e.b.MarkDirty()
	if err := e.b.FlushedSince(m); !errors.Is(err, ErrInvariant) {
		t.Fatalf("nothing flushed: %v, want ErrInvariant", err)
	}
	e.fs.SetFailNext(adapters.OpUpsert, 1)
	if err := flushAll(e.ctx, e.b); err == nil {
		t.Fatal("a flush whose write failed reported success")
	}
	if err := e.b.FlushedSince(m); !errors.Is(err, ErrInvariant) {
		t.Fatalf("after a failed flush: %v, want ErrInvariant", err)
	}
	if err := flushAll(e.ctx, e.b); err != nil {
		t.Fatal(err)
	}
	if err := e.b.FlushedSince(m); err != nil {
		t.Fatalf("after the flush: %v", err)
	}
	e.apply(put("a", "3"))
	m = e.b.MarkDirty()
	e.apply(put("a", "4"))
	if err := e.b.FlushedSince(m); err != nil {
		t.Fatalf("a record changed since the mark: %v", err)
	}
}
