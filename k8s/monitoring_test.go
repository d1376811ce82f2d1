package k8s

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// objectMeta is the metadata the monitoring objects carry.
type objectMeta struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

// podMonitor and prometheusRule are the parts of the Prometheus Operator's
// kinds that k8s/monitoring uses, decoded strictly (an unknown field
// fails).
type podMonitor struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		PodMetricsEndpoints []struct {
			Port        string `json:"port"`
			Path        string `json:"path"`
			Interval    string `json:"interval"`
			Relabelings []struct {
				TargetLabel string `json:"targetLabel"`
				Replacement string `json:"replacement"`
			} `json:"relabelings"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

func decodeFile(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// nemoJob and nemoContainer are the labels that tell nemo's series from
// other targets' (NemoDown's up{job="nemo"}) and from the application
// container's (go_* and process_* of container="nemo"): the PodMonitor's
// relabeling sets the job, and the sidecar's name in every example is
// the container label the Prometheus Operator gives its target.
const (
	nemoJob       = `job="nemo"`
	nemoContainer = `container="nemo"`
)

// TestPodMonitor: the PodMonitor selects the pods of every example
// workload, scrapes the port their nemo serves /metrics on, in a
// container named nemo, and labels its targets job="nemo".
func TestPodMonitor(t *testing.T) {
	var pm podMonitor
	decodeFile(t, "monitoring/podmonitor.yaml", &pm)
	if pm.APIVersion != "monitoring.coreos.com/v1" || pm.Kind != "PodMonitor" || len(pm.Spec.Selector.MatchLabels) == 0 {
		t.Fatalf("podmonitor.yaml: %+v", pm)
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 || pm.Spec.PodMetricsEndpoints[0].Port != "http-metrics" || pm.Spec.PodMetricsEndpoints[0].Path != "/metrics" {
		t.Fatalf("endpoints %+v, want port http-metrics path /metrics", pm.Spec.PodMetricsEndpoints)
	}
	if r := pm.Spec.PodMetricsEndpoints[0].Relabelings; len(r) != 1 || r[0].TargetLabel != "job" || `job="`+r[0].Replacement+`"` != nemoJob {
		t.Errorf("relabelings %+v, want one setting %s", r, nemoJob)
	}
	ws := workloads(load(t))
	if len(ws) == 0 {
		t.Fatal("no workloads")
	}
	for _, w := range ws {
		for k, v := range pm.Spec.Selector.MatchLabels {
			if w.pod.Labels[k] != v {
				t.Errorf("%s: pod labels %v lack %s=%s: the PodMonitor does not select it", w.name, w.pod.Labels, k, v)
			}
		}
		nemo := w.pod.Spec.InitContainers[0]
		if `container="`+nemo.Name+`"` != nemoContainer {
			t.Errorf("%s: nemo's container is named %q: the alerts and the dashboard select %s", w.name, nemo.Name, nemoContainer)
		}
		if !slices.ContainsFunc(nemo.Ports, func(p corev1.ContainerPort) bool { return p.Name == "http-metrics" }) {
			t.Errorf("%s: nemo has no port http-metrics", w.name)
		}
	}
}

// TestPrometheusRules checks the alerts with promtool (Debian's prometheus
// package; .ci/test installs it): the rules file it would load, then the
// unit tests in monitoring/rules_test.yaml, which make each alert fire on
// the series that should trip it and stay quiet otherwise.
func TestPrometheusRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install Debian's prometheus package (.ci/test does)")
	}
	var pr prometheusRule
	decodeFile(t, "monitoring/prometheusrule.yaml", &pr)
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" || len(pr.Spec.Groups) == 0 {
		t.Fatalf("prometheusrule.yaml: %+v", pr)
	}
	dir := t.TempDir()
	rules, err := yaml.Marshal(pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("monitoring/rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"nemo-rules.yaml": rules, "rules_test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"check", "rules", "nemo-rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Every alert has a unit test.
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if !bytes.Contains(tests, []byte("alertname: "+r.Alert+"\n")) {
				t.Errorf("alert %s has no test in rules_test.yaml", r.Alert)
			}
		}
	}
}

// metricName finds the metric names in a PromQL expression (an identifier
// followed by a selector, a range or an operator; label names and
// functions excluded by their prefixes).
var metricName = regexp.MustCompile(`\b((?:nemo|go|process)_[a-z_]+)\b`)

// documentedMetrics is the set of nemo_* families docs/metrics.md lists.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(nemo_[a-z_]+)` \\|").FindAllSubmatch(doc, -1) {
		out[string(m[1])] = true
	}
	return out
}

// checkMetricNames fails for a nemo_* name expr uses that docs/metrics.md
// does not list (with the _bucket, _sum and _count of its histograms).
func checkMetricNames(t *testing.T, where, expr string, known map[string]bool) {
	t.Helper()
	for _, m := range metricName.FindAllString(expr, -1) {
		if !strings.HasPrefix(m, "nemo_") {
			continue
		}
		base := m
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(m, suf); ok && known[b] {
				base = b
			}
		}
		if !known[base] {
			t.Errorf("%s uses %s, which docs/metrics.md does not list", where, m)
		}
	}
}

// scoped finds the selectors whose metric other targets export too: up
// (every target has it) and the series of every Go program or container
// (go_*, process_*, container_*). A query means nemo's only when it says
// so: up by nemo's job, the others by nemo's container.
var scoped = regexp.MustCompile(`\b(up|(?:go|process|container)_[a-z_]+)\b\s*(\{[^}]*\})?`)

// checkScoped fails for a selector in expr that scoped finds without the
// label that makes it nemo's.
func checkScoped(t *testing.T, where, expr string) {
	t.Helper()
	for _, m := range scoped.FindAllStringSubmatch(expr, -1) {
		want := nemoContainer
		if m[1] == "up" {
			want = nemoJob
		}
		if !strings.Contains(m[2], want) {
			t.Errorf("%s: %s%s does not select nemo's own series (%s)", where, m[1], m[2], want)
		}
	}
}

// TestDashboardAndRulesUseRealMetrics: the Grafana dashboard is valid JSON
// with a query in every panel, every nemo metric the dashboard and the
// alerts name is in the metrics reference (which TestMetricsReference
// compares with /metrics), and every selector of a metric that other
// containers of the pod export too names nemo's container (or, for up,
// nemo's job). TestDashboardQueriesReturnData runs each dashboard query
// against a real Prometheus scraping a real nemo.
func TestDashboardAndRulesUseRealMetrics(t *testing.T) {
	known := documentedMetrics(t)
	if len(known) < 50 {
		t.Fatalf("docs/metrics.md lists %d metrics", len(known))
	}
	exprs := DashboardQueries(t, "monitoring/dashboard.json")
	for _, e := range exprs {
		checkMetricNames(t, "dashboard", e, known)
		checkScoped(t, "dashboard", e)
	}
	var pr prometheusRule
	decodeFile(t, "monitoring/prometheusrule.yaml", &pr)
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			checkMetricNames(t, "alert "+r.Alert, r.Expr, known)
			checkScoped(t, "alert "+r.Alert, r.Expr)
		}
	}
}

// DashboardQueries returns the PromQL of every panel target of a Grafana
// dashboard file, failing t if a panel has none.
func DashboardQueries(t testing.TB, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: no title, uid or panels", file)
	}
	var out []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
			out = append(out, tg.Expr)
		}
	}
	return out
}
