package proxy

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/propagation"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/obs"
	"github.com/nemocache/nemo/internal/tlstest"
	"github.com/nemocache/nemo/proxy/aztable"
	"github.com/nemocache/nemo/proxy/datastore"
)

// TestMetricsReference compares docs/metrics.md with what /metrics
// exports after traffic through both frontends: the same nemo_* families,
// each with the documented type and labels.
func TestMetricsReference(t *testing.T) {
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	type entry struct{ typ, labels string }
	documented := map[string]entry{}
	row := regexp.MustCompile("^\\| `(nemo_[a-z_]+)` \\| (counter|gauge|histogram) \\|([^|]*)\\|")
	for _, line := range strings.Split(string(doc), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			if _, dup := documented[m[1]]; dup {
				t.Errorf("%s documented twice", m[1])
			}
			documented[m[1]] = entry{m[2], strings.Join(strings.Fields(strings.ReplaceAll(m[3], ",", " ")), ",")}
		} else if strings.HasPrefix(line, "| `nemo_") {
			t.Errorf("malformed reference row: %s", line)
		}
	}

	cfg := testConfig(t)
	// With listen.tls, whose metrics are exported then; these clients, on
	// loopback, keep plaintext.
	cfg.Listen.TLS.CertFile, cfg.Listen.TLS.KeyFile = tlstest.NewCA(t).Write(t, t.TempDir(), "nemo")
	s, err := New(Options{Config: cfg, Frontends: realFrontends(cfg), Open: checkedOpen(t), Logger: testLogger(&syncBuffer{})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := runServer(ctx, s)
	defer func() { cancel(); <-done }()
	waitStatus(t, "http://"+s.HTTPAddr()+"/readyz", http.StatusOK)
	if code, _ := get("http://" + s.FrontendAddr("aztable") + "/devstoreaccount1/Tables"); code != http.StatusOK {
		t.Fatalf("query tables: %d", code)
	}
	if code, body := do(t, http.MethodPost, "http://"+s.FrontendAddr("datastore")+"/v1/projects/p:lookup",
		strings.NewReader(`{"keys":[{"path":[{"kind":"K","name":"a"}]}]}`)); code != http.StatusOK {
		t.Fatalf("lookup: %d %s", code, body)
	}
	if code, body := do(t, http.MethodPost, "http://"+s.FrontendAddr("datastore")+"/v1/projects/p:runQuery",
		strings.NewReader(`{"query":{"kind":[{"name":"K"}]}}`)); code != http.StatusOK {
		t.Fatalf("runQuery: %d %s", code, body)
	}
	families, err := s.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	checkNames(t, families)
	ops := documentedOps(t)
	exported := map[string]entry{}
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, "nemo_") {
			continue
		}
		checkOpLabels(t, f, ops)
		var labels []string
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		slices.Sort(labels)
		exported[name] = entry{strings.ToLower(dto.MetricType_name[int32(f.GetType())]), strings.Join(labels, ",")}
	}
	for name, e := range exported {
		d, ok := documented[name]
		switch {
		case !ok:
			t.Errorf("%s (%s; labels %q) is exported but not in docs/metrics.md", name, e.typ, e.labels)
		case d != e:
			t.Errorf("%s: docs/metrics.md says %s with labels %q; /metrics has %s with %q", name, d.typ, d.labels, e.typ, e.labels)
		}
	}
	for name := range documented {
		if _, ok := exported[name]; !ok {
			t.Errorf("%s is in docs/metrics.md but not exported", name)
		}
	}
	if len(exported) < 60 {
		t.Errorf("only %d nemo families exported", len(exported))
	}
}

// checkNames fails for a family named against Prometheus's conventions
// (promlint: a counter ends in _total and nothing else does, base units,
// snake_case) or a histogram whose name does not say what one observation
// measures: its unit (_seconds, _bytes) or what it counts per what
// (nemo_wal_commits_per_sync; nemo_wal_group_commits read as a counter).
func checkNames(t *testing.T, families []*dto.MetricFamily) {
	t.Helper()
	problems, err := promlint.NewWithMetricFamilies(families).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	for _, f := range families {
		name := f.GetName()
		if f.GetType() == dto.MetricType_HISTOGRAM && !strings.HasSuffix(name, "_seconds") && !strings.HasSuffix(name, "_bytes") && !strings.Contains(name, "_per_") {
			t.Errorf("histogram %s: its name says neither the unit of an observation nor what it counts per what", name)
		}
	}
}

// documentedOps reads the operations table of docs/metrics.md: the op
// values of each api ("aztable", "datastore", and "remote" for the store
// calls' metrics).
func documentedOps(t *testing.T) map[string][]string {
	t.Helper()
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string][]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| ([a-z]+) \\| `([^`]*)` \\|").FindAllStringSubmatch(string(doc), -1) {
		ops[m[1]] = append(ops[m[1]], m[2])
	}
	return ops
}

// checkOpLabels fails for a series of f whose op label docs/metrics.md
// does not list for its api (the store calls' families: for "remote").
func checkOpLabels(t *testing.T, f *dto.MetricFamily, ops map[string][]string) {
	t.Helper()
	for _, m := range f.Metric {
		api, op := "remote", ""
		for _, l := range m.Label {
			switch l.GetName() {
			case "api":
				api = l.GetValue()
			case "op":
				op = l.GetValue()
			}
		}
		if op != "" && !slices.Contains(ops[api], op) {
			t.Errorf("%s: op %q of api %s is not in docs/metrics.md's operations", f.GetName(), op, api)
		}
	}
}

// TestOpLabelsDocumented: the op values docs/metrics.md lists are exactly
// those each frontend can give its requests (aztable.Ops, datastore.Ops,
// and "other"), the gRPC interceptor's name of every method of the
// Datastore service is one of datastore.Ops, and the store calls' op is
// adapters.Op's; every one is snake_case.
func TestOpLabelsDocumented(t *testing.T) {
	doc := documentedOps(t)
	var remote []string
	for op := adapters.Op(0); op.String() != "unknown"; op++ {
		remote = append(remote, op.String())
	}
	want := map[string][]string{
		"aztable":   append(aztable.Ops(), "other"),
		"datastore": append(datastore.Ops(), "other"),
		"remote":    remote,
	}
	snake := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	for api, ops := range want {
		slices.Sort(ops)
		got := slices.Sorted(slices.Values(doc[api]))
		if !slices.Equal(got, ops) {
			t.Errorf("docs/metrics.md lists the %s ops %v; the code gives %v", api, got, ops)
		}
		for _, op := range ops {
			if !snake.MatchString(op) {
				t.Errorf("%s op %q is not snake_case", api, op)
			}
		}
	}
	methods := datastorepb.File_google_datastore_v1_datastore_proto.Services().ByName("Datastore").Methods()
	if methods.Len() == 0 {
		t.Fatal("no methods in the Datastore service descriptor")
	}
	for i := range methods.Len() {
		full := "/google.datastore.v1.Datastore/" + string(methods.Get(i).Name())
		if op := grpcOp(full); !slices.Contains(datastore.Ops(), op) {
			t.Errorf("gRPC %s is labelled %q, not one of the Datastore ops %v", full, op, datastore.Ops())
		}
	}
}

// BenchmarkRequestBookkeeping is what each client request pays for its
// metrics and its obs.Request with tracing off: the record in the
// context, a hit noted by the buffer, the counter and the histogram.
func BenchmarkRequestBookkeeping(b *testing.B) {
	m := newRequestMetrics().api("aztable")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		c, r, span := beginRequest(ctx, "aztable", propagation.HeaderCarrier(http.Header{}))
		r.SetOp("get")
		obs.Note(c, "t", obs.Hit)
		m.end(r, span, start, class2xx)
	}
}
