package txn

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/cache"
)

// TestNoPhantoms: a transaction that scans a range twice sees the same
// records both times while writers insert, update and delete keys inside
// the range, at its bounds and just outside it, and a lock-free reader
// keeps admitting records into the gaps.
func TestNoPhantoms(t *testing.T) {
	for _, ph := range []Phantom{NextKey, PCL} {
		t.Run(string(ph), func(t *testing.T) { phantoms(t, ph, false) })
		t.Run(string(ph)+"/early", func(t *testing.T) { phantoms(t, ph, true) })
	}
}

// phantoms runs the test; early runs the engine with a WAL and early lock
// release.
func phantoms(t *testing.T, ph Phantom, early bool) {
	ctx := context.Background()
	// A sparse key space: most keys a writer picks were never buffered,
	// so only next-key (or partition) locks can stop its insert, not a row
	// lock on a record the reader happened to see.
	const lo, hi = 2000, 4000 // the scanned range [lo, hi)
	v := newEnv(t,
		cache.Options{MaxBytes: 40 * (64 + 16), MaxKeyBytes: 64, AdmitWait: time.Millisecond},
		Options{Phantom: ph, PCLPartitionSize: 256, Retries: 20, EarlyRelease: early})
	for i := 0; i < 6000; i += 150 {
		if err := v.e.Upsert(ctx, ks, k(i), []byte("init")); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var writes, readers, changes atomic.Int64
	var wg sync.WaitGroup
	stopWriters := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopWriters() // also when the reader fails
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g)+seedShift(t), 11))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key := lo - 100 + rng.IntN(hi-lo+200) // in, at the bounds and around
				if rng.IntN(8) == 0 {
					key = []int{lo - 1, lo, hi - 1, hi}[rng.IntN(4)]
				}
				op := rng.IntN(3)
				err := v.e.Run(ctx, false, func(x *Txn) error {
					if op == 0 {
						// Delete the first record at or after key.
						recs, _, err := x.Scan(ctx, ks, k(key), k(key+300), 1)
						if err != nil || len(recs) == 0 {
							return err
						}
						_, err = x.Delete(ctx, ks, recs[0].Key)
						return err
					}
					if err := x.Upsert(ctx, ks, k(key), []byte(fmt.Sprintf("w%d.%d", g, n))); err != nil {
						return err
					}
					if op == 1 { // a second write in the same transaction
						return x.Upsert(ctx, ks, k(key+1+rng.IntN(50)), []byte(fmt.Sprintf("w%d.%d", g, n)))
					}
					return nil
				})
				switch {
				case err == nil:
					writes.Add(1)
				case !errors.Is(err, ErrConflict):
					t.Error(err)
					return
				}
				time.Sleep(20 * time.Microsecond)
				if g == 0 { // lock-free misses admit records into locked gaps
					if _, _, err := v.e.Get(ctx, ks, k(lo+rng.IntN(hi-lo)), ReadLatest); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	var last string
	deadline := time.Now().Add(5 * time.Second)
	for readers.Load() < 100 && time.Now().Before(deadline) && !t.Failed() {
		x, err := v.e.Begin(true)
		if err != nil {
			t.Fatal(err)
		}
		first, _, err := x.Scan(ctx, ks, k(lo), k(hi), 0)
		if errors.Is(err, ErrConflict) {
			continue // a writer held a lock in the range: NO_WAIT, try again
		}
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Microsecond) // let the writers try
		second, _, err := x.Scan(ctx, ks, k(lo), k(hi), 0)
		if err != nil {
			t.Fatalf("second scan of a range the transaction holds: %v", err)
		}
		if a, b := fmtRecs(first, nil), fmtRecs(second, nil); a != b {
			t.Fatalf("phantom: first scan\n%s\nsecond scan\n%s", a, b)
		}
		if err := x.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if s := fmtRecs(first, nil); s != last {
			changes.Add(1)
			last = s
		}
		readers.Add(1)
		time.Sleep(time.Millisecond) // and let them commit between readers
	}
	stopWriters()
	t.Logf("%s: %d double scans, %d distinct results in a row, %d writes committed", ph, readers.Load(), changes.Load(), writes.Load())
	if readers.Load() < 20 || changes.Load() < 5 || writes.Load() == 0 {
		t.Fatalf("too little happened: %d double scans, %d changes of the range, %d writes", readers.Load(), changes.Load(), writes.Load())
	}
}
