package cache

import (
	"bytes"
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nemocache/nemo/adapters"
)

// TestSummaryKeepsKeyOrder: for any prefix, sorting by summary then key is
// sorting by key (summary never decreases as keys increase).
func TestSummaryKeepsKeyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	key := func() []byte {
		k := make([]byte, rng.IntN(14))
		for i := range k {
			k[i] = "\x00\x01ab\xff"[rng.IntN(5)]
		}
		return k
	}
	for range 20_000 {
		pfx, a, b := key(), key(), key()
		pfx = pfx[:min(len(pfx), rng.IntN(4))]
		if rng.IntN(2) == 0 {
			a = append(bytes.Clone(pfx), a...)
		}
		if rng.IntN(2) == 0 {
			b = append(bytes.Clone(pfx), b...)
		}
		sa, sb := summary(pfx, a), summary(pfx, b)
		if c := bytes.Compare(a, b); c < 0 && sa > sb || c > 0 && sa < sb || c == 0 && sa != sb {
			t.Fatalf("prefix %q: %q → %#x, %q → %#x", pfx, a, sa, b, sb)
		}
	}
}

// TestPrefixCutBack: keys sharing a long prefix, then keys that do not
// (shorter, below, above, a proper prefix), then the first ones again: the
// prefix shrinks, every sum follows (Check), and every key is still found.
func TestPrefixCutBack(t *testing.T) {
	m := newMemStore()
	var recs []adapters.Record
	var keys [][]byte
	for _, k := range []string{"user000000000001", "user000000000002", "user000000000123", "user0000", "user", "usa", "a", "zz", "\x00", "user000000009999"} {
		keys = append(keys, []byte(k))
	}
	for _, k := range keys {
		recs = append(recs, adapters.Record{Key: k, Value: []byte("v" + string(k))})
	}
	ctx := context.Background()
	sorted := append([]adapters.Record(nil), recs...)
	slices.SortFunc(sorted, func(a, b adapters.Record) int { return bytes.Compare(a.Key, b.Key) })
	m.spaces[testKS] = sorted
	b, err := New(m, Options{MaxBytes: 1 << 30, DisableWorkers: true, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.OpenKeyspace(testKS)
	for round := range 2 {
		for _, k := range keys {
			v, ok, err := b.Get(ctx, testKS, k)
			if err != nil || !ok || string(v) != "v"+string(k) {
				t.Fatalf("round %d: Get(%q) = %q, %v, %v", round, k, v, ok, err)
			}
			if err := b.Check(ctx); err != nil {
				t.Fatalf("after Get(%q): %v", k, err)
			}
		}
	}
	if _, ok, _ := b.Get(ctx, testKS, []byte("user000000000003")); ok {
		t.Fatal("absent key found")
	}
	if st := b.Stats(); st.Hits != uint64(len(keys)) {
		t.Fatalf("%d hits, want %d", st.Hits, len(keys))
	}
}
