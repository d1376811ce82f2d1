package cache

import (
	"context"
	"testing"

	"github.com/nemocache/nemo/adapters"
)

// FlushKeyspace writes back one keyspace's dirty records and no other's;
// ForgetKeyspace drops a keyspace's records, dirty ones included, without
// touching the store (no drop queued), and the keyspace opens again empty.
func TestFlushAndForgetKeyspace(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	b, err := New(st, Options{DisableWorkers: true, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const ks1, ks2 adapters.Keyspace = "one", "two"
	if _, err := st.Upsert(ctx, ks2, []adapters.Write{{Key: []byte("kept"), Value: []byte("store")}}); err != nil {
		t.Fatal(err)
	}
	for _, ks := range []adapters.Keyspace{ks1, ks2} {
		b.OpenKeyspace(ks)
		if err := b.Apply(ctx, ks, []Write{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := flushKeyspace(ctx, b, ks1); err != nil {
		t.Fatal(err)
	}
	if u := b.Unflushed(); u.Records != 2 || u.Keyspaces[ks2] != 2 || u.Keyspaces[ks1] != 0 {
		t.Fatalf("after flushing %s: %+v", ks1, u)
	}
	if recs, _ := st.Get(ctx, ks1, [][]byte{[]byte("a")}); recs[0].Value == nil {
		t.Fatalf("%s was not written back", ks1)
	}
	if recs, _ := st.Get(ctx, ks2, [][]byte{[]byte("a")}); recs[0].Value != nil {
		t.Fatalf("%s was written back too", ks2)
	}
	if err := flushKeyspace(ctx, b, "unknown"); err != nil {
		t.Fatalf("flush of an unknown keyspace: %v", err)
	}
	b.ForgetKeyspace(ks2)
	if u := b.Unflushed(); u.Records != 0 {
		t.Fatalf("after forgetting %s: %+v", ks2, u)
	}
	if err := flushAll(ctx, b); err != nil {
		t.Fatal(err)
	}
	recs, err := st.Get(ctx, ks2, [][]byte{[]byte("a"), []byte("kept")})
	if err != nil || recs[0].Value != nil || string(recs[1].Value) != "store" {
		t.Fatalf("the store's %s after forgetting it: %+v %v; want a never written, kept untouched", ks2, recs, err)
	}
	b.OpenKeyspace(ks2)
	if v, ok, err := b.Get(ctx, ks2, []byte("kept")); err != nil || !ok || string(v) != "store" {
		t.Fatalf("a read of %s opened again: %q %v %v, want the store's", ks2, v, ok, err)
	}
	if err := b.Check(ctx); err != nil {
		t.Fatal(err)
	}
}
