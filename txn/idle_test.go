package txn

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/testenv"
)

func TestIdleTimeoutAbortsAndReleases(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, cache.Options{}, Options{IdleTimeout: 150 * time.Millisecond})
	for _, i := range []int{10, 20, 30} {
		if err := v.e.Upsert(ctx, ks, k(i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	idle, err := v.e.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := idle.Get(ctx, ks, k(10)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := idle.Scan(ctx, ks, k(20), k(31), 0); err != nil {
		t.Fatal(err)
	}
	if err := idle.Upsert(ctx, ks, k(40), []byte("private")); err != nil {
		t.Fatal(err)
	}
	// While it is live, its locks stop others (NO_WAIT).
	w, _ := v.e.Begin(false)
	if err := w.Upsert(ctx, ks, k(10), []byte("w")); !errors.Is(err, ErrConflict) {
		if v.e.Stats().IdleAborts == 0 {
			t.Fatalf("write under a live reader's lock: %v, want ErrConflict", err)
		}
		t.Log("the machine is slow: the reaper ran before the conflict check")
		w.Abort()
	}
	testenv.WaitFor(t, 2*time.Second, "the reaper", func() bool { return v.e.Stats().Live == 0 })
	if n := v.e.Stats().IdleAborts; n != 1 {
		t.Fatalf("%d idle aborts, want 1", n)
	}
	// Every lock it held is gone: rows, the scanned range, its write's key.
	for _, key := range []int{10, 25, 30, 40} {
		x, _ := v.e.Begin(false)
		if err := x.Upsert(ctx, ks, k(key), []byte("after")); err != nil {
			t.Fatalf("upsert %d after the reap: %v", key, err)
		}
		if err := x.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Its private write was discarded, not committed.
	if got, _, _ := v.e.Get(ctx, ks, k(40), ReadLatest); string(got) != "after" {
		t.Fatalf("key 40 = %q", got)
	}
	// Every later call says why.
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrAborted) || !errors.Is(err, ErrIdleTimeout) {
			t.Errorf("%s on a reaped transaction: %v, want ErrAborted wrapping ErrIdleTimeout", what, err)
		}
	}
	_, _, err = idle.Get(ctx, ks, k(10))
	check("Get", err)
	_, _, err = idle.Scan(ctx, ks, nil, nil, 0)
	check("Scan", err)
	check("Upsert", idle.Upsert(ctx, ks, k(11), nil))
	check("Commit", idle.Commit(ctx))
	idle.Abort() // harmless
}

// A transaction whose operation is slower than the idle timeout is busy,
// not idle: the reaper leaves it alone, and the idle clock restarts when
// the operation returns, so a prompt next operation succeeds.
func TestIdleTimeoutSparesBusyTransactions(t *testing.T) {
	ctx := context.Background()
	const idle = 200 * time.Millisecond
	v := newEnv(t, cache.Options{}, Options{IdleTimeout: idle})
	v.fault.SetConfig(fault.Config{Ops: map[adapters.Op]fault.OpConfig{adapters.OpGet: {Latency: 3 * idle}}})
	x, err := v.e.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := x.Get(ctx, ks, k(1)); err != nil { // a miss: one slow store Get
		t.Fatalf("slow get: %v", err)
	}
	v.fault.SetConfig(fault.Config{})
	time.Sleep(idle / 4) // idle, but for less than the timeout
	if err := x.Upsert(ctx, ks, k(1), []byte("v")); err != nil {
		t.Fatalf("upsert right after a slow read: %v", err)
	}
	if err := x.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := v.e.Stats().IdleAborts; n != 0 {
		t.Fatalf("%d idle aborts", n)
	}
}
