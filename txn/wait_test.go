package txn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/enum"
	"github.com/nemocache/nemo/internal/testenv"
)

// A single-operation write under another transaction's lock waits for it
// and then commits, instead of failing; past LockWait it gives up with
// ErrConflict after one attempt (it has waited already).
func TestSingleWriteWaitsForTheLock(t *testing.T) {
	for _, ph := range enum.Phantoms() {
		t.Run(string(ph), func(t *testing.T) {
			ctx := context.Background()
			v := newEnv(t, cache.Options{}, Options{Phantom: ph, LockWait: 300 * time.Millisecond})
			holder, _ := v.e.Begin(false)
			if err := holder.Upsert(ctx, ks, k(1), []byte("h")); err != nil {
				t.Fatal(err)
			}
			// The holder commits once the writer waits for its lock.
			wrote := make(chan error, 1)
			go func() { wrote <- v.e.Upsert(ctx, ks, k(1), []byte("w")) }()
			testenv.WaitFor(t, 5*time.Second, "a lock wait", func() bool { return v.e.Stats().LockWaits > 0 })
			if err := holder.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-wrote; err != nil {
				t.Fatalf("upsert under a lock released while it waited: %v", err)
			}
			if got, _, _ := v.e.Get(ctx, ks, k(1), ReadLatest); string(got) != "w" {
				t.Fatalf("k1 = %q, want the waiter's write last", got)
			}
			if st := v.e.Stats(); st.LockWaits == 0 || st.Aborts != 0 {
				t.Fatalf("stats %+v: want a wait and no abort", st)
			}

			holder, _ = v.e.Begin(false)
			if err := holder.Upsert(ctx, ks, k(2), []byte("h")); err != nil {
				t.Fatal(err)
			}
			attempts := 0
			start := time.Now()
			err := v.e.Run(ctx, false, func(x *Txn) error {
				attempts++
				return x.Upsert(ctx, ks, k(2), []byte("w"))
			})
			if !errors.Is(err, ErrConflict) || !errors.Is(err, errLockTimeout) || attempts != 1 {
				t.Fatalf("upsert under a lock never released: %v after %d attempts, want a lock timeout after 1", err, attempts)
			}
			if d := time.Since(start); d < 300*time.Millisecond {
				t.Fatalf("gave up after %v, before LockWait", d)
			}
			holder.Abort()
		})
	}
}

// A lock wait gives up just before its request's deadline, with the lock
// timeout (Datastore ABORTED, Azure 503 ServerBusy: nothing was applied, run it again), not at the
// deadline with the context's error: there the frontend has already
// answered DEADLINE_EXCEEDED or a 500 timeout, which leaves the client
// unsure and which a client does not retry as a transaction. The frontends'
// request timeout is as long as the default LockWait, so before, a wait
// that lasted its whole LockWait never ended as a lock timeout.
func TestLockWaitEndsBeforeTheDeadline(t *testing.T) {
	v := newEnv(t, cache.Options{}, Options{LockWait: 10 * time.Second})
	holder, _ := v.e.Begin(false)
	if err := holder.Upsert(context.Background(), ks, k(1), []byte("h")); err != nil {
		t.Fatal(err)
	}
	defer holder.Abort()
	for _, budget := range []time.Duration{2 * time.Second, 400 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		start := time.Now()
		err := v.e.Upsert(ctx, ks, k(1), []byte("w"))
		took, ctxErr := time.Since(start), ctx.Err()
		cancel()
		if !errors.Is(err, ErrConflict) || !errors.Is(err, errLockTimeout) || ctxErr != nil {
			t.Fatalf("a wait with %v left: %v after %v (context: %v), want a lock timeout before the deadline", budget, err, took, ctxErr)
		}
		if took < budget/2 {
			t.Fatalf("a wait with %v left gave up after %v", budget, took)
		}
	}
	if got, _, _ := v.e.Get(context.Background(), ks, k(1), ReadLatest); got != nil {
		t.Fatalf("k1 = %q after the waits gave up, want nothing (the holder never committed)", got)
	}
}

// Two transactions that would wait for each other: the request that would
// close the cycle fails at once (the deadlock victim aborts), and the other
// then gets its lock and commits.
func TestDeadlockVictim(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, cache.Options{}, Options{LockWait: 5 * time.Second})
	a, _ := v.e.Begin(false)
	b, _ := v.e.Begin(false)
	if err := a.Upsert(ctx, ks, k(1), []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := b.Upsert(ctx, ks, k(2), []byte("b")); err != nil {
		t.Fatal(err)
	}
	aDone := make(chan error, 1)
	go func() { aDone <- a.Upsert(ctx, ks, k(2), []byte("a")) }() // waits for b
	testenv.WaitFor(t, 5*time.Second, "a lock wait", func() bool { return v.e.Stats().LockWaits > 0 })
	start := time.Now()
	err := b.Upsert(ctx, ks, k(1), []byte("b"))
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "deadlock") {
		t.Fatalf("b closing the cycle: %v, want a deadlock conflict", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the victim failed after %v; want at once", d)
	}
	if err := <-aDone; err != nil {
		t.Fatalf("a after the victim aborted: %v", err)
	}
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if st := v.e.Stats(); st.Deadlocks != 1 {
		t.Fatalf("Deadlocks = %d, want 1", st.Deadlocks)
	}
}

// Two read-write transactions read a key (S locks, no conflict), then both
// write it: the second upgrade would deadlock, so one aborts and the other
// commits, as in the services, where one of two such transactions gets
// ABORTED (Datastore) or 412 (Azure).
func TestUpgradeDeadlock(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, cache.Options{}, Options{})
	if err := v.e.Upsert(ctx, ks, k(1), []byte("0")); err != nil {
		t.Fatal(err)
	}
	a, _ := v.e.Begin(false)
	b, _ := v.e.Begin(false)
	for _, x := range []*Txn{a, b} {
		if _, _, err := x.Get(ctx, ks, k(1)); err != nil {
			t.Fatalf("shared reads of one key: %v", err)
		}
	}
	aDone := make(chan error, 1)
	go func() { aDone <- a.Update(ctx, ks, k(1), []byte("a")) }()
	testenv.WaitFor(t, 5*time.Second, "a lock wait", func() bool { return v.e.Stats().LockWaits > 0 })
	if err := b.Update(ctx, ks, k(1), []byte("b")); !errors.Is(err, ErrConflict) {
		t.Fatalf("second upgrade: %v, want a deadlock conflict", err)
	}
	if err := <-aDone; err != nil {
		t.Fatalf("first upgrade after the other aborted: %v", err)
	}
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// Eight goroutines upserting one key, each call its own transaction (the
// Azure frontend's InsertOrReplace): every call succeeds, as in Azure.
func TestHotKeyUpsertsAllSucceed(t *testing.T) {
	ctx := context.Background()
	// A commit log as slow as a disk's fsync holds each lock for a while
	// (with LockWait -1, NO_WAIT, 89 of the 400 calls failed).
	v := newEnv(t, cache.Options{}, Options{Log: slowLog(2 * time.Millisecond)})
	var wg sync.WaitGroup
	var failed atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if err := v.e.Upsert(ctx, ks, k(7), []byte(fmt.Sprint(g, i))); err != nil {
					failed.Add(1)
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of 400 upserts failed", failed.Load())
	}
}

// A read-only transaction reads the state committed when it began, whatever
// commits later, takes no lock and so holds up no writer: point reads and
// scans, keys updated, deleted and inserted since.
func TestReadOnlySnapshot(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, cache.Options{}, Options{LockWait: -1}) // a writer that met a lock would fail
	for i := 1; i <= 5; i++ {
		if err := v.e.Upsert(ctx, ks, k(i), []byte(fmt.Sprint("old", i))); err != nil {
			t.Fatal(err)
		}
	}
	r, _ := v.e.Begin(true)
	if got, _, err := r.Get(ctx, ks, k(2)); err != nil || string(got) != "old2" {
		t.Fatalf("snapshot read: %q %v", got, err)
	}
	// Writers go ahead: update 2, delete 3, insert 6 and 2½ (key 25).
	err := v.e.Run(ctx, false, func(x *Txn) error {
		if err := x.Update(ctx, ks, k(2), []byte("new2")); err != nil {
			return err
		}
		if _, err := x.Delete(ctx, ks, k(3)); err != nil {
			return err
		}
		if err := x.Insert(ctx, ks, k(6), []byte("new6")); err != nil {
			return err
		}
		return x.Insert(ctx, ks, k(25), []byte("new25"))
	})
	if err != nil {
		t.Fatalf("writer beside a read-only transaction: %v", err)
	}
	if err := v.e.Upsert(ctx, ks, k(2), []byte("newer2")); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[int]string{2: "old2", 3: "old3", 6: "", 25: ""} {
		got, ok, err := r.Get(ctx, ks, k(key))
		if err != nil || string(got) != want || ok != (want != "") {
			t.Errorf("snapshot Get(%d) = %q %v %v, want %q", key, got, ok, err, want)
		}
	}
	recs, _, err := r.Scan(ctx, ks, k(0), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmtRecsPlain(recs); got != "1=old1 2=old2 3=old3 4=old4 5=old5" {
		t.Fatalf("snapshot scan: %s", got)
	}
	// A limited scan pages through the same state.
	recs, next, err := r.Scan(ctx, ks, k(0), nil, 2)
	if err != nil || fmtRecsPlain(recs) != "1=old1 2=old2" {
		t.Fatalf("snapshot scan, limit 2: %s %v", fmtRecsPlain(recs), err)
	}
	recs, _, err = r.Scan(ctx, ks, next, nil, 2)
	if err != nil || fmtRecsPlain(recs) != "3=old3 4=old4" {
		t.Fatalf("snapshot scan, second page: %s %v", fmtRecsPlain(recs), err)
	}
	if err := r.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if st := v.e.Stats(); st.Snapshots != 0 || st.SnapshotBytes != 0 {
		t.Fatalf("versions kept after the last snapshot closed: %+v", st)
	}
	// A new one sees the latest state.
	recs, _, err = v.e.Scan(ctx, ks, k(0), nil, 0, ReadSerializable)
	if err != nil || fmtRecsPlain(recs) != "1=old1 2=newer2 4=old4 5=old5 6=new6 25=new25" {
		t.Fatalf("scan after: %s %v", fmtRecsPlain(recs), err)
	}
}

// Past SnapshotBytes the oldest snapshot is given up: its next read fails
// with ErrConflict (a one-operation read retries on a fresh one).
func TestSnapshotGivenUp(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, cache.Options{}, Options{SnapshotBytes: 1024})
	r, _ := v.e.Begin(true)
	young, _ := v.e.Begin(true)
	for i := 0; i < 20; i++ {
		if err := v.e.Upsert(ctx, ks, k(i), make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			young.Abort()
			young, _ = v.e.Begin(true)
		}
	}
	if _, _, err := r.Get(ctx, ks, k(1)); !errors.Is(err, ErrConflict) {
		t.Fatalf("read of a given-up snapshot: %v, want ErrConflict", err)
	}
	if st := v.e.Stats(); st.SnapshotsExpired == 0 || st.SnapshotBytes > 1024 {
		t.Fatalf("stats %+v: want a snapshot given up and the kept bytes under the limit", st)
	}
	young.Abort()
}

type slowLog time.Duration

func (l slowLog) Append(context.Context, uint64, []Change) error {
	time.Sleep(time.Duration(l))
	return nil
}

func fmtRecsPlain(recs []adapters.Record) string {
	var b strings.Builder
	for i, r := range recs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", keyName(r.Key), r.Value)
	}
	return b.String()
}
