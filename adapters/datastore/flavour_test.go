package datastore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
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
			inner, s, cc, p := b.counting(t)
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

// TestCommitsSizedForTheBackend: writes as a write-back sends them (new
// entities the buffer knew absent, which go out as inserts in a
// transaction; rewrites and deletes at the versions the store gave) go
// out in commits sized for the backend from the start. The legacy
// Datastore emulator refuses a transaction over more than 25 entity
// groups (INVALID_ARGUMENT "operating on too many entity groups in a
// single transaction."; a non-transactional commit has no such limit),
// Firestore in Datastore mode has none; before an answer has shown which
// backend it is (any read, or a commit, shows it), the adapter assumes the
// limit. 200 entities in 200 entity groups take exactly the commits
// counted here, and the backend refuses none.
func TestCommitsSizedForTheBackend(t *testing.T) {
	for _, b := range dsBackends() {
		t.Run(b.name, func(t *testing.T) {
			_, s, cc, p := b.counting(t)
			ctx := context.Background()
			ks := p.Keyspace()
			const n = 200
			writes := func(expect func(i int) adapters.Expect, path func(i int) []*datastorepb.Key_PathElement) []adapters.Write {
				ws := make([]adapters.Write, n)
				for i := range ws {
					r := record(t, p, path(i), int64(i))
					ws[i] = adapters.Write{Key: r.Key, Value: r.Value, Expect: expect(i)}
				}
				return ws
			}
			absent := func(int) adapters.Expect { return adapters.Expect{Kind: adapters.ExpectAbsent} }
			roots := func(i int) []*datastorepb.Key_PathElement {
				return []*datastorepb.Key_PathElement{idEl("G", int64(i+1))}
			}
			children := func(i int) []*datastorepb.Key_PathElement {
				return []*datastorepb.Key_PathElement{idEl("P", int64(i%4+1)), idEl("C", int64(i+1))}
			}
			var vers []adapters.Version
			at := func(i int) adapters.Expect { return adapters.Expect{Kind: adapters.ExpectVersion, Version: vers[i]} }
			upsert := func(ws []adapters.Write) func() error {
				return func() (err error) {
					vers, err = s.Upsert(ctx, ks, ws)
					if err == nil && slices.Contains(vers, "") {
						err = fmt.Errorf("versions %q: a write not applied", vers)
					}
					return err
				}
			}
			steps := []struct {
				what    string
				do      func() error
				commits map[string]int32
			}{
				// Unknown backend: 25 groups; then 25 more at a time on
				// the legacy emulator, the other 175 at once on Firestore.
				{"200 new entities in 200 groups, the backend not known yet", upsert(writes(absent, roots)),
					map[string]int32{"datastore-emulator": 8, "firestore": 2}},
				// base_version, not in a transaction, on the legacy
				// emulator; checked in one transaction on Firestore.
				{"200 rewrites at their versions", func() error { return upsert(writes(at, roots))() },
					map[string]int32{"datastore-emulator": 1, "firestore": 1}},
				{"200 deletes at their versions", func() error {
					return s.Delete(ctx, ks, writes(at, roots))
				}, map[string]int32{"datastore-emulator": 1, "firestore": 1}},
				{"200 new entities in 200 groups again", upsert(writes(absent, roots)),
					map[string]int32{"datastore-emulator": 8, "firestore": 1}},
				{"200 new entities in 4 groups", upsert(writes(absent, children)),
					map[string]int32{"datastore-emulator": 1, "firestore": 1}},
				// A new Store learns the backend from any read, even one
				// that finds nothing (Firestore answers with a read time).
				{"a read of 200 absent keys, then 200 new entities in 200 groups", func() error {
					s = over(t, cc, Options{})
					ws := writes(absent, func(i int) []*datastorepb.Key_PathElement {
						return []*datastorepb.Key_PathElement{idEl("N", int64(i+1))}
					})
					keys := make([][]byte, len(ws))
					for i, w := range ws {
						keys[i] = w.Key
					}
					if _, err := s.Get(ctx, ks, keys); err != nil {
						return err
					}
					return upsert(ws)()
				}, map[string]int32{"datastore-emulator": 8, "firestore": 1}},
			}
			for _, st := range steps {
				cc.reset()
				if err := st.do(); err != nil {
					t.Fatalf("%s: %v (%d commits, %d refused for too many entity groups)", st.what, err, cc.commits.Load(), cc.wide.Load())
				}
				if got, want := cc.commits.Load(), st.commits[b.name]; got != want || cc.wide.Load() != 0 {
					t.Errorf("%s: %d commits, %d refused for too many entity groups; want %d, none refused", st.what, got, cc.wide.Load(), want)
				}
			}
		})
	}
}

// TestNextBatchEntityGroups: a commit is cut at maxTxGroups entity groups
// once it is a transaction, whichever of its writes makes it one, and only
// then.
func TestNextBatchEntityGroups(t *testing.T) {
	w := func(group string, kind pendingKind, bv int64) pending {
		m := &datastorepb.Mutation{}
		if bv != 0 {
			m.ConflictDetectionStrategy = &datastorepb.Mutation_BaseVersion{BaseVersion: bv}
		}
		return pending{id: group + "/" + fmt.Sprint(rand.Uint64()), group: group, kind: kind, mut: m, size: 1}
	}
	many := func(n int, kind pendingKind, bv int64, prefix string) []pending {
		var ws []pending
		for i := range n {
			ws = append(ws, w(fmt.Sprintf("%s%d", prefix, i), kind, bv))
		}
		return ws
	}
	cases := []struct {
		name      string
		ws        []pending
		maxGroups int
		checked   bool
		want      int
	}{
		{"plain upserts: no limit", many(100, sendMutation, 0, "g"), maxTxGroups, true, 100},
		{"inserts", many(100, sendInsert, 0, "g"), maxTxGroups, false, maxTxGroups},
		{"inserts, no limit", many(100, sendInsert, 0, "g"), 0, false, 100},
		{"inserts in 25 groups, four times over", slices.Concat(many(25, sendInsert, 0, "g"), many(25, sendInsert, 0, "g"), many(25, sendInsert, 0, "g"), many(25, sendInsert, 0, "g")), maxTxGroups, false, 100},
		{"30 plain upserts, then an insert in one of their groups", append(many(30, sendMutation, 0, "g"), w("g0", sendInsert, 0)), maxTxGroups, false, 30},
		{"10 plain upserts, then inserts", append(many(10, sendMutation, 0, "p"), many(30, sendInsert, 0, "i")...), maxTxGroups, false, maxTxGroups},
		{"base versions, checked", many(100, sendMutation, 7, "g"), maxTxGroups, true, maxTxGroups},
		{"base versions, trusted", many(100, sendMutation, 7, "g"), maxTxGroups, false, 100},
		{"refusals and absence checks are not sent", append(many(30, checkAbsent, 0, "c"), many(30, sendInsert, 0, "i")...), maxTxGroups, false, 30 + maxTxGroups},
	}
	for _, c := range cases {
		if got := nextBatch(c.ws, c.maxGroups, c.checked); got != c.want {
			t.Errorf("%s: %d writes in the first commit, want %d", c.name, got, c.want)
		}
	}
}
