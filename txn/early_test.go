package txn

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/wal"
)

// lossyFS keeps what the log writes in memory until the fsync that covers
// it, can hold fsyncs, and can lose everything not yet synced, as a power
// cut loses the page cache.
type lossyFS struct {
	wal.OSFS
	mu   sync.Mutex
	hold chan struct{} // non-nil: Sync waits for it to close
	held chan struct{} // closed when a Sync starts waiting on hold
	lost bool          // crashed: nothing more reaches the disk
}

type lossyFile struct {
	wal.File
	fs      *lossyFS
	mu      sync.Mutex
	pending []lossyWrite
}

type lossyWrite struct {
	off int64
	p   []byte
}

func (f *lossyFS) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &lossyFile{File: file, fs: f}, nil
}

// holdSyncs makes the next fsyncs wait until release is called; held is
// closed once one is waiting.
func (f *lossyFS) holdSyncs() (held <-chan struct{}, release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold, f.held = make(chan struct{}), make(chan struct{})
	hold := f.hold
	return f.held, sync.OnceFunc(func() {
		f.mu.Lock()
		f.hold = nil
		f.mu.Unlock()
		close(hold)
	})
}

// crash loses every write not yet synced, for good.
func (f *lossyFS) crash() {
	f.mu.Lock()
	f.lost = true
	f.mu.Unlock()
}

func (f *lossyFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	lost := f.fs.lost
	f.fs.mu.Unlock()
	if lost {
		return 0, fmt.Errorf("write: %w", syscall.EIO)
	}
	f.mu.Lock()
	f.pending = append(f.pending, lossyWrite{off, append([]byte(nil), p...)})
	f.mu.Unlock()
	return len(p), nil
}

func (f *lossyFile) Sync() error {
	f.fs.mu.Lock()
	hold, held := f.fs.hold, f.fs.held
	if hold != nil && held != nil {
		close(held)
		f.fs.held = nil
	}
	f.fs.mu.Unlock()
	if hold != nil {
		<-hold
	}
	f.fs.mu.Lock()
	lost := f.fs.lost
	f.fs.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if lost {
		f.pending = nil
		return fmt.Errorf("fsync: %w", syscall.EIO)
	}
	for _, w := range f.pending {
		if _, err := f.File.WriteAt(w.p, w.off); err != nil {
			return err
		}
	}
	f.pending = nil
	return f.File.Sync()
}

// ReadAt sees the writes not yet synced, as the page cache does.
func (f *lossyFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.pending {
		lo, hi := max(off, w.off), min(off+int64(len(p)), w.off+int64(len(w.p)))
		if lo < hi {
			copy(p[lo-off:hi-off], w.p[lo-w.off:hi-w.off])
		}
	}
	return n, err
}

func openEarly(t *testing.T, dir string, fsys wal.FS) *durableEnv {
	t.Helper()
	return openEnvWith(t, dir, fsys, func(_ *cache.Options, eo *Options) { eo.EarlyRelease = true })
}

// outcome runs fn in a goroutine and returns where its error arrives.
func outcome(fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return ch
}

func notYet(t *testing.T, what string, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned (%v) before the commit it depends on was durable", what, err)
	default:
	}
}

func storeHas(t *testing.T, d *durableEnv, key []byte) bool {
	t.Helper()
	recs, err := d.store.Get(context.Background(), "t", [][]byte{key})
	if err != nil {
		t.Fatal(err)
	}
	return recs[0].Value != nil
}

// TestEarlyReleaseWaitsForDurability: with the WAL's fsync held, a commit
// releases its locks (another transaction reads its write at once, where
// without early release it would wait for the lock until the fsync) but
// is not acknowledged; neither is a transaction that read its write, a
// read-only transaction's read of it, a lock-free read of it, nor a
// writer that read it, and write-back does not carry it to the store.
// Reads of other keys go on. Once the fsync returns, all of them answer.
func TestEarlyReleaseWaitsForDurability(t *testing.T) {
	ctx := context.Background()
	fsys := &lossyFS{}
	d := openEarly(t, t.TempDir(), fsys)
	defer d.close()
	if err := d.eng.Upsert(ctx, "t", k(0), []byte("v0")); err != nil {
		t.Fatal(err)
	}
	held, release := fsys.holdSyncs()
	defer release()
	w1 := outcome(func() error { return d.eng.Upsert(ctx, "t", k(1), []byte("v1")) })
	<-held // w1 is sequenced, in the batch whose fsync is held

	// A read-write transaction reads k1: the lock is free already.
	r2, err := d.eng.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	v, ok, err := r2.Get(ctx, "t", k(1))
	if err != nil || !ok || string(v) != "v1" {
		t.Fatalf("read of the early-released write: %q %v %v", v, ok, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the read waited %v for the lock: it was held across the fsync", took)
	}
	c2 := outcome(func() error { return r2.Commit(ctx) })
	// A writer that read k1, a read-only transaction, a lock-free read,
	// a scan over k1 and an insert that finds k1 there.
	w3 := outcome(func() error {
		return d.eng.Run(ctx, false, func(tx *Txn) error {
			v, _, err := tx.Get(ctx, "t", k(1))
			if err != nil {
				return err
			}
			return tx.Upsert(ctx, "t", k(3), append([]byte("saw "), v...))
		})
	})
	ro := outcome(func() error {
		return d.eng.Run(ctx, true, func(tx *Txn) error {
			_, _, err := tx.Get(ctx, "t", k(1))
			return err
		})
	})
	latest := outcome(func() error {
		_, _, err := d.eng.Get(ctx, "t", k(1), ReadLatest)
		return err
	})
	scan := outcome(func() error {
		_, _, err := d.eng.Scan(ctx, "t", k(0), k(2), 0, ReadLatest)
		return err
	})
	dup := outcome(func() error {
		err := d.eng.Insert(ctx, "t", k(1), []byte("again"))
		if errors.Is(err, ErrExists) {
			return nil
		}
		return fmt.Errorf("insert of an existing key: %v, want ErrExists", err)
	})
	// Independent work goes on.
	if v, ok, err := d.eng.Get(ctx, "t", k(0), ReadLatest); err != nil || !ok || string(v) != "v0" {
		t.Fatalf("independent read: %q %v %v", v, ok, err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	if err := d.eng.Flush(short); err == nil {
		t.Fatal("a flush wrote back while the commit was not durable")
	}
	cancel()
	if storeHas(t, d, k(1)) {
		t.Fatal("the store holds a write whose commit is not durable")
	}
	for what, ch := range map[string]<-chan error{"the writer": w1, "a reader's commit": c2, "a dependent writer": w3,
		"a read-only read": ro, "a ReadLatest read": latest, "a scan": scan, "an insert's refusal": dup} {
		notYet(t, what, ch)
	}

	release()
	for what, ch := range map[string]<-chan error{"the writer": w1, "a reader's commit": c2, "a dependent writer": w3,
		"a read-only read": ro, "a ReadLatest read": latest, "a scan": scan, "an insert's refusal": dup} {
		if err := <-ch; err != nil {
			t.Fatalf("%s after the fsync: %v", what, err)
		}
	}
	if err := d.eng.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if !storeHas(t, d, k(1)) || !storeHas(t, d, k(3)) {
		t.Fatal("write-back did not carry the durable commits to the store")
	}
}

// TestEarlyReleaseCrashBeforeFsync: the machine dies after a commit has
// released its locks and a second transaction has read its write and
// committed on it, but before the fsync covering the first. Neither is
// acknowledged, the store never received either, and after the restart
// neither exists; what was durable before is all there.
func TestEarlyReleaseCrashBeforeFsync(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fsys := &lossyFS{}
	d := openEarly(t, dir, fsys)
	if err := d.eng.Upsert(ctx, "t", k(0), []byte("v0")); err != nil {
		t.Fatal(err)
	}
	held, release := fsys.holdSyncs()
	w1 := outcome(func() error { return d.eng.Upsert(ctx, "t", k(1), []byte("v1")) })
	<-held
	// A transaction reads the write (so it is installed, and its locks
	// are gone) and commits a write of its own on it.
	tx, err := d.eng.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok, err := tx.Get(ctx, "t", k(1)); err != nil || !ok || string(v) != "v1" {
		t.Fatalf("read of the early-released write: %q %v %v", v, ok, err)
	}
	if err := tx.Upsert(ctx, "t", k(2), []byte("saw v1")); err != nil {
		t.Fatal(err)
	}
	w2 := outcome(func() error { return tx.Commit(ctx) })
	latest := outcome(func() error {
		_, _, err := d.eng.Get(ctx, "t", k(1), ReadLatest)
		return err
	})
	// Let write-back try meanwhile.
	fl := outcome(func() error { return d.eng.Flush(ctx) })
	time.Sleep(50 * time.Millisecond)
	notYet(t, "the writer", w1)
	notYet(t, "the dependent writer", w2)
	notYet(t, "a read", latest)

	fsys.crash() // the held fsync and everything after it fail; nothing unsynced survives
	release()
	for what, ch := range map[string]<-chan error{"the writer": w1, "the dependent writer": w2, "a read": latest} {
		if err := <-ch; !errors.Is(err, ErrCommitLog) {
			t.Fatalf("%s after the crash: %v, want ErrCommitLog (not acknowledged)", what, err)
		}
	}
	if err := <-fl; err == nil {
		t.Fatal("the flush wrote back writes whose log records were lost")
	}
	if storeHas(t, d, k(1)) || storeHas(t, d, k(2)) {
		t.Fatal("the store holds writes the log never made durable")
	}
	// The dead engine takes no more writes.
	if err := d.eng.Upsert(ctx, "t", k(4), []byte("v4")); !errors.Is(err, ErrCommitLog) {
		t.Fatalf("a write after the failure: %v, want ErrCommitLog", err)
	}
	d.close()

	d = openEnv(t, dir, nil)
	defer d.close()
	for i, want := range []string{"v0", "", "", "", ""} {
		v, ok, err := d.eng.Get(ctx, "t", k(i), ReadLatest)
		if err != nil {
			t.Fatal(err)
		}
		if got := map[bool]string{true: string(v)}[ok]; got != want {
			t.Fatalf("after restart k%d = %q (exists %v), want %q", i, v, ok, want)
		}
	}
	if err := d.eng.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if !storeHas(t, d, k(0)) || storeHas(t, d, k(1)) || storeHas(t, d, k(2)) {
		t.Fatal("after restart and checkpoint the store does not hold exactly the durable commits")
	}
}

// TestEarlyReleaseOption: early release needs write mode back.
func TestEarlyReleaseOption(t *testing.T) {
	o := Options{EarlyRelease: true, Mode: WriteThrough}
	if err := o.Validate(); err == nil {
		t.Fatal("early release writing through validated")
	}
}
