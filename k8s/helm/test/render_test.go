package helmtest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// chartDir is the chart under test, and plainDir the plain manifests the
// examples are checked against.
const (
	chartDir = "../nemo"
	plainDir = "../.."
)

// examples maps each values file in the chart's examples/ to the plain
// manifest it reproduces and the release name that gives the plain
// workload's name.
var examples = []struct{ values, plain, release string }{
	{"shared.yaml", "deployment-shared.yaml", "orders"},
	{"exclusive.yaml", "statefulset-exclusive.yaml", "ledger"},
	{"partitioned.yaml", "deployment-partitioned.yaml", "inventory"},
}

// kubeVersion is the cluster version the chart is rendered for (the chart
// needs 1.29+: native sidecars).
const kubeVersion = "v1.31.0"

// strictDecoder decodes YAML into the Kubernetes API types client-go
// registers and the Prometheus Operator's, as the API server does: an
// unknown, misspelt or duplicate field is an error, and so is a kind no
// scheme knows.
var strictDecoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := monitoringv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	return json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Yaml: true, Strict: true})
}()

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeAll decodes every YAML document of text strictly, keyed
// kind/name; a document holding only comments is skipped.
func decodeAll(text string) (map[string]runtime.Object, error) {
	objs := map[string]runtime.Object{}
	for i, doc := range docSep.Split(text, -1) {
		if isBlank(doc) {
			continue
		}
		obj, gvk, err := strictDecoder.Decode([]byte(doc), nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		meta, err := metaOf(obj)
		if err != nil {
			return nil, err
		}
		key := gvk.Kind + "/" + meta.GetName()
		if objs[key] != nil {
			return nil, fmt.Errorf("two objects %s", key)
		}
		objs[key] = obj
	}
	return objs, nil
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return m, nil
}

func isBlank(doc string) bool {
	for _, l := range strings.Split(doc, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// render renders the chart as helm install or helm template would, for a
// release of the given name, with the values of the files (in order) and
// then the overrides; it returns every object decoded strictly.
func render(release string, overrides map[string]any, valuesFiles ...string) (map[string]runtime.Object, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	vals := map[string]any{}
	for _, f := range valuesFiles {
		v, err := common.ReadValuesFile(f)
		if err != nil {
			return nil, err
		}
		vals = chartutil.MergeTables(v, vals)
	}
	vals = chartutil.MergeTables(overrides, vals)
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, err
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	top, err := chartutil.ToRenderValues(ch, vals, common.ReleaseOptions{Name: release, Namespace: "default", IsInstall: true, Revision: 1}, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return nil, err
	}
	var all strings.Builder
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		all.WriteString("\n---\n" + files[name])
	}
	return decodeAll(all.String())
}

// renderExample renders one example's values under its release name.
func renderExample(t *testing.T, values, release string, overrides map[string]any) map[string]runtime.Object {
	t.Helper()
	objs, err := render(release, overrides, filepath.Join(chartDir, "examples", values))
	if err != nil {
		t.Fatalf("%s: %v", values, err)
	}
	return objs
}

// loadPlain decodes the given files of the plain manifests strictly.
func loadPlain(t *testing.T, files ...string) map[string]runtime.Object {
	t.Helper()
	objs := map[string]runtime.Object{}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(plainDir, f))
		if err != nil {
			t.Fatal(err)
		}
		m, err := decodeAll(string(data))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for k, v := range m {
			objs[k] = v
		}
	}
	return objs
}

// TestStrictDecoding: the decoder refuses what the API server would, in
// the core kinds and the Prometheus Operator's alike.
func TestStrictDecoding(t *testing.T) {
	for name, doc := range map[string]string{
		"misspelt field":  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndatta:\n  a: b\n",
		"nested typo":     "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  template:\n    spec:\n      initContainers:\n        - name: nemo\n          restartpolicy: Always\n",
		"duplicate field": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  name: y\n",
		"unknown kind":    "apiVersion: v1\nkind: Podd\nmetadata:\n  name: x\n",
		"monitor typo":    "apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata:\n  name: x\nspec:\n  podMetricsEndpoint:\n    - port: http-metrics\n",
		"rule typo":       "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: x\nspec:\n  groups:\n    - name: g\n      rules:\n        - alert: A\n          expression: up\n",
	} {
		if _, err := decodeAll(doc); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
	if _, err := decodeAll("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: b\n"); err != nil {
		t.Errorf("a valid ConfigMap: %v", err)
	}
}

// TestExamplesRender: each example renders, every object decodes strictly,
// and the set of objects is what the example needs.
func TestExamplesRender(t *testing.T) {
	want := map[string][]string{
		"shared.yaml": {"ConfigMap/orders-nemo", "ConfigMap/orders-nemo-dashboard", "Deployment/orders",
			"NetworkPolicy/orders-ingress", "PodMonitor/orders-nemo", "PrometheusRule/orders-nemo"},
		"exclusive.yaml":   {"ConfigMap/ledger-nemo", "NetworkPolicy/ledger-ingress", "Service/ledger", "StatefulSet/ledger"},
		"partitioned.yaml": {"ConfigMap/inventory-nemo", "Deployment/inventory", "NetworkPolicy/inventory-ingress", "Service/inventory-peers"},
	}
	for _, ex := range examples {
		t.Run(ex.values, func(t *testing.T) {
			objs := renderExample(t, ex.values, ex.release, nil)
			got := slices.Sorted(func(yield func(string) bool) {
				for k := range objs {
					if !yield(k) {
						return
					}
				}
			})
			if !slices.Equal(got, want[ex.values]) {
				t.Errorf("objects %v, want %v", got, want[ex.values])
			}
		})
	}
}
