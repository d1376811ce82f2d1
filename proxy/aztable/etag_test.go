package aztable

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/aztest"
)

// TestETagsSurviveEviction: behind Azurite, with a buffer of a few KiB,
// the ETags nemo gave for its writes stay valid after write-back,
// eviction and refetch (the adapter restores nemo's stamps), and a stale
// ETag still fails with 412. With the adapter's stamp memory disabled the
// same conditional writes fail, which is what the memory is for.
func TestETagsSurviveEviction(t *testing.T) {
	t.Run("remembered", func(t *testing.T) { etagsAfterEviction(t, 0) })
	t.Run("forgotten", func(t *testing.T) { etagsAfterEviction(t, -1) })
}

func etagsAfterEviction(t *testing.T, etagMemory int) {
	url := aztest.Azurite(t)
	name := aztest.TableName("etagev")
	direct := service(t, url, aztest.Key)
	t.Cleanup(func() { _, _ = direct.DeleteTable(context.Background(), name, nil) }) // after nemo has checked its buffer
	n := startNemo(t, azuriteStoreMemo(t, etagMemory), cache.Options{MaxBytes: 4 << 10, MaxKeyBytes: 2 << 10, EvictBatch: 8})
	ctx := ctxT(t)
	nsvc := service(t, n.URL, aztest.Key)
	if _, err := nsvc.CreateTable(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	tc, dc := nsvc.NewClient(name), direct.NewClient(name)
	const count = 24
	body := func(i, v int) []byte {
		return []byte(fmt.Sprintf(`{"PartitionKey":"p%d","RowKey":"r%02d","V":%d,"Pad":"%0100d"}`, i%3, i, v, i))
	}
	etags := make([]azcore.ETag, count)
	for i := range count {
		r, err := tc.AddEntity(ctx, body(i, 0), nil)
		if err != nil {
			t.Fatal(err)
		}
		etags[i] = r.ETag
	}
	// Out of band, entity 0 changes in Azurite: its ETag is stale.
	flushEvict := func() {
		t.Helper()
		if err := n.Eng.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		n.Eng.EvictUntil(ctx, 0)
	}
	flushEvict()
	if _, err := dc.UpsertEntity(ctx, body(0, 99), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}); err != nil {
		t.Fatal(err)
	}
	before := n.Buf.Stats().Misses
	// A point read gives the ETag of the insert back.
	g, err := tc.GetEntity(ctx, "p1", "r01", nil)
	if err != nil {
		t.Fatal(err)
	}
	if n.Buf.Stats().Misses == before {
		t.Fatal("the read was served from the buffer: nothing was evicted")
	}
	if etagMemory < 0 {
		if g.ETag == etags[1] {
			t.Fatal("without the stamp memory the refetched entity kept nemo's ETag")
		}
		// Without the memory, the client's ETags fail: the issue.
		_, err := tc.UpdateEntity(ctx, body(2, 1), &aztables.UpdateEntityOptions{IfMatch: &etags[2], UpdateMode: aztables.UpdateModeReplace})
		if st, _ := aztest.Status(err); st != http.StatusPreconditionFailed {
			t.Fatalf("without the stamp memory: update with the insert's ETag: %v, want 412", err)
		}
		return
	}
	if g.ETag != etags[1] {
		t.Fatalf("refetched entity has ETag %s, the insert gave %s", g.ETag, etags[1])
	}
	flushEvict()
	// Conditional writes with the inserts' ETags: updates (replace and
	// merge) for some, deletes for others; all succeed.
	newer := map[int]azcore.ETag{}
	for i := 1; i < count; i++ {
		switch i % 3 {
		case 0:
			_, err = tc.DeleteEntity(ctx, fmt.Sprintf("p%d", i%3), fmt.Sprintf("r%02d", i), &aztables.DeleteEntityOptions{IfMatch: &etags[i]})
		default:
			mode := []aztables.UpdateMode{aztables.UpdateModeReplace, aztables.UpdateModeMerge}[i%2]
			var r aztables.UpdateEntityResponse
			r, err = tc.UpdateEntity(ctx, body(i, 1), &aztables.UpdateEntityOptions{IfMatch: &etags[i], UpdateMode: mode})
			newer[i] = r.ETag
		}
		if err != nil {
			t.Fatalf("entity %d: conditional write with the insert's ETag after eviction: %v", i, err)
		}
	}
	// Stale ETags give 412: the entity changed out of band, and the
	// inserts' ETags of entities nemo updated since.
	_, err = tc.UpdateEntity(ctx, body(0, 1), &aztables.UpdateEntityOptions{IfMatch: &etags[0], UpdateMode: aztables.UpdateModeReplace})
	if st, _ := aztest.Status(err); st != http.StatusPreconditionFailed {
		t.Fatalf("update with an ETag from before an out-of-band change: %v, want 412", err)
	}
	flushEvict()
	for i := range newer {
		_, err := tc.DeleteEntity(ctx, fmt.Sprintf("p%d", i%3), fmt.Sprintf("r%02d", i), &aztables.DeleteEntityOptions{IfMatch: &etags[i]})
		if st, _ := aztest.Status(err); st != http.StatusPreconditionFailed {
			t.Fatalf("entity %d: delete with the insert's ETag after an update: %v, want 412", i, err)
		}
	}
	// The updates' ETags are current, after another eviction as well.
	flushEvict()
	for i, e := range newer {
		if _, err := tc.DeleteEntity(ctx, fmt.Sprintf("p%d", i%3), fmt.Sprintf("r%02d", i), &aztables.DeleteEntityOptions{IfMatch: &e}); err != nil {
			t.Fatalf("entity %d: delete with the update's ETag after eviction: %v", i, err)
		}
	}
	if err := n.Eng.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	left, err := queryAll(ctx, dc, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || len(left[0]) != 1 {
		t.Fatalf("Azurite holds %v, want entity 0 alone", left)
	}
}
