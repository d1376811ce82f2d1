package datastore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type Item struct {
	Name  string
	N     int64
	Tags  []string
	F     float64
	When  time.Time
	Note  string `datastore:",noindex"`
	Owner *datastore.Key
}

func TestPutGetDelete(t *testing.T) {
	each(t, func(t *testing.T, n *nemo, c *datastore.Client) {
		ctx := context.Background()
		k1 := datastore.NameKey("Item", "one", nil)
		k2 := datastore.IDKey("Item", 2, nil)
		when := time.Date(2024, 5, 6, 7, 8, 9, 123000, time.UTC)
		in := &Item{Name: "one", N: 1, Tags: []string{"a", "b"}, F: 1.5, When: when, Note: "n", Owner: k2}
		if _, err := c.Put(ctx, k1, in); err != nil {
			t.Fatal(err)
		}
		var out Item
		if err := c.Get(ctx, k1, &out); err != nil {
			t.Fatal(err)
		}
		if out.Name != "one" || out.N != 1 || !slices.Equal(out.Tags, in.Tags) || out.F != 1.5 || !out.When.Equal(when) || out.Note != "n" || !out.Owner.Equal(k2) {
			t.Fatalf("Get = %+v", out)
		}
		// GetMulti with a missing key.
		got := make([]Item, 2)
		err := c.GetMulti(ctx, []*datastore.Key{k1, k2}, got)
		var me datastore.MultiError
		if !errors.As(err, &me) || me[0] != nil || !errors.Is(me[1], datastore.ErrNoSuchEntity) || got[0].Name != "one" {
			t.Fatalf("GetMulti: %v %+v", err, got)
		}
		// An incomplete key gets an id.
		k3, err := c.Put(ctx, datastore.IncompleteKey("Item", nil), &Item{Name: "auto"})
		if err != nil || k3.Incomplete() || k3.ID == 0 {
			t.Fatalf("incomplete Put: %v %v", k3, err)
		}
		if err := c.Get(ctx, k3, &out); err != nil || out.Name != "auto" {
			t.Fatalf("Get allocated: %v %+v", err, out)
		}
		keys, err := c.AllocateIDs(ctx, []*datastore.Key{datastore.IncompleteKey("Item", nil), datastore.IncompleteKey("Item", nil)})
		if err != nil || len(keys) != 2 || keys[0].ID == keys[1].ID || keys[0].ID == 0 {
			t.Fatalf("AllocateIDs: %v %v", keys, err)
		}
		if err := c.ReserveIDs(ctx, []*datastore.Key{datastore.IDKey("Item", 424242, nil)}); err != nil {
			t.Fatal(err)
		}
		// Insert and update preconditions.
		_, err = c.Mutate(ctx, datastore.NewInsert(k1, &Item{}))
		if status.Code(errors.Unwrap(err)) != codes.AlreadyExists && !isCode(err, codes.AlreadyExists) {
			t.Errorf("insert over an existing entity: %v", err)
		}
		_, err = c.Mutate(ctx, datastore.NewUpdate(datastore.NameKey("Item", "nope", nil), &Item{}))
		if !isCode(err, codes.NotFound) {
			t.Errorf("update of a missing entity: %v", err)
		}
		if _, err := c.Mutate(ctx, datastore.NewUpdate(k1, &Item{Name: "one", N: 5})); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, k1, &out); err != nil || out.N != 5 {
			t.Fatalf("after update: %v %+v", err, out)
		}
		// Delete, including an absent key.
		if err := c.DeleteMulti(ctx, []*datastore.Key{k1, k2}); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, k1, &out); !errors.Is(err, datastore.ErrNoSuchEntity) {
			t.Fatalf("Get after delete: %v", err)
		}
		// Namespaces are separate partitions.
		nk := datastore.NameKey("Item", "one", nil)
		nk.Namespace = "other"
		if _, err := c.Put(ctx, nk, &Item{Name: "ns"}); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, k1, &out); !errors.Is(err, datastore.ErrNoSuchEntity) {
			t.Fatalf("default namespace sees another namespace's entity: %v", err)
		}
		if err := c.Get(ctx, nk, &out); err != nil || out.Name != "ns" {
			t.Fatalf("namespaced Get: %v %+v", err, out)
		}
	})
}

func isCode(err error, c codes.Code) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if status.Code(e) == c {
			return true
		}
	}
	var me datastore.MultiError
	if errors.As(err, &me) {
		for _, e := range me {
			if isCode(e, c) {
				return true
			}
		}
	}
	return false
}

func TestCounterTransactions(t *testing.T) {
	each(t, func(t *testing.T, n *nemo, c *datastore.Client) {
		ctx := context.Background()
		type Counter struct{ N int64 }
		k := datastore.NameKey("Counter", "c", nil)
		const workers, each = 16, 4
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					_, err := c.RunInTransaction(ctx, func(tx *datastore.Transaction) error {
						var ctr Counter
						if err := tx.Get(k, &ctr); err != nil && !errors.Is(err, datastore.ErrNoSuchEntity) {
							return err
						}
						ctr.N++
						_, err := tx.Put(k, &ctr)
						return err
					}, datastore.MaxAttempts(500))
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		var ctr Counter
		if err := c.Get(ctx, k, &ctr); err != nil || ctr.N != workers*each {
			t.Fatalf("counter = %d (%v), want %d", ctr.N, err, workers*each)
		}
		if n.engine.Stats().Conflicts == 0 {
			t.Log("no lock conflicts happened; the contention path went untested this run")
		}
		// A read-only transaction refuses writes.
		tx, err := c.NewTransaction(ctx, datastore.ReadOnly)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Get(k, &ctr); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Put(k, &ctr); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Commit(); !isCode(err, codes.InvalidArgument) {
			t.Errorf("commit of a read-only transaction with writes: %v", err)
		}
		// A rolled-back transaction leaves nothing.
		tx, err = c.NewTransaction(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Put(datastore.NameKey("Counter", "rolled", nil), &Counter{N: 1}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, datastore.NameKey("Counter", "rolled", nil), &ctr); !errors.Is(err, datastore.ErrNoSuchEntity) {
			t.Errorf("rolled back write visible: %v", err)
		}
	})
}

// keyNames lists the names (or ids) of the keys a query returns.
func keyNames(t *testing.T, c *datastore.Client, q *datastore.Query) []string {
	t.Helper()
	keys, err := c.GetAll(context.Background(), q.KeysOnly(), nil)
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	return names(keys)
}

func names(keys []*datastore.Key) []string {
	out := []string{}
	for _, k := range keys {
		if k.Name != "" {
			out = append(out, k.Name)
		} else {
			out = append(out, k.String())
		}
	}
	return out
}

func TestQueries(t *testing.T) {
	each(t, func(t *testing.T, n *nemo, c *datastore.Client) {
		ctx := context.Background()
		parent := datastore.NameKey("Parent", "p", nil)
		items := map[string]*Item{
			"a": {Name: "a", N: 1, Tags: []string{"x", "y"}, F: 0.5},
			"b": {Name: "b", N: 5, Tags: []string{"y"}, F: 2.5},
			"c": {Name: "c", N: 3, Tags: []string{"z", "x"}, F: -1},
			"d": {Name: "d", N: 9, F: 4},
			"e": {Name: "e", N: 5, Tags: []string{"q"}, F: 0},
		}
		var keys []*datastore.Key
		var vals []*Item
		for name, it := range items {
			var p *datastore.Key
			if name == "c" || name == "d" {
				p = parent
			}
			keys = append(keys, datastore.NameKey("Item", name, p))
			vals = append(vals, it)
		}
		if _, err := c.PutMulti(ctx, keys, vals); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Put(ctx, datastore.NameKey("Other", "o", nil), &Item{Name: "o", N: 5}); err != nil {
			t.Fatal(err)
		}
		q := func() *datastore.Query { return datastore.NewQuery("Item") }
		for _, tc := range []struct {
			name string
			q    *datastore.Query
			want []string
		}{
			{"kind", q(), []string{"a", "b", "e", "c", "d"}}, // key order: roots first, then Parent:p's children
			{"eq", q().FilterField("N", "=", 5), []string{"b", "e"}},
			{"gt order", q().FilterField("N", ">", 3), []string{"b", "e", "d"}},
			{"range", q().FilterField("N", ">=", 3).FilterField("N", "<", 9), []string{"c", "b", "e"}},
			{"ne", q().FilterField("N", "!=", 5), []string{"a", "c", "d"}},
			{"in", q().FilterField("N", "in", []any{1, 9}), []string{"a", "d"}},
			{"not in", q().FilterField("N", "not-in", []any{1, 9}), []string{"c", "b", "e"}},
			{"array eq", q().FilterField("Tags", "=", "x"), []string{"a", "c"}},
			{"array both", q().FilterField("Tags", "=", "x").FilterField("Tags", "=", "y"), []string{"a"}},
			{"order desc", q().Order("-N").Order("Name"), []string{"d", "b", "e", "c", "a"}},
			{"order array asc", q().Order("Tags"), []string{"e", "a", "c", "b"}},
			// a and b tie on "y": descending orders end in descending keys
			// (Firestore; the legacy emulator says a, b).
			{"order array desc", q().Order("-Tags"), []string{"c", "b", "a", "e"}},
			{"float order", q().Order("F"), []string{"c", "e", "a", "b", "d"}},
			{"ancestor", q().Ancestor(parent), []string{"c", "d"}},
			{"kindless ancestor", datastore.NewQuery("").Ancestor(parent), []string{"c", "d"}},
			{"key range", q().FilterField("__key__", ">", datastore.NameKey("Item", "a", nil)).FilterField("__key__", "<=", datastore.NameKey("Item", "e", nil)), []string{"b", "e"}},
			{"limit offset", q().Order("N").Offset(1).Limit(2), []string{"c", "b"}},
			{"or", q().FilterEntity(datastore.OrFilter{Filters: []datastore.EntityFilter{
				datastore.PropertyFilter{FieldName: "N", Operator: "=", Value: 1},
				datastore.PropertyFilter{FieldName: "F", Operator: ">", Value: 3.0},
			}}), []string{"a", "d"}},
			{"noindex", q().FilterField("Note", "=", ""), []string{}},
		} {
			got := keyNames(t, c, tc.q)
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
			}
		}
		// Projection and distinct-on over an array property.
		type P struct{ Tags string }
		var ps []P
		if _, err := c.GetAll(ctx, q().Project("Tags"), &ps); err != nil {
			t.Fatal(err)
		}
		var tags []string
		for _, p := range ps {
			tags = append(tags, p.Tags)
		}
		if want := []string{"q", "x", "x", "y", "y", "z"}; !slices.Equal(tags, want) {
			t.Errorf("projection rows %v, want %v", tags, want)
		}
		ps = nil
		if _, err := c.GetAll(ctx, q().Project("Tags").DistinctOn("Tags"), &ps); err != nil {
			t.Fatal(err)
		}
		if len(ps) != 4 {
			t.Errorf("distinct projection: %v", ps)
		}
		// Cursor paging through the whole kind, two at a time.
		var paged []string
		var cursor datastore.Cursor
		for page := 0; page < 10; page++ {
			qq := q().Order("N").Order("Name").Limit(2).KeysOnly()
			if page > 0 {
				qq = qq.Start(cursor)
			}
			it := c.Run(ctx, qq)
			n := 0
			for {
				k, err := it.Next(nil)
				if err == iterator.Done {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				paged = append(paged, k.Name)
				n++
			}
			if n == 0 {
				break
			}
			var err error
			if cursor, err = it.Cursor(); err != nil {
				t.Fatal(err)
			}
		}
		if want := []string{"a", "c", "b", "e", "d"}; !slices.Equal(paged, want) {
			t.Errorf("paged %v, want %v", paged, want)
		}
		// Full entities come back whole.
		var all []Item
		if _, err := c.GetAll(ctx, q().FilterField("Name", "=", "a"), &all); err != nil || len(all) != 1 || !slices.Equal(all[0].Tags, []string{"x", "y"}) {
			t.Fatalf("full entity query: %v %+v", err, all)
		}
		// Count, the old way and as an aggregation.
		if cnt, err := c.Count(ctx, q().FilterField("N", ">", 2)); err != nil || cnt != 4 {
			t.Errorf("Count = %d, %v", cnt, err)
		}
		ar, err := c.RunAggregationQuery(ctx, q().NewAggregationQuery().WithCount("n").WithSum("N", "s").WithAvg("F", "a"))
		if err != nil {
			t.Fatal(err)
		}
		if got := ar["n"]; !sameNumber(got, 5) {
			t.Errorf("count = %v", got)
		}
		if got := ar["s"]; !sameNumber(got, 23) {
			t.Errorf("sum = %v", got)
		}
		if got := ar["a"]; !sameNumber(got, 1.2) {
			t.Errorf("avg = %v", got)
		}
	})
}

// sameNumber compares an aggregation result (a *pb.Value or a Go number,
// depending on the client version) with want.
func sameNumber(got any, want float64) bool {
	switch v := got.(type) {
	case int64:
		return float64(v) == want
	case float64:
		return v > want-1e-9 && v < want+1e-9
	case interface{ GetIntegerValue() int64 }:
		if d, ok := got.(interface{ GetDoubleValue() float64 }); ok && d.GetDoubleValue() != 0 {
			return sameNumber(d.GetDoubleValue(), want)
		}
		return float64(v.GetIntegerValue()) == want
	}
	return false
}
