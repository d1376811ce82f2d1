package txn

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nemocache/nemo/cache"
)

// Write skew: T1 and T2 both read x and y, then each writes a different
// one. Snapshot isolation would commit both; serializability must not.
func TestWriteSkewPrevented(t *testing.T) {
	for _, c := range lockCases() {
		ph, early := c.ph, c.early
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			v := newEnv(t, cache.Options{}, Options{Phantom: ph, EarlyRelease: early})
			for _, i := range []int{1, 2} {
				if err := v.e.Upsert(ctx, ks, k(i), u64(1)); err != nil {
					t.Fatal(err)
				}
			}
			t1, _ := v.e.Begin(false)
			t2, _ := v.e.Begin(false)
			for _, x := range []*Txn{t1, t2} {
				for _, i := range []int{1, 2} {
					if _, _, err := x.Get(ctx, ks, k(i)); err != nil {
						t.Fatal(err)
					}
				}
			}
			err1 := t1.Update(ctx, ks, k(1), u64(0))
			if err1 == nil {
				err1 = t1.Commit(ctx)
			}
			err2 := t2.Update(ctx, ks, k(2), u64(0))
			if err2 == nil {
				err2 = t2.Commit(ctx)
			}
			if err1 == nil && err2 == nil {
				t.Fatal("both transactions of a write skew committed")
			}
			if !errors.Is(err1, ErrConflict) {
				t.Fatalf("t1: %v, want the NO_WAIT conflict (t2 shares its read locks)", err1)
			}
			if err2 != nil {
				t.Fatalf("t2, alone after t1 aborted: %v", err2)
			}
			t1.Abort()
		})
	}
}

// The "doctors on call" write skew run concurrently: each transaction
// leaves the rota only if someone else is still on it. Whatever the
// interleaving, at least one stays.
func TestWriteSkewConcurrent(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, cache.Options{}, Options{Retries: 100})
	const doctors = 4
	for round := 0; round < 100; round++ {
		base := round * 10
		for d := 0; d < doctors; d++ {
			if err := v.e.Upsert(ctx, ks, k(base+d), u64(1)); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for d := 0; d < doctors; d++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				err := v.e.Run(ctx, false, func(x *Txn) error {
					recs, _, err := x.Scan(ctx, ks, k(base), k(base+doctors), 0)
					if err != nil {
						return err
					}
					on := 0
					for _, r := range recs {
						on += int(binary.BigEndian.Uint64(r.Value))
					}
					if on < 2 {
						return nil
					}
					return x.Update(ctx, ks, k(base+d), u64(0))
				})
				if err != nil && !errors.Is(err, ErrConflict) {
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		recs, _, err := v.e.Scan(ctx, ks, k(base), k(base+doctors), 0, ReadSerializable)
		if err != nil {
			t.Fatal(err)
		}
		on := 0
		for _, r := range recs {
			on += int(binary.BigEndian.Uint64(r.Value))
		}
		if on < 1 {
			t.Fatalf("round %d: nobody left on call", round)
		}
	}
}

// Lost update: concurrent read-modify-write increments through Run, the
// read a plain shared Get (so the write is an upgrade, the case where two
// readers deadlock under waiting 2PL and one must abort under NO_WAIT).
// Every acknowledged increment is in the final value, no more, no less.
func TestLostUpdatePrevented(t *testing.T) {
	for _, c := range lockCases() {
		ph, early := c.ph, c.early
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			v := newEnv(t, cache.Options{}, Options{Phantom: ph, Retries: 1000, EarlyRelease: early})
			if err := v.e.Upsert(ctx, ks, k(7), u64(0)); err != nil {
				t.Fatal(err)
			}
			const workers, each = 8, 100
			var acked atomic.Int64
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < each; i++ {
						err := v.e.Run(ctx, false, func(x *Txn) error {
							val, _, err := x.Get(ctx, ks, k(7))
							if err != nil {
								return err
							}
							return x.Update(ctx, ks, k(7), u64(binary.BigEndian.Uint64(val)+1))
						})
						switch {
						case err == nil:
							acked.Add(1)
						case !errors.Is(err, ErrConflict):
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			got, _, err := v.e.Get(ctx, ks, k(7), ReadLatest)
			if err != nil {
				t.Fatal(err)
			}
			if n := binary.BigEndian.Uint64(got); int64(n) != acked.Load() {
				t.Fatalf("counter %d after %d acknowledged increments", n, acked.Load())
			}
			if acked.Load() < workers*each*9/10 {
				t.Fatalf("only %d of %d increments went through", acked.Load(), workers*each)
			}
			st := v.e.Stats()
			t.Logf("%d increments, %d conflicts (%.0f%% of attempts aborted)", acked.Load(), st.Conflicts, 100*float64(st.Aborts)/float64(st.Aborts+st.Commits))
		})
	}
}
