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

// hungStore answers reads, but every write blocks until its context ends,
// as a backend that stopped answering (issue 13).
type hungStore struct {
	adapters.Store
	hung   atomic.Bool
	inCall atomic.Int32
}

func (s *hungStore) block(ctx context.Context) error {
	s.inCall.Add(1)
	defer s.inCall.Add(-1)
	<-ctx.Done()
	return ctx.Err()
}

func (s *hungStore) Upsert(ctx context.Context, ks adapters.Keyspace, ws []adapters.Write) ([]adapters.Version, error) {
	if s.hung.Load() {
		return nil, s.block(ctx)
	}
	return s.Store.Upsert(ctx, ks, ws)
}

func (s *hungStore) Delete(ctx context.Context, ks adapters.Keyspace, ws []adapters.Write) error {
	if s.hung.Load() {
		return s.block(ctx)
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
	b.StopWorkers()
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
