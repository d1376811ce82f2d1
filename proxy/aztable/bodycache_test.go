package aztable

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/internal/aztest"
)

func TestBodyCacheValidatesVersion(t *testing.T) {
	c := newBodyCache(1 << 20)
	k := bodyKey{table: "t", pk: "p", rk: "r", context: "c", level: tablecodec.MinimalMetadata}
	v1, v2 := []byte("value one"), []byte("value two")
	c.put(k, "e1", v1, []byte("body one"))
	if got := c.get(k, "e1", v1); string(got) != "body one" {
		t.Fatalf("hit: %q", got)
	}
	if got := c.get(k, "e2", v1); got != nil {
		t.Fatalf("another ETag served %q", got)
	}
	if got := c.get(k, "e1", v2); got != nil {
		t.Fatalf("another value under the same ETag served %q", got)
	}
	other := k
	other.level = tablecodec.NoMetadata
	if got := c.get(other, "e1", v1); got != nil {
		t.Fatalf("another metadata level served %q", got)
	}
	c.put(k, "e2", v2, []byte("body two"))
	if got := c.get(k, "e2", v2); string(got) != "body two" {
		t.Fatalf("replaced: %q", got)
	}
	if got := c.get(k, "e1", v1); got != nil {
		t.Fatalf("replaced version served %q", got)
	}
	var nilCache *bodyCache
	nilCache.put(k, "e1", v1, []byte("x"))
	if nilCache.get(k, "e1", v1) != nil || newBodyCache(0) != nil {
		t.Fatal("a disabled cache served")
	}
}

func TestBodyCacheBound(t *testing.T) {
	const max = 64 << 10
	c := newBodyCache(max)
	body := make([]byte, 1000)
	hot := bodyKey{table: "t", pk: "hot"}
	c.put(hot, "e", []byte("hot"), body)
	for i := 0; i < 1000; i++ {
		k := bodyKey{table: "t", pk: fmt.Sprint(i)}
		c.put(k, "e", []byte(k.pk), body)
		if c.get(hot, "e", []byte("hot")) == nil {
			t.Fatalf("after %d puts the entry read before each was evicted", i)
		}
		if c.bytes() > max {
			t.Fatalf("%d bytes held, bound %d", c.bytes(), max)
		}
	}
	if len(c.m) != len(c.clock) {
		t.Fatalf("map %d entries, clock %d", len(c.m), len(c.clock))
	}
	for i, e := range c.clock {
		if e.idx != i || c.m[e.k] != e {
			t.Fatalf("clock[%d] is out of step", i)
		}
	}
	c.put(bodyKey{pk: "big"}, "e", nil, make([]byte, max/4))
	if c.get(bodyKey{pk: "big"}, "e", nil) != nil {
		t.Fatal("an entry over an eighth of the cache was kept")
	}
}

func TestBodyCacheConcurrent(t *testing.T) {
	c := newBodyCache(16 << 10)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; i < 5000; i++ {
				n := r.IntN(64)
				ver := r.IntN(3)
				k := bodyKey{pk: fmt.Sprint(n)}
				v := []byte(fmt.Sprintf("%d/%d", n, ver))
				etag := fmt.Sprint(ver)
				if b := c.get(k, etag, v); b != nil && string(b) != "body "+string(v) {
					t.Errorf("%s served %q", v, b)
					return
				}
				c.put(k, etag, v, []byte("body "+string(v)))
			}
		}()
	}
	wg.Wait()
	if c.bytes() > 16<<10 {
		t.Fatalf("%d bytes held", c.bytes())
	}
}

// TestBodyCacheThroughTheSDK: reads answered from cached bodies follow
// every write, at every metadata level, and a $select read is not served
// the whole entity.
func TestBodyCacheThroughTheSDK(t *testing.T) {
	n := overEmbedded(t)
	ctx := context.Background()
	svc := service(t, n.URL, aztest.Key)
	if _, err := svc.CreateTable(ctx, "bodies", nil); err != nil {
		t.Fatal(err)
	}
	tc := svc.NewClient("bodies")
	for i := 0; i < 5; i++ {
		ent := fmt.Sprintf(`{"PartitionKey":"p","RowKey":"r","N":%d,"S":"v%d"}`, i, i)
		if _, err := tc.UpsertEntity(ctx, []byte(ent), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}); err != nil {
			t.Fatal(err)
		}
		for _, f := range []aztables.MetadataFormat{aztables.MetadataFormatNone, aztables.MetadataFormatMinimal, aztables.MetadataFormatFull} {
			for rep := 0; rep < 2; rep++ { // the second is a cached body
				got, err := tc.GetEntity(ctx, "p", "r", &aztables.GetEntityOptions{Format: to.Ptr(f)})
				if err != nil {
					t.Fatal(err)
				}
				var m map[string]any
				if err := json.Unmarshal(got.Value, &m); err != nil {
					t.Fatal(err)
				}
				if m["N"] != float64(i) || m["S"] != fmt.Sprintf("v%d", i) {
					t.Fatalf("write %d, format %s: read %s", i, f, got.Value)
				}
			}
		}
		path := "/" + aztest.Account + "/bodies(PartitionKey='p',RowKey='r')"
		resp, err := rawClient.Do(signedGet(t, n.base+path+"?$select=S", path))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), fmt.Sprintf(`"S":"v%d"`, i)) || strings.Contains(string(raw), `"N"`) {
			t.Fatalf("point read with $select=S: %d %s", resp.StatusCode, raw)
		}
		pager := tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Select: to.Ptr("S"), Filter: to.Ptr("PartitionKey eq 'p' and RowKey eq 'r'")})
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(page.Entities[0], &m); err != nil {
			t.Fatal(err)
		}
		if _, ok := m["N"]; ok {
			t.Fatalf("$select=S answered %s", page.Entities[0])
		}
	}
	if n.Front.bodies.bytes() == 0 {
		t.Fatal("no body was cached")
	}
	if _, err := tc.DeleteEntity(ctx, "p", "r", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.GetEntity(ctx, "p", "r", nil); err == nil {
		t.Fatal("a deleted entity was read from a cached body")
	}
}

// bytes is what the cache holds.
func (c *bodyCache) bytes() int64 {
	if c == nil {
		return 0
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.used
}
