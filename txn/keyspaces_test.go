package txn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/storetest"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/testenv"
)

const testCatalog adapters.Keyspace = "catalog"

func createKS(t *testing.T, e *Engine, name string) error {
	t.Helper()
	ctx := context.Background()
	return e.Run(ctx, false, func(x *Txn) error {
		return x.CreateKeyspace(ctx, testCatalog, []byte(name), adapters.Keyspace(name))
	})
}

func dropKS(t *testing.T, e *Engine, name string) error {
	t.Helper()
	ctx := context.Background()
	return e.Run(ctx, false, func(x *Txn) error {
		_, err := x.DropKeyspace(ctx, testCatalog, []byte(name))
		return err
	})
}

func storeKeyspaces(t *testing.T, d *durableEnv) []adapters.Keyspace {
	t.Helper()
	kss, err := d.store.Keyspaces()
	if err != nil {
		t.Fatal(err)
	}
	return kss
}

func listed(t *testing.T, e *Engine) []string {
	t.Helper()
	kss, _, err := e.ListKeyspaces(context.Background(), testCatalog, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ks := range kss {
		out = append(out, string(ks))
	}
	return out
}

// TestKeyspaceLifecycle: create, lookup, list, drop through the catalog;
// the store follows; ErrExists and ErrNotFound where they belong.
func TestKeyspaceLifecycle(t *testing.T) {
	ctx := context.Background()
	d := openEnv(t, t.TempDir(), nil)
	defer d.close()
	if err := createKS(t, d.eng, "a"); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(storeKeyspaces(t, d), "a") {
		t.Fatalf("create did not reach the store before it returned: %v", storeKeyspaces(t, d))
	}
	if err := createKS(t, d.eng, "a"); !errors.Is(err, ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	if err := d.eng.Upsert(ctx, "a", k(1), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if ks, ok, err := d.eng.LookupKeyspace(ctx, testCatalog, []byte("a")); err != nil || !ok || ks != "a" {
		t.Fatalf("lookup: %q %v %v", ks, ok, err)
	}
	if got := listed(t, d.eng); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("listed %v", got)
	}
	if err := dropKS(t, d.eng, "a"); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(storeKeyspaces(t, d), "a") {
		t.Fatalf("drop did not reach the store before it returned: %v", storeKeyspaces(t, d))
	}
	if err := dropKS(t, d.eng, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second drop: %v, want ErrNotFound", err)
	}
	if _, ok, _ := d.eng.LookupKeyspace(ctx, testCatalog, []byte("a")); ok {
		t.Fatal("dropped keyspace still in the catalog")
	}
	// Re-created, it starts empty, and its unflushed record never reaches
	// the store.
	if err := createKS(t, d.eng, "a"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := d.eng.Get(ctx, "a", k(1), ReadLatest); err != nil || ok {
		t.Fatalf("re-created keyspace holds the old record: %v %v", ok, err)
	}
	if err := d.eng.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if vals, err := storetest.Values(d.store.Get(ctx, "a", [][]byte{k(1)})); err != nil || vals[0] != nil {
		t.Fatalf("old record in the store after re-create and flush: %q %v", vals, err)
	}
	if err := d.buf.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDroppedKeyspaceStaysDroppedAfterCrash: unflushed writes, a drop, a
// crash before any checkpoint; replay must not bring the keyspace back,
// neither in the catalog nor in the store. A drop, re-create and new
// writes replay in order: only the new writes survive.
func TestDroppedKeyspaceStaysDroppedAfterCrash(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := openEnv(t, dir, nil)
	for _, name := range []string{"gone", "again"} {
		if err := createKS(t, d.eng, name); err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			if err := d.eng.Upsert(ctx, adapters.Keyspace(name), k(i), []byte("old")); err != nil {
				t.Fatal(err)
			}
		}
		if err := dropKS(t, d.eng, name); err != nil {
			t.Fatal(err)
		}
	}
	if err := createKS(t, d.eng, "again"); err != nil {
		t.Fatal(err)
	}
	if err := d.eng.Upsert(ctx, "again", k(100), []byte("new")); err != nil {
		t.Fatal(err)
	}
	d.close() // a crash: nothing flushed, no checkpoint

	d = openEnv(t, dir, nil)
	defer d.close()
	if got := listed(t, d.eng); !slices.Equal(got, []string{"again"}) {
		t.Fatalf("catalog after replay: %v, want [again]", got)
	}
	recs, _, err := d.eng.Scan(ctx, "again", nil, nil, 0, ReadLatest)
	if err != nil || len(recs) != 1 || string(recs[0].Value) != "new" {
		t.Fatalf("re-created keyspace after replay: %v %v", recs, err)
	}
	if err := d.eng.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if kss := storeKeyspaces(t, d); slices.Contains(kss, "gone") {
		t.Fatalf("dropped keyspace back in the store: %v", kss)
	}
	if got, _, err := d.store.GetRange(ctx, "again", nil, nil, 0); err != nil || len(got) != 1 {
		t.Fatalf("re-created keyspace in the store: %v %v", got, err)
	}
	if err := d.buf.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDropWhileStoreDown: the drop commits (it is in the WAL) while the
// store is down; the store side waits in the buffer's keyspace gate, no
// later store call overtakes it, a checkpoint cannot cover it, and it runs
// once the store is back.
func TestDropWhileStoreDown(t *testing.T) {
	ctx := context.Background()
	d := openEnv(t, t.TempDir(), nil)
	defer d.close()
	if err := createKS(t, d.eng, "x"); err != nil {
		t.Fatal(err)
	}
	if err := d.eng.Upsert(ctx, "x", k(1), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := d.eng.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	d.fault.SetDown(true)
	if err := dropKS(t, d.eng, "x"); err != nil {
		t.Fatalf("drop with the store down: %v (it is durable in the WAL and must commit)", err)
	}
	if n := d.buf.Stats().PendingKeyspaceOps; n != 1 {
		t.Fatalf("pending keyspace ops: %d, want 1", n)
	}
	if err := d.eng.Checkpoint(ctx); err == nil {
		t.Fatal("a checkpoint succeeded with a drop the store has not seen")
	}
	d.fault.SetDown(false)
	// The re-created keyspace's first read goes to the store: the drop
	// runs first, so the old record is not found.
	if err := createKS(t, d.eng, "x"); err != nil {
		t.Fatal(err)
	}
	d.buf.DropKeyspace("ignored") // an unrelated queued drop settles too
	if _, ok, err := d.eng.Get(ctx, "x", k(1), ReadLatest); err != nil || ok {
		t.Fatalf("old record visible in the re-created keyspace: %v %v", ok, err)
	}
	if n := d.buf.Stats().PendingKeyspaceOps; n != 0 {
		t.Fatalf("pending keyspace ops after the store came back: %d", n)
	}
	if err := d.eng.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.buf.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// Keyspace handles stay resident: once resolved, a lookup makes no store
// call, whatever the buffer evicted (here: everything, policy none); a
// create or drop through the engine is seen at once; with a staleness bound
// a handle older than it is resolved again.
func TestKeyspaceHandlesResident(t *testing.T) {
	ctx := context.Background()
	for _, ttl := range []time.Duration{0, 20 * time.Millisecond} {
		t.Run(fmt.Sprint("ttl=", ttl), func(t *testing.T) {
			st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			counted := adapters.Count(st)
			buf, e := writeThroughOver(t, counted, ttl)
			v := &env{e: e, buf: buf, st: st}
			const cat adapters.Keyspace = "cat"
			v.buf.OpenKeyspace(cat)
			if err := v.e.Run(ctx, false, func(x *Txn) error { return x.CreateKeyspace(ctx, cat, []byte("t1"), "ks1") }); err != nil {
				t.Fatal(err)
			}
			lookup := func(key string) (adapters.Keyspace, bool) {
				t.Helper()
				ks, ok, err := v.e.LookupKeyspace(ctx, cat, []byte(key))
				if err != nil {
					t.Fatal(err)
				}
				return ks, ok
			}
			if ks, ok := lookup("t1"); !ok || ks != "ks1" {
				t.Fatalf("lookup t1: %q %v", ks, ok)
			}
			before := counted.Stats().Total().Requests
			for range 10 {
				lookup("t1")
			}
			if n := counted.Stats().Total().Requests - before; n != 0 {
				t.Fatalf("10 lookups of a resolved table made %d store calls, want 0", n)
			}
			if _, ok := lookup("t2"); ok {
				t.Fatal("t2 exists before it is created")
			}
			if err := v.e.Run(ctx, false, func(x *Txn) error { return x.CreateKeyspace(ctx, cat, []byte("t2"), "ks2") }); err != nil {
				t.Fatal(err)
			}
			if ks, ok := lookup("t2"); !ok || ks != "ks2" {
				t.Fatalf("t2 after its create: %q %v", ks, ok)
			}
			if err := v.e.Run(ctx, false, func(x *Txn) error { _, err := x.DropKeyspace(ctx, cat, []byte("t1")); return err }); err != nil {
				t.Fatal(err)
			}
			if _, ok := lookup("t1"); ok {
				t.Fatal("t1 still resolves after its drop")
			}
			if ttl > 0 {
				// Another node's change, straight in the store: seen once
				// the handle is older than the TTL.
				if _, err := v.st.Upsert(ctx, cat, adapters.Puts([]adapters.Record{{Key: []byte("t2"), Value: []byte("ks2b")}})); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * ttl)
				if ks, _ := lookup("t2"); ks != "ks2b" {
					t.Fatalf("t2 after the TTL: %q, want the store's ks2b", ks)
				}
			}
		})
	}
}

// A transaction that resolves a keyspace through the catalog leaves what
// was read as the resident handle, so the transactions after it (a stream
// of writes, with no read outside a transaction to refresh the handle)
// make no store call for the catalog; what a transaction resolves from its
// own uncommitted catalog write is not kept.
func TestKeyspaceHandleKeptByTransactions(t *testing.T) {
	ctx := context.Background()
	st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	counted := adapters.Count(st)
	buf, e := writeThroughOver(t, counted, time.Minute)
	const cat adapters.Keyspace = "cat"
	buf.OpenKeyspace(cat)
	if err := e.Run(ctx, false, func(x *Txn) error { return x.CreateKeyspace(ctx, cat, []byte("t1"), "ks1") }); err != nil {
		t.Fatal(err)
	}
	lookupIn := func() {
		t.Helper()
		err := e.Run(ctx, false, func(x *Txn) error {
			ks, ok, err := x.LookupKeyspace(ctx, cat, []byte("t1"))
			if err == nil && (!ok || ks != "ks1") {
				err = fmt.Errorf("t1 resolves to %q %v", ks, ok)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	catalogReads := func() uint64 { return counted.Stats()[adapters.OpGet].Requests }
	before := catalogReads()
	lookupIn() // the create dropped the handle: this one reads the entry
	if n := catalogReads() - before; n != 1 {
		t.Fatalf("the first lookup made %d catalog reads, want 1", n)
	}
	for range 10 {
		lookupIn()
	}
	if n := catalogReads() - before; n != 1 {
		t.Fatalf("11 transactions' lookups made %d catalog reads, want the first one only", n)
	}
	// Resolved from the transaction's own create: not kept.
	err = e.Run(ctx, false, func(x *Txn) error {
		if err := x.CreateKeyspace(ctx, cat, []byte("t2"), "ks2"); err != nil {
			return err
		}
		if _, ok, err := x.LookupKeyspace(ctx, cat, []byte("t2")); err != nil || !ok {
			return fmt.Errorf("t2 in its own creating transaction: %v %v", ok, err)
		}
		return errors.New("abort")
	})
	if err == nil || err.Error() != "abort" {
		t.Fatalf("aborted create: %v", err)
	}
	if _, ok, err := e.LookupKeyspace(ctx, cat, []byte("t2")); err != nil || ok {
		t.Fatalf("t2 after its create aborted: %v %v, want absent", ok, err)
	}
}

// blockingGets is a store whose Get calls wait for release, counting them.
type blockingGets struct {
	adapters.Store
	calls   atomic.Int64
	release chan struct{}
}

func (b *blockingGets) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	b.calls.Add(1)
	<-b.release
	return b.Store.Get(ctx, ks, keys)
}

// writeThroughOver returns a buffer with policy none over st (knowledge
// kept for ttl) and a write-through engine over it, closed at the end of
// the test.
func writeThroughOver(t *testing.T, st adapters.Store, ttl time.Duration) (*cache.Buffer, *Engine) {
	t.Helper()
	buf, err := cache.New(st, cache.Options{Policy: cache.PolicyNone, MaxStaleness: ttl, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { buf.Close() })
	e, err := New(buf, Options{Mode: WriteThrough, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return buf, e
}

// Lookups that find a keyspace's handle gone stale together (every request
// of a busy table, once per staleness bound) share one catalog read.
func TestKeyspaceHandleResolvedOnce(t *testing.T) {
	ctx := context.Background()
	st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	const cat adapters.Keyspace = "cat"
	if _, err := st.Upsert(ctx, cat, adapters.Puts([]adapters.Record{{Key: []byte("t1"), Value: []byte("ks1")}})); err != nil {
		t.Fatal(err)
	}
	blk := &blockingGets{Store: st, release: make(chan struct{})}
	buf, e := writeThroughOver(t, blk, time.Minute)
	buf.OpenKeyspace(cat)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			var ks adapters.Keyspace
			var ok bool
			var err error
			if i%2 == 0 {
				ks, ok, err = e.LookupKeyspace(ctx, cat, []byte("t1"))
			} else {
				err = e.Run(ctx, false, func(x *Txn) error {
					ks, ok, err = x.LookupKeyspace(ctx, cat, []byte("t1"))
					return err
				})
			}
			if err == nil && (!ok || ks != "ks1") {
				err = fmt.Errorf("t1 resolves to %q %v", ks, ok)
			}
			errs <- err
		})
	}
	testenv.WaitFor(t, 10*time.Second, "the first lookup's read", func() bool { return blk.calls.Load() > 0 })
	testenv.WaitFor(t, 10*time.Second, "the other lookups to join the read in flight", func() bool { return e.handles.waiting() >= 7 })
	close(blk.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := blk.calls.Load(); n != 1 {
		t.Errorf("8 lookups of a stale handle made %d catalog reads, want 1", n)
	}
}

// waiting says how many lookups wait on the catalog reads in flight
// besides their own.
func (h *handles) waiting() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := 0
	for _, r := range h.resolving {
		n += r.joined
	}
	return n
}
