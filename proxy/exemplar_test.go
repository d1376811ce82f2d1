package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/nemocache/nemo/internal/obs"
)

// TestMetricsOpenMetricsExemplars: /metrics answers OpenMetrics to a
// scraper that asks for it (as Prometheus does), and the request-duration
// histogram carries, on the bucket of a traced request, an exemplar with
// that request's trace ID; a request whose trace is not sampled adds none;
// the classic text format stays the default, without exemplars, and
// promtool (Debian's prometheus package, which .ci/test installs) accepts
// it (promtool check metrics reads only that format).
func TestMetricsOpenMetricsExemplars(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	// Requests without a sampled parent are not sampled: they add no
	// exemplar.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	obs.EnableTracing(tp)
	t.Cleanup(func() { obs.EnableTracing(nil); tp.Shutdown(context.Background()) })

	cfg := testConfig(t)
	s, err := New(Options{Config: cfg, Frontends: realFrontends(cfg), Open: checkedOpen(t), Logger: testLogger(&syncBuffer{})})
	if err != nil {
		t.Fatal(err)
	}
	done := runServer(context.Background(), s)
	t.Cleanup(func() {
		s.Quit()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	waitStatus(t, "http://"+s.HTTPAddr()+"/readyz", http.StatusOK)

	sc := newParent(t, 9)
	send := func(path, body, traceparent string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.FrontendAddr("aztable")+"/devstoreaccount1"+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if traceparent != "" {
			req.Header.Set("Traceparent", traceparent)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusNoContent {
			t.Fatalf("POST %s: %s", path, resp.Status)
		}
	}
	send("/Tables", `{"TableName":"exemplars"}`, traceparent(sc))
	send("/exemplars", `{"PartitionKey":"p","RowKey":"r"}`, "") // untraced

	scrapeAs := func(accept string) (string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.HTTPAddr()+"/metrics", nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("Content-Type"), string(b)
	}
	// Prometheus' own Accept header for a scrape.
	ct, om := scrapeAs("application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2")
	if !strings.HasPrefix(ct, "application/openmetrics-text") || !strings.HasSuffix(om, "# EOF\n") {
		t.Fatalf("OpenMetrics scrape: Content-Type %q, ends %q", ct, om[max(0, len(om)-20):])
	}
	ex := regexp.MustCompile(`(?m)^nemo_request_duration_seconds_bucket\{api="aztable",op="([a-z_]+)",le="[^"]+"\} \d+ # \{trace_id="([0-9a-f]{32})"\} \S+`)
	ops := map[string]string{}
	for _, m := range ex.FindAllStringSubmatch(om, -1) {
		ops[m[1]] = m[2]
	}
	if len(ops) != 1 || ops["create_table"] != sc.TraceID().String() {
		t.Errorf("exemplars by op %v, want only create_table with trace %s:\n%s", ops, sc.TraceID(), om)
	}
	ct, text := scrapeAs("")
	if !strings.HasPrefix(ct, "text/plain") || strings.Contains(text, "trace_id") {
		t.Errorf("default scrape: Content-Type %q, exemplars in the classic format: %t", ct, strings.Contains(text, "trace_id"))
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install Debian's prometheus package (.ci/test does)")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out.String())
	}
}

// TestObserveDurationUntracedAllocates: without a sampled trace (tracing
// off: a noop span) recording a latency allocates nothing, as Observe.
func TestObserveDurationUntracedAllocates(t *testing.T) {
	h := newRequestMetrics().duration.WithLabelValues("aztable", "get_entity")
	if n := testing.AllocsPerRun(100, func() { observeDuration(h, 0.001, noop.Span{}) }); n != 0 {
		t.Errorf("%v allocations per untraced observation, want 0", n)
	}
}
