package cache

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
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

// A hung store holds nothing past a deadline: a background write-back
// stuck in it gives up after StoreTimeout; a Flush queued behind it on the
// keyspace's write-back lock gives up with its own context; StopWorkers
// cancels the stuck call at once; and a Flush after that, with the store
// back, writes everything.
func TestHungStoreHoldsNothingPastADeadline(t *testing.T) {
	ctx := context.Background()
	st := &hungStore{Store: openEmbedded(t)}
	b, err := New(st, Options{Logger: quietLog, StoreTimeout: time.Hour, FlushInterval: 5 * time.Millisecond, MaxDirtyAge: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.OpenKeyspace(testKS)
	st.hung.Store(true)
	if err := b.Apply(ctx, testKS, []Write{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the flusher stuck in the store", func() bool { return st.inCall.Load() > 0 })
	fctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	began := time.Now()
	err = b.Flush(fctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(began) > time.Second {
		t.Fatalf("Flush behind a hung write-back: %v after %v, want its deadline at 100ms", err, time.Since(began))
	}
	began = time.Now()
	b.StopWorkers(ctx)
	if d := time.Since(began); d > time.Second || st.inCall.Load() != 0 {
		t.Fatalf("StopWorkers took %v with %d calls still in the store", d, st.inCall.Load())
	}
	st.hung.Store(false)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if u := b.Unflushed(); u.Records != 0 || u.Bytes != 0 {
		t.Fatalf("unflushed after the flush: %+v", u)
	}
	if err := b.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// StopWorkers with a deadline lets a write-back in flight finish (it
// settles its records itself; cut off, its outcome would be unknown), and
// cancels one that is still in the store when half the time is spent.
func TestStopWorkersLetsAWriteBackFinish(t *testing.T) {
	for _, hung := range []bool{false, true} {
		st := &hungStore{Store: openEmbedded(t), release: make(chan struct{})}
		b, err := New(st, Options{Logger: quietLog, StoreTimeout: time.Hour, FlushInterval: 5 * time.Millisecond, MaxDirtyAge: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		b.OpenKeyspace(testKS)
		st.hung.Store(true)
		ctx := context.Background()
		if err := b.Apply(ctx, testKS, []Write{{Key: []byte("a"), Value: []byte("1")}}); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 10*time.Second, "the flusher's write-back in the store", func() bool { return st.inCall.Load() > 0 })
		sctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
		stopped := make(chan time.Duration)
		began := time.Now()
		go func() { b.StopWorkers(sctx); stopped <- time.Since(began) }()
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
			t.Fatalf("hung: StopWorkers returned after %v with %+v; want it at half its 400ms, the record still dirty", took, u)
		}
	}
}

// StoreTimeout bounds one write-back attempt of the background flusher:
// the records stay dirty, Unflushed says so, and the next attempt after
// the store is back writes them.
func TestWriteBackAttemptTimesOut(t *testing.T) {
	ctx := context.Background()
	st := &hungStore{Store: openEmbedded(t)}
	b, err := New(st, Options{Logger: quietLog, StoreTimeout: 50 * time.Millisecond, FlushInterval: 5 * time.Millisecond, MaxDirtyAge: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.OpenKeyspace(testKS)
	st.hung.Store(true)
	if err := b.Apply(ctx, testKS, []Write{{Key: []byte("a"), Value: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "a failed write-back", func() bool { return b.Stats().WritebackErr > 0 })
	if u := b.Unflushed(); u.Records != 1 || u.Keyspaces[testKS] != 1 {
		t.Fatalf("Unflushed = %+v, want the one record", u)
	}
	st.hung.Store(false)
	testenv.WaitFor(t, 10*time.Second, "nothing unflushed", func() bool { return b.Unflushed().Records == 0 })
}
