package wal

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// TestAppendEarly: AppendEarly returns once the commit has its LSN in the
// batch being written, before the fsync; the outcome channel and
// WaitDurable report durability only after the fsync; a commit that
// arrives during that fsync is sequenced in the next batch, after it; a
// failed fsync reaches the outcome channel and WaitDurable.
func TestAppendEarly(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ffs := &faultFS{}
	opts := testOptions(t, dir)
	opts.FS = ffs
	l := mustOpen(t, opts)
	defer l.Close()
	before := mustAppend(t, l, 1, putRec("a", "0", "x"))

	hold := make(chan struct{})
	ffs.set(func(f *faultFS) { f.syncHold = hold })
	lsn1, durable1, err := l.AppendEarly(ctx, 2, []Data{putRec("a", "1", "x")})
	if err != nil {
		t.Fatal(err)
	}
	if lsn1 <= before.lsn || l.SequencedLSN() != lsn1 {
		t.Fatalf("early commit LSN %d, sequenced %d, previous commit %d", lsn1, l.SequencedLSN(), before.lsn)
	}
	if l.NextLSN() > lsn1 {
		t.Fatalf("NextLSN %d covers LSN %d while its fsync is held", l.NextLSN(), lsn1)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	if err := l.WaitDurable(short, lsn1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitDurable during the held fsync: %v, want the deadline", err)
	}
	cancel()
	if err := l.WaitDurable(ctx, before.lsn); err != nil {
		t.Fatalf("WaitDurable of an older, durable commit: %v", err)
	}
	select {
	case err := <-durable1:
		t.Fatalf("outcome %v before the fsync returned", err)
	default:
	}
	// The next commit queues behind the held batch: not sequenced yet.
	type result struct {
		lsn     uint64
		durable <-chan error
		err     error
	}
	second := make(chan result, 1)
	go func() {
		lsn, d, err := l.AppendEarly(ctx, 3, []Data{putRec("a", "2", "x")})
		second <- result{lsn, d, err}
	}()
	select {
	case r := <-second:
		t.Fatalf("second AppendEarly returned (%d, %v) while the writer is in the first fsync", r.lsn, r.err)
	case <-time.After(20 * time.Millisecond):
	}
	ffs.set(func(f *faultFS) { f.syncHold = nil })
	close(hold)
	if err := <-durable1; err != nil {
		t.Fatal(err)
	}
	if err := l.WaitDurable(ctx, lsn1); err != nil {
		t.Fatal(err)
	}
	r := <-second
	if r.err != nil || r.lsn <= lsn1 {
		t.Fatalf("second AppendEarly: LSN %d, %v; want after %d", r.lsn, r.err, lsn1)
	}
	if err := <-r.durable; err != nil {
		t.Fatal(err)
	}

	ffs.set(func(f *faultFS) { f.syncErr = syscall.EIO })
	lsn3, durable3, err := l.AppendEarly(ctx, 4, []Data{putRec("a", "3", "x")})
	if err != nil {
		t.Fatalf("AppendEarly is sequenced before the fsync fails: %v", err)
	}
	if err := <-durable3; !errors.Is(err, ErrSync) {
		t.Fatalf("outcome of a failed fsync: %v, want ErrSync", err)
	}
	if err := l.WaitDurable(ctx, lsn3); !errors.Is(err, ErrSync) {
		t.Fatalf("WaitDurable after the failure: %v, want ErrSync", err)
	}
	if _, _, err := l.AppendEarly(ctx, 5, []Data{putRec("a", "4", "x")}); !errors.Is(err, ErrSync) {
		t.Fatalf("AppendEarly on a failed log: %v, want the sticky ErrSync", err)
	}
	if got := txnIDs(replayAll(t, l, 0)); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("replayed %v, want [1 2 3]", got)
	}
}

// TestAppendEarlyWithoutGroupCommit: with no writer to overlap with,
// AppendEarly returns after the fsync, its outcome already delivered.
func TestAppendEarlyWithoutGroupCommit(t *testing.T) {
	opts := testOptions(t, t.TempDir())
	opts.NoGroupCommit = true
	l := mustOpen(t, opts)
	defer l.Close()
	lsn, durable, err := l.AppendEarly(context.Background(), 1, []Data{putRec("a", "1", "x")})
	if err != nil {
		t.Fatal(err)
	}
	if l.NextLSN() <= lsn {
		t.Fatalf("NextLSN %d does not cover %d", l.NextLSN(), lsn)
	}
	if err := <-durable; err != nil {
		t.Fatal(err)
	}
}
