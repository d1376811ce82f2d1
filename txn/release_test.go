package txn

import (
	"context"
	"sync"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
)

// TestReleaseRacesInheritance ends range readers while other goroutines
// admit records into the gaps they hold (lock-free Engine.Get misses and
// conflicting inserts both put a record there, which inherits the gap's
// holders). A holder that is being released must not be handed a lock it
// will never release: afterwards no record may be locked.
func TestReleaseRacesInheritance(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, cache.Options{DisableWorkers: true}, Options{})
	const keys = 64
	for i := 0; i < keys; i += 2 {
		if _, err := v.st.Upsert(ctx, ks, adapters.Puts([]adapters.Record{{Key: k(i), Value: []byte("v")}})); err != nil {
			t.Fatal(err)
		}
	}
	rounds := 300
	if testing.Short() {
		rounds = 50
	}
	for round := 0; round < rounds; round++ {
		// Forget everything, so the next scan's gaps are unknown and
		// every point read below is a miss that admits a record.
		v.e.EvictUntil(ctx, 0)
		r, err := v.e.Begin(true)
		if err != nil {
			t.Fatal(err)
		}
		// A limited scan locks [0, keys) but fetches only its start,
		// leaving the rest of the range an unknown, S-locked gap.
		if _, _, err := r.Scan(ctx, ks, k(0), k(keys), 1); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := 1; i < keys; i++ {
				if _, _, err := v.e.Get(ctx, ks, k(i), ReadLatest); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			if err := r.Commit(ctx); err != nil {
				t.Error(err)
			}
		}()
		wg.Wait()
		infos, err := v.buf.Records(ks, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, li := range infos {
			if li.RowX != 0 || li.GapX != 0 || len(li.RowS) > 0 || len(li.GapS) > 0 || li.Pinned > 0 {
				t.Fatalf("round %d: %s still locked after its holder ended: %+v", round, keyName(li.Key), li)
			}
		}
	}
}
