package txn

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters/storetest"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/testenv"
)

func TestOptionsValidate(t *testing.T) {
	err := Options{Phantom: "gap", IdleTimeout: -1, Retries: -2}.Validate()
	for _, want := range []string{`phantom "gap"`, "idle timeout", "retries"} {
		if err == nil || !contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %s", err, want)
		}
	}
	if err := (Options{Phantom: PCL}).Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
	if _, err := New(nil, Options{Phantom: "gap"}); err == nil {
		t.Error("New accepted invalid options")
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestRunRetriesConflictsOnly(t *testing.T) {
	ctx := context.Background()
	// NO_WAIT, so that each attempt fails at once (wait_test.go has the
	// waits).
	v := newEnv(t, cache.Options{}, Options{Retries: 3, LockWait: -1})
	holder, _ := v.e.Begin(false)
	if err := holder.Upsert(ctx, ks, k(1), []byte("h")); err != nil {
		t.Fatal(err)
	}
	attempts := 0
	err := v.e.Run(ctx, false, func(x *Txn) error {
		attempts++
		return x.Upsert(ctx, ks, k(1), []byte("r"))
	})
	if !errors.Is(err, ErrConflict) || attempts != 4 {
		t.Fatalf("Run under a held lock: %v after %d attempts, want ErrConflict after 1+3", err, attempts)
	}
	holder.Abort()

	// Another error is returned as it is, after one attempt, and aborts.
	boom := errors.New("boom")
	attempts = 0
	err = v.e.Run(ctx, false, func(x *Txn) error {
		attempts++
		if err := x.Upsert(ctx, ks, k(2), []byte("x")); err != nil {
			return err
		}
		return boom
	})
	if err != boom || attempts != 1 {
		t.Fatalf("Run = %v after %d attempts, want boom after 1", err, attempts)
	}
	if _, ok, _ := v.e.Get(ctx, ks, k(2), ReadLatest); ok {
		t.Fatal("the failed Run's write is visible")
	}

	// A conflict that clears is retried into a commit.
	holder, _ = v.e.Begin(false)
	if err := holder.Upsert(ctx, ks, k(3), []byte("h")); err != nil {
		t.Fatal(err)
	}
	attempts = 0
	err = v.e.Run(ctx, false, func(x *Txn) error {
		attempts++
		if attempts == 2 {
			holder.Abort()
		}
		return x.Upsert(ctx, ks, k(3), []byte("r"))
	})
	if err != nil || attempts != 2 {
		t.Fatalf("Run = %v after %d attempts, want success on the 2nd", err, attempts)
	}

	// A cancelled context ends the retries.
	holder, _ = v.e.Begin(false)
	if err := holder.Upsert(ctx, ks, k(4), []byte("h")); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err = v.e.Run(cctx, false, func(x *Txn) error { return x.Upsert(ctx, ks, k(4), []byte("r")) })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run with a cancelled context: %v", err)
	}
	holder.Abort()

	// Read-only Run refuses writes.
	err = v.e.Run(ctx, true, func(x *Txn) error { return x.Upsert(ctx, ks, k(5), nil) })
	if !errors.Is(err, ErrReadOnly) {
		t.Fatalf("write in a read-only Run: %v", err)
	}
	err = v.e.Run(ctx, true, func(x *Txn) error { _, _, err := x.GetForUpdate(ctx, ks, k(5)); return err })
	if !errors.Is(err, ErrReadOnly) {
		t.Fatalf("GetForUpdate in a read-only Run: %v", err)
	}
}

func TestSingleOps(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, cache.Options{}, Options{})
	e := v.e
	if err := e.Insert(ctx, ks, k(1), []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := e.Insert(ctx, ks, k(1), []byte("b")); !errors.Is(err, ErrExists) {
		t.Fatalf("second insert: %v", err)
	}
	if err := e.Update(ctx, ks, k(2), []byte("b")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update of a missing key: %v", err)
	}
	if err := e.Update(ctx, ks, k(1), []byte("c")); err != nil {
		t.Fatal(err)
	}
	if err := e.Upsert(ctx, ks, k(3), []byte("d")); err != nil {
		t.Fatal(err)
	}
	if existed, err := e.Delete(ctx, ks, k(3)); err != nil || !existed {
		t.Fatalf("delete: %v %v", existed, err)
	}
	if existed, err := e.Delete(ctx, ks, k(3)); err != nil || existed {
		t.Fatalf("delete again: %v %v", existed, err)
	}
	recs, next, err := e.Scan(ctx, ks, nil, nil, 0, ReadSerializable)
	if err != nil || next != nil || fmtRecs(recs, nil) != "1=c" {
		t.Fatalf("scan: %s next=%v err=%v", fmtRecs(recs, nil), next, err)
	}
	// The engine opens a keyspace on first use: frontends never open one.
	if err := e.Upsert(ctx, "fresh", k(1), []byte("f")); err != nil {
		t.Fatalf("upsert into a new keyspace: %v", err)
	}
	if v, ok, err := e.Get(ctx, "fresh", k(1), ReadLatest); err != nil || !ok || string(v) != "f" {
		t.Fatalf("get from the new keyspace: %q %v %v", v, ok, err)
	}
	if err := e.Upsert(ctx, ks, nil, nil); !errors.Is(err, cache.ErrInvalidKey) {
		t.Fatalf("empty key: %v", err)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if vals, err := storetest.Values(v.st.Get(ctx, ks, [][]byte{k(1), k(3)})); err != nil || string(vals[0]) != "c" || vals[1] != nil {
		t.Fatalf("store after flush: %q %v", vals, err)
	}
	if s := e.Stats(); s.Commits < 5 || s.Live != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestCloseAbortsLiveTransactions(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, cache.Options{}, Options{})
	x, _ := v.e.Begin(false)
	if err := x.Upsert(ctx, ks, k(1), []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := v.e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := x.Commit(ctx); !errors.Is(err, ErrAborted) {
		t.Fatalf("commit after Close: %v", err)
	}
	if _, err := v.e.Begin(true); !errors.Is(err, ErrClosed) {
		t.Fatalf("Begin after Close: %v", err)
	}
	if err := v.e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	assertStopped(t, v.e)
}

// assertStopped fails unless the engine's background goroutines were told
// to stop.
func assertStopped(t *testing.T, e *Engine) {
	t.Helper()
	select {
	case <-e.stop:
	default:
		t.Fatal("the reaper was not stopped")
	}
}

func TestStopAdmittingDrains(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, cache.Options{}, Options{})
	x, _ := v.e.Begin(false)
	if err := x.Upsert(ctx, ks, k(1), []byte("a")); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		v.e.StopAdmitting(ctx)
		close(done)
	}()
	testenv.WaitFor(t, time.Second, "admission to stop", func() bool {
		y, err := v.e.Begin(true)
		if err == nil {
			y.Abort()
		}
		return errors.Is(err, ErrClosed)
	})
	select {
	case <-done:
		t.Fatal("StopAdmitting returned while a transaction was live")
	case <-time.After(20 * time.Millisecond):
	}
	if err := x.Commit(ctx); err != nil {
		t.Fatalf("a live transaction may still commit during a drain: %v", err)
	}
	<-done

	if _, err := v.e.Begin(false); !errors.Is(err, ErrClosed) {
		t.Fatalf("Begin after a drain: %v", err)
	}
	// Closing after a drain still stops the engine's goroutines.
	if err := v.e.Close(); err != nil {
		t.Fatal(err)
	}
	assertStopped(t, v.e)
}

func TestStopAdmittingDeadlineAborts(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, cache.Options{}, Options{})
	x, _ := v.e.Begin(false)
	if err := x.Upsert(ctx, ks, k(1), []byte("a")); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	v.e.StopAdmitting(dctx)
	if err := x.Commit(ctx); !errors.Is(err, ErrAborted) {
		t.Fatalf("commit after a drain deadline: %v", err)
	}
	if _, ok, _ := v.e.Get(ctx, ks, k(1), ReadLatest); ok {
		t.Fatal("the aborted write is visible")
	}
}
