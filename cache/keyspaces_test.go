package cache

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/storetest"
)

// adminStore records keyspace creates and drops and every data call, in
// order; block, when set, holds the next admin call until it is closed.
type adminStore struct {
	*memStore
	mu    sync.Mutex
	log   []string
	fail  error
	block chan struct{}
	in    chan struct{}
}

func (a *adminStore) note(s string) {
	a.mu.Lock()
	a.log = append(a.log, s)
	a.mu.Unlock()
}

func (a *adminStore) admin(op string, ks adapters.Keyspace) error {
	a.mu.Lock()
	block, fail := a.block, a.fail
	a.block = nil
	a.mu.Unlock()
	if block != nil {
		a.in <- struct{}{}
		<-block
	}
	if fail != nil {
		return fail
	}
	a.note(op + " " + string(ks))
	return nil
}

func (a *adminStore) CreateKeyspace(_ context.Context, ks adapters.Keyspace) error {
	return a.admin("create", ks)
}

func (a *adminStore) DropKeyspace(_ context.Context, ks adapters.Keyspace) error {
	a.mu.Lock()
	delete(a.spaces, ks)
	a.mu.Unlock()
	return a.admin("drop", ks)
}

func (a *adminStore) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	a.note("get " + string(ks))
	return a.memStore.Get(ctx, ks, keys)
}

func (a *adminStore) Upsert(ctx context.Context, ks adapters.Keyspace, ws []adapters.Write) ([]adapters.Version, error) {
	a.note("upsert " + string(ks))
	return a.memStore.Upsert(ctx, ks, ws)
}

func (a *adminStore) calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.log)
}

func newAdminBuffer(t *testing.T) (*Buffer, *adminStore) {
	t.Helper()
	st := &adminStore{memStore: newMemStore(), in: make(chan struct{}, 1)}
	b, err := New(st, Options{DisableWorkers: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, st
}

// TestKeyspaceGateOrdersAdminBeforeData: queued creates and drops reach the
// store before any later store call, in queue order; a failed one stays
// queued and fails the call that would have overtaken it.
func TestKeyspaceGateOrdersAdminBeforeData(t *testing.T) {
	ctx := context.Background()
	b, st := newAdminBuffer(t)
	b.CreateKeyspace("a")
	if err := b.Apply(ctx, "a", []Write{{Key: []byte("k"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	b.DropKeyspace("a")
	b.CreateKeyspace("a")
	b.DropKeyspace("b")
	if err := b.Apply(ctx, "a", []Write{{Key: []byte("k2"), Value: []byte("v2")}}); err != nil {
		t.Fatal(err)
	}
	if n := b.Stats().PendingKeyspaceOps; n != 2 {
		t.Fatalf("pending: %d, want 2 (a: drop+create, b: drop)", n)
	}
	st.fail = errors.New("store down")
	if err := flushAll(ctx, b); !errors.Is(err, ErrStore) {
		t.Fatalf("flush with the admin call failing: %v", err)
	}
	if _, _, err := b.Get(ctx, "a", []byte("zz")); !errors.Is(err, ErrStore) {
		t.Fatalf("a fetch overtook a failed drop: %v", err)
	}
	st.fail = nil
	if err := flushAll(ctx, b); err != nil {
		t.Fatal(err)
	}
	want := []string{"drop a", "create a", "drop b", "upsert a"}
	if got := st.calls(); !slices.Equal(got, want) {
		t.Fatalf("store calls %v, want %v", got, want)
	}
	if vals, _ := storetest.Values(st.memStore.Get(ctx, "a", [][]byte{[]byte("k"), []byte("k2")})); vals[0] != nil || string(vals[1]) != "v2" {
		t.Fatalf("store after flush: %q (the dropped write must not be there)", vals)
	}
	if err := b.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestKeyspaceGateRequeueWhileRunning: a drop queued while the previous
// ops of the same keyspace are running is not lost.
func TestKeyspaceGateRequeueWhileRunning(t *testing.T) {
	ctx := context.Background()
	b, st := newAdminBuffer(t)
	b.DropKeyspace("a")
	release := make(chan struct{})
	st.block = release
	done := make(chan error, 1)
	go func() { done <- b.SettleKeyspaces(ctx) }()
	<-st.in // the first drop is running
	b.CreateKeyspace("a")
	b.DropKeyspace("a")
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := b.Stats().PendingKeyspaceOps; n != 0 {
		t.Fatalf("pending after settle: %d", n)
	}
	if got, want := st.calls(), []string{"drop a", "drop a"}; !slices.Equal(got, want) {
		t.Fatalf("store calls %v, want %v", got, want)
	}
}

// TestKeyspaceGateNoAdmin: a store without explicit keyspaces (Datastore)
// queues nothing.
func TestKeyspaceGateNoAdmin(t *testing.T) {
	b, err := New(newMemStore(), Options{DisableWorkers: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.CreateKeyspace("a")
	b.DropKeyspace("a")
	if n := b.Stats().PendingKeyspaceOps; n != 0 {
		t.Fatalf("pending on a store without keyspace admin: %d", n)
	}
	if err := b.SettleKeyspaces(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestKnownKeyspaces: the keyspaces with a prefix are those the store lists
// (an embedded store's buckets) and those the buffer has open, unflushed
// writes included, once each and in order; a store that cannot list
// contributes nothing.
func TestKnownKeyspaces(t *testing.T) {
	ctx := context.Background()
	st := openEmbedded(t)
	if _, err := st.Upsert(ctx, "p/a", []adapters.Write{{Key: []byte("k"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Upsert(ctx, "q/x", []adapters.Write{{Key: []byte("k"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	b, err := New(adapters.Count(st), Options{DisableWorkers: true, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, ks := range []adapters.Keyspace{"p/c", "p/a"} {
		b.OpenKeyspace(ks) // as the engine opens a keyspace on first use
		if err := b.Apply(ctx, ks, []Write{{Key: []byte("k"), Value: []byte("v2")}}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.KnownKeyspaces(ctx, "p/")
	if err != nil || !slices.Equal(got, []adapters.Keyspace{"p/a", "p/c"}) {
		t.Fatalf("known keyspaces %q, %v; want p/a and p/c", got, err)
	}
	mem, err := New(newMemStore(), Options{DisableWorkers: true, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	mem.OpenKeyspace("p/m")
	if err := mem.Apply(ctx, "p/m", []Write{{Key: []byte("k"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if got, err := mem.KnownKeyspaces(ctx, "p/"); err != nil || !slices.Equal(got, []adapters.Keyspace{"p/m"}) {
		t.Fatalf("over a store that cannot list: %q, %v", got, err)
	}
}
