package txn

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/deadline"
	"github.com/nemocache/nemo/wal"
)

// TestCommitMarksItsRequest: a commit marks its request as sending a write
// (internal/deadline) before it enters the commit log, so that a frontend
// answering at its own deadline waits for the log's outcome instead; a
// commit whose frontend has already answered enters nothing into the log
// and writes nothing. With and without early lock release.
func TestCommitMarksItsRequest(t *testing.T) {
	for _, early := range []bool{false, true} {
		t.Run(map[bool]string{false: "classic", true: "early"}[early], func(t *testing.T) {
			wo := wal.Options{Dir: filepath.Join(t.TempDir(), "wal")}
			wo.Logger = quiet
			v := newEnv(t, cache.Options{}, Options{WAL: &wo, EarlyRelease: early})
			ctx, r, cancel := deadline.Start(context.Background(), time.Minute, 0)
			defer cancel()
			if err := v.e.Upsert(ctx, ks, k(1), []byte("v")); err != nil {
				t.Fatal(err)
			}
			if r.Cut() {
				t.Fatal("the frontend may answer at its deadline after the commit was logged")
			}

			ctx, r, cancel2 := deadline.Start(context.Background(), time.Minute, 0)
			defer cancel2()
			before, _ := v.e.WALStats()
			if !r.Cut() {
				t.Fatal("Cut refused before any commit")
			}
			if err := v.e.Upsert(ctx, ks, k(2), []byte("w")); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a commit after its frontend answered: %v, want DeadlineExceeded", err)
			}
			if after, _ := v.e.WALStats(); after.Commits != before.Commits {
				t.Fatalf("the log took a commit whose frontend had answered: %d commits, want %d", after.Commits, before.Commits)
			}
			if _, ok, err := v.e.Get(context.Background(), ks, k(2), ReadLatest); err != nil || ok {
				t.Fatalf("k2 after the refused commit: present %v, %v", ok, err)
			}
		})
	}
}
