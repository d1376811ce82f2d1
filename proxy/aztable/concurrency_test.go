package aztable

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/aztest"
)

// TestOptimisticConcurrency: clients incrementing one counter with
// read / If-Match update loops never lose an increment. A stale ETag gets
// 412, a lock conflict 503 (both retried by the loop).
func TestOptimisticConcurrency(t *testing.T) {
	n := overEmbedded(t)
	ctx := ctxT(t)
	svc := service(t, n.URL, aztest.Key)
	name := aztest.TableName("occ")
	if _, err := svc.CreateTable(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	tc := svc.NewClient(name)
	if _, err := tc.AddEntity(ctx, []byte(`{"PartitionKey":"c","RowKey":"c","N":0}`), nil); err != nil {
		t.Fatal(err)
	}
	const workers, each = 4, 25
	var wg sync.WaitGroup
	var mu sync.Mutex
	conflicts := map[int]int{}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done := 0; done < each; {
				g, err := tc.GetEntity(ctx, "c", "c", nil)
				if err != nil {
					t.Error(err)
					return
				}
				v := int(decodeMap(t, g.Value)["N"].(float64))
				_, err = tc.UpdateEntity(ctx, []byte(fmt.Sprintf(`{"PartitionKey":"c","RowKey":"c","N":%d}`, v+1)),
					&aztables.UpdateEntityOptions{IfMatch: &g.ETag, UpdateMode: aztables.UpdateModeReplace})
				switch st, _ := aztest.Status(err); st {
				case 0:
					done++
				case http.StatusPreconditionFailed, http.StatusServiceUnavailable:
					mu.Lock()
					conflicts[st]++
					mu.Unlock()
				default:
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	g, err := tc.GetEntity(ctx, "c", "c", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeMap(t, g.Value)["N"]; got != float64(workers*each) {
		t.Fatalf("counter %v after %d increments (conflicts %v)", got, workers*each, conflicts)
	}
	t.Logf("retried conflicts by status: %v", conflicts)
}

// TestBackendDown: a backend outage surfaces as 503 ServerBusy (which the
// SDKs retry) for what the buffer cannot answer, while buffered entities
// are still served.
func TestBackendDown(t *testing.T) {
	st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() }) // after nemo's own cleanup checks the buffer
	fs := fault.New(st, fault.Config{})
	n := startNemo(t, fs, cache.Options{})
	ctx := ctxT(t)
	svc := service(t, n.URL, aztest.Key)
	name := aztest.TableName("down")
	if _, err := svc.CreateTable(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	tc := svc.NewClient(name)
	if _, err := tc.AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"cached"}`), nil); err != nil {
		t.Fatal(err)
	}
	fs.SetDown(true)
	if _, err := tc.GetEntity(ctx, "p", "cached", nil); err != nil {
		t.Fatalf("a buffered entity during the outage: %v", err)
	}
	_, err = tc.GetEntity(ctx, "p", "unknown", nil)
	wantStatus(t, "a miss during the outage", err, 503, "ServerBusy")
	fs.SetDown(false)
	_, err = tc.GetEntity(ctx, "p", "unknown", nil)
	wantStatus(t, "the miss after the outage", err, 404, "ResourceNotFound")
}
