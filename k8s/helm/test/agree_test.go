package helmtest

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nemocache/nemo/config"
)

// workload is what the comparison reads of a Deployment or StatefulSet.
type workload struct {
	kind     string
	replicas int32
	selector *metav1.LabelSelector
	pod      corev1.PodTemplateSpec
	claims   []corev1.PersistentVolumeClaim
	sts      *appsv1.StatefulSet
}

func workloadOf(t *testing.T, objs map[string]runtime.Object, name string) workload {
	t.Helper()
	if d, ok := objs["Deployment/"+name].(*appsv1.Deployment); ok {
		return workload{kind: "Deployment", replicas: deref(d.Spec.Replicas), selector: d.Spec.Selector, pod: d.Spec.Template}
	}
	if s, ok := objs["StatefulSet/"+name].(*appsv1.StatefulSet); ok {
		return workload{kind: "StatefulSet", replicas: deref(s.Spec.Replicas), selector: s.Spec.Selector, pod: s.Spec.Template, claims: s.Spec.VolumeClaimTemplates, sts: s}
	}
	t.Fatalf("no Deployment or StatefulSet %s", name)
	return workload{}
}

func deref(n *int32) int32 {
	if n == nil {
		return 1
	}
	return *n
}

// TestExamplesAgreeWithManifests: each example's values render the
// workload of its plain manifest in k8s/, in everything that decides how
// it runs.
func TestExamplesAgreeWithManifests(t *testing.T) {
	secrets := loadPlain(t, "secret.example.yaml")
	for _, ex := range examples {
		t.Run(ex.values, func(t *testing.T) {
			chart := renderExample(t, ex.values, ex.release, nil)
			plain := loadPlain(t, ex.plain, "configmap.yaml", "networkpolicy.yaml")
			c, p := workloadOf(t, chart, ex.release), workloadOf(t, plain, ex.release)
			compareWorkloads(t, c, p)
			cn, pn := nemoContainer(t, c), nemoContainer(t, p)
			compareNemo(t, cn, pn)
			compareMounts(t, c, cn, p, pn)
			cc := effectiveConfig(t, chart, secrets, c, cn)
			pc := effectiveConfig(t, plain, secrets, p, pn)
			if cc != pc {
				t.Errorf("nemo's effective configuration differs (%s)", lineDiff(cc, pc))
			}
			compareServices(t, chart, plain, p)
			np := ex.release + "-ingress"
			cp, ok1 := chart["NetworkPolicy/"+np].(*networkingv1.NetworkPolicy)
			pp, ok2 := plain["NetworkPolicy/"+np].(*networkingv1.NetworkPolicy)
			if !ok1 || !ok2 || !equality.Semantic.DeepEqual(cp.Spec, pp.Spec) {
				t.Errorf("NetworkPolicy %s differs:\nchart %s\nplain %s", np, js(cp), js(pp))
			}
		})
	}
}

func compareWorkloads(t *testing.T, c, p workload) {
	t.Helper()
	same := func(what string, a, b any) {
		if !equality.Semantic.DeepEqual(a, b) {
			t.Errorf("%s differs:\nchart %s\nplain %s", what, js(a), js(b))
		}
	}
	same("kind", c.kind, p.kind)
	same("replicas", c.replicas, p.replicas)
	same("selector", c.selector, p.selector)
	same("terminationGracePeriodSeconds", c.pod.Spec.TerminationGracePeriodSeconds, p.pod.Spec.TerminationGracePeriodSeconds)
	same("pod securityContext", c.pod.Spec.SecurityContext, p.pod.Spec.SecurityContext)
	same("application containers", c.pod.Spec.Containers, p.pod.Spec.Containers)
	// The chart adds its own labels (instance, chart) and the config's
	// checksum annotation: the plain ones must all be there.
	for what, m := range map[string][2]map[string]string{"pod labels": {c.pod.Labels, p.pod.Labels}, "pod annotations": {c.pod.Annotations, p.pod.Annotations}} {
		for k, v := range m[1] {
			if m[0][k] != v {
				t.Errorf("%s: chart has %s=%q, plain %q", what, k, m[0][k], v)
			}
		}
	}
	sel, err := metav1.LabelSelectorAsSelector(c.selector)
	if err != nil || !sel.Matches(labels.Set(c.pod.Labels)) {
		t.Errorf("selector %v does not select the pod labels %v", c.selector, c.pod.Labels)
	}
	if (c.sts == nil) != (p.sts == nil) {
		return
	}
	if c.sts != nil {
		same("serviceName", c.sts.Spec.ServiceName, p.sts.Spec.ServiceName)
		same("updateStrategy", c.sts.Spec.UpdateStrategy, p.sts.Spec.UpdateStrategy)
		same("persistentVolumeClaimRetentionPolicy", c.sts.Spec.PersistentVolumeClaimRetentionPolicy, p.sts.Spec.PersistentVolumeClaimRetentionPolicy)
		if len(c.claims) != len(p.claims) {
			t.Errorf("%d claim templates, plain %d", len(c.claims), len(p.claims))
		}
		for i := range min(len(c.claims), len(p.claims)) {
			same("claim template "+p.claims[i].Name, c.claims[i].Spec, p.claims[i].Spec)
			same("claim template name", c.claims[i].Name, p.claims[i].Name)
		}
	}
}

func nemoContainer(t *testing.T, w workload) corev1.Container {
	t.Helper()
	if len(w.pod.Spec.InitContainers) != 1 || w.pod.Spec.InitContainers[0].Name != "nemo" {
		t.Fatalf("want the one init container nemo, got %d", len(w.pod.Spec.InitContainers))
	}
	return w.pod.Spec.InitContainers[0]
}

// compareNemo: the sidecar itself, field by field. Its environment and
// mounts are compared through what they amount to (effectiveConfig,
// compareMounts): the chart writes into the file what the plain manifests
// set with NEMO_* variables.
func compareNemo(t *testing.T, c, p corev1.Container) {
	t.Helper()
	for what, pair := range map[string][2]any{
		"image":           {c.Image, p.Image},
		"args":            {c.Args, p.Args},
		"command":         {c.Command, p.Command},
		"restartPolicy":   {c.RestartPolicy, p.RestartPolicy},
		"ports":           {c.Ports, p.Ports},
		"startupProbe":    {c.StartupProbe, p.StartupProbe},
		"livenessProbe":   {c.LivenessProbe, p.LivenessProbe},
		"readinessProbe":  {c.ReadinessProbe, p.ReadinessProbe},
		"lifecycle":       {c.Lifecycle, p.Lifecycle},
		"resources":       {c.Resources, p.Resources},
		"securityContext": {c.SecurityContext, p.SecurityContext},
	} {
		if !equality.Semantic.DeepEqual(pair[0], pair[1]) {
			t.Errorf("nemo's %s differs:\nchart %s\nplain %s", what, js(pair[0]), js(pair[1]))
		}
	}
}

// compareMounts: each of nemo's mounts is at the same path, with the same
// access, on a volume of the same source (a ConfigMap, whatever its name;
// the same Secret items; an emptyDir of the same size; a claim template
// of the same spec).
func compareMounts(t *testing.T, c workload, cn corev1.Container, p workload, pn corev1.Container) {
	t.Helper()
	cm, pm := mounts(c, cn), mounts(p, pn)
	if !maps.Equal(cm, pm) {
		t.Errorf("nemo's mounts differ:\nchart %v\nplain %v", cm, pm)
	}
}

func mounts(w workload, c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, vm := range c.VolumeMounts {
		src := "missing"
		for _, v := range w.pod.Spec.Volumes {
			if v.Name != vm.Name {
				continue
			}
			switch s := v.VolumeSource; {
			case s.ConfigMap != nil:
				src = "configMap " + js(s.ConfigMap.Items)
			case s.Secret != nil:
				src = "secret " + s.Secret.SecretName + " " + js(s.Secret.Items)
			case s.EmptyDir != nil:
				src = "emptyDir " + js(s.EmptyDir)
			default:
				src = js(s)
			}
		}
		for _, pc := range w.claims {
			if pc.Name == vm.Name {
				src = "claim " + js(pc.Spec)
			}
		}
		out[vm.MountPath] = fmt.Sprintf("%s readOnly=%v subPath=%q", src, vm.ReadOnly, vm.SubPath)
	}
	return out
}

// compareServices: every plain Service of the workload has its twin in
// the chart, of the same spec.
func compareServices(t *testing.T, chart, plain map[string]runtime.Object, w workload) {
	t.Helper()
	for key, o := range plain {
		ps, ok := o.(*corev1.Service)
		if !ok {
			continue
		}
		cs, ok := chart[key].(*corev1.Service)
		if !ok {
			t.Errorf("the chart renders no %s", key)
			continue
		}
		if !equality.Semantic.DeepEqual(cs.Spec, ps.Spec) {
			t.Errorf("%s differs:\nchart %s\nplain %s", key, js(cs.Spec), js(ps.Spec))
		}
	}
}

// effectiveConfig is nemo's configuration as the container would load it:
// its ConfigMap file under its environment, secret references resolved
// from k8s/secret.example.yaml and field references as placeholders,
// rendered as config print would (secrets included, to compare them).
func effectiveConfig(t *testing.T, objs, secrets map[string]runtime.Object, w workload, c corev1.Container) string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, ok := secrets["Secret/"+ref.Name].(*corev1.Secret)
			if !ok {
				t.Fatalf("env %s: no Secret %s", e.Name, ref.Name)
			}
			v, ok := s.StringData[ref.Key]
			if !ok {
				t.Fatalf("env %s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = v
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = "field:" + e.ValueFrom.FieldRef.FieldPath
		default:
			t.Fatalf("env %s: unsupported valueFrom", e.Name)
		}
	}
	file := env["NEMO_CONFIG"]
	dir, key := filepath.Split(file)
	var text *string
	for _, vm := range c.VolumeMounts {
		if filepath.Clean(vm.MountPath) != filepath.Clean(dir) {
			continue
		}
		for _, v := range w.pod.Spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				if cm, ok := objs["ConfigMap/"+v.ConfigMap.Name].(*corev1.ConfigMap); ok {
					if s, ok := cm.Data[key]; ok {
						text = &s
					}
				}
			}
		}
	}
	if text == nil {
		t.Fatalf("NEMO_CONFIG %q is no key of a mounted ConfigMap", file)
	}
	env["NEMO_CONFIG"] = filepath.Join(t.TempDir(), key)
	if err := os.WriteFile(env["NEMO_CONFIG"], []byte(*text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(config.LoadOptions{Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatalf("nemo would refuse this configuration: %v", err)
	}
	out, err := cfg.YAML()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// lineDiff names the lines of the chart's configuration (+) and the plain
// one's (-) that the other lacks, for failure messages.
func lineDiff(chart, plain string) string {
	var out []string
	cl, pl := strings.Split(chart, "\n"), strings.Split(plain, "\n")
	for _, l := range cl {
		if !slices.Contains(pl, l) {
			out = append(out, "+"+strings.TrimSpace(l))
		}
	}
	for _, l := range pl {
		if !slices.Contains(cl, l) {
			out = append(out, "-"+strings.TrimSpace(l))
		}
	}
	return strings.Join(out, ", ")
}

// js renders v as JSON for failure messages.
func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

// TestMonitoringAgrees: the chart's PodMonitor scrapes as
// k8s/monitoring/podmonitor.yaml does, selecting the release's pods; its
// PrometheusRule holds the alerts of k8s/monitoring/prometheusrule.yaml and
// its dashboard ConfigMap k8s/monitoring/dashboard.json, which the chart
// carries as copies (files/) that must stay identical.
func TestMonitoringAgrees(t *testing.T) {
	for _, f := range []string{"prometheusrule.yaml", "dashboard.json"} {
		chartCopy, err1 := os.ReadFile(filepath.Join(chartDir, "files", f))
		plain, err2 := os.ReadFile(filepath.Join(plainDir, "monitoring", f))
		if err1 != nil || err2 != nil || string(chartCopy) != string(plain) {
			t.Errorf("k8s/helm/nemo/files/%s is not k8s/monitoring/%s (%v, %v): cp k8s/monitoring/%[1]s k8s/helm/nemo/files/", f, f, err1, err2)
		}
	}
	ex := examples[0]
	chart := renderExample(t, ex.values, ex.release, nil)
	plain := loadPlain(t, "monitoring/podmonitor.yaml", "monitoring/prometheusrule.yaml")
	pod := workloadOf(t, chart, ex.release).pod

	cm, ok1 := chart["PodMonitor/"+ex.release+"-nemo"].(*monitoringv1.PodMonitor)
	pm, ok2 := plain["PodMonitor/nemo"].(*monitoringv1.PodMonitor)
	if !ok1 || !ok2 {
		t.Fatalf("PodMonitor missing: chart %v, plain %v", ok1, ok2)
	}
	if !equality.Semantic.DeepEqual(cm.Spec.PodMetricsEndpoints, pm.Spec.PodMetricsEndpoints) {
		t.Errorf("PodMonitor endpoints differ:\nchart %s\nplain %s", js(cm.Spec.PodMetricsEndpoints), js(pm.Spec.PodMetricsEndpoints))
	}
	for name, sel := range map[string]metav1.LabelSelector{"chart": cm.Spec.Selector, "plain": pm.Spec.Selector} {
		s, err := metav1.LabelSelectorAsSelector(&sel)
		if err != nil || !s.Matches(labels.Set(pod.Labels)) {
			t.Errorf("the %s PodMonitor's selector %v does not select the chart's pods %v", name, sel.MatchLabels, pod.Labels)
		}
	}
	// Another release's pods are not this PodMonitor's: two releases in a
	// namespace must not scrape each other's pods twice.
	other := maps.Clone(pod.Labels)
	other["app.kubernetes.io/name"] = "someone-else"
	if s, _ := metav1.LabelSelectorAsSelector(&cm.Spec.Selector); s.Matches(labels.Set(other)) {
		t.Errorf("the chart's PodMonitor selects other releases' pods: %v", cm.Spec.Selector.MatchLabels)
	}

	cr, ok1 := chart["PrometheusRule/"+ex.release+"-nemo"].(*monitoringv1.PrometheusRule)
	pr, ok2 := plain["PrometheusRule/nemo"].(*monitoringv1.PrometheusRule)
	if !ok1 || !ok2 || len(pr.Spec.Groups) == 0 || !equality.Semantic.DeepEqual(cr.Spec, pr.Spec) {
		t.Errorf("PrometheusRule differs from k8s/monitoring/prometheusrule.yaml (rendered %v, plain %v)", ok1, ok2)
	}

	dash, ok := chart["ConfigMap/"+ex.release+"-nemo-dashboard"].(*corev1.ConfigMap)
	want, err := os.ReadFile(filepath.Join(plainDir, "monitoring", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !ok || strings.TrimSpace(dash.Data["nemo.json"]) != strings.TrimSpace(string(want)) {
		t.Error("the dashboard ConfigMap does not hold k8s/monitoring/dashboard.json")
	}
}
