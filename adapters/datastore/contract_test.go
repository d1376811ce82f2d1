package datastore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/contract"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
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
	type read struct {
		name       string
		start, end []byte
		limit      int
	}
	reads := []read{{"all", nil, nil, 0}, {"limit 7", nil, nil, 7}, {"from key 10", keys[9], nil, 0},
		{"keys 10..40", keys[9], keys[39], 0}, {"keys 10..40 limit 5", keys[9], keys[39], 5}, {"one key", keys[3], adapters.Successor(keys[3]), 0},
		{"limit 1", nil, nil, 1}}
	want := map[string]string{}
	for _, r := range reads {
		got, more, err := direct.GetRange(ctx, ks, r.start, r.end, r.limit)
		if err != nil {
			t.Fatal(err)
		}
		want[r.name] = fmt.Sprint(keysOf(got), more)
	}
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
		for _, r := range reads {
			rctx, report := adapters.WithRangeReport(ctx)
			got, more, err := s.GetRange(rctx, ks, r.start, r.end, r.limit)
			if err != nil {
				t.Fatalf("seed %d: %s: %v", seed, r.name, err)
			}
			if g := fmt.Sprint(keysOf(got), more); g != want[r.name] {
				t.Errorf("seed %d: %s:\n direct: %s\n under:  %s", seed, r.name, want[r.name], g)
			}
			hi := r.end
			if more {
				hi = adapters.Successor(got[len(got)-1].Key)
			}
			if covers, ok := report.Covers(hi); !ok || !covers {
				t.Errorf("seed %d: %s: the answer is complete up to %q, the batches reported say not (reported %v)", seed, r.name, hi, ok)
			}
		}
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

func keysOf(recs []adapters.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%x", r.Key)
	}
	return out
}

// TestUnknownOutcomes: a write whose reply is lost after the service
// applied it. An idempotent one (upserts and deletes without a
// precondition, a group of them) is sent again and succeeds; any other
// (an insert, a base version, a transaction) fails with
// adapters.ErrUnknownOutcome, never with a conflict its own first
// application caused, nor with the "transaction is invalid" a repeated
// transactional commit gets; and it was applied.
func TestUnknownOutcomes(t *testing.T) {
	c := contract.New(contract.Config{})
	s := underContract(t, c)
	p := dscodec.Partition{Project: dstest.Project(t)}
	ks := p.Keyspace()
	ctx := context.Background()
	n := 0
	next := func(v int64) adapters.Record {
		n++
		return record(t, p, []*datastorepb.Key_PathElement{idEl("K", int64(n))}, v)
	}
	version := func(k []byte) adapters.Version {
		recs, err := s.Get(ctx, ks, [][]byte{k})
		if err != nil {
			t.Fatal(err)
		}
		return recs[0].Version
	}
	present := func(k []byte, v int64) bool {
		recs, err := s.Get(ctx, ks, [][]byte{k})
		if err != nil {
			t.Fatal(err)
		}
		return recs[0].Value != nil && propV(t, recs[0].Value) == v
	}
	unknown := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, adapters.ErrUnknownOutcome) || errors.Is(err, adapters.ErrConflict) || errors.Is(err, adapters.ErrInvalid) {
			t.Errorf("%s with its reply lost: %v, want only an unknown outcome", what, err)
		}
	}
	lose := func() { c.LoseNext(1) }

	r := next(1)
	lose()
	if _, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{r})); err != nil || !present(r.Key, 1) {
		t.Errorf("a plain upsert with its reply lost: %v (applied %v), want it sent again", err, present(r.Key, 1))
	}
	r = next(2)
	lose()
	_, err := s.Upsert(ctx, ks, []adapters.Write{{Key: r.Key, Value: r.Value, Expect: adapters.Expect{Kind: adapters.ExpectAbsent}}})
	unknown("an insert", err)
	if !present(r.Key, 2) {
		t.Error("the insert was not applied")
	}
	r2 := record(t, p, []*datastorepb.Key_PathElement{idEl("K", int64(n))}, 3)
	lose()
	_, err = s.Upsert(ctx, ks, []adapters.Write{{Key: r2.Key, Value: r2.Value, Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: version(r.Key)}}})
	unknown("an update at a base version", err)
	if !present(r.Key, 3) {
		t.Error("the update was not applied")
	}
	lose()
	err = s.Delete(ctx, ks, []adapters.Write{{Key: r.Key, Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: version(r.Key)}}})
	unknown("a delete at a base version", err)
	if recs, _ := s.Get(ctx, ks, [][]byte{r.Key}); recs[0].Value != nil {
		t.Error("the delete was not applied")
	}
	a, b := next(4), next(5)
	lose()
	_, err = s.WriteAtomic(ctx, ks, []adapters.Mutation{{Write: adapters.Write{Key: a.Key, Value: a.Value, Expect: adapters.Expect{Kind: adapters.ExpectAbsent}}},
		{Write: adapters.Write{Key: b.Key, Value: b.Value}}})
	unknown("a transaction", err)
	if !present(a.Key, 4) || !present(b.Key, 5) {
		t.Error("the transaction was not applied")
	}
	a, b = next(6), next(7)
	lose()
	if _, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{{Write: adapters.Write{Key: a.Key, Value: a.Value}}, {Write: adapters.Write{Key: b.Key, Value: b.Value}}}); err != nil {
		t.Errorf("a group of plain upserts with its reply lost: %v, want it sent again", err)
	}
	if st := c.Stats(); st.Lost != 6 {
		t.Errorf("%d replies lost, want 6", st.Lost)
	}
}
