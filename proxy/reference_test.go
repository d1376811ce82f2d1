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

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/propagation"

	"github.com/nemocache/nemo/internal/obs"
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
	families, err := s.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]entry{}
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, "nemo_") {
			continue
		}
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

// BenchmarkRequestBookkeeping is what each client request pays for its
// metrics and its obs.Request with tracing off: the record in the
// context, a hit noted by the buffer, the counter and the histogram.
func BenchmarkRequestBookkeeping(b *testing.B) {
	m := newRequestMetrics()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		c, r, span := beginRequest(ctx, "aztable", propagation.HeaderCarrier(http.Header{}))
		r.SetOp("get")
		obs.Note(c, "t", obs.Hit)
		m.end("aztable", r, span, start, "2xx", nil)
	}
}
