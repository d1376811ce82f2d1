package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemocache/nemo/internal/proctest"
)

// TestDashboardQueriesReturnData runs the real thing: a nemo binary (built
// from ../cmd/nemo) under a steady workload through both frontends (reads
// that hit, miss and scan, writes to a few hot entities from several
// clients, so locks are waited for), a real Prometheus (Debian's package;
// .ci/test installs it) scraping its /metrics every second, and every query
// of monitoring/dashboard.json asked of Prometheus's HTTP API: each must
// return at least one sample with a number (not NaN). The alert
// expressions must evaluate without error, and those of quietWhenServing
// be false. Both processes are stopped at the end.
func TestDashboardQueriesReturnData(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus not found: install Debian's prometheus package (.ci/test does)")
	}
	dir := t.TempDir()
	bin := proctest.Build(t, "../cmd/nemo")
	n := proctest.Start(t, exec.Command(bin, "serve"), append(proctest.FreeListeners(dir),
		"NEMO_FRONTEND_AZURE_ALLOW_ANONYMOUS=true", "NEMO_CACHE_MAX_DIRTY_AGE=200ms", "NEMO_CACHE_FLUSH_INTERVAL=100ms")...)
	addrs := n.WaitReady(t)

	promAddr := freeAddr(t)
	// The target's labels are those a nemo scraped through
	// monitoring/podmonitor.yaml has (TestPodMonitor checks the job and
	// the container name they come from).
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: nemo
    static_configs:
      - targets: [%q]
        labels: {namespace: shop, pod: orders-0, container: nemo, endpoint: http-metrics}
`, addrs["http"])
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	proctest.Start(t, exec.Command(promBin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+promAddr))

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	drive(ctx, &wg, errs, addrs["aztable"], addrs["datastore"])
	defer func() {
		stop()
		wg.Wait()
	}()

	queries := DashboardQueries(t, "monitoring/dashboard.json")
	var missing map[string]string
	deadline := time.Now().Add(90 * time.Second)
	time.Sleep(12 * time.Second) // rate windows of 10s need two scrapes in them
	for {
		missing = map[string]string{}
		for _, q := range queries {
			expr := strings.NewReplacer("$__rate_interval", "10s", "$pod", ".*").Replace(q)
			if why := hasData(promAddr, expr); why != "" {
				missing[expr] = why
			}
		}
		select {
		case err := <-errs:
			t.Fatalf("workload: %v", err)
		default:
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	for expr, why := range missing {
		t.Errorf("dashboard query returns no data (%s):\n  %s", why, expr)
	}
	var pr prometheusRule
	decodeFile(t, "monitoring/prometheusrule.yaml", &pr)
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			res, err := query(promAddr, r.Expr)
			switch {
			case err != nil:
				t.Errorf("alert %s: %v", r.Alert, err)
			case quietWhenServing[r.Alert] && len(res) > 0:
				t.Errorf("alert %s is true of a nemo that serves: %v\n  %s", r.Alert, res, r.Expr)
			}
		}
	}
	// NemoDown's and NemoMetricsAbsent's selector finds the target.
	if res, err := query(promAddr, `up{`+nemoJob+`,`+nemoContainer+`}`); err != nil || len(res) != 1 || res[0] != "1" {
		t.Errorf("nemo's up series: %v, %v; want one, 1", res, err)
	}
	if t.Failed() {
		t.Logf("nemo log tail:\n%s", tail(n.Logs(), 3000))
	}
}

// quietWhenServing are the alerts whose expression must be false of a
// nemo that serves every request: their selectors find it, and find it
// well.
var quietWhenServing = map[string]bool{"NemoDown": true, "NemoMetricsAbsent": true, "NemoRequestErrors": true, "NemoBackendDown": true, "NemoLeaseLost": true}

// drive runs the workload until ctx ends: Azure reads of a few hot
// entities (hits), of absent ones (misses), table queries (range scans),
// and writes of the hot entities from four clients (lock waits); Datastore
// lookups of absent keys and upserts, over REST.
func drive(ctx context.Context, wg *sync.WaitGroup, errs chan<- error, azure, ds string) {
	client := &http.Client{Timeout: 10 * time.Second}
	base := "http://" + azure + "/devstoreaccount1"
	do := func(method, u, body string) int {
		req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
		if err != nil {
			return 0
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json;odata=nometadata")
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				select {
				case errs <- err:
				default:
				}
			}
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	do(http.MethodPost, base+"/Tables", `{"TableName":"dash"}`)
	entity := func(i int) string { return fmt.Sprintf("%s/dash(PartitionKey='p',RowKey='r%03d')", base, i) }
	loop := func(step func(r *rand.Rand, i int)) {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(rand.Uint64(), 1))
			for i := 0; ctx.Err() == nil; i++ {
				step(r, i)
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	for range 4 { // writers of the same hot entities: lock waits
		loop(func(r *rand.Rand, i int) { do(http.MethodPut, entity(r.IntN(4)), fmt.Sprintf(`{"V":%d}`, i)) })
	}
	loop(func(r *rand.Rand, i int) {
		do(http.MethodGet, entity(r.IntN(4)), "")          // hits
		do(http.MethodGet, entity(1000+r.IntN(1<<20)), "") // misses
		do(http.MethodGet, base+"/dash()?$top=5", "")      // range scans
	})
	loop(func(r *rand.Rand, i int) {
		do(http.MethodPost, "http://"+ds+"/v1/projects/p:lookup", fmt.Sprintf(`{"keys":[{"path":[{"kind":"K","name":"n%d"}]}]}`, r.IntN(1<<20)))
		do(http.MethodPost, "http://"+ds+"/v1/projects/p:commit", fmt.Sprintf(`{"mode":"NON_TRANSACTIONAL","mutations":[{"upsert":{"key":{"path":[{"kind":"K","name":"h%d"}]}}}]}`, r.IntN(8)))
	})
}

// hasData returns "" when expr returns a sample with a number, else why
// not.
func hasData(prom, expr string) string {
	res, err := query(prom, expr)
	if err != nil {
		return err.Error()
	}
	if len(res) == 0 {
		return "empty result"
	}
	for _, v := range res {
		if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(f) {
			return ""
		}
	}
	return fmt.Sprintf("only NaN: %v", res)
}

// query asks Prometheus for expr now and returns the samples' values.
func query(prom, expr string) ([]string, error) {
	resp, err := http.Get("http://" + prom + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("prometheus: %s", body.Error)
	}
	var out []string
	for _, r := range body.Data.Result {
		if s, ok := r.Value[1].(string); ok {
			out = append(out, s)
		}
	}
	return out, nil
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
