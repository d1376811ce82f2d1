package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nemocache/nemo/adapters/storetest"
	"github.com/nemocache/nemo/proxy/node"
)

// adminFixture is a Server that is not running, with an open engine
// installed by hand, so the admin handler can be driven with httptest.
type adminFixture struct {
	s    *Server
	n    *node.Node
	h    http.Handler // the admin listener's
	http http.Handler // the HTTP listener's
}

func newAdminFixture(t testing.TB) *adminFixture {
	t.Helper()
	cfg := testConfig(t)
	s, err := New(Options{Config: cfg, Version: "v9.9.9-test", Logger: testLogger(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.adminLn.Close(); s.httpLn.Close() })
	n, err := checkedOpen(t)(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return &adminFixture{s: s, n: n, h: s.admin.Handler, http: s.http.Handler}
}

func (f *adminFixture) start() {
	f.s.node.Store(f.n)
	f.s.started.Store(true)
}

func (f *adminFixture) call(method, target string) (int, string) {
	return callHandler(f.h, method, target)
}

func callHandler(h http.Handler, method, target string) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec.Code, rec.Body.String()
}

// TestProbes: the HTTP listener answers /startupz, /healthz and /readyz
// (and the earlier /startup and /livez); the admin listener answers the
// names it served before.
func TestProbes(t *testing.T) {
	f := newAdminFixture(t)
	type want struct {
		path string
		code int
		body string
	}
	check := func(stage string, ws ...want) {
		t.Helper()
		for _, w := range ws {
			for _, h := range []struct {
				name string
				h    http.Handler
			}{{"http", f.http}, {"admin", f.h}} {
				if h.name == "admin" && (w.path == "/startupz" || w.path == "/healthz") {
					continue
				}
				code, body := callHandler(h.h, http.MethodGet, w.path)
				if code != w.code || body != w.body {
					t.Errorf("%s: %s GET %s = %d %q, want %d %q", stage, h.name, w.path, code, body, w.code, w.body)
				}
			}
		}
	}
	starting, ok, draining := "starting\n", "ok\n", "draining\n"
	check("starting",
		want{"/startupz", 503, starting}, want{"/startup", 503, starting}, want{"/healthz", 200, ok},
		want{"/livez", 200, ok}, want{"/readyz", 503, starting})
	f.start()
	check("serving",
		want{"/startupz", 200, ok}, want{"/startup", 200, ok}, want{"/healthz", 200, ok},
		want{"/livez", 200, ok}, want{"/readyz", 200, ok})
	f.s.draining.Store(true)
	check("draining",
		want{"/startupz", 200, ok}, want{"/healthz", 200, ok}, want{"/livez", 200, ok}, want{"/readyz", 503, draining})
	if code, _ := callHandler(f.http, http.MethodPost, "/readyz"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /readyz: %d", code)
	}
}

// TestHTTPListenerServesNoAdmin: the HTTP listener, which may face the
// network, serves neither pprof, nor the debug API, nor /quitquitquit.
func TestHTTPListenerServesNoAdmin(t *testing.T) {
	f := newAdminFixture(t)
	f.start()
	for _, c := range []struct{ method, path string }{
		{http.MethodPost, "/quitquitquit"}, {http.MethodGet, "/debug/pprof/"}, {http.MethodGet, "/debug/keyspaces"},
		{http.MethodGet, "/debug/records?keyspace=t"}, {http.MethodPost, "/debug/flush"},
	} {
		if code, _ := callHandler(f.http, c.method, c.path); code != http.StatusNotFound {
			t.Errorf("http listener: %s %s = %d, want 404", c.method, c.path, code)
		}
	}
	select {
	case <-f.s.quit:
		t.Fatal("the HTTP listener started a shutdown")
	default:
	}
}

func TestPprofOnAdmin(t *testing.T) {
	f := newAdminFixture(t)
	code, body := f.call(http.MethodGet, "/debug/pprof/")
	if code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Fatalf("pprof index: %d %.200q", code, body)
	}
	if code, body := f.call(http.MethodGet, "/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine profile") {
		t.Fatalf("goroutine profile: %d %.200q", code, body)
	}
}

func TestDebugAPI(t *testing.T) {
	f := newAdminFixture(t)
	for _, p := range []string{"/debug/keyspaces", "/debug/records?keyspace=t"} {
		if code, _ := f.call(http.MethodGet, p); code != http.StatusServiceUnavailable {
			t.Errorf("%s before start: %d", p, code)
		}
	}
	if code, _ := f.call(http.MethodPost, "/debug/flush"); code != http.StatusServiceUnavailable {
		t.Errorf("flush before start: %d", code)
	}
	f.start()

	ctx := context.Background()
	eng := f.n.Engine
	f.n.Buffer.OpenKeyspace("empty") // the operator's handle; "t" opens on first write
	for _, k := range []string{"a", "b", "c", "d"} {
		if err := eng.Upsert(ctx, "t", []byte(k), []byte("v-"+k)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := eng.Delete(ctx, "t", []byte("c")); err != nil {
		t.Fatal(err)
	}
	if err := eng.Upsert(ctx, "t", []byte{0xff, 0x00}, []byte("bin")); err != nil {
		t.Fatal(err)
	}
	// An open transaction holding an X lock on b.
	tx, err := eng.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Abort()
	if err := tx.Upsert(ctx, "t", []byte("b"), []byte("new")); err != nil {
		t.Fatal(err)
	}

	code, body := f.call(http.MethodGet, "/debug/keyspaces")
	if code != http.StatusOK {
		t.Fatalf("keyspaces: %d %s", code, body)
	}
	var ks struct {
		Buffer    bufferTotals    `json:"buffer"`
		Keyspaces []keyspaceStats `json:"keyspaces"`
	}
	if err := json.Unmarshal([]byte(body), &ks); err != nil {
		t.Fatal(err)
	}
	if len(ks.Keyspaces) != 2 || ks.Keyspaces[0].Name != "empty" || ks.Keyspaces[1].Name != "t" {
		t.Fatalf("keyspaces = %+v", ks.Keyspaces)
	}
	if e := ks.Keyspaces[0]; e.Records != 0 {
		t.Errorf("empty keyspace = %+v", e)
	}
	got := ks.Keyspaces[1]
	if got.Records != 5 || got.Regular != 4 || got.Tombstones != 1 || got.Dirty != 5 || got.Locked != 1 || got.KeyBytes != 6 {
		t.Errorf("keyspace t = %+v, want 5 records (4 regular, 1 tombstone), all dirty, 1 locked, 6 key bytes", got)
	}
	if ks.Buffer.DirtyBytes <= 0 || ks.Buffer.UsedBytes < ks.Buffer.DirtyBytes || ks.Buffer.MaxBytes != 256<<20-4<<20 { // the Azure body cache has 4 MiB of the default 256 MiB
		t.Errorf("buffer totals = %+v", ks.Buffer)
	}

	type recs struct {
		Keyspace  string       `json:"keyspace"`
		Records   []recordView `json:"records"`
		Truncated bool         `json:"truncated"`
	}
	list := func(q string) recs {
		t.Helper()
		code, body := f.call(http.MethodGet, "/debug/records?"+q)
		if code != http.StatusOK {
			t.Fatalf("records?%s: %d %s", q, code, body)
		}
		var r recs
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	keys := func(r recs) string {
		var ks []string
		for _, v := range r.Records {
			ks = append(ks, v.KeyHex)
		}
		return strings.Join(ks, ",")
	}
	all := list("keyspace=t")
	if keys(all) != "61,62,63,64,ff00" || all.Truncated {
		t.Fatalf("all records: %s truncated=%v", keys(all), all.Truncated)
	}
	b, c, bin := all.Records[1], all.Records[2], all.Records[4]
	if b.Key != "b" || b.Type != "regular" || !b.Dirty || b.Locks.RowX != tx.ID() {
		t.Errorf("b = %+v, want a dirty regular record X-locked by txn %d", b, tx.ID())
	}
	if c.Type != "tombstone" || !c.Dirty || c.Locks.RowX != 0 {
		t.Errorf("c = %+v, want an unlocked dirty tombstone", c)
	}
	if bin.Key != "" || bin.KeyHex != "ff00" {
		t.Errorf("binary key shown as %+v, want hex only", bin)
	}
	if r := list("keyspace=t&start=b&end=d"); keys(r) != "62,63" {
		t.Errorf("[b,d) = %s", keys(r))
	}
	if r := list("keyspace=t&start_hex=63&end_hex=ff"); keys(r) != "63,64" {
		t.Errorf("hex [63,ff) = %s", keys(r))
	}
	if r := list("keyspace=t&start=d"); keys(r) != "64,ff00" {
		t.Errorf("[d,∞) = %s", keys(r))
	}
	if r := list("keyspace=t&limit=2"); keys(r) != "61,62" || !r.Truncated {
		t.Errorf("limit 2 = %s truncated=%v", keys(r), r.Truncated)
	}

	for _, tc := range []struct {
		q    string
		code int
		msg  string
	}{
		{"", 400, "keyspace is required"},
		{"keyspace=nope", 404, "unknown keyspace"},
		{"keyspace=t&start=a&start_hex=61", 400, "give start or start_hex, not both"},
		{"keyspace=t&end_hex=zz", 400, "end_hex: encoding/hex"},
		{"keyspace=t&limit=0", 400, "limit must be an integer from 1 to 100000"},
		{"keyspace=t&limit=x", 400, "limit must be"},
		{"keyspace=t&limit=100001", 400, "limit must be"},
	} {
		code, body := f.call(http.MethodGet, "/debug/records?"+tc.q)
		if code != tc.code || !strings.Contains(body, tc.msg) {
			t.Errorf("records?%s = %d %s, want %d containing %q", tc.q, code, body, tc.code, tc.msg)
		}
	}

	tx.Abort()
	code, body = f.call(http.MethodPost, "/debug/flush")
	if code != http.StatusOK {
		t.Fatalf("flush: %d %s", code, body)
	}
	var fl struct {
		Before     int64  `json:"dirty_bytes_before"`
		After      int64  `json:"dirty_bytes_after"`
		Writebacks uint64 `json:"writebacks"`
	}
	if err := json.Unmarshal([]byte(body), &fl); err != nil {
		t.Fatal(err)
	}
	if fl.Before <= 0 || fl.After != 0 || fl.Writebacks != 5 {
		t.Errorf("flush = %s, want dirty bytes to 0 and 5 write-backs", body)
	}
	if r := list("keyspace=t"); r.Records[0].Dirty {
		t.Error("record still dirty after flush")
	}
	// The flush reached the store.
	vals, err := storetest.Values(f.n.Store.Get(ctx, "t", [][]byte{[]byte("a"), []byte("c")}))
	if err != nil || string(vals[0]) != "v-a" || vals[1] != nil {
		t.Errorf("store after flush: %q %v", vals, err)
	}
	if code, _ := f.call(http.MethodGet, "/debug/flush"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /debug/flush: %d", code)
	}
}

// TestMetricsMoveWithWorkload scrapes /metrics of a running server before
// and after a workload through a frontend.
func TestMetricsMoveWithWorkload(t *testing.T) {
	cfg := testConfig(t)
	f := &kvFrontend{}
	s, err := New(Options{Config: cfg, Version: "v1.2.3", Frontends: []Mount{kvMount(f)}, Open: checkedOpen(t), Logger: testLogger(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := runServer(ctx, s)
	defer func() { cancel(); <-done }()
	waitStatus(t, "http://"+s.HTTPAddr()+"/readyz", http.StatusOK)

	before := scrape(t, s.HTTPAddr())
	for _, name := range []string{
		`nemo_build_info{goversion="` + runtimeVersion() + `",version="v1.2.3"}`,
		`nemo_draining`, `nemo_cache_hits_total`, `nemo_cache_negative_hits_total`, `nemo_cache_misses_total`,
		`nemo_cache_range_hits_total`, `nemo_cache_range_holes_total`, `nemo_cache_evictions_total`,
		`nemo_cache_dirty_bytes`, `nemo_cache_flush_lag_seconds`, `nemo_txn_lock_conflicts_total`,
		`nemo_txn_commit_seconds_count`, `nemo_wal_fsync_seconds_sum`, `nemo_wal_fsync_seconds_count`,
		`nemo_wal_fsync_seconds_bucket{le="0.001"}`, `nemo_txn_lock_wait_seconds_bucket{le="+Inf"}`,
		`nemo_remote_request_duration_seconds_count{op="get"}`, `nemo_cache_writeback_batch_seconds_count`,
		`nemo_remote_requests_total{op="get"}`, `nemo_remote_sent_bytes_total{op="upsert"}`,
		`go_goroutines`,
	} {
		if _, ok := before[name]; !ok {
			t.Errorf("metric %s missing", name)
		}
	}
	if before["nemo_build_info"+`{goversion="`+runtimeVersion()+`",version="v1.2.3"}`] != 1 {
		t.Error("nemo_build_info is not 1")
	}

	front := "http://" + s.FrontendAddr("kv")
	for i := range 20 {
		if code, body := do(t, http.MethodPut, fmt.Sprintf("%s/kv/m/k%02d", front, i), strings.NewReader("value")); code != 204 {
			t.Fatalf("put: %d %s", code, body)
		}
	}
	for i := range 20 {
		if code, _ := get(fmt.Sprintf("%s/kv/m/k%02d", front, i)); code != 200 {
			t.Fatalf("get k%02d: %d", i, code)
		}
	}
	if code, _ := get(front + "/kv/m/absent"); code != 404 { // a miss, then a negative hit
		t.Fatalf("get absent: %d", code)
	}
	if code, _ := get(front + "/kv/m/absent"); code != 404 {
		t.Fatalf("get absent: %d", code)
	}
	mid := scrape(t, s.HTTPAddr())
	if code, body := do(t, http.MethodPost, "http://"+s.AdminAddr()+"/debug/flush", nil); code != 200 {
		t.Fatalf("flush: %d %s", code, body)
	}
	after := scrape(t, s.HTTPAddr())

	grew := func(m map[string]float64, name string, by float64) {
		t.Helper()
		if d := m[name] - before[name]; d < by {
			t.Errorf("%s grew by %v, want at least %v", name, d, by)
		}
	}
	grew(mid, "nemo_cache_hits_total", 20)
	grew(mid, "nemo_cache_misses_total", 1)
	grew(mid, "nemo_cache_negative_hits_total", 1)
	grew(mid, `nemo_remote_requests_total{op="get"}`, 1)
	grew(mid, "nemo_txn_commits_total", 20)
	grew(mid, "nemo_wal_commits_total", 20)
	grew(mid, "nemo_wal_fsync_seconds_count", 1)
	grew(mid, "nemo_wal_written_bytes_total", 20*5)
	if mid["nemo_cache_dirty_bytes"] <= 0 || mid["nemo_cache_flush_lag_seconds"] <= 0 {
		t.Errorf("dirty %v, flush lag %v after writes", mid["nemo_cache_dirty_bytes"], mid["nemo_cache_flush_lag_seconds"])
	}
	grew(mid, "nemo_txn_commit_seconds_count", 20)
	if mid["nemo_txn_commit_seconds_sum"] <= before["nemo_txn_commit_seconds_sum"] {
		t.Error("commit time did not grow")
	}
	grew(mid, `nemo_remote_request_duration_seconds_count{op="get"}`, 1)
	// Per request: 20 puts and 20 hits answered from the buffer, two 404s
	// (one asked the store, one a negative hit), by operation.
	grew(mid, `nemo_requests_total{api="kv",op="put",source="buffer",status="2xx"}`, 20)
	grew(mid, `nemo_requests_total{api="kv",op="get",source="buffer",status="2xx"}`, 20)
	grew(mid, `nemo_requests_total{api="kv",op="get",source="remote",status="4xx"}`, 1)
	grew(mid, `nemo_requests_total{api="kv",op="get",source="buffer",status="4xx"}`, 1)
	grew(mid, `nemo_request_duration_seconds_count{api="kv",op="get"}`, 22)
	grew(after, "nemo_cache_writeback_batch_seconds_count", 1)
	grew(after, "nemo_cache_writebacks_total", 20)
	grew(after, `nemo_remote_requests_total{op="upsert"}`, 1)
	grew(after, `nemo_remote_sent_bytes_total{op="upsert"}`, 20*(3+5))
	grew(after, `nemo_remote_records_total{op="upsert"}`, 20)
	if after["nemo_cache_dirty_bytes"] != 0 {
		t.Errorf("dirty bytes after flush = %v", after["nemo_cache_dirty_bytes"])
	}
	if after["nemo_draining"] != 0 {
		t.Error("nemo_draining is 1 while serving")
	}
}

// TestMetricsBeforeStart: before the engine opens, a scrape still works and
// reports only what is known.
func TestMetricsBeforeStart(t *testing.T) {
	f := newAdminFixture(t)
	code, body := f.call(http.MethodGet, "/metrics")
	if code != 200 || !strings.Contains(body, "nemo_build_info{") || !strings.Contains(body, "nemo_draining 0") {
		t.Fatalf("metrics before start: %d\n%s", code, body)
	}
	if strings.Contains(body, "nemo_cache_hits_total") {
		t.Error("cache metrics reported before the engine is open")
	}
	f.start()
	f.s.draining.Store(true)
	if _, body := f.call(http.MethodGet, "/metrics"); !strings.Contains(body, "nemo_draining 1") || !strings.Contains(body, "nemo_cache_hits_total 0") {
		t.Errorf("metrics while draining:\n%s", body)
	}
}
