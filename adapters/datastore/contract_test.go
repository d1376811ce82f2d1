package datastore

import (
	"bytes"
	"context"
	"reflect"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/contract"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/internal/contracttest"
	"github.com/nemocache/nemo/internal/dstest"
)

// underContract opens the adapter over the emulator with c on its
// connection.
func underContract(t *testing.T, c *contract.Contract) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{EmulatorHost: dstest.Emulator(t), RetryBase: time.Millisecond,
		Interceptors: []grpc.UnaryClientInterceptor{c.Interceptor()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestReadsUnderContract: every reader of the adapter (GetRange with
// bounds and limits, Get, ListKeyspaces, MetadataEntities) answers
// through the contract (short and empty batches, cuts in offsets, deferred
// keys, transient failures and lost replies) exactly what it answers
// directly, and a range read reports itself complete only where the
// service said its last batch was. Before the adapter followed
// NOT_FINISHED batches to the end, the first empty batch ended a read.
func TestReadsUnderContract(t *testing.T) {
	direct, _ := openEmulator(t)
	p := dscodec.Partition{Project: dstest.Project(t)}
	ctx := context.Background()
	var recs []adapters.Record
	var keys [][]byte
	for i := 1; i <= 60; i++ {
		path := []*datastorepb.Key_PathElement{idEl([]string{"A", "B", "C"}[i%3], int64(i))}
		if i%4 == 0 {
			path = append([]*datastorepb.Key_PathElement{nameEl("P", "p")}, path...)
		}
		r := record(t, p, path, int64(i))
		keys = append(keys, r.Key)
		if i%5 != 0 {
			recs = append(recs, r) // every fifth key stays absent
		}
	}
	for _, ns := range []string{"", "ns1", "ns2"} {
		q := p
		q.Namespace = ns
		if _, err := direct.Upsert(ctx, q.Keyspace(), adapters.Puts(recs)); err != nil {
			t.Fatal(err)
		}
	}
	ks := p.Keyspace()
	reads := []contracttest.Read{{Name: "all", KS: ks}, {Name: "limit 7", KS: ks, Limit: 7}, {Name: "from key 10", KS: ks, Start: keys[9]},
		{Name: "keys 10..40", KS: ks, Start: keys[9], End: keys[39]}, {Name: "keys 10..40 limit 5", KS: ks, Start: keys[9], End: keys[39], Limit: 5},
		{Name: "one key", KS: ks, Start: keys[3], End: adapters.Successor(keys[3])}, {Name: "limit 1", KS: ks, Limit: 1}}
	wantGet, err := direct.Get(ctx, ks, keys)
	if err != nil {
		t.Fatal(err)
	}
	wantNS, err := direct.ListKeyspaces(ctx, string(ks))
	if err != nil {
		t.Fatal(err)
	}
	var total contract.Stats
	for seed := uint64(1); seed <= 3; seed++ {
		c := contract.New(contract.Config{Seed: seed, ShortRate: 0.7, EmptyRate: 0.4, DeferRate: 0.5, ErrorRate: 0.1, LostRate: 0.1})
		s := underContract(t, c)
		contracttest.SameRanges(t, ctx, direct, s, reads)
		got, err := s.Get(ctx, ks, keys)
		if err != nil {
			t.Fatalf("seed %d: get: %v", seed, err)
		}
		for i := range got {
			if !bytes.Equal(got[i].Value, wantGet[i].Value) || got[i].Version != wantGet[i].Version {
				t.Errorf("seed %d: get key %d: %v, want %v", seed, i, got[i].Version, wantGet[i].Version)
			}
		}
		gotNS, err := s.ListKeyspaces(ctx, string(ks))
		if err != nil || !reflect.DeepEqual(gotNS, wantNS) {
			t.Errorf("seed %d: namespaces %v (%v), want %v", seed, gotNS, err, wantNS)
		}
		for _, kind := range []string{"__kind__", "__property__"} {
			w, err1 := direct.MetadataEntities(ctx, ks, kind)
			g, err2 := s.MetadataEntities(ctx, ks, kind)
			if err1 != nil || err2 != nil || len(g) != len(w) {
				t.Fatalf("seed %d: %s: %d entities (%v), want %d (%v)", seed, kind, len(g), err2, len(w), err1)
			}
			for i := range w {
				if prototext.Format(g[i]) != prototext.Format(w[i]) {
					t.Errorf("seed %d: %s entity %d: %v, want %v", seed, kind, i, g[i], w[i])
				}
			}
		}
		st := c.Stats()
		total.Cut, total.Empty, total.Deferred, total.Failed, total.Lost = total.Cut+st.Cut, total.Empty+st.Empty, total.Deferred+st.Deferred, total.Failed+st.Failed, total.Lost+st.Lost
	}
	if total.Cut == 0 || total.Empty == 0 || total.Deferred == 0 || total.Failed == 0 || total.Lost == 0 {
		t.Errorf("the contract injected too little: %+v", total)
	}
}

// TestUnknownOutcomes: writes whose replies the contract lost after the
// service applied them (contracttest.UnknownOutcomes): a repeated
// transactional commit, which the service answers "transaction is
// invalid", must not read as a refusal either.
func TestUnknownOutcomes(t *testing.T) {
	c := contract.New(contract.Config{})
	p := dscodec.Partition{Project: dstest.Project(t)}
	rec := func(i, n int) adapters.Record {
		return record(t, p, []*datastorepb.Key_PathElement{idEl("K", int64(i))}, int64(n))
	}
	number := func(v []byte) int { return int(propV(t, v)) }
	contracttest.UnknownOutcomes(t, context.Background(), underContract(t, c), c, p.Keyspace(), rec, number)
}
