package aztable

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/internal/aztest"
)

// TestHotEntityUpsertsAllSucceed: 8 clients upserting one entity at once
// (insert-or-merge, which reads the entity, so each call takes its lock)
// all succeed, as they do against Azure and Azurite: a call that meets
// another's lock is retried by the engine instead of failing with 503
// ServerBusy. (Here no WAL fsync lengthens the locks; issue 12 measures the
// case with one.)
func TestHotEntityUpsertsAllSucceed(t *testing.T) {
	n := overEmbedded(t)
	svc := service(t, n.URL, aztest.Key)
	ctx := ctxT(t)
	if _, err := svc.CreateTable(ctx, "hot", nil); err != nil {
		t.Fatal(err)
	}
	tc := svc.NewClient("hot")
	const clients, calls = 8, 50
	var failed atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				e := []byte(fmt.Sprintf(`{"PartitionKey":"p","RowKey":"hot","C%d":%d}`, c, i))
				if _, err := tc.UpsertEntity(context.Background(), e, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeMerge}); err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f != 0 {
		t.Fatalf("%d of %d upserts of one entity failed; first: %v", f, clients*calls, first.Load())
	}
}
