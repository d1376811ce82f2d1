package txn

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/adapters/storetest"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/txn/logrec"
	"github.com/nemocache/nemo/wal"
)

// syncFailFS fails every fsync while failing is set: a dying disk.
type syncFailFS struct {
	wal.OSFS
	failing atomic.Bool
}

type syncFailFile struct {
	wal.File
	fs *syncFailFS
}

func (f *syncFailFS) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return syncFailFile{file, f}, nil
}

func (f syncFailFile) Sync() error {
	if f.fs.failing.Load() {
		return fmt.Errorf("fsync: %w", syscall.EIO)
	}
	return f.File.Sync()
}

func (f syncFailFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.failing.Load() {
		return 0, fmt.Errorf("write: %w", syscall.ENOSPC)
	}
	return f.File.WriteAt(p, off)
}

type durableEnv struct {
	dir   string
	store *embedded.Store
	fault *fault.Store
	buf   *cache.Buffer
	eng   *Engine
}

func openEnv(t *testing.T, dir string, fsys wal.FS) *durableEnv {
	t.Helper()
	return openEnvWith(t, dir, fsys, nil)
}

// openEnvWith is openEnv with a chance to change the options: by default
// nothing is written back but by a checkpoint, which runs every hour (or
// when one is due).
func openEnvWith(t *testing.T, dir string, fsys wal.FS, set func(*cache.Options, *Options)) *durableEnv {
	t.Helper()
	return openEnvOver(t, dir, fsys, nil, set)
}

// openEnvOver is openEnvWith with the store the fault injector wraps
// chosen by over (given the embedded store; nil: the embedded store).
func openEnvOver(t *testing.T, dir string, fsys wal.FS, over func(*embedded.Store) adapters.Store, set func(*cache.Options, *Options)) *durableEnv {
	t.Helper()
	st, err := embedded.Open(filepath.Join(dir, "store"), embedded.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	var inner adapters.Store = st
	if over != nil {
		inner = over(st)
	}
	fst := fault.New(inner, fault.Config{})
	co := cache.Options{MaxKeyBytes: 64, FlushInterval: time.Hour, MaxDirtyAge: time.Hour}
	wo := wal.Options{Dir: filepath.Join(dir, "wal")}
	wo.SegmentSize = 64 << 10
	wo.FS = fsys
	eo := Options{WAL: &wo, CheckpointInterval: time.Hour}
	if set != nil {
		set(&co, &eo)
	}
	b, err := cache.New(fst, co)
	if err != nil {
		t.Fatal(err)
	}
	b.OpenKeyspace("t")
	e, err := New(b, eo)
	if err != nil {
		b.Close()
		st.Close()
		t.Fatal(err)
	}
	return &durableEnv{dir, st, fst, b, e}
}

func (d *durableEnv) close() {
	d.eng.Close()
	d.buf.Close()
	d.store.Close()
}

func TestWALReplayRestoresDirtyWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := openEnv(t, dir, nil)
	for i := 0; i < 50; i++ {
		if err := d.eng.Upsert(ctx, "t", k(i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.eng.Delete(ctx, "t", k(7)); err != nil {
		t.Fatal(err)
	}
	// Nothing was flushed: the store is empty, the log holds everything.
	if recs, _, _ := d.store.GetRange(ctx, "t", nil, nil, 0); len(recs) != 0 {
		t.Fatalf("store has %d records before any flush", len(recs))
	}
	d.close() // no drain: a crash as far as the store is concerned
	d = openEnv(t, dir, nil)
	for i := 0; i < 50; i++ {
		v, ok, err := d.eng.Get(ctx, "t", k(i), ReadLatest)
		if err != nil || ok != (i != 7) || (ok && v[0] != byte(i)) {
			t.Fatalf("key %d after replay: %v %v %v", i, v, ok, err)
		}
	}
	// The replayed writes are written back and the log truncated soon
	// after the start, not a checkpoint interval (an hour here) later.
	waitCheckpoint(t, d)
	if recs, _, _ := d.store.GetRange(ctx, "t", nil, nil, 0); len(recs) != 49 {
		t.Fatalf("after the checkpoint that follows replay the store has %d records, want 49", len(recs))
	}
	d.close()
	if n := walTxns(t, dir); n != 0 {
		t.Fatalf("the next start would replay %d transactions, want 0", n)
	}
	d = openEnv(t, dir, nil)
	defer d.close()
	if err := d.eng.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	recs, _, _ := d.store.GetRange(ctx, "t", nil, nil, 0)
	if len(recs) != 49 {
		t.Fatalf("after drain the store has %d records, want 49", len(recs))
	}
	if _, err := d.eng.Begin(false); !errors.Is(err, ErrClosed) {
		t.Fatalf("begin after drain: %v", err)
	}
}

// waitCheckpoint waits until the engine has written a checkpoint record
// and nothing is dirty.
func waitCheckpoint(t *testing.T, d *durableEnv) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st, _ := d.eng.WALStats(); st.Checkpoints > 0 && d.buf.Stats().DirtyBytes == 0 {
			return
		}
		if time.Now().After(deadline) {
			st, _ := d.eng.WALStats()
			t.Fatalf("no checkpoint: %+v, %d dirty bytes", st, d.buf.Stats().DirtyBytes)
		}
	}
}

// walTxns counts the transactions a start of the engine over dir would
// replay (those past the last checkpoint).
func walTxns(t *testing.T, dir string) int {
	t.Helper()
	l, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "wal"), SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n := 0
	if err := l.Replay(0, func(uint64, []wal.Data) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCheckpointConcurrentWithCommitsLosesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := openEnv(t, dir, nil)
	var wg sync.WaitGroup
	var stop atomic.Bool
	var acked sync.Map
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				key := k(g<<20 | i)
				if err := d.eng.Insert(ctx, "t", key, key); err != nil {
					t.Error(err)
					return
				}
				acked.Store(string(key), true)
			}
		}(g)
	}
	checkpoints := 0
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); checkpoints++ {
		if err := d.eng.Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	d.close()
	d = openEnv(t, dir, nil)
	defer d.close()
	n := 0
	acked.Range(func(key, _ any) bool {
		n++
		v, ok, err := d.eng.Get(ctx, "t", []byte(key.(string)), ReadLatest)
		if err != nil || !ok || string(v) != key.(string) {
			t.Fatalf("acknowledged key %x lost across checkpoints: %v %v", key, ok, err)
		}
		return true
	})
	if n == 0 || checkpoints < 2 {
		t.Fatalf("test did nothing: %d writes, %d checkpoints", n, checkpoints)
	}
	t.Logf("%d writes across %d checkpoints", n, checkpoints)
}

func TestFsyncFailureRefusesWritesKeepsReads(t *testing.T) {
	ctx := context.Background()
	fsys := &syncFailFS{}
	d := openEnv(t, t.TempDir(), fsys)
	defer d.close()
	if err := d.eng.Upsert(ctx, "t", k(1), []byte("one")); err != nil {
		t.Fatal(err)
	}
	fsys.failing.Store(true)
	err := d.eng.Upsert(ctx, "t", k(2), []byte("two"))
	if !errors.Is(err, ErrCommitLog) {
		t.Fatalf("commit with a failing disk: %v", err)
	}
	if _, ok, _ := d.eng.Get(ctx, "t", k(2), ReadLatest); ok {
		t.Fatal("a commit that was not durable is visible")
	}
	if v, ok, err := d.eng.Get(ctx, "t", k(1), ReadLatest); err != nil || !ok || string(v) != "one" {
		t.Fatalf("reads must go on: %q %v %v", v, ok, err)
	}
	// Writes are refused at once, before commit, while the log is failed.
	tx, _ := d.eng.Begin(false)
	if err := tx.Upsert(ctx, "t", k(3), []byte("x")); !errors.Is(err, ErrCommitLog) {
		t.Fatalf("write while the log is failed: %v", err)
	}
	tx.Abort()
	// The disk recovers; the engine notices within its retry interval.
	fsys.failing.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := d.eng.Upsert(ctx, "t", k(2), []byte("two"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("log never writable again: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := d.buf.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestStoreOutageDuringDrainKeepsEverything(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := openEnv(t, dir, nil)
	for i := 0; i < 20; i++ {
		if err := d.eng.Upsert(ctx, "t", k(i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	d.fault.SetDown(true)
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := d.eng.Drain(dctx)
	cancel()
	if err == nil || !errors.Is(err, adapters.ErrUnavailable) {
		t.Fatalf("drain during an outage: %v", err)
	}
	if d.buf.Stats().DirtyBytes == 0 {
		t.Fatal("dirty records were dropped")
	}
	d.buf.Close()
	d.store.Close()
	// Restart with the store back: the WAL still has everything.
	d = openEnv(t, dir, nil)
	defer d.close()
	if err := d.eng.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	recs, _, _ := d.store.GetRange(ctx, "t", nil, nil, 0)
	if len(recs) != 20 {
		t.Fatalf("store has %d of 20 records after the outage", len(recs))
	}
}

func TestWriteThroughMode(t *testing.T) {
	ctx := context.Background()
	st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fst := fault.New(st, fault.Config{})
	b, _ := cache.New(fst, cache.Options{MaxKeyBytes: 64})
	defer b.Close()
	b.OpenKeyspace("t")
	e, err := New(b, Options{Mode: WriteThrough})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Insert(ctx, "t", k(1), []byte("a")); err != nil {
		t.Fatal(err)
	}
	if vals, _ := storetest.Values(st.Get(ctx, "t", [][]byte{k(1)})); string(vals[0]) != "a" {
		t.Fatalf("write-through did not reach the store: %q", vals[0])
	}
	if b.Stats().DirtyBytes != 0 {
		t.Fatal("write-through left dirty records")
	}
	fst.SetFailNext(adapters.OpUpsert, 1)
	if err := e.Upsert(ctx, "t", k(2), []byte("b")); !errors.Is(err, adapters.ErrUnavailable) {
		t.Fatalf("store failure must fail the commit: %v", err)
	}
	if _, ok, _ := e.Get(ctx, "t", k(2), ReadLatest); ok {
		t.Fatal("a failed write-through commit is visible")
	}
	if err := b.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDirtyBytesBounded: with the store down, writes fill the dirty budget
// and are then refused with ErrBackpressure instead of growing it without
// bound; reads go on; once the store is back, writes are accepted again.
func TestDirtyBytesBounded(t *testing.T) {
	ctx := context.Background()
	st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fst := fault.New(st, fault.Config{})
	b, err := cache.New(fst, cache.Options{MaxKeyBytes: 64, MaxBytes: 1 << 20, MaxDirtyBytes: 4 << 10, FlushInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.OpenKeyspace("t")
	e, err := New(b, Options{DirtyWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	fst.SetDown(true)
	val := make([]byte, 200)
	var refused error
	i := 0
	for ; i < 1000 && refused == nil; i++ {
		refused = e.Upsert(ctx, "t", k(i), val)
	}
	if !errors.Is(refused, ErrBackpressure) {
		t.Fatalf("after %d writes with the store down: %v, want ErrBackpressure", i, refused)
	}
	if d := b.Stats().DirtyBytes; d > 4<<10+int64(len(val))+200 {
		t.Fatalf("dirty bytes %d overran the 4 KiB bound by more than one write", d)
	}
	if _, ok, err := e.Get(ctx, "t", k(0), ReadLatest); err != nil || !ok {
		t.Fatalf("reads must go on: %v %v", ok, err)
	}
	fst.SetDown(false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := e.Upsert(ctx, "t", k(5000), val)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrBackpressure) || time.Now().After(deadline) {
			t.Fatalf("store back, write still refused: %v", err)
		}
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs, _, _ := st.GetRange(ctx, "t", nil, nil, 0)
	if len(recs) != i {
		t.Fatalf("store has %d records, want the %d accepted writes", len(recs), i)
	}
}

// dirtyEngine is an engine over a buffer over store (keys up to 64
// bytes, a 64 MiB budget unless co says otherwise) with keyspace "t" open;
// both close at the end of the test.
func dirtyEngine(t *testing.T, store adapters.Store, co cache.Options, o Options) (*cache.Buffer, *Engine) {
	t.Helper()
	co.MaxKeyBytes = 64
	if co.MaxBytes == 0 {
		co.MaxBytes = 64 << 20
	}
	b, err := cache.New(store, co)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	b.OpenKeyspace("t")
	e, err := New(b, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() }) // runs before the buffer's
	return b, e
}

// TestDirtyAgeBounded: writers that dirty records twice as fast as a slow
// store takes them back (10 ms a call of 10 records, one call at a time:
// about 1,000 records a second; 8 writers of about 250 a second each) are
// held back to the store's pace, so that the oldest dirty record stays
// within MaxDirtyAge (1 s) where MaxDirtyBytes (4 MiB, some 15,000
// records) alone would let it grow by half a second every second (4 s
// by the end); writes go on meanwhile, none refused, and every
// acknowledged write reaches the store.
func TestDirtyAgeBounded(t *testing.T) {
	ctx := context.Background()
	st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() }) // after the engine and buffer (dirtyEngine)
	slow := fault.OpConfig{Latency: 10 * time.Millisecond}
	fst := fault.New(st, fault.Config{Ops: map[adapters.Op]fault.OpConfig{adapters.OpUpsert: slow, adapters.OpDelete: slow}})
	const maxAge = time.Second
	b, e := dirtyEngine(t, fst, cache.Options{MaxDirtyBytes: 4 << 20, MaxDirtyAge: maxAge,
		FlushInterval: 10 * time.Millisecond, WriteBatch: 10, WriteBackParallelism: 1}, Options{})
	val := make([]byte, 200)
	var next atomic.Int64
	// From idle, the writers run at their own pace until write-back has
	// measured the store's (its first full pass, after MaxDirtyAge/2):
	// that backlog drains within settle; the bound holds from then on.
	const settle = 4 * time.Second
	wctx, stop := context.WithTimeout(ctx, settle+4*time.Second)
	defer stop()
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for pace := time.NewTicker(4 * time.Millisecond); wctx.Err() == nil; <-pace.C {
				if err := e.Upsert(ctx, "t", k(int(next.Add(1))), val); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var worst, worstAt time.Duration
	began := time.Now()
	for tick := time.NewTicker(20 * time.Millisecond); wctx.Err() == nil; <-tick.C {
		if lag := b.Stats().FlushLag; time.Since(began) > settle && lag > worst {
			worst, worstAt = lag, time.Since(began)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a write: %v", err)
	}
	s := b.Stats()
	written := next.Load()
	t.Logf("%d writes in %v, %d throttled, oldest dirty at most %v (at %v), dirty limit at the end %d bytes", written, settle+4*time.Second, s.Throttled, worst, worstAt.Round(time.Millisecond), s.DirtyLimit)
	if s.Throttled == 0 || written < 1000 {
		t.Fatalf("%d writes, %d throttled: want writers held back and going on", written, s.Throttled)
	}
	// Half of it again as slack for a loaded machine (-race, CI's
	// packages side by side); without the dirty limit it reaches 2.5 s.
	if worst > maxAge+maxAge/2 {
		t.Fatalf("the oldest dirty record reached %v, max_dirty_age %v", worst, maxAge)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs, _, _ := st.GetRange(ctx, "t", nil, nil, 0)
	if int64(len(recs)) != written {
		t.Fatalf("store has %d records, want the %d acknowledged writes", len(recs), written)
	}
}

// TestDirtyLimitIdleWhileWriteBackKeepsUp: writers well within a fast
// store's pace are never held back by the dirty limit, whatever
// FlushInterval adds to a record's wait before its write-back is taken.
func TestDirtyLimitIdleWhileWriteBackKeepsUp(t *testing.T) {
	ctx := context.Background()
	st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() }) // after the engine and buffer (dirtyEngine)
	b, e := dirtyEngine(t, st, cache.Options{MaxDirtyBytes: 4 << 20, MaxDirtyAge: 2 * time.Second,
		FlushInterval: 500 * time.Millisecond, WriteBatch: 10}, Options{})
	val := make([]byte, 200)
	var worst time.Duration
	for i, pace := 0, time.NewTicker(5*time.Millisecond); i < 1200; i, _ = i+1, <-pace.C {
		if err := e.Upsert(ctx, "t", k(i), val); err != nil {
			t.Fatal(err)
		}
		worst = max(worst, b.Stats().FlushLag)
	}
	s := b.Stats()
	t.Logf("oldest dirty at most %v, %d throttled, dirty limit %d", worst, s.Throttled, s.DirtyLimit)
	// The limit itself may move (on a loaded machine write-back's passes
	// come back full and its rate caps the limit, a CI run saw 2 MiB of
	// 4): what must not happen is a writer held back while the dirty
	// bytes, a few tens of KiB here, are far below any limit.
	if s.Throttled != 0 {
		t.Fatalf("%d writes throttled (dirty limit %d): write-back kept up, want none", s.Throttled, s.DirtyLimit)
	}
}

// A checkpoint the checkpointer takes because the buffer looked clean
// writes nothing back: if a commit dirtied a record since, it does
// nothing (else a test seeing a record reach the store before any flush
// would flake, and a "clean" checkpoint would cost a write-back).
func TestCleanCheckpointNeverFlushes(t *testing.T) {
	ctx := context.Background()
	d := openEnv(t, t.TempDir(), nil)
	defer d.close()
	if err := d.eng.Upsert(ctx, "t", k(1), []byte("v")); err != nil {
		t.Fatal(err)
	}
	before := d.eng.wal.LastCheckpoint()
	if err := d.eng.checkpoint(ctx, true); err != nil {
		t.Fatal(err)
	}
	if recs, _, _ := d.store.GetRange(ctx, "t", nil, nil, 0); len(recs) != 0 || d.eng.wal.LastCheckpoint() != before {
		t.Fatalf("a clean-only checkpoint over a dirty record wrote %d records, checkpoint %d → %d", len(recs), before, d.eng.wal.LastCheckpoint())
	}
	if err := d.eng.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.eng.checkpoint(ctx, true); err != nil {
		t.Fatal(err)
	}
	if d.eng.wal.LastCheckpoint() <= before {
		t.Fatal("a clean-only checkpoint over a clean buffer did not checkpoint")
	}
}

// TestReplayStopsAtUndecodableRecord: a committed record that the log's
// checksums pass but the record format refuses (here a put whose body is
// cut short, and a type the format does not know) makes New fail with
// wal.ErrCorrupt, naming the transaction, rather than skip an
// acknowledged write; the log itself is left as it was.
func TestReplayStopsAtUndecodableRecord(t *testing.T) {
	for name, bad := range map[string]wal.Data{
		"put cut short": {Type: byte(logrec.RecordPut), Body: []byte{1, 't', 5, 'k'}},
		"unknown type":  {Type: 42, Body: []byte{1, 't'}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			l, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "wal"), SegmentSize: 64 << 10})
			if err != nil {
				t.Fatal(err)
			}
			good := logrec.Record{Type: logrec.RecordPut, Keyspace: "t", Key: []byte("a"), Value: []byte("1")}
			if _, err := l.Append(context.Background(), 1, []wal.Data{{Type: good.WireType(), Body: good.AppendBody(nil)}}); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append(context.Background(), 77, []wal.Data{bad}); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			st, err := embedded.Open(filepath.Join(dir, "store"), embedded.Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			b, err := cache.New(st, cache.Options{MaxKeyBytes: 64})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			b.OpenKeyspace("t")
			wo := wal.Options{Dir: filepath.Join(dir, "wal"), SegmentSize: 64 << 10}
			e, err := New(b, Options{WAL: &wo, CheckpointInterval: time.Hour})
			if err == nil {
				e.Close()
				t.Fatal("New replayed a log with an undecodable committed record")
			}
			if !errors.Is(err, wal.ErrCorrupt) || !errors.Is(err, logrec.ErrMalformed) || !strings.Contains(err.Error(), "transaction 77") {
				t.Fatalf("New: %v; want wal.ErrCorrupt and logrec.ErrMalformed naming transaction 77", err)
			}
			if n := walTxns(t, dir); n != 2 {
				t.Fatalf("the log holds %d transactions after the refused replay, want 2", n)
			}
		})
	}
}
