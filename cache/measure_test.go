package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/nemocache/nemo/adapters"
)

// In-process measurements: the cost of a buffer hit and the memory a
// resident record takes beyond its key and value.

const (
	overheadRecords = 1_000_000
	overheadTarget  = 64 // bytes per record beyond key and value
	measureKeyLen   = 16
	measureValLen   = 48
)

// filledStore returns a memStore holding n records with 16-byte keys and
// 48-byte values, and the keys.
func filledStore(n int) (*memStore, [][]byte) {
	m := newMemStore()
	recs := make([]adapters.Record, n)
	keys := make([][]byte, n)
	val := make([]byte, measureValLen)
	for i := range recs {
		keys[i] = fmt.Appendf(nil, "user%012d", i)
		recs[i] = adapters.Record{Key: keys[i], Value: val}
	}
	m.spaces[testKS] = recs
	return m, keys
}

// admitAll loads every record of the store into b through the buffer's own
// admission path: range scans in pages, as a client paging through would.
func admitAll(tb testing.TB, b *Buffer) {
	tb.Helper()
	var start []byte
	for {
		_, next, err := b.Scan(context.Background(), testKS, start, nil, 50_000)
		if err != nil {
			tb.Fatal(err)
		}
		if next == nil {
			return
		}
		start = next
	}
}

// measureOverhead admits n records and returns the heap bytes per record
// beyond its key and value: the record header, the allocator's rounding and
// the tree's share.
func measureOverhead(tb testing.TB, n int) float64 {
	tb.Helper()
	store, _ := filledStore(n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b, err := New(store, Options{MaxBytes: 1 << 40, DisableWorkers: true, Logger: quietLog})
	if err != nil {
		tb.Fatal(err)
	}
	b.OpenKeyspace(testKS)
	admitAll(tb, b)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := b.Stats().Records; got < n+1 {
		tb.Fatalf("%d records resident, want %d", got, n+1)
	}
	runtime.KeepAlive(b)
	runtime.KeepAlive(store)
	payload := float64(n * (measureKeyLen + measureValLen))
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc) - payload) / float64(n)
}

func TestRecordOverhead(t *testing.T) {
	if testing.Short() && raceEnabled {
		t.Skip("a million records under the race detector is slow")
	}
	got := measureOverhead(t, overheadRecords)
	t.Logf("per-record overhead: %.1f bytes beyond key and value (%d records, %d+%d bytes each; budget charges %d)",
		got, overheadRecords, measureKeyLen, measureValLen, int64(64))
	if raceEnabled {
		return // the race detector changes allocation sizes
	}
	if got > overheadTarget {
		t.Fatalf("per-record overhead %.1f bytes, target <= %d", got, overheadTarget)
	}
}

func BenchmarkRecordOverhead(b *testing.B) {
	var got float64
	for range b.N {
		got = measureOverhead(b, overheadRecords)
	}
	b.ReportMetric(got, "bytes/record-overhead")
}

// BenchmarkGetHit measures a buffer hit with every record resident, keys
// drawn in random order: at 10k records the tree fits in the CPU caches, at
// 100k and 1M the records and the tree's leaves do not (see "Tree layout"
// in doc.go). The keys are copied, in the order they are looked up, into
// one buffer read front to back, so that the benchmark's own reads are
// sequential: it measures the buffer, not the fetch of a random key from a
// million (a server has the key at hand, fresh from the request).
func BenchmarkGetHit(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			buf, keys := hitBuffer(b, n)
			probes := make([][]byte, n)
			arena := make([]byte, 0, n*measureKeyLen)
			for j, o := range rand.New(rand.NewPCG(1, 2)).Perm(n) {
				arena = append(arena, keys[o]...)
				probes[j] = arena[len(arena)-len(keys[o]) : len(arena) : len(arena)]
			}
			ctx := context.Background()
			i := 0
			for b.Loop() {
				if _, ok, err := buf.Get(ctx, testKS, probes[i]); !ok || err != nil {
					b.Fatalf("miss: %v", err)
				}
				if i++; i == n {
					i = 0
				}
			}
			b.StopTimer()
			if st := buf.Stats(); st.Misses != 0 {
				b.Fatalf("%d misses", st.Misses)
			}
		})
	}
}

// BenchmarkGetHitParallel is the 100k-record hit from every core at once:
// hits share the tree latch and set ref bits only when clear.
func BenchmarkGetHitParallel(b *testing.B) {
	const n = 100_000
	buf, keys := hitBuffer(b, n)
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 3))
		for pb.Next() {
			if _, ok, err := buf.Get(ctx, testKS, keys[rng.IntN(n)]); !ok || err != nil {
				b.Errorf("miss: %v", err)
				return
			}
		}
	})
}

// hitBuffer returns a buffer holding n records and their keys.
func hitBuffer(b *testing.B, n int) (*Buffer, [][]byte) {
	b.Helper()
	store, keys := filledStore(n)
	buf, err := New(store, Options{MaxBytes: 1 << 40, DisableWorkers: true, Logger: quietLog})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = buf.Close() })
	buf.OpenKeyspace(testKS)
	admitAll(b, buf)
	return buf, keys
}
