package aztable

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/aztest"
)

// benchTable creates a table in Azurite holding rows entities of
// partition "p" (keys r0000...), written directly, and returns its name.
func benchTable(b *testing.B, direct *aztables.ServiceClient, rows int) string {
	b.Helper()
	ctx := context.Background()
	name := aztest.TableName("bench")
	if _, err := direct.CreateTable(ctx, name, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = direct.DeleteTable(context.Background(), name, nil) })
	tc := direct.NewClient(name)
	for i := 0; i < rows; i += 100 {
		var acts []aztables.TransactionAction
		for j := i; j < min(i+100, rows); j++ {
			e := fmt.Sprintf(`{"PartitionKey":"p","RowKey":"r%04d","N":%d,"S":"some string value %d","L":"%d","L@odata.type":"Edm.Int64"}`, j, j, j, int64(j)<<33)
			acts = append(acts, aztables.TransactionAction{ActionType: aztables.TransactionTypeInsertReplace, Entity: []byte(e)})
		}
		if _, err := tc.SubmitTransaction(ctx, acts, nil); err != nil {
			b.Fatal(err)
		}
	}
	return name
}

// throughput runs ops point reads of p/r0000 with workers goroutines and
// returns operations per second.
func throughput(b *testing.B, tc *aztables.Client, ops, workers int) float64 {
	ctx := context.Background()
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < ops; i += workers {
				if _, err := tc.GetEntity(ctx, "p", "r0000", nil); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(ops) / time.Since(start).Seconds()
}

// BenchmarkHotPointRead: the same hot entity read through the aztables
// SDK from nemo in front of Azurite (a buffer hit) and from Azurite
// directly, 8 concurrent clients each. Reports both throughputs and their
// ratio (target >= 10x).
func BenchmarkHotPointRead(b *testing.B) {
	url := aztest.Azurite(b)
	direct := service(b, url, aztest.Key)
	name := benchTable(b, direct, 1)
	n := overAzurite(b)
	viaNemo := service(b, n.URL, aztest.Key).NewClient(name)
	viaAzurite := direct.NewClient(name)
	throughput(b, viaNemo, 100, 8) // warm the buffer and the connections
	throughput(b, viaAzurite, 100, 8)
	b.ResetTimer()
	nemoOps := throughput(b, viaNemo, b.N, 8)
	b.StopTimer()
	azOps := throughput(b, viaAzurite, min(max(b.N, 200), 2000), 8)
	b.ReportMetric(nemoOps, "nemo-ops/s")
	b.ReportMetric(azOps, "azurite-ops/s")
	b.ReportMetric(nemoOps/azOps, "speedup")
}

// signedGet is a Shared Key Lite signed GET of url, valid for 15 minutes.
func signedGet(b testing.TB, url, resource string) *http.Request {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	date := time.Now().UTC().Format(http.TimeFormat)
	key, _ := base64.StdEncoding.DecodeString(aztest.Key)
	h := hmac.New(sha256.New, key)
	h.Write([]byte(date + "\n/" + aztest.Account + resource))
	req.Header.Set("x-ms-date", date)
	req.Header.Set("x-ms-version", "2019-02-02")
	req.Header.Set("Accept", "application/json;odata=minimalmetadata")
	req.Header.Set("Authorization", "SharedKeyLite "+aztest.Account+":"+base64.StdEncoding.EncodeToString(h.Sum(nil)))
	return req
}

// latencies sends req n times, one at a time, and returns each latency.
func latencies(b *testing.B, c *http.Client, req *http.Request, n int) []time.Duration {
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
		out = append(out, time.Since(t0))
	}
	return out
}

func p50(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// BenchmarkRangeQuery100: a 100-row key-range query from nemo's buffer
// (nemo in front of Azurite, range already buffered) and from Azurite
// directly, through the SDK and as a bare signed GET (the SDK's own JSON
// decoding costs about 1 ms per 100 rows, the same for both servers).
// Reports the medians and their ratios.
func BenchmarkRangeQuery100(b *testing.B) {
	url := aztest.Azurite(b)
	direct := service(b, url, aztest.Key)
	name := benchTable(b, direct, 300)
	n := overAzurite(b)
	ctx := context.Background()
	opts := &aztables.ListEntitiesOptions{Filter: to.Ptr("PartitionKey eq 'p' and RowKey ge 'r0100' and RowKey lt 'r0200'")}
	query := func(tc *aztables.Client) time.Duration {
		t0 := time.Now()
		page, err := tc.NewListEntitiesPager(opts).NextPage(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(page.Entities) != 100 {
			b.Fatalf("%d rows", len(page.Entities))
		}
		return time.Since(t0)
	}
	viaNemo := service(b, n.URL, aztest.Key).NewClient(name)
	viaAzurite := direct.NewClient(name)
	for i := 0; i < 10; i++ { // the first fills the buffer
		query(viaNemo)
		query(viaAzurite)
	}
	var nemoLat, azLat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		nemoLat = append(nemoLat, query(viaNemo))
		if i < 500 {
			b.StopTimer()
			azLat = append(azLat, query(viaAzurite))
			b.StartTimer()
		}
	}
	b.StopTimer()
	np, ap := p50(nemoLat), p50(azLat)
	b.ReportMetric(float64(np.Nanoseconds())/1e3, "nemo-p50-µs")
	b.ReportMetric(float64(ap.Nanoseconds())/1e3, "azurite-p50-µs")
	b.ReportMetric(float64(ap)/float64(np), "speedup")

	q := "?%24filter=PartitionKey%20eq%20%27p%27%20and%20RowKey%20ge%20%27r0100%27%20and%20RowKey%20lt%20%27r0200%27"
	path := "/" + aztest.Account + "/" + name + "()"
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	nemoRaw := p50(latencies(b, c, signedGet(b, n.base+path+q, path), 300))
	azRaw := p50(latencies(b, c, signedGet(b, url+"/"+name+"()"+q, path), 300))
	b.ReportMetric(float64(nemoRaw.Nanoseconds())/1e3, "nemo-raw-p50-µs")
	b.ReportMetric(float64(azRaw.Nanoseconds())/1e3, "azurite-raw-p50-µs")
	b.ReportMetric(float64(azRaw)/float64(nemoRaw), "raw-speedup")
	if st := n.Buf.Stats(); st.RangeFetches > 2 {
		b.Fatalf("the range was fetched %d times: not served from the buffer", st.RangeFetches)
	}
}

// throughputFor reads the entities p/r0000..p/r<keys-1> round robin with
// workers goroutines for d and returns operations per second and the
// number of operations.
func throughputFor(b *testing.B, tc *aztables.Client, keys, workers int, d time.Duration) (float64, int) {
	ctx := context.Background()
	var wg sync.WaitGroup
	var total atomic.Int64
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i := w; time.Since(start) < d; i += workers {
				if _, err := tc.GetEntity(ctx, "p", fmt.Sprintf("r%04d", i%keys), nil); err != nil {
					b.Error(err)
					return
				}
				n++
			}
			total.Add(int64(n))
		}()
	}
	wg.Wait()
	n := int(total.Load())
	return float64(n) / time.Since(start).Seconds(), n
}

// BenchmarkSharedHotPointRead: hot point reads (100 entities, round
// robin, 8 concurrent clients through the aztables SDK) from nemo in
// coherence mode shared with max_staleness 1s in front of Azurite, and
// from Azurite directly, 3 s each in one run. Each entity is fetched again
// once its knowledge is a second old, so the remote reads per operation
// are reported beside the ratio (target >= 8x).
func BenchmarkSharedHotPointRead(b *testing.B) {
	url := aztest.Azurite(b)
	direct := service(b, url, aztest.Key)
	const keys, workers = 100, 8
	d := 3 * time.Second
	name := benchTable(b, direct, keys)
	counted := adapters.Count(azuriteStoreMemo(b, -1))
	n := startShared(b, counted, cache.Options{MaxStaleness: time.Second})
	n.NoCheck = "the benchmark measures; the tests check"
	viaNemo := service(b, n.URL, aztest.Key).NewClient(name)
	viaAzurite := direct.NewClient(name)
	throughputFor(b, viaNemo, keys, workers, 200*time.Millisecond) // warm the buffer and the connections
	throughputFor(b, viaAzurite, keys, workers, 200*time.Millisecond)
	before := counted.Stats()[adapters.OpGet].Requests
	b.ResetTimer()
	nemoOps, ops := throughputFor(b, viaNemo, keys, workers, d)
	b.StopTimer()
	gets := counted.Stats()[adapters.OpGet].Requests - before
	azOps, _ := throughputFor(b, viaAzurite, keys, workers, d)
	b.ReportMetric(nemoOps, "nemo-ops/s")
	b.ReportMetric(azOps, "azurite-ops/s")
	b.ReportMetric(nemoOps/azOps, "speedup")
	b.ReportMetric(float64(gets)/float64(ops), "remote-gets/op")
}
