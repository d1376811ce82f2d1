package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/txn"
	"github.com/nemocache/nemo/wal"
)

// durable is an engine with a WAL over a local embedded store (no fault
// latency: the commit path of write-back never waits for the store).
type durable struct {
	store *embedded.Store
	buf   *cache.Buffer
	eng   *txn.Engine
	walOp wal.Options
}

// openDurable opens (replaying whatever log is in walDir) an engine over
// store. The checkpoint interval is an hour so that no checkpoint
// truncates the log during a measurement.
func openDurable(tb testing.TB, store *embedded.Store, wo wal.Options) *durable {
	tb.Helper()
	wo.Logger = quiet
	buf, err := cache.New(store, cache.Options{MaxBytes: 1 << 30, MaxDirtyBytes: 512 << 20, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	buf.OpenKeyspace(ks)
	eng, err := txn.New(buf, txn.Options{WAL: &wo, CheckpointInterval: time.Hour, Logger: quiet})
	if err != nil {
		buf.Close()
		tb.Fatal(err)
	}
	return &durable{store: store, buf: buf, eng: eng, walOp: wo}
}

// close closes the engine (no flush) and the buffer, checking the buffer's
// invariants against the store in between unless tb failed or is a
// benchmark (whose timer may cover close). The store stays open.
func (d *durable) close(tb testing.TB) {
	tb.Helper()
	if err := d.eng.Close(); err != nil {
		tb.Error(err)
	}
	if _, bench := tb.(*testing.B); !bench && !tb.Failed() {
		if err := d.buf.Check(context.Background()); err != nil {
			tb.Errorf("buffer invariants: %v", err)
		}
	}
	d.buf.Close()
}

// commitSpec is one commit-throughput configuration.
type commitSpec struct {
	group      bool // group commit (wal.Options.NoGroupCommit off)
	noSync     bool // tests only: skip fsync
	committers int
	keys       int // distinct keys per committer, cycled (so no conflicts)
	valueSize  int
	dur        time.Duration
}

type commitResult struct {
	commits, writes uint64
	elapsed         time.Duration
	commitTime      time.Duration // engine: summed commit latency
	wal             wal.Stats
	errs            []string
}

func (r *commitResult) add(o commitResult) {
	r.commits += o.commits
	r.writes += o.writes
	r.elapsed += o.elapsed
	r.commitTime += o.commitTime
	r.wal.Commits += o.wal.Commits
	r.wal.Batches += o.wal.Batches
	r.wal.Bytes += o.wal.Bytes
	r.wal.SyncTime += o.wal.SyncTime
	r.errs = append(r.errs, o.errs...)
}

func (r commitResult) rate() float64 { return float64(r.commits) / r.elapsed.Seconds() }

// bytesPerWrite is WAL bytes (framing and commit markers included) per
// committed write.
func (r commitResult) bytesPerWrite() float64 {
	return float64(r.wal.Bytes) / max(float64(r.writes), 1)
}
func (r commitResult) perFsync() float64 {
	return float64(r.wal.Commits) / max(float64(r.wal.Batches), 1)
}
func (r commitResult) latency() time.Duration {
	return r.commitTime / time.Duration(max(r.commits, 1))
}

func (r commitResult) String() string {
	return fmt.Sprintf("%8.0f commits/s  %6.1f commits/fsync  %5.1f WAL bytes/write  mean commit %v",
		r.rate(), r.perFsync(), r.bytesPerWrite(), r.latency().Round(time.Microsecond))
}

// runCommits has sp.committers goroutines commit one-upsert transactions
// through a fresh engine and WAL for sp.dur.
func runCommits(tb testing.TB, sp commitSpec) commitResult {
	tb.Helper()
	ctx := context.Background()
	st, err := embedded.Open(tb.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	defer st.Close()
	wo := wal.Options{Dir: tb.TempDir()}
	wo.NoGroupCommit, wo.NoSync = !sp.group, sp.noSync
	d := openDurable(tb, st, wo)
	defer d.close(tb)
	var commits atomic.Uint64
	var mu sync.Mutex
	var errs []string
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(sp.dur)
	for c := range sp.committers {
		wg.Go(func() {
			val := make([]byte, sp.valueSize)
			for i := 0; time.Now().Before(deadline); i++ {
				key := encKey(uint64(c)<<32 | uint64(i%sp.keys))
				binary.BigEndian.PutUint64(val, uint64(i))
				tx, err := d.eng.Begin(false)
				if err == nil {
					if err = tx.Upsert(ctx, ks, key, val); err == nil {
						err = tx.Commit(ctx)
					} else {
						tx.Abort()
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("committer %d: %v", c, err))
					mu.Unlock()
					return
				}
				commits.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	ws, _ := d.eng.WALStats()
	es := d.eng.Stats()
	return commitResult{
		commits: commits.Load(), writes: commits.Load(), elapsed: elapsed,
		commitTime: es.CommitTime, wal: ws, errs: errs,
	}
}

// logSpec describes a log written for the recovery measurement.
type logSpec struct {
	target    int64 // WAL bytes to write
	writers   int
	perTxn    int // upserts per transaction
	keys      int // distinct keys per writer, cycled: the log is mostly overwrites
	valueSize int
	// segmentSize is the WAL's preallocated segment size; 0 is the
	// default (64 MiB). Tests use small ones: opening a log scans its last
	// segment to the end.
	segmentSize int64
}

// writtenLog is a WAL left behind by a closed engine, without checkpoints,
// and the last value every key got.
type writtenLog struct {
	store *embedded.Store
	wo    wal.Options
	bytes int64
	txns  uint64
	last  map[string][]byte
}

// seqValue is a value that names the write that produced it.
func seqValue(seq uint64, n int) []byte {
	v := make([]byte, n)
	binary.BigEndian.PutUint64(v, seq)
	for i := 8; i < n; i++ {
		v[i] = byte(seq) ^ byte(i)
	}
	return v
}

// writeLog commits through an engine with group commit and no fsync (the
// speed of writing the log is not what is measured) until the WAL holds
// sp.target bytes and every writer has written each of its keys, then
// closes the engine without a checkpoint.
func writeLog(tb testing.TB, sp logSpec) *writtenLog {
	tb.Helper()
	ctx := context.Background()
	st, err := embedded.Open(tb.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	wo := wal.Options{Dir: tb.TempDir()}
	wo.NoSync = true
	if sp.segmentSize > 0 {
		wo.SegmentSize = sp.segmentSize
	}
	d := openDurable(tb, st, wo)
	lasts := make([]map[string][]byte, sp.writers)
	var seq, txns atomic.Uint64
	var failed atomic.Value
	var wg sync.WaitGroup
	for w := range sp.writers {
		lasts[w] = map[string][]byte{}
		wg.Go(func() {
			for i := 0; ; i++ {
				if failed.Load() != nil {
					return
				}
				// Stop at the target size, but not before this writer has
				// written each of its keys once (a writer that got little
				// CPU would otherwise leave keys unwritten).
				if ws, _ := d.eng.WALStats(); int64(ws.Bytes) >= sp.target && i*sp.perTxn >= sp.keys {
					return
				}
				pending := map[string][]byte{}
				err := d.eng.Run(ctx, false, func(tx *txn.Txn) error {
					clear(pending)
					for j := range sp.perTxn {
						key := encKey(uint64(w)<<32 | uint64((i*sp.perTxn+j)%sp.keys))
						val := seqValue(seq.Add(1), sp.valueSize)
						if err := tx.Upsert(ctx, ks, key, val); err != nil {
							return err
						}
						pending[string(key)] = val
					}
					return nil
				})
				if err != nil {
					failed.Store(fmt.Errorf("writer %d: %w", w, err))
					return
				}
				txns.Add(1)
				for k, v := range pending {
					lasts[w][k] = v
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		tb.Fatal(err)
	}
	ws, _ := d.eng.WALStats()
	d.close(tb)
	last := map[string][]byte{}
	for _, m := range lasts {
		for k, v := range m {
			last[k] = v
		}
	}
	return &writtenLog{store: st, wo: d.walOp, bytes: int64(ws.Bytes), txns: txns.Load(), last: last}
}

// recover opens a fresh buffer and engine over a copy of the log (the
// checkpoint that follows replay truncates the copy, so every call
// replays the same log) and returns how long txn.New took (opening the
// WAL, validating it and replaying it into the buffer), after checking
// that every key reads its last written value.
func (l *writtenLog) recover(tb testing.TB) time.Duration {
	tb.Helper()
	wo := l.wo
	wo.Dir = filepath.Join(tb.TempDir(), "wal")
	if err := os.CopyFS(wo.Dir, os.DirFS(l.wo.Dir)); err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	d := openDurable(tb, l.store, wo)
	took := time.Since(start)
	defer d.close(tb)
	ctx := context.Background()
	for k, want := range l.last {
		v, ok, err := d.eng.Get(ctx, ks, []byte(k), txn.ReadLatest)
		if err != nil || !ok || !bytes.Equal(v, want) {
			tb.Fatalf("after recovery key %x: found=%v err=%v, value matches=%v", k, ok, err, bytes.Equal(v, want))
		}
	}
	return took
}
