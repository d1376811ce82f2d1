package cache

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/testenv"
)

// heldKeyStore blocks the Upsert of one key until release is closed, so a
// test can hold a write-through inside its store call.
type heldKeyStore struct {
	adapters.Store
	key     []byte
	entered chan struct{} // closed when the gated Upsert is in the store
	release chan struct{}
	once    sync.Once
}

func (g *heldKeyStore) Upsert(ctx context.Context, ks adapters.Keyspace, ws []adapters.Write) ([]adapters.Version, error) {
	for _, w := range ws {
		if bytes.Equal(w.Key, g.key) {
			g.once.Do(func() { close(g.entered) })
			select {
			case <-g.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	return g.Store.Upsert(ctx, ks, ws)
}

// Write-throughs of different keys of one keyspace reach the store
// together: while one is held inside its store call, another completes;
// a write-back of the keyspace (a Flush of a dirty record) waits for the
// held one rather than overlapping it, and runs once it is done.
func TestWriteThroughsOfOneKeyspaceOverlap(t *testing.T) {
	ctx := context.Background()
	st := &heldKeyStore{Store: openEmbedded(t), key: []byte("a"), entered: make(chan struct{}), release: make(chan struct{})}
	b, err := New(st, Options{Logger: quietLog, FlushInterval: time.Hour, MaxDirtyAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var released sync.Once
	release := func() { released.Do(func() { close(st.release) }) }
	defer release() // a failing test does not leave the held call stuck
	b.OpenKeyspace(testKS)
	if err := b.Apply(ctx, testKS, []Write{{Key: []byte("c"), Value: []byte("dirty")}}); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() { held <- b.WriteThrough(ctx, testKS, []Write{{Key: []byte("a"), Value: []byte("1")}}, false) }()
	<-st.entered

	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = b.WriteThrough(wctx, testKS, []Write{{Key: []byte("b"), Value: []byte("2")}}, false)
	cancel()
	if err != nil {
		t.Fatalf("write-through of b while a's is in the store: %v (serialised behind it)", err)
	}

	fctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = flushAll(fctx, b)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush while a write-through is in the store: %v, want it to wait (deadline exceeded)", err)
	}
	if u := b.Unflushed(); u.Records != 1 {
		t.Fatalf("unflushed while the write-through is held: %+v, want c alone", u)
	}

	release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := flushAll(ctx, b); err != nil {
		t.Fatal(err)
	}
	recs, err := st.Store.Get(ctx, testKS, [][]byte{[]byte("a"), []byte("b"), []byte("c")})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"1", "2", "dirty"} {
		if string(recs[i].Value) != want {
			t.Fatalf("store holds %q for %q, want %q", recs[i].Value, recs[i].Key, want)
		}
	}
	if err := b.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// ctxRWMutex against its contract, in random interleavings: a writer holds
// it alone, readers together; a writer waiting holds new readers back; a
// waiter whose context ends gives up without taking it, and a writer that
// gave up lets the readers it held back go.
func TestCtxRWMutex(t *testing.T) {
	m := newCtxRWMutex()
	var readers, writers, maxReaders atomic.Int32
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 300 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(200))*time.Microsecond)
				if rng.IntN(4) == 0 {
					if err := m.Lock(ctx); err == nil {
						if w, r := writers.Add(1), readers.Load(); w != 1 || r != 0 {
							t.Errorf("writer holds it with %d writers and %d readers", w, r)
						}
						time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
						writers.Add(-1)
						m.Unlock()
					} else if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("Lock: %v", err)
					}
				} else if err := m.RLock(ctx); err == nil {
					r := readers.Add(1)
					if w := writers.Load(); w != 0 {
						t.Errorf("reader holds it with a writer")
					}
					for old := maxReaders.Load(); r > old && !maxReaders.CompareAndSwap(old, r); old = maxReaders.Load() {
					}
					time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
					readers.Add(-1)
					m.RUnlock()
				} else if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("RLock: %v", err)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	if maxReaders.Load() < 2 {
		t.Errorf("readers never held it together (at most %d)", maxReaders.Load())
	}

	// A waiting writer holds new readers back; when its context ends,
	// they go.
	ctx := context.Background()
	if err := m.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	wErr := make(chan error, 1)
	go func() { wErr <- m.Lock(wctx) }()
	testenv.WaitFor(t, 10*time.Second, "a waiter", func() bool { m.mu.Lock(); defer m.mu.Unlock(); return m.waiting == 1 })
	rctx, rcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if err := m.RLock(rctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RLock behind a waiting writer: %v, want it held back", err)
	}
	rcancel()
	rErr := make(chan error, 1)
	go func() { rErr <- m.RLock(ctx) }()
	cancel()
	if err := <-wErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with its context cancelled: %v", err)
	}
	if err := <-rErr; err != nil {
		t.Fatalf("RLock after the waiting writer gave up: %v", err)
	}
	m.RUnlock()
	m.RUnlock()
	m.lock()
	m.Unlock()
}
