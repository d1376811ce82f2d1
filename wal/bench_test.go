package wal

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchRecord is one committed write: a 16-byte key and a 100-byte value.
func benchRecord(i uint64) []Data {
	return []Data{putRec("bench", fmt.Sprintf("key-%012d", i), string(make([]byte, 100)))}
}

type commitRun struct {
	rate          float64 // commits per second
	bytesPerWrite float64
	perFsync      float64 // commits per write+fsync round
	elapsed       time.Duration
}

// runCommits commits n single-write transactions from committers goroutines
// against a fresh log and measures the wall time.
func runCommits(b *testing.B, group bool, committers, n int) commitRun {
	opts := Options{Dir: b.TempDir()}
	opts.NoGroupCommit = !group
	l, err := Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var next atomic.Uint64
	var wg sync.WaitGroup
	start := time.Now()
	for range committers {
		wg.Go(func() {
			for i := next.Add(1); i <= uint64(n); i = next.Add(1) {
				if _, err := l.Append(context.Background(), i, benchRecord(i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	st := l.Stats()
	return commitRun{
		rate:          float64(n) / elapsed.Seconds(),
		bytesPerWrite: float64(st.Bytes) / float64(st.Commits),
		perFsync:      float64(st.Commits) / float64(st.Batches),
		elapsed:       elapsed,
	}
}

// BenchmarkCommit runs b.N commits with group commit and b.N with an fsync
// per commit, so both rates and their ratio come from the same run. ns/op
// is the group-commit time per commit.
func BenchmarkCommit(b *testing.B) {
	for _, c := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("committers=%d", c), func(b *testing.B) {
			g := runCommits(b, true, c, b.N)
			f := runCommits(b, false, c, b.N)
			b.ReportMetric(float64(g.elapsed.Nanoseconds())/float64(b.N), "ns/op")
			b.ReportMetric(g.rate, "group-commits/s")
			b.ReportMetric(f.rate, "fsync-commits/s")
			b.ReportMetric(g.rate/f.rate, "group/fsync")
			b.ReportMetric(g.perFsync, "commits/fsync")
			b.ReportMetric(g.bytesPerWrite, "walbytes/write")
		})
	}
}

// BenchmarkReplay measures recovery over a ~60 MB log of single-write
// transactions: Replay alone, and Open (which validates every frame) plus
// Replay. MB/s converts to recovery seconds per GB.
func BenchmarkReplay(b *testing.B) {
	dir := b.TempDir()
	opts := Options{Dir: dir}
	opts.NoSync = true
	l, err := Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	const txns = 250_000
	var wg sync.WaitGroup
	var next atomic.Uint64
	for range 8 {
		wg.Go(func() {
			for i := next.Add(1); i <= txns; i = next.Add(1) {
				recs := []Data{putRec("bench", fmt.Sprintf("key-%012d", i), string(make([]byte, 200)))}
				if _, err := l.Append(context.Background(), i, recs); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	logBytes := int64(l.Stats().Bytes)
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	opts.NoSync = false
	replay := func(l *Log) {
		n := 0
		if err := l.Replay(1, func(uint64, []Data) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
		if n != txns {
			b.Fatalf("replayed %d transactions, want %d", n, txns)
		}
	}
	b.Run("replay", func(b *testing.B) {
		l, err := Open(opts)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		b.SetBytes(logBytes)
		for b.Loop() {
			replay(l)
		}
	})
	b.Run("open+replay", func(b *testing.B) {
		b.SetBytes(logBytes)
		for b.Loop() {
			l, err := Open(opts)
			if err != nil {
				b.Fatal(err)
			}
			replay(l)
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
