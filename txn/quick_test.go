package txn

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand"
	"sync"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/cache"
)

func newEngine(t *testing.T, copts cache.Options, topts Options) (*Engine, *embedded.Store) {
	t.Helper()
	st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cache.New(st, copts)
	if err != nil {
		t.Fatal(err)
	}
	b.OpenKeyspace("t")
	e, err := New(b, topts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Close()
		b.Close()
		st.Close()
	})
	return e, st
}

func k(i int) []byte { var b [8]byte; binary.BigEndian.PutUint64(b[:], uint64(i)); return b[:] }

func TestQuickFigure4(t *testing.T) {
	ctx := context.Background()
	e, _ := newEngine(t, cache.Options{}, Options{})
	for _, i := range []int{40, 50, 56} {
		if err := e.Upsert(ctx, "t", k(i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	t1, _ := e.Begin(true)
	recs, _, err := t1.Scan(ctx, "t", k(40), k(57), 0)
	if err != nil || len(recs) != 3 {
		t.Fatalf("scan: %v %d", err, len(recs))
	}
	t2, _ := e.Begin(false)
	if err := t2.Insert(ctx, "t", k(42), []byte("x")); !errors.Is(err, ErrConflict) {
		t.Fatalf("insert 42: %v", err)
	}
	t3, _ := e.Begin(true)
	if _, ok, err := t3.Get(ctx, "t", k(50)); err != nil || !ok {
		t.Fatalf("lookup 50: %v %v", ok, err)
	}
	t4, _ := e.Begin(false)
	if err := t4.Insert(ctx, "t", k(60), []byte("x")); err != nil {
		t.Fatalf("insert 60 outside: %v", err)
	}
	if err := t4.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	t1.Commit(ctx)
	t3.Commit(ctx)
	if err := e.Buffer().Check(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestQuickBank(t *testing.T) {
	for _, ph := range []Phantom{NextKey, PCL} {
		t.Run(string(ph), func(t *testing.T) {
			ctx := context.Background()
			e, _ := newEngine(t, cache.Options{MaxBytes: 8 << 10, MaxKeyBytes: 64}, Options{Phantom: ph, PCLPartitionSize: 4})
			const n = 20
			for i := 0; i < n; i++ {
				var v [8]byte
				binary.BigEndian.PutUint64(v[:], 100)
				if err := e.Insert(ctx, "t", k(i), v[:]); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			commits := 0
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					rng := rand.New(rand.NewSource(int64(g)))
					for i := 0; i < 300; i++ {
						if g == 0 {
							err := e.Run(ctx, true, func(tx *Txn) error {
								recs, _, err := tx.Scan(ctx, "t", nil, nil, 0)
								if err != nil {
									return err
								}
								sum := uint64(0)
								for _, r := range recs {
									sum += binary.BigEndian.Uint64(r.Value)
								}
								if sum != 100*n || len(recs) != n {
									t.Errorf("audit: sum %d over %d", sum, len(recs))
								}
								return nil
							})
							if err != nil && !errors.Is(err, ErrConflict) {
								t.Error(err)
							}
							continue
						}
						a, b := rng.Intn(n), rng.Intn(n)
						if a == b {
							continue
						}
						err := e.Run(ctx, false, func(tx *Txn) error {
							va, _, err := tx.GetForUpdate(ctx, "t", k(a))
							if err != nil {
								return err
							}
							vb, _, err := tx.GetForUpdate(ctx, "t", k(b))
							if err != nil {
								return err
							}
							x, y := binary.BigEndian.Uint64(va), binary.BigEndian.Uint64(vb)
							if x == 0 {
								return nil
							}
							binary.BigEndian.PutUint64(va, x-1)
							binary.BigEndian.PutUint64(vb, y+1)
							if err := tx.Update(ctx, "t", k(a), va); err != nil {
								return err
							}
							return tx.Update(ctx, "t", k(b), vb)
						})
						if err == nil {
							mu.Lock()
							commits++
							mu.Unlock()
						} else if !errors.Is(err, ErrConflict) {
							t.Error(err)
						}
					}
				}(g)
			}
			wg.Wait()
			t.Logf("commits %d stats %+v", commits, e.Stats())
			if err := e.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := e.Buffer().Check(ctx); err != nil {
				t.Fatal(err)
			}
			_ = adapters.Keyspace("t")
		})
	}
}
