package helmtest

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/strvals"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nemocache/nemo/config"
)

// appOnly is the least a release needs: one application container.
var appOnly = map[string]any{"app": map[string]any{"containers": []any{map[string]any{"name": "app", "image": "registry.example.com/app:1.0.0"}}}}

// with returns appOnly with more values set as helm install --set sets
// them (key.path=value).
func with(t *testing.T, sets ...string) map[string]any {
	t.Helper()
	vals := map[string]any{"app": appOnly["app"]}
	for _, s := range sets {
		if err := strvals.ParseInto(s, vals); err != nil {
			t.Fatalf("--set %s: %v", s, err)
		}
	}
	return vals
}

// TestMemoryDerivedFromCacheSize: the nemo container's memory limit is
// 1.15 × (1.5 × cache.max_bytes + 64 MiB) rounded up to 64Mi, and its
// request nemo's soft limit 1.5 × cache.max_bytes + 64 MiB, for sizes in
// every spelling nemo's own parser takes (the chart parses them itself).
func TestMemoryDerivedFromCacheSize(t *testing.T) {
	const mi = 1 << 20
	for _, size := range []string{"64MiB", "256MiB", "300MB", "512MiB", "1GiB", "1.5GiB", "2Gi", "100000000", "768Mi"} {
		b, err := config.ParseByteSize(size)
		if err != nil {
			t.Fatalf("nemo refuses %q: %v", size, err)
		}
		soft := 1.5*float64(b) + 64*mi
		wantLimit := resource.MustParse(formatMi(64 * math.Ceil(1.15*soft/mi/64)))
		wantRequest := resource.MustParse(formatMi(math.Ceil(soft / mi)))
		objs, err := render("app", with(t, "config.cache.max_bytes="+size))
		if err != nil {
			t.Fatalf("%s: %v", size, err)
		}
		sts, ok := objs["StatefulSet/app"].(*appsv1.StatefulSet)
		if !ok {
			t.Fatalf("%s: no StatefulSet (embedded backend, exclusive mode by default)", size)
		}
		r := sts.Spec.Template.Spec.InitContainers[0].Resources
		if got := r.Limits[corev1.ResourceMemory]; got.Cmp(wantLimit) != 0 {
			t.Errorf("cache.max_bytes %s: memory limit %s, want %s", size, got.String(), wantLimit.String())
		}
		if got := r.Requests[corev1.ResourceMemory]; got.Cmp(wantRequest) != 0 {
			t.Errorf("cache.max_bytes %s: memory request %s, want %s", size, got.String(), wantRequest.String())
		}
		if lim := r.Limits[corev1.ResourceMemory]; float64(lim.Value()) < 1.15*soft {
			t.Errorf("cache.max_bytes %s: limit %s below 1.15 × the soft limit", size, lim.String())
		}
	}
	// A limit given explicitly wins if it is not below the derived one.
	objs, err := render("app", with(t, "resources.limits.memory=1Gi"))
	if err != nil {
		t.Fatal(err)
	}
	if got := objs["StatefulSet/app"].(*appsv1.StatefulSet).Spec.Template.Spec.InitContainers[0].Resources.Limits[corev1.ResourceMemory]; got.String() != "1Gi" {
		t.Errorf("explicit limit 1Gi rendered as %s", got.String())
	}
}

func formatMi(n float64) string { return fmt.Sprintf("%dMi", int64(n)) }

// TestRefusals: values that would run nemo unsafely or not at all fail
// to render, saying why.
func TestRefusals(t *testing.T) {
	for name, c := range map[string]struct {
		vals map[string]any
		want string
	}{
		"no application":               {map[string]any{}, "app.containers"},
		"exclusive with two replicas":  {with(t, "config.coherence.mode=exclusive", "workload.replicas=2"), "one replica"},
		"partitioned without a secret": {with(t, "config.backend.type=datastore", "config.coherence.mode=partitioned"), "peerSecret"},
		"memory limit below the bound": {with(t, "resources.limits.memory=256Mi"), "below"},
		"cache size nemo cannot parse": {with(t, "config.cache.max_bytes=lots"), "want a size"},
	} {
		_, err := render("app", c.vals)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", name, err, c.want)
		}
	}
}

// TestModesPickWorkloads: the coherence mode, as nemo resolves it, picks
// the workload: exclusive (nemo's default over the embedded store) a
// StatefulSet of one replica with a claim; shared (the default in front
// of a cloud backend) and partitioned a Deployment with an emptyDir.
func TestModesPickWorkloads(t *testing.T) {
	for name, c := range map[string]struct {
		vals map[string]any
		kind string
	}{
		"embedded, mode unset": {with(t), "StatefulSet"},
		"aztable, mode unset":  {with(t, "config.backend.type=aztable"), "Deployment"},
		"datastore, shared":    {with(t, "config.backend.type=datastore", "config.coherence.mode=shared"), "Deployment"},
		"datastore, partitioned": {with(t, "config.backend.type=datastore", "config.coherence.mode=partitioned",
			"credentials.peerSecret=peer-secret"), "Deployment"},
	} {
		objs, err := render("app", c.vals)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		w := workloadOf(t, objs, "app")
		if w.kind != c.kind {
			t.Errorf("%s: %s, want %s", name, w.kind, c.kind)
		}
		hasClaim := len(w.claims) == 1 && w.claims[0].Name == "nemo-data"
		if (w.kind == "StatefulSet") != hasClaim || (w.kind == "StatefulSet") != (w.replicas == 1) {
			t.Errorf("%s: %s with %d replicas, claims %v", name, w.kind, w.replicas, w.claims)
		}
	}
}

// TestTLSHook: a TLS Secret named in values is mounted read-only in the
// nemo container at /etc/nemo/tls, for listen.tls.cert_file and key_file.
func TestTLSHook(t *testing.T) {
	objs, err := render("app", with(t, "tls.secretName=app-tls"))
	if err != nil {
		t.Fatal(err)
	}
	w := workloadOf(t, objs, "app")
	m := mounts(w, nemoContainer(t, w))
	if got := m["/etc/nemo/tls"]; got != `secret app-tls null readOnly=true subPath=""` {
		t.Errorf("TLS mount %q", got)
	}
}

// TestLint: helm lint, strict (warnings fail), passes for each example.
func TestLint(t *testing.T) {
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range examples {
		vals, err := common.ReadValuesFile(filepath.Join(chartDir, "examples", ex.values))
		if err != nil {
			t.Fatal(err)
		}
		l := action.NewLint()
		l.Strict = true
		l.KubeVersion = kv
		res := l.Run([]string{chartDir}, vals)
		for _, m := range res.Messages {
			if m.Severity > support.InfoSev {
				t.Errorf("%s: %s", ex.values, m.Err)
			}
		}
		for _, err := range res.Errors {
			t.Errorf("%s: %v", ex.values, err)
		}
		if res.TotalChartsLinted != 1 {
			t.Errorf("%s: %d charts linted", ex.values, res.TotalChartsLinted)
		}
	}
}
