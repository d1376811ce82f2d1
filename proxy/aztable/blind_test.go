package aztable

import (
	"context"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/aztest"
)

// readsOf is an adapters.Store that counts the keys read per keyspace and
// forwards every optional interface the embedded store has.
type readsOf struct {
	*embedded.Store
	mu    sync.Mutex
	reads map[adapters.Keyspace]int
}

func (r *readsOf) count(ks adapters.Keyspace) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads[ks]++
}

func (r *readsOf) of(ks adapters.Keyspace) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads[ks]
}

func (r *readsOf) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	r.count(ks)
	return r.Store.Get(ctx, ks, keys)
}

func (r *readsOf) GetRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	r.count(ks)
	return r.Store.GetRange(ctx, ks, start, end, limit)
}

// TestInsertOrReplaceIsBlind (issue 13): an InsertOrReplace of an entity
// nemo never saw reads nothing of its table from the store, in coherence
// exclusive (buffered, written back) and shared (written through) alike
// (shared mode reads the table's catalog entry to lock it, as every write
// does); an InsertOrMerge must read what it merges into.
func TestInsertOrReplaceIsBlind(t *testing.T) {
	for _, mode := range []string{"exclusive", "shared"} {
		t.Run(mode, func(t *testing.T) {
			st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			rec := &readsOf{Store: st, reads: map[adapters.Keyspace]int{}}
			counted := adapters.Count(rec)
			n := startNemo(t, counted, cache.Options{})
			if mode == "shared" {
				n = startShared(t, counted, cache.Options{})
			}
			ctx := context.Background()
			svc := service(t, n.URL, aztest.Key)
			if _, err := svc.CreateTable(ctx, "blind", nil); err != nil {
				t.Fatal(err)
			}
			tc := svc.NewClient("blind")
			reads := func() int { return rec.of("blind") }
			before, gets := reads(), counted.Stats()[adapters.OpGet].Requests
			if _, err := tc.UpsertEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r1","N":1}`),
				&aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}); err != nil {
				t.Fatal(err)
			}
			if got := counted.Stats()[adapters.OpGet].Requests - gets; mode == "exclusive" && got != 0 {
				t.Errorf("InsertOrReplace of an uncached entity made %d store Gets, want 0", got)
			}
			if got := reads() - before; got != 0 {
				t.Errorf("InsertOrReplace of an uncached entity made %d store reads of its table, want 0 (all reads: %v)", got, rec.reads)
			}
			before = reads()
			if _, err := tc.UpsertEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r2","N":1}`),
				&aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeMerge}); err != nil {
				t.Fatal(err)
			}
			if got := reads() - before; got == 0 {
				t.Errorf("InsertOrMerge of an uncached entity read nothing; it merges into what the store holds")
			}
			if _, err := tc.GetEntity(ctx, "p", "r1", nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}
