package datastore

import (
	"context"
	"errors"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"

	"github.com/nemocache/nemo/adapters"
)

// TestConditionalWritesOnEveryBackend: an upsert or delete conditioned on
// a version that is no longer current is refused, with the current
// version, in front of both Datastore backends, whatever the store's first
// call was. The Firestore emulator ignores base_version (it applies the
// mutation anyway), so there the precondition is checked in a
// transaction; in front of the legacy emulator, once its first answer has
// shown it, a base_version does it in one commit.
func TestConditionalWritesOnEveryBackend(t *testing.T) {
	for _, b := range dsBackends() {
		t.Run(b.name, func(t *testing.T) {
			inner, p := b.open(t, Options{})
			cc := &countingClient{DatastoreClient: inner.client}
			s := over(t, cc, Options{})
			ctx := context.Background()
			ks := p.Keyspace()
			path := []*datastorepb.Key_PathElement{nameEl("K", "c")}
			v1, err := inner.Upsert(ctx, ks, adapters.Puts([]adapters.Record{record(t, p, path, 1)}))
			if err != nil {
				t.Fatal(err)
			}
			v2, err := inner.Upsert(ctx, ks, adapters.Puts([]adapters.Record{record(t, p, path, 2)}))
			if err != nil {
				t.Fatal(err)
			}
			stale := adapters.Expect{Kind: adapters.ExpectVersion, Version: v1[0]}
			refused := func(what string, err error) {
				t.Helper()
				var ce *adapters.ConflictError
				if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || !ce.Conflicts[0].Exists || ce.Conflicts[0].Current != v2[0] {
					t.Fatalf("%s at a stale version: %v, want a conflict at %s", what, err, v2[0])
				}
			}
			// The store's first call: its flavour is not known yet.
			r3 := record(t, p, path, 3)
			_, err = s.Upsert(ctx, ks, []adapters.Write{{Key: r3.Key, Value: r3.Value, Expect: stale}})
			refused("the first upsert", err)
			err = s.Delete(ctx, ks, []adapters.Write{{Key: r3.Key, Expect: stale}})
			refused("a delete", err)
			recs, err := inner.Get(ctx, ks, [][]byte{r3.Key})
			if err != nil || propV(t, recs[0].Value) != 2 {
				t.Fatalf("after the refused writes: %+v %v", recs, err)
			}
			cc.reset()
			v3, err := s.Upsert(ctx, ks, []adapters.Write{{Key: r3.Key, Value: r3.Value, Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: v2[0]}}})
			if err != nil || v3[0] == "" {
				t.Fatalf("an upsert at the current version: %v %v", v3, err)
			}
			want := map[string][2]int32{"datastore-emulator": {1, 0}, "firestore": {1, 1}} // commits, lookups
			if got := [2]int32{cc.commits.Load(), cc.lookups.Load()}; got != want[b.name] {
				t.Errorf("an applied conditional upsert cost %d commits and %d lookups, want %v", got[0], got[1], want[b.name])
			}
		})
	}
}
