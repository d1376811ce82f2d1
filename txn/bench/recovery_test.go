package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/txn"
	"github.com/nemocache/nemo/wal"
)

// replayLog is a slog handler that keeps the attributes of the engine's
// "wal replayed" line, so a benchmark outside the package can read what a
// restart replayed.
type replayLog struct {
	mu   *sync.Mutex
	txns *int64
}

func newReplayLog() replayLog { return replayLog{mu: &sync.Mutex{}, txns: new(int64)} }

func (h replayLog) Enabled(context.Context, slog.Level) bool { return true }
func (h replayLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h replayLog) WithGroup(string) slog.Handler            { return h }
func (h replayLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "wal replayed" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "transactions" {
			h.mu.Lock()
			*h.txns = a.Value.Int64()
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

func (h replayLog) replayed() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return *h.txns
}

// life is one run of an engine over a persistent store and WAL directory:
// open (timed: txn.New opens, validates and replays the log), commit, and
// close without a drain, as a kill leaves things.
type life struct {
	store *embedded.Store
	buf   *cache.Buffer
	eng   *txn.Engine
	open  time.Duration // txn.New
	txns  int64         // transactions replayed
}

func startLife(tb testing.TB, store *embedded.Store, walDir string) *life {
	tb.Helper()
	h := newReplayLog()
	log := slog.New(h)
	buf, err := cache.New(store, cache.Options{MaxBytes: 1 << 30, MaxDirtyBytes: 512 << 20, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	buf.OpenKeyspace(ks)
	wo := wal.Options{Dir: walDir}
	wo.NoSync = true // writing the log is not what is measured
	start := time.Now()
	eng, err := txn.New(buf, txn.Options{WAL: &wo, Logger: log})
	if err != nil {
		buf.Close()
		tb.Fatal(err)
	}
	return &life{store: store, buf: buf, eng: eng, open: time.Since(start), txns: h.replayed()}
}

// commit writes n transactions of perTxn 100-byte upserts, keys from
// first on (all distinct).
func (l *life) commit(tb testing.TB, first, n, perTxn int) {
	tb.Helper()
	ctx := context.Background()
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n; i += writers {
				err := l.eng.Run(ctx, false, func(tx *txn.Txn) error {
					for j := range perTxn {
						seq := uint64(first + i*perTxn + j)
						if err := tx.Upsert(ctx, ks, encKey(seq), seqValue(seq, 100)); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}

// crash closes the engine and the buffer without a drain or checkpoint.
func (l *life) crash(tb testing.TB) {
	tb.Helper()
	if err := l.eng.Close(); err != nil {
		tb.Error(err)
	}
	l.buf.Close()
}

// waitCheckpointed waits until the checkpoint that follows replay has
// written the replayed records back and its record to the log, and
// returns how long that took.
func (l *life) waitCheckpointed(tb testing.TB, limit time.Duration) time.Duration {
	tb.Helper()
	start := time.Now()
	for time.Since(start) < limit {
		if st, _ := l.eng.WALStats(); st.Checkpoints > 0 && l.buf.Stats().DirtyBytes == 0 {
			return time.Since(start)
		}
		time.Sleep(time.Millisecond)
	}
	tb.Fatalf("not checkpointed after %v", limit)
	return 0
}

func walBytes(tb testing.TB, dir string) int64 {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			tb.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

func openBenchStore(tb testing.TB) *embedded.Store {
	tb.Helper()
	st, err := embedded.Open(tb.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// BenchmarkRecoveryUnflushed leaves n unflushed records in the WAL
// (transactions of 10 upserts of 100 bytes, distinct keys, nothing written
// back: the engine is closed without a drain, as by a kill) and times the
// restart: txn.New (open, validate, replay into an empty buffer) and then
// the checkpoint that follows replay (the replayed records written back
// to the embedded store, the log truncated). One iteration per size.
func BenchmarkRecoveryUnflushed(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			var open, ckpt time.Duration
			var txns int64
			var logged uint64
			for b.Loop() {
				st := openBenchStore(b)
				dir := filepath.Join(b.TempDir(), "wal")
				l := startLife(b, st, dir)
				l.commit(b, 0, n/10, 10)
				ws, _ := l.eng.WALStats()
				logged = ws.Bytes
				l.crash(b)
				l = startLife(b, st, dir)
				open, txns = l.open, l.txns
				ckpt = l.waitCheckpointed(b, time.Minute)
				l.crash(b)
			}
			if txns != int64(n/10) {
				b.Fatalf("replayed %d transactions, want %d", txns, n/10)
			}
			b.Logf("%d unflushed records (%.1f MiB of log): replay %v, then checkpointed in %v", n, float64(logged)/(1<<20),
				open.Round(time.Millisecond), ckpt.Round(time.Millisecond))
			b.ReportMetric(float64(logged)/(1<<20), "log_MiB")
			b.ReportMetric(float64(open.Microseconds())/1000, "replay_ms")
			b.ReportMetric(float64(ckpt.Microseconds())/1000, "ckpt_ms")
		})
	}
}

// BenchmarkRecoveryRestarts is issue 13's restart loop: 100 lives of an
// engine over one store and WAL directory, each replaying what the last
// one left, committing 500 one-write transactions (100-byte values,
// distinct keys) and living 200 ms before it is closed without a drain (a
// kill, or a pod that never lives a checkpoint interval). It reports the
// restart time and the transactions replayed at restarts 1, 10, 50 and
// 100; bounded recovery keeps both flat. Afterwards a drain must leave
// every write in the store; it reports how many records that drain wrote
// back (the replayed ones it rewrites).
func BenchmarkRecoveryRestarts(b *testing.B) {
	const lives, perLife = 100, 500
	for b.Loop() {
		st := openBenchStore(b)
		dir := filepath.Join(b.TempDir(), "wal")
		for i := range lives {
			l := startLife(b, st, dir)
			if n := i + 1; n == 1 || n == 10 || n == 50 || n == 100 {
				b.Logf("restart %3d: replayed %6d transactions in %8v; WAL directory %6.1f MiB", n, l.txns, l.open.Round(10*time.Microsecond), float64(walBytes(b, dir))/(1<<20))
				b.ReportMetric(float64(l.txns), fmt.Sprintf("txns@%d", n))
				b.ReportMetric(float64(l.open.Microseconds())/1000, fmt.Sprintf("replay_ms@%d", n))
			}
			l.commit(b, i*perLife, perLife, 1)
			time.Sleep(200 * time.Millisecond)
			l.crash(b)
		}
		l := startLife(b, st, dir)
		ctx := context.Background()
		start := time.Now()
		if err := l.eng.Drain(ctx); err != nil {
			b.Fatal(err)
		}
		drain := time.Since(start)
		b.Logf("final drain: %d records written back in %v", l.buf.Stats().Writebacks, drain.Round(time.Millisecond))
		b.ReportMetric(float64(l.buf.Stats().Writebacks), "drain_writebacks")
		l.buf.Close()
		recs, _, err := st.GetRange(ctx, ks, nil, nil, 0)
		if err != nil || len(recs) != lives*perLife {
			b.Fatalf("store holds %d records (%v), want %d", len(recs), err, lives*perLife)
		}
	}
}
