package aztable

import (
	"context"
	"errors"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/atomictest"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

// TestEmptyKeys: the entity whose PartitionKey and RowKey are both empty
// goes through every write kind (direct requests: the SDK sends none of
// them), each precondition refused exactly where it fails, with the
// versions Get reports; then in a transaction with a neighbour.
func TestEmptyKeys(t *testing.T) {
	s := newAzurite(t)
	emptyKeys(t, s, newTable(t, s, "empty"))
}

// emptyKeys is TestEmptyKeys' sequence on s, in the empty table ks.
func emptyKeys(t *testing.T, s *Store, ks adapters.Keyspace) {
	ctx := context.Background()
	key := tablecodec.EncodeKey("", "")
	w := func(n int32, e adapters.Expect) []adapters.Write {
		return []adapters.Write{{Key: key, Value: val("", "", n).Value, Expect: e}}
	}
	conflict := func(what string, err error, exists bool, cur adapters.Version) {
		t.Helper()
		var ce *adapters.ConflictError
		if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0].Exists != exists || ce.Conflicts[0].Current != cur {
			t.Fatalf("%s: %v, want a conflict (exists %v, current %q)", what, err, exists, cur)
		}
	}
	at := func(what string, n int32, v adapters.Version) {
		t.Helper()
		got := getOne(t, s, ks, key)
		if got.Value == nil || nOf(t, got.Value) != n || got.Version != v || v == "" {
			t.Fatalf("%s: Get %q (%x), want N=%d at %q", what, got.Version, got.Value, n, v)
		}
	}
	absent := adapters.Expect{Kind: adapters.ExpectAbsent}
	version := func(v adapters.Version) adapters.Expect {
		return adapters.Expect{Kind: adapters.ExpectVersion, Version: v}
	}

	_, err := s.Upsert(ctx, ks, w(1, version(`W/"datetime'2020-01-01T00%3A00%3A00Z'"`)))
	conflict("replace of an absent entity", err, false, "")
	if err := s.Delete(ctx, ks, []adapters.Write{{Key: key}}); err != nil {
		t.Fatalf("delete of an absent entity: %v", err)
	}
	v1, err := s.Upsert(ctx, ks, w(1, absent))
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	at("insert", 1, v1[0])
	_, err = s.Upsert(ctx, ks, w(2, absent))
	conflict("insert of a present entity", err, true, v1[0])
	v2, err := s.Upsert(ctx, ks, w(2, adapters.Expect{}))
	if err != nil {
		t.Fatalf("upsert: %v", err)
	}
	at("upsert", 2, v2[0])
	_, err = s.Upsert(ctx, ks, w(3, version(v1[0])))
	conflict("replace at a stale version", err, true, v2[0])
	v3, err := s.Upsert(ctx, ks, w(3, version(v2[0])))
	if err != nil {
		t.Fatalf("replace: %v", err)
	}
	at("replace", 3, v3[0])
	err = s.Delete(ctx, ks, []adapters.Write{{Key: key, Expect: version(v2[0])}})
	conflict("delete at a stale version", err, true, v3[0])
	err = s.Delete(ctx, ks, []adapters.Write{{Key: key, Expect: absent}})
	conflict("delete expecting absence", err, true, v3[0])
	if err := s.Delete(ctx, ks, []adapters.Write{{Key: key, Expect: version(v3[0])}}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if got := getOne(t, s, ks, key); got.Value != nil {
		t.Fatalf("deleted, but Get finds %q", got.Version)
	}

	// A transaction of the entity and a neighbour in partition "".
	other := tablecodec.EncodeKey("", "x")
	vs, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{
		atomictest.Upsert(key, val("", "", 4).Value, absent),
		atomictest.Upsert(other, val("", "x", 5).Value, adapters.Expect{}),
	})
	if err != nil {
		t.Fatalf("transaction: %v", err)
	}
	at("transaction", 4, vs[0])
	_, err = s.WriteAtomic(ctx, ks, []adapters.Mutation{
		atomictest.Upsert(other, val("", "x", 6).Value, adapters.Expect{}),
		atomictest.Delete(key, version(v3[0])),
	})
	var ce *adapters.ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0].Index != 1 || ce.Conflicts[0].Current != vs[0] {
		t.Fatalf("transaction with a stale delete: %v", err)
	}
	if got := getOne(t, s, ks, other); got.Version != vs[1] {
		t.Fatalf("a refused transaction changed its other entity: %q, want %q", got.Version, vs[1])
	}
	if _, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{atomictest.Delete(key, version(vs[0])), atomictest.Delete(other, adapters.Expect{})}); err != nil {
		t.Fatalf("transaction of deletes: %v", err)
	}
	if recs, _, err := s.GetRange(ctx, ks, nil, nil, 0); err != nil || len(recs) != 0 {
		t.Fatalf("after deleting both: %d entities, %v", len(recs), err)
	}
}
