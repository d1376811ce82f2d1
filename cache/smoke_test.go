package cache

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"sort"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
)

func TestSmokeModel(t *testing.T) {
	ctx := context.Background()
	st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := New(st, Options{MaxBytes: 3000, RecordOverhead: 64, MaxKeyBytes: 64, EvictBatch: 4, DisableWorkers: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ks := adapters.Keyspace("t")
	b.OpenKeyspace(ks)
	model := map[string]string{}
	rng := rand.New(rand.NewSource(1))
	key := func() []byte { return []byte(fmt.Sprintf("k%02d", rng.Intn(40))) }
	for i := 0; i < 4000; i++ {
		switch op := rng.Intn(10); {
		case op < 3:
			k := key()
			v, ok, err := b.Get(ctx, ks, k)
			if err != nil {
				t.Fatal(err)
			}
			mv, mok := model[string(k)]
			if ok != mok || string(v) != mv {
				t.Fatalf("step %d get %s: got %q %v want %q %v", i, k, v, ok, mv, mok)
			}
		case op < 5:
			a, c := key(), key()
			if bytes.Compare(a, c) > 0 {
				a, c = c, a
			}
			limit := rng.Intn(5)
			got, next, err := b.Scan(ctx, ks, a, c, limit)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for k := range model {
				if k >= string(a) && k < string(c) {
					want = append(want, k)
				}
			}
			sort.Strings(want)
			if limit > 0 && len(want) > limit {
				want = want[:limit]
			}
			if len(got) != len(want) && next == nil {
				t.Fatalf("step %d scan [%s,%s) limit %d: got %d want %d (%v)", i, a, c, limit, len(got), len(want), want)
			}
			for j, r := range got {
				if j >= len(want) || string(r.Key) != want[j] || string(r.Value) != model[want[j]] {
					t.Fatalf("step %d scan [%s,%s) limit %d: row %d got %s want %v", i, a, c, limit, j, r.Key, want)
				}
			}
		case op < 8:
			k := key()
			v := fmt.Sprintf("v%d", i)
			if err := b.Apply(ctx, ks, []Write{{Key: k, Value: []byte(v)}}); err != nil {
				t.Fatal(err)
			}
			model[string(k)] = v
		case op < 9:
			k := key()
			if err := b.Apply(ctx, ks, []Write{{Key: k, Delete: true}}); err != nil {
				t.Fatal(err)
			}
			delete(model, string(k))
		default:
			if _, err := b.EvictStep(ctx, ks); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Check(ctx); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs, _, _ := st.GetRange(ctx, ks, nil, nil, 0)
	if len(recs) != len(model) {
		t.Fatalf("store has %d records, model %d", len(recs), len(model))
	}
	t.Logf("stats %+v", b.Stats())
}
