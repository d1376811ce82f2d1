package txn

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
)

// failLog is a CommitLog that fails while fail is set.
type failLog struct {
	fail    atomic.Bool
	appends atomic.Int64
}

var errDisk = errors.New("disk on fire")

func (l *failLog) Append(context.Context, uint64, []Change) error {
	if l.fail.Load() {
		return errDisk
	}
	l.appends.Add(1)
	return nil
}

func TestCommitLogFailureAppliesNothing(t *testing.T) {
	ctx := context.Background()
	log := &failLog{}
	v := newEnv(t, cache.Options{}, Options{Log: log})
	if err := v.e.Upsert(ctx, ks, k(1), []byte("old")); err != nil {
		t.Fatal(err)
	}
	if before, _ := v.buf.Records(ks, nil, nil); len(before) != 1 || !before[0].Dirty {
		t.Fatalf("setup: %+v", before)
	}
	log.fail.Store(true)
	x, _ := v.e.Begin(false)
	if _, _, err := x.Scan(ctx, ks, k(0), k(10), 0); err != nil {
		t.Fatal(err)
	}
	if err := x.Update(ctx, ks, k(1), []byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := x.Insert(ctx, ks, k(2), []byte("new")); err != nil {
		t.Fatal(err)
	}
	err := x.Commit(ctx)
	if !errors.Is(err, ErrCommitLog) || !errors.Is(err, errDisk) {
		t.Fatalf("Commit with a failing log: %v, want ErrCommitLog wrapping the cause", err)
	}
	if err := x.Commit(ctx); !errors.Is(err, ErrAborted) {
		t.Fatalf("the failed commit left the transaction usable: %v", err)
	}
	// Nothing applied: values, dirty bits unchanged.
	if got, _, _ := v.e.Get(ctx, ks, k(1), ReadLatest); string(got) != "old" {
		t.Fatalf("key 1 = %q after a failed commit", got)
	}
	if _, ok, _ := v.e.Get(ctx, ks, k(2), ReadLatest); ok {
		t.Fatal("key 2 exists after a failed commit")
	}
	after, _ := v.buf.Records(ks, nil, nil)
	for _, li := range after {
		if li.Dirty && string(li.Key) != string(k(1)) {
			t.Errorf("%s dirty after a failed commit", keyName(li.Key))
		}
		if li.RowX != 0 || len(li.RowS) > 0 || li.GapX != 0 || len(li.GapS) > 0 || li.Pinned > 0 {
			t.Errorf("%s still locked after a failed commit: %+v", keyName(li.Key), li)
		}
	}
	// Locks released: another transaction writes the same keys at once.
	log.fail.Store(false)
	y, _ := v.e.Begin(false)
	if err := y.Upsert(ctx, ks, k(1), []byte("y")); err != nil {
		t.Fatal(err)
	}
	if err := y.Insert(ctx, ks, k(5), []byte("y")); err != nil { // inside x's scanned range
		t.Fatal(err)
	}
	if err := y.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// A read-only commit never touches the log.
	log.fail.Store(true)
	r, _ := v.e.Begin(true)
	if _, _, err := r.Get(ctx, ks, k(1)); err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(ctx); err != nil {
		t.Fatalf("read-only commit with a failing log: %v", err)
	}
	if n := log.appends.Load(); n != 2 {
		t.Fatalf("%d successful appends, want 2", n)
	}
}

// A store outage during a transaction's reads: the error comes back (it
// is not a conflict, so the transaction stays live), the transaction can
// go on once the store is back or abort, and no lock or sentinel stays.
func TestStoreOutageDuringReads(t *testing.T) {
	for _, ph := range []Phantom{NextKey, PCL} {
		t.Run(string(ph), func(t *testing.T) {
			ctx := context.Background()
			v := newEnv(t, cache.Options{}, Options{Phantom: ph, LockWait: 50 * time.Millisecond})
			for _, i := range []int{10, 20, 30} {
				if _, err := v.st.Upsert(ctx, ks, adapters.Puts([]adapters.Record{{Key: k(i), Value: []byte("v")}})); err != nil {
					t.Fatal(err)
				}
			}
			unavailable := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, adapters.ErrUnavailable) || !errors.Is(err, cache.ErrStore) {
					t.Fatalf("%s during an outage: %v, want the store's error", what, err)
				}
			}
			v.fault.SetDown(true)
			x, _ := v.e.Begin(false)
			_, _, err := x.Get(ctx, ks, k(10))
			unavailable("Get", err)
			_, _, err = x.Scan(ctx, ks, k(15), k(35), 0)
			unavailable("Scan", err)
			unavailable("Insert", x.Insert(ctx, ks, k(25), []byte("x")))
			_, err = x.Delete(ctx, ks, k(20))
			unavailable("Delete", err)
			// Meanwhile the placeholders are locked: a writer waits
			// for them, and gives up after LockWait.
			if err := v.e.Upsert(ctx, ks, k(10), []byte("w")); !errors.Is(err, ErrConflict) || !errors.Is(err, errLockTimeout) {
				t.Fatalf("writer under the stalled reader's lock: %v, want a lock wait timeout", err)
			}
			x.Abort()
			infos, _ := v.buf.Records(ks, nil, nil)
			if len(infos) != 0 {
				t.Fatalf("records left after the abort: %+v", infos)
			}
			v.fault.SetDown(false)
			if err := v.buf.Check(ctx); err != nil {
				t.Fatal(err)
			}

			// Or it carries on when the store is back.
			v.fault.SetDown(true)
			y, _ := v.e.Begin(false)
			_, _, err = y.Scan(ctx, ks, k(15), k(35), 0)
			unavailable("Scan", err)
			v.fault.SetDown(false)
			recs, _, err := y.Scan(ctx, ks, k(15), k(35), 0)
			if err != nil || fmtRecs(recs, nil) != "20=v 30=v" {
				t.Fatalf("scan after the outage: %s %v", fmtRecs(recs, nil), err)
			}
			if err := y.Insert(ctx, ks, k(25), []byte("y")); err != nil {
				t.Fatal(err)
			}
			if err := y.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got, _, _ := v.e.Get(ctx, ks, k(25), ReadLatest); string(got) != "y" {
				t.Fatalf("key 25 = %q", got)
			}
		})
	}
}
