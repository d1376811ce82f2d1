package txn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/testenv"
)

// hungStore answers reads, but while hung every write blocks until its
// context ends, as a backend that stopped answering (issue 13), or until
// release is closed (if set), when it goes through.
type hungStore struct {
	adapters.Store
	hung    atomic.Bool
	inCall  atomic.Int32
	release chan struct{}
}

func (s *hungStore) block(ctx context.Context) error {
	s.inCall.Add(1)
	defer s.inCall.Add(-1)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.release: // nil: never
		return nil
	}
}

func (s *hungStore) Upsert(ctx context.Context, ks adapters.Keyspace, ws []adapters.Write) ([]adapters.Version, error) {
	if s.hung.Load() {
		if err := s.block(ctx); err != nil {
			return nil, err
		}
	}
	return s.Store.Upsert(ctx, ks, ws)
}

func (s *hungStore) Delete(ctx context.Context, ks adapters.Keyspace, ws []adapters.Write) error {
	if s.hung.Load() {
		if err := s.block(ctx); err != nil {
			return err
		}
	}
	return s.Store.Delete(ctx, ks, ws)
}

// hungEnv is an engine (no log) over a buffer over a hungStore, with the
// background write-back running every 5ms on records 1ms old.
func hungEnv(t *testing.T, st *hungStore, storeTimeout time.Duration) (*Engine, *cache.Buffer) {
	t.Helper()
	raw, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	st.Store = raw
	b, err := cache.New(st, cache.Options{Logger: quiet, StoreTimeout: storeTimeout, FlushInterval: 5 * time.Millisecond, MaxDirtyAge: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b.OpenKeyspace(ks)
	e, err := New(b, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.hung.Store(false)
		e.Close()
		b.Close()
		raw.Close()
	})
	return e, b
}

// A hung store holds nothing past a deadline: a background write-back
// stuck in it gives up after StoreTimeout; a Flush queued behind it on the
// keyspace's write-back lock gives up with its own context; stopping the
// write-back loop cancels the stuck call at once; and a Flush after that,
// with the store back, writes everything.
func TestHungStoreHoldsNothingPastADeadline(t *testing.T) {
	ctx := context.Background()
	st := &hungStore{}
	e, b := hungEnv(t, st, time.Hour)
	st.hung.Store(true)
	for _, k := range []string{"a", "b"} {
		if err := e.Upsert(ctx, ks, []byte(k), []byte("1")); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "the write-back loop stuck in the store", func() bool { return st.inCall.Load() > 0 })
	fctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	began := time.Now()
	err := e.Flush(fctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(began) > time.Second {
		t.Fatalf("Flush behind a hung write-back: %v after %v, want its deadline at 100ms", err, time.Since(began))
	}
	began = time.Now()
	e.wb.stopWorkers(ctx)
	if d := time.Since(began); d > time.Second || st.inCall.Load() != 0 {
		t.Fatalf("stopWorkers took %v with %d calls still in the store", d, st.inCall.Load())
	}
	st.hung.Store(false)
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if u := b.Unflushed(); u.Records != 0 || u.Bytes != 0 {
		t.Fatalf("unflushed after the flush: %+v", u)
	}
	if err := b.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// Stopping the write-back loop with a deadline lets a write-back in
// flight finish (it settles its records itself; cut off, its outcome
// would be unknown), and cancels one that is still in the store when half
// the time is spent.
func TestStopWorkersLetsAWriteBackFinish(t *testing.T) {
	for _, hung := range []bool{false, true} {
		st := &hungStore{release: make(chan struct{})}
		e, b := hungEnv(t, st, time.Hour)
		st.hung.Store(true)
		ctx := context.Background()
		if err := e.Upsert(ctx, ks, []byte("a"), []byte("1")); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 10*time.Second, "the loop's write-back in the store", func() bool { return st.inCall.Load() > 0 })
		sctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
		stopped := make(chan time.Duration)
		began := time.Now()
		go func() { e.wb.stopWorkers(sctx); stopped <- time.Since(began) }()
		if !hung {
			close(st.release) // the store answers while the workers stop
		}
		took := <-stopped
		cancel()
		u := b.Unflushed()
		switch {
		case !hung && (u.Records != 0 || b.Stats().WritebackErr != 0):
			t.Fatalf("the write-back in flight was not let finish: %+v, %d failed calls", u, b.Stats().WritebackErr)
		case hung && (u.Records != 1 || took < 150*time.Millisecond || took > time.Second):
			t.Fatalf("hung: stopWorkers returned after %v with %+v; want it at half its 400ms, the record still dirty", took, u)
		}
	}
}

// StoreTimeout bounds one write-back attempt of the background loop: the
// records stay dirty, Unflushed says so, and the next attempt after the
// store is back writes them.
func TestWriteBackAttemptTimesOut(t *testing.T) {
	ctx := context.Background()
	st := &hungStore{}
	e, b := hungEnv(t, st, 50*time.Millisecond)
	st.hung.Store(true)
	if err := e.Upsert(ctx, ks, []byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "a failed write-back", func() bool { return b.Stats().WritebackErr > 0 })
	if u := b.Unflushed(); u.Records != 1 || u.Keyspaces[ks] != 1 {
		t.Fatalf("Unflushed = %+v, want the one record", u)
	}
	st.hung.Store(false)
	testenv.WaitFor(t, 10*time.Second, "nothing unflushed", func() bool { return b.Unflushed().Records == 0 })
}

// gateLeaser is a Leaser that answers with what err says now; after
// lapseAfter Holds (when set) it answers errLapsed.
type gateLeaser struct {
	mu         sync.Mutex
	err        error
	holds      int
	lapseAfter int
}

var errLapsed = errors.New("the lease lapsed")

func (g *gateLeaser) Hold(context.Context, adapters.Keyspace) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holds++
	if g.lapseAfter > 0 && g.holds > g.lapseAfter {
		return errLapsed
	}
	return g.err
}

func (g *gateLeaser) set(err error) {
	g.mu.Lock()
	g.err = err
	g.mu.Unlock()
}

// TestWriteGateHoldsBackWriteBack: while the lease refuses a keyspace
// (this node does not hold it), write-back writes nothing of it, Flush
// says why, and the records stay dirty and queued; once the lease is
// back, the next Flush writes them.
func TestWriteGateHoldsBackWriteBack(t *testing.T) {
	g := &gateLeaser{}
	v := newEnv(t, cache.Options{DisableWorkers: true}, Options{Leases: g})
	ctx := context.Background()
	if err := v.e.Upsert(ctx, ks, []byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	g.set(fmt.Errorf("held by node b"))
	if err := v.e.Flush(ctx); err == nil || !strings.Contains(err.Error(), "held by node b") {
		t.Fatalf("Flush with the gate shut: %v", err)
	}
	if recs, err := v.st.Get(ctx, ks, [][]byte{[]byte("a")}); err != nil || len(recs) != 1 || recs[0].Value != nil {
		t.Fatalf("the store after a Flush with the gate shut: %v %v", recs, err)
	}
	if v.buf.Stats().DirtyBytes == 0 {
		t.Fatal("the held-back record is no longer dirty")
	}
	g.set(nil)
	if err := v.e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if v.buf.Stats().DirtyBytes != 0 {
		t.Fatal("dirty after the gate opened and Flush ran")
	}
}

// TestWriteGateCheckedBeforeTheStoreCall: the lease is asked again just
// before a write-back's store calls, so one that lapsed while the
// write-back waited (for the write-back lock, for the log) sends nothing:
// the record stays dirty, and Flush says why.
func TestWriteGateCheckedBeforeTheStoreCall(t *testing.T) {
	g := &gateLeaser{}
	v := newEnv(t, cache.Options{DisableWorkers: true}, Options{Leases: g})
	ctx := context.Background()
	if err := v.e.Upsert(ctx, ks, []byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	g.lapseAfter = g.holds + 1 // the write-back's first Hold passes, the second refuses
	g.mu.Unlock()
	if err := v.e.Flush(ctx); !errors.Is(err, errLapsed) {
		t.Fatalf("Flush with the lease lapsing before the store call: %v, want %v", err, errLapsed)
	}
	if recs, err := v.st.Get(ctx, ks, [][]byte{[]byte("a")}); err != nil || len(recs) != 1 || recs[0].Value != nil {
		t.Fatalf("the store after the lease lapsed before the call: %v %v", recs, err)
	}
	if v.buf.Stats().DirtyBytes == 0 {
		t.Fatal("the held-back record is no longer dirty")
	}
}
