package txn

import (
	"context"
	"errors"
	"testing"

	"github.com/nemocache/nemo/cache"
)

// Under the record policy (no negative entries) a deleted key is a dirty
// tombstone until written back. A transaction that read the key's absence
// holds an S lock on that tombstone: write-back must not take the record
// (and the lock) away, and Release removes it once nobody holds it. (It
// did take it: a writer re-inserted the key under the reader, which
// TestSerializable/*/record caught as stale reads and dependency cycles.)
func TestRecordPolicyLockOnDeletedKeySurvivesWriteBack(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, cache.Options{Policy: cache.PolicyRecord, DisableWorkers: true}, Options{LockWait: -1})
	if err := v.e.Upsert(ctx, ks, k(50), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Delete(ctx, ks, k(50)); err != nil {
		t.Fatal(err)
	}
	r, _ := v.e.Begin(false) // a read-write transaction that reads: it locks
	if _, ok, err := r.Get(ctx, ks, k(50)); err != nil || ok {
		t.Fatalf("get of the deleted key: %v %v", ok, err)
	}
	if err := v.e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	w, _ := v.e.Begin(false)
	if err := w.Insert(ctx, ks, k(50), []byte("phantom")); !errors.Is(err, ErrConflict) {
		t.Fatalf("insert under a reader's lock on the key's absence: %v, want ErrConflict", err)
	}
	if err := r.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if infos, _ := v.buf.Records(ks, nil, nil); len(infos) != 0 {
		t.Fatalf("records left once the lock is gone: %+v", infos)
	}
}
