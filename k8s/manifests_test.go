package k8s

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/dockerfile"
	"github.com/nemocache/nemo/internal/enum"
	"github.com/nemocache/nemo/internal/loopback"
	"github.com/nemocache/nemo/txn"
)

// apiVersions is every kind the manifests may contain, with its API group.
var apiVersions = map[string]string{
	"ConfigMap":     "v1",
	"Secret":        "v1",
	"Service":       "v1",
	"Deployment":    "apps/v1",
	"StatefulSet":   "apps/v1",
	"NetworkPolicy": "networking.k8s.io/v1",
}

// manifests is every object in k8s/*.yaml, decoded strictly.
type manifests struct {
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	services     map[string]*corev1.Service
	deployments  map[string]*appsv1.Deployment
	statefulSets map[string]*appsv1.StatefulSet
	netPolicies  map[string]*networkingv1.NetworkPolicy
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeStrict decodes one YAML document into the typed object its kind
// names, refusing unknown, misspelt and duplicate fields.
func decodeStrict(doc []byte) (any, string, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, "", err
	}
	want, ok := apiVersions[tm.Kind]
	if !ok {
		return nil, tm.Kind, fmt.Errorf("unexpected kind %q", tm.Kind)
	}
	if tm.APIVersion != want {
		return nil, tm.Kind, fmt.Errorf("%s has apiVersion %q, want %q", tm.Kind, tm.APIVersion, want)
	}
	var obj any
	switch tm.Kind {
	case "ConfigMap":
		obj = &corev1.ConfigMap{}
	case "Secret":
		obj = &corev1.Secret{}
	case "Service":
		obj = &corev1.Service{}
	case "Deployment":
		obj = &appsv1.Deployment{}
	case "StatefulSet":
		obj = &appsv1.StatefulSet{}
	case "NetworkPolicy":
		obj = &networkingv1.NetworkPolicy{}
	}
	// Decode the way the API server does: case-sensitive field names
	// (encoding/json would take "restartpolicy" for restartPolicy), no
	// unknown and no duplicate fields.
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, tm.Kind, err
	}
	strict, err := kjson.UnmarshalStrict(js, obj)
	if err != nil {
		return nil, tm.Kind, err
	}
	return obj, tm.Kind, errors.Join(strict...)
}

// blank reports whether a document holds only comments and whitespace.
func blank(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func load(t *testing.T) manifests {
	t.Helper()
	m := manifests{
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
		services: map[string]*corev1.Service{}, deployments: map[string]*appsv1.Deployment{},
		statefulSets: map[string]*appsv1.StatefulSet{}, netPolicies: map[string]*networkingv1.NetworkPolicy{},
	}
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSep.Split(string(data), -1) {
			if blank([]byte(doc)) {
				continue
			}
			obj, kind, err := decodeStrict([]byte(doc))
			if err != nil {
				t.Fatalf("%s document %d (%s): %v", f, i+1, kind, err)
			}
			put := func(name string, dup bool) {
				if name == "" || dup {
					t.Fatalf("%s document %d: %s with empty or duplicate name %q", f, i+1, kind, name)
				}
			}
			switch o := obj.(type) {
			case *corev1.ConfigMap:
				put(o.Name, m.configMaps[o.Name] != nil)
				m.configMaps[o.Name] = o
			case *corev1.Secret:
				put(o.Name, m.secrets[o.Name] != nil)
				m.secrets[o.Name] = o
			case *corev1.Service:
				put(o.Name, m.services[o.Name] != nil)
				m.services[o.Name] = o
			case *appsv1.Deployment:
				put(o.Name, m.deployments[o.Name] != nil)
				m.deployments[o.Name] = o
			case *appsv1.StatefulSet:
				put(o.Name, m.statefulSets[o.Name] != nil)
				m.statefulSets[o.Name] = o
			case *networkingv1.NetworkPolicy:
				put(o.Name, m.netPolicies[o.Name] != nil)
				m.netPolicies[o.Name] = o
			}
		}
	}
	return m
}

func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	for name, doc := range map[string]string{
		"misspelt field": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndatta:\n  a: b\n",
		"nested typo": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  template:\n    spec:\n" +
			"      initContainers:\n        - name: nemo\n          restartpolicy: Always\n",
		"duplicate field": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  name: y\n",
		"wrong case":      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  Name: x\n",
		"wrong version":   "apiVersion: apps/v1beta1\nkind: Deployment\nmetadata:\n  name: x\n",
		"unknown kind":    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n",
	} {
		if _, _, err := decodeStrict([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

func TestManifestSet(t *testing.T) {
	m := load(t)
	for kind, got := range map[string][]string{
		"ConfigMap=nemo-config":                                         slices.Sorted(maps.Keys(m.configMaps)),
		"Secret=nemo-credentials":                                       slices.Sorted(maps.Keys(m.secrets)),
		"Deployment=inventory,orders":                                   slices.Sorted(maps.Keys(m.deployments)),
		"StatefulSet=ledger":                                            slices.Sorted(maps.Keys(m.statefulSets)),
		"Service=inventory-peers,ledger":                                slices.Sorted(maps.Keys(m.services)),
		"NetworkPolicy=inventory-ingress,ledger-ingress,orders-ingress": slices.Sorted(maps.Keys(m.netPolicies)),
	} {
		kind, want, _ := strings.Cut(kind, "=")
		if strings.Join(got, ",") != want {
			t.Errorf("%s objects %v, want %s", kind, got, want)
		}
	}
	if svc, sts := m.services["ledger"], m.statefulSets["ledger"]; svc == nil || sts == nil ||
		svc.Spec.ClusterIP != corev1.ClusterIPNone || sts.Spec.ServiceName != svc.Name {
		t.Error("StatefulSet ledger needs the headless Service ledger as its serviceName")
	}
}

// workload is the part of a Deployment or StatefulSet the checks read.
type workload struct {
	name     string
	selector *metav1.LabelSelector
	pod      corev1.PodTemplateSpec
	claims   []corev1.PersistentVolumeClaim
	replicas int32
	sts      *appsv1.StatefulSet // nil for a Deployment
}

// replicas is a workload's replica count (Kubernetes' default is 1).
func replicas(n *int32) int32 {
	if n == nil {
		return 1
	}
	return *n
}

func workloads(m manifests) []workload {
	var ws []workload
	for _, d := range m.deployments {
		ws = append(ws, workload{name: "Deployment/" + d.Name, selector: d.Spec.Selector, pod: d.Spec.Template, replicas: replicas(d.Spec.Replicas)})
	}
	for _, s := range m.statefulSets {
		ws = append(ws, workload{name: "StatefulSet/" + s.Name, selector: s.Spec.Selector, pod: s.Spec.Template, claims: s.Spec.VolumeClaimTemplates, replicas: replicas(s.Spec.Replicas), sts: s})
	}
	slices.SortFunc(ws, func(a, b workload) int { return strings.Compare(a.name, b.name) })
	return ws
}

// Assumptions of the grace period arithmetic in README.md.
const (
	appShutdownAllowance = 15 * time.Second
	exitSlack            = 5 * time.Second
	writeBackBytesPerSec = 4 << 20
	flushMargin          = 1.5
)

// TestWorkloads checks each example workload, and that there is one
// example of each coherence mode (every mode nemo knows: a new one without
// an example fails here).
func TestWorkloads(t *testing.T) {
	m := load(t)
	ws := workloads(m)
	if len(ws) != 3 {
		t.Fatalf("%d workloads, want 3", len(ws))
	}
	modes := map[txn.Coherence]string{}
	for _, w := range ws {
		t.Run(w.name, func(t *testing.T) { checkWorkload(t, m, w) })
		cfg := nemoConfig(t, m, w.pod.Spec, w.pod.Spec.InitContainers[0])
		modes[cfg.CoherenceMode()] = w.name
	}
	for _, mode := range enum.Coherences() {
		if modes[mode] == "" {
			t.Errorf("no example runs coherence mode %s (examples by mode: %v)", mode, modes)
		}
	}
}

func checkWorkload(t *testing.T, m manifests, w workload) {
	spec := w.pod.Spec
	for k, v := range w.selector.MatchLabels {
		if w.pod.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template labels %v", k, v, w.pod.Labels)
		}
	}

	// nemo is a native sidecar: an init container that keeps running.
	if len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != "nemo" {
		t.Fatalf("want exactly the init container nemo, got %d", len(spec.InitContainers))
	}
	nemo := spec.InitContainers[0]
	if nemo.RestartPolicy == nil || *nemo.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("nemo needs restartPolicy: Always (native sidecar)")
	}
	if len(spec.Containers) == 0 {
		t.Error("no application container")
	}
	if strings.HasSuffix(nemo.Image, ":latest") || !strings.Contains(nemo.Image, ":") {
		t.Errorf("nemo image %q is not pinned", nemo.Image)
	}

	// Probes are httpGet on the container port http-metrics, which is
	// listen.http's (checked below against the configuration).
	metricsPort := slices.IndexFunc(nemo.Ports, func(p corev1.ContainerPort) bool { return p.Name == "http-metrics" })
	if metricsPort < 0 {
		t.Fatal("nemo has no container port named http-metrics")
	}
	for path, p := range map[string]*corev1.Probe{"/startupz": nemo.StartupProbe, "/healthz": nemo.LivenessProbe, "/readyz": nemo.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "http-metrics" {
			t.Errorf("probe %s must be httpGet %s on port http-metrics, got %+v", path, path, p)
		}
	}
	// Prometheus finds the port by annotation and by the PodMonitor's
	// label selector (TestMonitoring).
	if a := w.pod.Annotations; a["prometheus.io/scrape"] != "true" || a["prometheus.io/path"] != "/metrics" ||
		a["prometheus.io/port"] != fmt.Sprint(nemo.Ports[metricsPort].ContainerPort) {
		t.Errorf("scrape annotations %v do not name port %d and /metrics", a, nemo.Ports[metricsPort].ContainerPort)
	}
	checkProbes(t, nemo)
	if l := nemo.Lifecycle; l == nil || l.PreStop == nil || l.PreStop.Exec == nil || !slices.Equal(l.PreStop.Exec.Command[:2], []string{"/nemo", "shutdown"}) {
		t.Errorf("nemo needs preStop exec /nemo shutdown, got %+v", nemo.Lifecycle)
	}
	if sc := nemo.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("nemo should run with a read-only root file system (its data is on a volume)")
	}

	cfg := nemoConfig(t, m, spec, nemo)
	// Every frontend stays on loopback: the application shares the pod's
	// network namespace, nobody else needs them (NetworkPolicy aside).
	for key, addr := range map[string]string{"listen.azure_table": cfg.AzureTableListener(), "listen.datastore": cfg.DatastoreListener()} {
		if addr != "" && !loopback.Listen(addr) {
			t.Errorf("%s is %q, off loopback", key, addr)
		}
	}
	if cfg.Listen.AllowRemote {
		t.Error("listen.allow_remote is set")
	}
	// listen.http binds the pod IP on the port the probes and Prometheus
	// use; the admin listener stays on loopback.
	host, port, _ := net.SplitHostPort(cfg.Listen.HTTP)
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() || port != fmt.Sprint(nemo.Ports[metricsPort].ContainerPort) {
		t.Errorf("listen.http %q must bind every address on port %d (http-metrics), so the kubelet and Prometheus reach it", cfg.Listen.HTTP, nemo.Ports[metricsPort].ContainerPort)
	}
	if !loopback.Listen(cfg.Listen.Admin) || cfg.Listen.AdminAllowRemote {
		t.Errorf("listen.admin %q must stay on loopback", cfg.Listen.Admin)
	}
	// Several replicas front the same tables: shared or partitioned mode
	// (exclusive would let one replica hold each table's lease and refuse
	// the others' writes; partitioned forwards them to that replica).
	if w.replicas > 1 && cfg.CoherenceMode() == txn.Exclusive {
		t.Errorf("%d replicas share the tables but coherence mode is %s; want shared or partitioned", w.replicas, cfg.CoherenceMode())
	}
	switch cfg.CoherenceMode() {
	case txn.Exclusive:
		checkExclusive(t, w, nemo, cfg)
	case enum.Partitioned:
		for _, p := range partitionedProblems(m, nemo, cfg) {
			t.Error(p)
		}
	}

	// Grace: application + nemo's own grace + exit slack, and nemo's flush
	// share covers the dirty-data bound at the assumed write-back rate.
	grace := cfg.Listen.ShutdownGrace
	if spec.TerminationGracePeriodSeconds == nil {
		t.Fatal("terminationGracePeriodSeconds not set")
	}
	pod := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	if need := appShutdownAllowance + grace + exitSlack; pod < need {
		t.Errorf("terminationGracePeriodSeconds %v < application %v + listen.shutdown_grace %v + %v", pod, appShutdownAllowance, grace, exitSlack)
	}
	flush := time.Duration(float64(cfg.MaxDirtyBytes()) / writeBackBytesPerSec * flushMargin * float64(time.Second))
	if grace/2 < flush {
		t.Errorf("flush share of the grace %v < %v needed for cache.max_dirty_bytes %s at 4 MiB/s with margin %v", grace/2, flush, cfg.MaxDirtyBytes(), flushMargin)
	}

	// Memory: nemo keeps its own memory under 1.5 × cache.max_bytes +
	// 64 MiB (the soft limit it sets, measured in
	// cmd/nemo TestBinaryMemoryWithinBound); the container's limit adds
	// 15% for the page cache of the WAL and the kernel's share.
	limit := nemo.Resources.Limits.Memory()
	if need := 1.15 * (1.5*float64(cfg.Cache.MaxBytes) + 64<<20); limit.IsZero() || float64(limit.Value()) < need {
		t.Errorf("memory limit %v < 1.15 × (1.5 × cache.max_bytes %s + 64 MiB) = %.0f MiB", limit, cfg.Cache.MaxBytes, need/(1<<20))
	}

	// Everything mounted exists.
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		for _, vm := range c.VolumeMounts {
			if volume(spec, vm.Name) == nil && !slices.ContainsFunc(w.claims, func(pc corev1.PersistentVolumeClaim) bool { return pc.Name == vm.Name }) {
				t.Errorf("container %s mounts unknown volume %s", c.Name, vm.Name)
			}
		}
	}
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil && m.configMaps[v.ConfigMap.Name] == nil {
			t.Errorf("volume %s: no ConfigMap %s", v.Name, v.ConfigMap.Name)
		}
		if v.Secret != nil {
			s := m.secrets[v.Secret.SecretName]
			if s == nil {
				t.Errorf("volume %s: no Secret %s", v.Name, v.Secret.SecretName)
				continue
			}
			for _, it := range v.Secret.Items {
				if _, ok := secretValue(s, it.Key); !ok {
					t.Errorf("volume %s: Secret %s has no key %s", v.Name, s.Name, it.Key)
				}
			}
		}
	}
	// A credentials file the config names is in a mounted secret.
	if f := cfg.Backend.Datastore.CredentialsFile; cfg.Backend.Type == config.BackendDatastore && f != "" {
		if !secretFileMounted(spec, nemo, f) {
			t.Errorf("backend.datastore.credentials_file %s is not a mounted secret item", f)
		}
	}
}

// checkProbes: every probe tolerates more than one failure (one slow
// answer must not restart nemo or take the pod out of its Service),
// readiness at least three, and the startup probe leaves at least a minute
// for WAL replay.
func checkProbes(t *testing.T, nemo corev1.Container) {
	t.Helper()
	for name, p := range map[string]*corev1.Probe{"startup": nemo.StartupProbe, "liveness": nemo.LivenessProbe, "readiness": nemo.ReadinessProbe} {
		if p == nil {
			continue // reported with the paths above
		}
		least := int32(2)
		if name == "readiness" {
			least = 3
		}
		if p.FailureThreshold < least {
			t.Errorf("%s probe failureThreshold %d, want at least %d", name, p.FailureThreshold, least)
		}
	}
	if sp := nemo.StartupProbe; sp != nil && time.Duration(sp.PeriodSeconds*sp.FailureThreshold)*time.Second < time.Minute {
		t.Errorf("startup probe allows %ds for WAL replay, want at least a minute", sp.PeriodSeconds*sp.FailureThreshold)
	}
}

// checkExclusive: a workload in exclusive mode is one lease holder whose
// WAL and node id outlive its pod: a StatefulSet of one replica (never two
// pods of one identity) with its data directory and WAL on a claim of its
// volumeClaimTemplates that one pod mounts and that outlives the
// StatefulSet.
func checkExclusive(t *testing.T, w workload, nemo corev1.Container, cfg config.Config) {
	t.Helper()
	if w.sts == nil || w.replicas != 1 {
		t.Errorf("coherence mode exclusive wants a StatefulSet of one replica, got %s with %d", w.name, w.replicas)
		return
	}
	if u := w.sts.Spec.UpdateStrategy.Type; u != "" && u != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Errorf("updateStrategy %s: with OnDelete an update waits for someone to delete the pod", u)
	}
	if r := w.sts.Spec.PersistentVolumeClaimRetentionPolicy; r != nil &&
		(r.WhenDeleted == appsv1.DeletePersistentVolumeClaimRetentionPolicyType || r.WhenScaled == appsv1.DeletePersistentVolumeClaimRetentionPolicyType) {
		t.Error("persistentVolumeClaimRetentionPolicy deletes the claim that holds the WAL")
	}
	for _, dir := range []string{cfg.WALDir(), cfg.Backend.Embedded.DataDir} {
		dir, err := inContainer(image(t), nemo, dir)
		if err != nil {
			t.Fatal(err)
		}
		vm := mountOf(nemo, dir)
		if vm == nil {
			t.Errorf("%s is not on a mounted volume", dir)
			continue
		}
		claim := slices.IndexFunc(w.claims, func(c corev1.PersistentVolumeClaim) bool { return c.Name == vm.Name })
		if claim < 0 {
			t.Errorf("%s is on volume %q, not on a claim of volumeClaimTemplates: the WAL would not outlive the pod", dir, vm.Name)
			continue
		}
		if am := w.claims[claim].Spec.AccessModes; !slices.Equal(am, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}) &&
			!slices.Equal(am, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
			t.Errorf("claim %s access modes %v: a WAL has one writer (ReadWriteOncePod, or ReadWriteOnce)", vm.Name, am)
		}
	}
}

// The partitioned example (deployment-partitioned.yaml) and the names its
// nemo container uses.
const (
	partitionedExample = "inventory"
	peerPortName       = "peer"
	podIPFieldPath     = "status.podIP"
)

// peerSecretEnv is coherence.peer_secret's variable,
// NEMO_COHERENCE_PEER_SECRET.
var peerSecretEnv = config.EnvName("coherence.peer_secret")

// partitionedProblems checks a nemo container in coherence mode
// partitioned: its commit logs are in the backend (so a pod, its emptyDir
// and its node may go at any time), its peer listener binds the pod IP on
// the container port named peer, the address it advertises in its leases
// is its own pod's IP (POD_IP from the downward API, not a fixed
// coherence.advertise that every replica of the template would share), and
// the peer secret comes from a key of the example Secret.
func partitionedProblems(m manifests, nemo corev1.Container, cfg config.Config) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if mode := cfg.CoherenceMode(); mode != enum.Partitioned {
		bad("coherence mode %s, want partitioned", mode)
	}
	if cfg.WAL.Location != enum.WALBackend {
		bad("wal.location %q: partitioned mode keeps the commit logs in the backend (NEMO_WAL_LOCATION=backend), so the next owner of a table replays them", cfg.WAL.Location)
	}

	// The peer listener: every address, on the declared container port.
	var peerPort int32
	switch i := slices.IndexFunc(nemo.Ports, func(p corev1.ContainerPort) bool { return p.Name == peerPortName }); {
	case i < 0:
		bad("nemo has no container port named %s (listen.peer)", peerPortName)
	case nemo.Ports[i].Protocol != "" && nemo.Ports[i].Protocol != corev1.ProtocolTCP:
		bad("container port %s is %s; the peer API is gRPC over TCP", peerPortName, nemo.Ports[i].Protocol)
	default:
		peerPort = nemo.Ports[i].ContainerPort
	}
	host, port, err := net.SplitHostPort(cfg.Listen.Peer)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsUnspecified() {
		bad("listen.peer %q must bind every address, so the other replicas reach it on the pod IP", cfg.Listen.Peer)
	}
	if peerPort != 0 && port != fmt.Sprint(peerPort) {
		bad("listen.peer %q is not on container port %s (%d)", cfg.Listen.Peer, peerPortName, peerPort)
	}

	// The advertised address: this pod's IP with the peer port.
	if e := envVar(nemo, config.PodIPEnv); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != podIPFieldPath {
		bad("env %s must come from the downward API (fieldRef %s): coherence.advertise defaults to it with listen.peer's port", config.PodIPEnv, podIPFieldPath)
	}
	if envVar(nemo, config.EnvName("coherence.advertise")) != nil {
		bad("env %s is set: every replica of the template would advertise the same address; leave it to %s", config.EnvName("coherence.advertise"), config.PodIPEnv)
	}
	if want := net.JoinHostPort(fieldPlaceholder(podIPFieldPath), port); cfg.PeerAdvertise() != want {
		bad("coherence.advertise is %q, want the pod IP with listen.peer's port (%s)", cfg.PeerAdvertise(), want)
	}

	// The peer secret: a key of the Secret, in force.
	switch e := envVar(nemo, peerSecretEnv); {
	case e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil:
		bad("env %s must come from a Secret (secretKeyRef), never a literal value or the ConfigMap", peerSecretEnv)
	default:
		ref := e.ValueFrom.SecretKeyRef
		s := m.secrets[ref.Name]
		if s == nil {
			bad("env %s: no Secret %s", peerSecretEnv, ref.Name)
			break
		}
		v, ok := secretValue(s, ref.Key)
		if !ok {
			bad("env %s: Secret %s has no key %s", peerSecretEnv, ref.Name, ref.Key)
		} else if cfg.Coherence.PeerSecret != v {
			bad("coherence.peer_secret is not the value of Secret %s key %s", ref.Name, ref.Key)
		}
	}
	return problems
}

// envVar is c's environment variable name, nil if it sets none.
func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// TestPartitionedExample: deployment-partitioned.yaml runs three replicas
// in coherence mode partitioned with the commit logs in the backend, and
// the numbers its comments and README.md give hold: reads on a non-owner
// at most 1s stale, a crashed owner's tables taken over after 15s. The
// rest of what partitioned mode needs is partitionedProblems' (in
// TestWorkloads) and ingressProblems' (TestNetworkPolicies, the peer port).
func TestPartitionedExample(t *testing.T) {
	m := load(t)
	d := m.deployments[partitionedExample]
	if d == nil {
		t.Fatalf("no Deployment %s", partitionedExample)
	}
	if n := replicas(d.Spec.Replicas); n != 3 {
		t.Errorf("%d replicas, want 3", n)
	}
	nemo := d.Spec.Template.Spec.InitContainers[0]
	cfg := nemoConfig(t, m, d.Spec.Template.Spec, nemo)
	if cfg.CoherenceMode() != enum.Partitioned || cfg.WAL.Location != enum.WALBackend {
		t.Errorf("coherence mode %s, wal.location %s; want partitioned, backend", cfg.CoherenceMode(), cfg.WAL.Location)
	}
	if b := cfg.Backend.Type; b != config.BackendAzTable && b != config.BackendDatastore {
		t.Errorf("backend %s; partitioned mode needs aztable or datastore", b)
	}
	if got := cfg.MaxStaleness(); got != time.Second {
		t.Errorf("coherence.max_staleness %v, the comments say 1s", got)
	}
	if got := cfg.Coherence.LeaseTTL; got != 15*time.Second {
		t.Errorf("coherence.lease_ttl %v, the comments say 15s", got)
	}
	if p := partitionedProblems(m, nemo, cfg); len(p) > 0 {
		t.Errorf("as shipped: %v", p)
	}
	// The peer port is open, and only to the Deployment's own pods.
	w := workload{name: "Deployment/" + d.Name, selector: d.Spec.Selector, pod: d.Spec.Template, replicas: replicas(d.Spec.Replicas)}
	_, port, _ := net.SplitHostPort(cfg.Listen.Peer)
	n := 0
	for _, r := range ingressRules(t, m, w) {
		if !slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.String() == port }) {
			continue
		}
		n++
		if p := peerSourceProblem(w, r.From); p != "" {
			t.Errorf("a rule opens the peer port %s %s", port, p)
		}
	}
	if n == 0 {
		t.Errorf("no NetworkPolicy rule admits the other replicas to the peer port %s", port)
	}
	// Rebalancing: coherence.peers names a headless Service over the
	// Deployment's own pods, on the peer port.
	peers := cfg.Coherence.PeerList()
	if len(peers) != 1 {
		t.Fatalf("coherence.peers %q, want the one headless Service of the replicas", cfg.Coherence.Peers)
	}
	host, pport, _ := net.SplitHostPort(peers[0])
	svc := m.services[host]
	switch {
	case svc == nil:
		t.Errorf("coherence.peers names %s, which is no Service of the manifests", host)
	case svc.Spec.ClusterIP != corev1.ClusterIPNone:
		t.Errorf("Service %s is not headless: its name would resolve to one virtual IP, not each replica", host)
	case !selects(svc.Spec.Selector, d.Spec.Template.Labels):
		t.Errorf("Service %s selects %v, not the Deployment's pods %v", host, svc.Spec.Selector, d.Spec.Template.Labels)
	case pport != port || !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
		return fmt.Sprint(p.Port) == port && p.TargetPort.String() == peerPortName
	}):
		t.Errorf("coherence.peers port %s and Service %s's ports %v: want the peer port %s, to the container's port %q", pport, host, svc.Spec.Ports, port, peerPortName)
	}
}

// selects reports whether a Service selector picks pods labelled labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestPartitionedChecks: partitionedProblems catches each mistake it is
// for.
func TestPartitionedChecks(t *testing.T) {
	m := load(t)
	d := m.deployments[partitionedExample]
	if d == nil {
		t.Fatalf("no Deployment %s", partitionedExample)
	}
	spec := d.Spec.Template.Spec
	cfg0 := nemoConfig(t, m, spec, spec.InitContainers[0])
	setEnv := func(c *corev1.Container, e corev1.EnvVar) {
		if i := slices.IndexFunc(c.Env, func(x corev1.EnvVar) bool { return x.Name == e.Name }); i >= 0 {
			c.Env[i] = e
		} else {
			c.Env = append(c.Env, e)
		}
	}
	for name, edit := range map[string]func(*config.Config, *corev1.Container){
		"shared mode":          func(cfg *config.Config, _ *corev1.Container) { cfg.Coherence.Mode = enum.Shared },
		"local WAL":            func(cfg *config.Config, _ *corev1.Container) { cfg.WAL.Location = enum.WALLocal },
		"peer on loopback":     func(cfg *config.Config, _ *corev1.Container) { cfg.Listen.Peer = "127.0.0.1:7946" },
		"peer on another port": func(cfg *config.Config, _ *corev1.Container) { cfg.Listen.Peer = "0.0.0.0:7947" },
		"no peer port": func(_ *config.Config, c *corev1.Container) {
			c.Ports = slices.DeleteFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == peerPortName })
		},
		"peer port renamed": func(_ *config.Config, c *corev1.Container) {
			for i := range c.Ports {
				if c.Ports[i].Name == peerPortName {
					c.Ports[i].Name = "gossip"
				}
			}
		},
		"peer port UDP": func(_ *config.Config, c *corev1.Container) {
			for i := range c.Ports {
				if c.Ports[i].Name == peerPortName {
					c.Ports[i].Protocol = corev1.ProtocolUDP
				}
			}
		},
		"POD_IP a literal": func(_ *config.Config, c *corev1.Container) {
			setEnv(c, corev1.EnvVar{Name: config.PodIPEnv, Value: "10.1.2.3"})
		},
		"POD_IP from the host": func(_ *config.Config, c *corev1.Container) {
			setEnv(c, corev1.EnvVar{Name: config.PodIPEnv, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}})
		},
		"no POD_IP": func(_ *config.Config, c *corev1.Container) {
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == config.PodIPEnv })
		},
		"advertise fixed in the template": func(cfg *config.Config, c *corev1.Container) {
			setEnv(c, corev1.EnvVar{Name: config.EnvName("coherence.advertise"), Value: "inventory:7946"})
			cfg.Coherence.Advertise = "inventory:7946"
		},
		"advertise fixed in the ConfigMap": func(cfg *config.Config, _ *corev1.Container) {
			cfg.Coherence.Advertise = "inventory:7946"
		},
		"peer secret a literal": func(cfg *config.Config, c *corev1.Container) {
			setEnv(c, corev1.EnvVar{Name: peerSecretEnv, Value: "0123456789abcdef0123"})
			cfg.Coherence.PeerSecret = "0123456789abcdef0123"
		},
		"peer secret from the ConfigMap": func(_ *config.Config, c *corev1.Container) {
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == peerSecretEnv })
		},
		"peer secret key not in the Secret": func(_ *config.Config, c *corev1.Container) {
			setEnv(c, corev1.EnvVar{Name: peerSecretEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "nemo-credentials"}, Key: "no-such-key"}}})
		},
		"peer secret from another Secret": func(_ *config.Config, c *corev1.Container) {
			setEnv(c, corev1.EnvVar{Name: peerSecretEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "no-such-secret"}, Key: "peer-secret"}}})
		},
		"peer secret overridden": func(cfg *config.Config, _ *corev1.Container) {
			cfg.Coherence.PeerSecret = "another secret of enough bytes"
		},
	} {
		cfg, c := cfg0, *spec.InitContainers[0].DeepCopy()
		edit(&cfg, &c)
		if len(partitionedProblems(m, c, cfg)) == 0 {
			t.Errorf("%s: no problem found", name)
		}
	}
}

// nemoConfig loads the configuration the nemo container would run with
// (see containerEnv) through nemo's own loader.
func nemoConfig(t *testing.T, m manifests, spec corev1.PodSpec, c corev1.Container) config.Config {
	t.Helper()
	env := containerEnv(t, m, spec, c)
	cfg, err := config.Load(config.LoadOptions{Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatalf("nemo would refuse this configuration:\n%v", err)
	}
	return cfg
}

// containerEnv is the environment container c of the pod starts nemo
// with, as Kubernetes composes it: the image's ENV (read from the
// Dockerfile's final stage), overridden by the container's env, secret
// references resolved from the example Secret and field references as
// placeholders. NEMO_CONFIG, which names the ConfigMap file on its mounted
// volume, names a copy of that file in a temporary directory instead.
func containerEnv(t *testing.T, m manifests, spec corev1.PodSpec, c corev1.Container) map[string]string {
	t.Helper()
	env, err := image(t).Env()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.EnvFrom) > 0 {
		t.Fatalf("container %s: envFrom is not composed here; list the variables in env", c.Name)
	}
	for _, e := range c.Env {
		if strings.Contains(e.Value, "$(") {
			t.Fatalf("env %s: $(VAR) references are not composed here", e.Name)
		}
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s := m.secrets[ref.Name]
			if s == nil {
				t.Fatalf("env %s: no Secret %s", e.Name, ref.Name)
			}
			v, ok := secretValue(s, ref.Key)
			if !ok {
				t.Fatalf("env %s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = v
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = fieldPlaceholder(e.ValueFrom.FieldRef.FieldPath)
		default:
			t.Fatalf("env %s: unsupported valueFrom", e.Name)
		}
	}
	if env["NEMO_CONFIG"] == "" {
		t.Fatal("nemo container does not set NEMO_CONFIG")
	}
	vm := mountOf(c, env["NEMO_CONFIG"])
	if vm == nil {
		t.Fatalf("NEMO_CONFIG %s is not on a mounted volume", env["NEMO_CONFIG"])
	}
	v := volume(spec, vm.Name)
	if v == nil || v.ConfigMap == nil {
		t.Fatalf("NEMO_CONFIG %s is not on a ConfigMap volume", env["NEMO_CONFIG"])
	}
	cm := m.configMaps[v.ConfigMap.Name]
	if cm == nil {
		t.Fatalf("no ConfigMap %s", v.ConfigMap.Name)
	}
	rel, _ := filepath.Rel(vm.MountPath, env["NEMO_CONFIG"])
	text, ok := cm.Data[rel]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cm.Name, rel)
	}
	file := filepath.Join(t.TempDir(), "nemo.yaml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	env["NEMO_CONFIG"] = file
	return env
}

// fieldPlaceholder is what containerEnv sets a variable from the downward
// API's fieldPath to (status.podIP: field-status-podIP).
func fieldPlaceholder(fieldPath string) string {
	return "field-" + strings.NewReplacer(".", "-", "'", "", "[", "-", "]", "").Replace(fieldPath)
}

// image is the final stage of ../Dockerfile: the image the examples run.
func image(t *testing.T) dockerfile.Stage {
	t.Helper()
	stages, err := dockerfile.Read("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	return dockerfile.Final(stages)
}

func secretValue(s *corev1.Secret, key string) (string, bool) {
	if v, ok := s.StringData[key]; ok {
		return v, true
	}
	v, ok := s.Data[key]
	return string(v), ok
}

// mountOf returns the mount holding path in c, the deepest if several.
func mountOf(c corev1.Container, p string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	for i, vm := range c.VolumeMounts {
		mp := path.Clean(vm.MountPath)
		if p == mp || strings.HasPrefix(path.Clean(p), mp+"/") {
			if best == nil || len(mp) > len(best.MountPath) {
				best = &c.VolumeMounts[i]
			}
		}
	}
	return best
}

func volume(spec corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

func secretFileMounted(spec corev1.PodSpec, c corev1.Container, file string) bool {
	vm := mountOf(c, file)
	if vm == nil {
		return false
	}
	v := volume(spec, vm.Name)
	if v == nil || v.Secret == nil {
		return false
	}
	rel, _ := filepath.Rel(vm.MountPath, file)
	return slices.ContainsFunc(v.Secret.Items, func(it corev1.KeyToPath) bool { return it.Path == rel })
}

// httpMetricsPort is nemo's health and metrics listener in the manifests
// (listen.http, container port http-metrics): the one nemo port a
// NetworkPolicy opens beyond the pod, to Prometheus.
const httpMetricsPort = 9091

// TestNetworkPolicies: each workload is selected by an Ingress policy that
// keeps the application reachable, lets only a monitoring namespace
// scrape nemo, lets only labelled client pods of the namespace reach a
// frontend, lets only the workload's own pods reach nemo's peer port
// (coherence mode partitioned), and never opens the admin port or
// anything unserved.
func TestNetworkPolicies(t *testing.T) {
	m := load(t)
	for _, w := range workloads(m) {
		t.Run(w.name, func(t *testing.T) {
			rules := ingressRules(t, m, w)
			if len(rules) == 0 {
				t.Fatal("no NetworkPolicy of type Ingress selects its pods")
			}
			for _, p := range ingressProblems(nemoConfig(t, m, w.pod.Spec, w.pod.Spec.InitContainers[0]), w, rules) {
				t.Error(p)
			}
		})
	}
}

// TestNetworkPolicyChecks: the checks catch each mistake they are for, in
// the policies of each workload.
func TestNetworkPolicyChecks(t *testing.T) {
	m := load(t)
	for _, w := range workloads(m) {
		t.Run(w.name, func(t *testing.T) { checkNetworkPolicyChecks(t, m, w) })
	}
}

func checkNetworkPolicyChecks(t *testing.T, m manifests, w workload) {
	cfg := nemoConfig(t, m, w.pod.Spec, w.pod.Spec.InitContainers[0])
	tcp := corev1.ProtocolTCP
	port := func(p int) []networkingv1.NetworkPolicyPort {
		v := intstr.FromInt32(int32(p))
		return []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &v}}
	}
	listenPort := func(addr string) int {
		_, p, _ := net.SplitHostPort(addr)
		n, _ := strconv.Atoi(p)
		return n
	}
	frontend := listenPort(cfg.AzureTableListener() + cfg.DatastoreListener()) // the one this backend serves
	if frontend == 0 {
		t.Fatalf("no frontend: %q, %q", cfg.AzureTableListener(), cfg.DatastoreListener())
	}
	everyone := []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}
	edits := map[string]func([]networkingv1.NetworkPolicyIngressRule) []networkingv1.NetworkPolicyIngressRule{
		"admin port": func(r []networkingv1.NetworkPolicyIngressRule) []networkingv1.NetworkPolicyIngressRule {
			return append(r, networkingv1.NetworkPolicyIngressRule{Ports: port(9090)})
		},
		"frontend to all": func(r []networkingv1.NetworkPolicyIngressRule) []networkingv1.NetworkPolicyIngressRule {
			return append(r, networkingv1.NetworkPolicyIngressRule{Ports: port(frontend)})
		},
		"frontend to an IP block": func(r []networkingv1.NetworkPolicyIngressRule) []networkingv1.NetworkPolicyIngressRule {
			return append(r, networkingv1.NetworkPolicyIngressRule{Ports: port(frontend), From: everyone})
		},
		"metrics to all": func(r []networkingv1.NetworkPolicyIngressRule) []networkingv1.NetworkPolicyIngressRule {
			return append(r, networkingv1.NetworkPolicyIngressRule{Ports: port(httpMetricsPort)})
		},
		"every port": func(r []networkingv1.NetworkPolicyIngressRule) []networkingv1.NetworkPolicyIngressRule {
			return append(r, networkingv1.NetworkPolicyIngressRule{})
		},
		"unserved port": func(r []networkingv1.NetworkPolicyIngressRule) []networkingv1.NetworkPolicyIngressRule {
			return append(r, networkingv1.NetworkPolicyIngressRule{Ports: port(5432)})
		},
		"application closed": func(r []networkingv1.NetworkPolicyIngressRule) []networkingv1.NetworkPolicyIngressRule { return r[1:] },
		"no scraping": func(r []networkingv1.NetworkPolicyIngressRule) []networkingv1.NetworkPolicyIngressRule {
			return append(r[:1:1], r[2:]...)
		},
	}
	peer := listenPort(cfg.Listen.Peer)
	if peer == 0 {
		// No peer listener: its port, opened to the workload's own pods,
		// is unserved.
		edits["peer port without a peer listener"] = func(r []networkingv1.NetworkPolicyIngressRule) []networkingv1.NetworkPolicyIngressRule {
			return append(r, networkingv1.NetworkPolicyIngressRule{Ports: port(7946), From: []networkingv1.NetworkPolicyPeer{{PodSelector: w.selector.DeepCopy()}}})
		}
	} else {
		from := func(p ...networkingv1.NetworkPolicyPeer) func([]networkingv1.NetworkPolicyIngressRule) []networkingv1.NetworkPolicyIngressRule {
			return func(r []networkingv1.NetworkPolicyIngressRule) []networkingv1.NetworkPolicyIngressRule {
				return append(r, networkingv1.NetworkPolicyIngressRule{Ports: port(peer), From: p})
			}
		}
		pods := func(l map[string]string) *metav1.LabelSelector { return &metav1.LabelSelector{MatchLabels: l} }
		edits["peer port to all"] = from()
		edits["peer port to an IP block"] = from(everyone...)
		edits["peer port to the same labels in every namespace"] = from(networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: w.selector.DeepCopy()})
		edits["peer port to every nemo sidecar"] = from(networkingv1.NetworkPolicyPeer{PodSelector: pods(map[string]string{"nemo.cache/sidecar": "true"})})
		edits["peer port to every pod of the namespace"] = from(networkingv1.NetworkPolicyPeer{PodSelector: pods(nil)})
		edits["peer port to another workload"] = from(networkingv1.NetworkPolicyPeer{PodSelector: pods(map[string]string{"app.kubernetes.io/name": "orders"})})
		edits["peer port to labelled clients"] = from(networkingv1.NetworkPolicyPeer{PodSelector: pods(map[string]string{"nemo.example.com/client": "true"})})
		edits["peer port closed"] = func(r []networkingv1.NetworkPolicyIngressRule) []networkingv1.NetworkPolicyIngressRule {
			return slices.DeleteFunc(r, func(r networkingv1.NetworkPolicyIngressRule) bool {
				return slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.IntValue() == peer })
			})
		}
	}
	for name, edit := range edits {
		rules := edit(slices.Clone(ingressRules(t, m, w)))
		if len(ingressProblems(cfg, w, rules)) == 0 {
			t.Errorf("%s: no problem found", name)
		}
	}
}

// ingressRules collects the ingress rules of every policy selecting w's
// pods.
func ingressRules(t *testing.T, m manifests, w workload) []networkingv1.NetworkPolicyIngressRule {
	t.Helper()
	var rules []networkingv1.NetworkPolicyIngressRule
	for _, name := range slices.Sorted(maps.Keys(m.netPolicies)) {
		np := m.netPolicies[name]
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Fatalf("NetworkPolicy %s: %v", name, err)
		}
		if !sel.Matches(labels.Set(w.pod.Labels)) {
			continue
		}
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			t.Errorf("NetworkPolicy %s is not of type Ingress", name)
		}
		rules = append(rules, np.Spec.Ingress...)
	}
	return rules
}

// ingressProblems checks the rules a workload's policies allow against
// what its pods' containers serve.
func ingressProblems(cfg config.Config, w workload, rules []networkingv1.NetworkPolicyIngressRule) []string {
	spec := w.pod.Spec
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	listenPort := func(addr string) int {
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			return -1
		}
		n, _ := strconv.Atoi(p)
		return n
	}
	frontends := map[int]bool{listenPort(cfg.AzureTableListener()): true, listenPort(cfg.DatastoreListener()): true}
	peerPort := -1 // listen.peer (coherence mode partitioned); none otherwise
	if cfg.Listen.Peer != "" {
		peerPort = listenPort(cfg.Listen.Peer)
	}
	app := map[int]string{} // the application's ports, by name
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			app[int(p.ContainerPort)] = p.Name
		}
	}
	allowed := map[int]bool{}
	for i, r := range rules {
		if len(r.Ports) == 0 {
			bad("rule %d allows every port", i)
		}
		for _, p := range r.Ports {
			if p.Port == nil || p.Port.Type != intstr.Int || p.Protocol == nil || *p.Protocol != corev1.ProtocolTCP {
				bad("rule %d: port %v: want a TCP port number", i, p.Port)
				continue
			}
			n := p.Port.IntValue()
			allowed[n] = true
			switch {
			case n == listenPort(cfg.Listen.Admin):
				bad("rule %d opens the admin port %d (pprof, /quitquitquit, the debug API)", i, n)
			case frontends[n]:
				if len(r.From) == 0 || slices.ContainsFunc(r.From, func(p networkingv1.NetworkPolicyPeer) bool {
					return p.IPBlock != nil || p.NamespaceSelector != nil || p.PodSelector == nil || len(p.PodSelector.MatchLabels) == 0
				}) {
					bad("rule %d opens frontend port %d beyond labelled client pods of the namespace", i, n)
				}
			case n == peerPort:
				if p := peerSourceProblem(w, r.From); p != "" {
					bad("rule %d opens peer port %d %s", i, n, p)
				}
			case n == httpMetricsPort:
				if len(r.From) == 0 || slices.ContainsFunc(r.From, func(p networkingv1.NetworkPolicyPeer) bool {
					return p.IPBlock != nil || p.NamespaceSelector == nil || len(p.NamespaceSelector.MatchLabels) == 0
				}) {
					bad("rule %d opens metrics port %d beyond a monitoring namespace", i, n)
				}
			case app[n] == "":
				bad("rule %d opens port %d, which nothing in the pod serves", i, n)
			}
		}
	}
	for n, name := range app {
		if !allowed[n] {
			bad("the application's port %s (%d) is closed", name, n)
		}
	}
	if !allowed[httpMetricsPort] {
		bad("metrics port %d is closed to Prometheus", httpMetricsPort)
	}
	if peerPort >= 0 && !allowed[peerPort] {
		bad("peer port %d (listen.peer) is closed: the other replicas cannot forward writes to the tables this one owns", peerPort)
	}
	return problems
}

// peerSourceProblem says what is wrong with the sources a rule admits to
// nemo's peer port, "" if nothing: whoever reaches it can try the peer
// secret, and with it write every table the replica owns, so only the
// workload's own pods may, in its namespace. Each source must be a pod
// selector that selects the workload's pods (its replicas reach each
// other) and no other pods: at least the labels of the workload's own
// selector.
func peerSourceProblem(w workload, from []networkingv1.NetworkPolicyPeer) string {
	if len(from) == 0 {
		return "to every source"
	}
	for _, p := range from {
		switch {
		case p.IPBlock != nil:
			return "to an IP block"
		case p.NamespaceSelector != nil:
			return "to pods of other namespaces"
		case p.PodSelector == nil:
			return "beyond the workload's pods"
		}
		sel, err := metav1.LabelSelectorAsSelector(p.PodSelector)
		if err != nil {
			return err.Error()
		}
		if !sel.Matches(labels.Set(w.pod.Labels)) {
			return fmt.Sprintf("to pods %q, which are not the workload's own (labels %v)", metav1.FormatLabelSelector(p.PodSelector), w.pod.Labels)
		}
		narrow := true
		for k, v := range w.selector.MatchLabels {
			if got, ok := p.PodSelector.MatchLabels[k]; !ok || got != v {
				narrow = false
			}
		}
		for _, e := range w.selector.MatchExpressions {
			narrow = narrow && slices.ContainsFunc(p.PodSelector.MatchExpressions, func(x metav1.LabelSelectorRequirement) bool {
				return x.Key == e.Key && x.Operator == e.Operator && slices.Equal(x.Values, e.Values)
			})
		}
		if !narrow {
			return fmt.Sprintf("to pods %q, beyond the workload's selector %q", metav1.FormatLabelSelector(p.PodSelector), metav1.FormatLabelSelector(w.selector))
		}
	}
	return ""
}

// TestManifestDocs: the READMEs name the manifests that exist. Every
// k8s/….yaml that ../README.md names, and every file a `kubectl apply -f`
// of either README applies (on a line of its own or as inline code),
// exists; k8s/README.md's file table lists every
// manifest here and names no other.
func TestManifestDocs(t *testing.T) {
	root, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	here, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`k8s/[\w./-]+\.yaml`).FindAllString(string(root), -1)
	// A command line of its own (in a shell block), or inline code.
	apply := regexp.MustCompile("(?m)^kubectl apply .*$|`kubectl apply [^`]*`")
	for _, line := range append(apply.FindAllString(string(root), -1), apply.FindAllString(string(here), -1)...) {
		line = strings.Trim(line, "`")
		f := strings.Fields(line)
		for i := range f {
			if f[i] == "-f" && i+1 < len(f) {
				named = append(named, f[i+1])
			}
		}
	}
	if len(named) == 0 {
		t.Error("README.md names no manifest")
	}
	for _, f := range named {
		if _, err := os.Stat(filepath.Join("..", f)); err != nil {
			t.Errorf("the README names %s: %v", f, err)
		}
	}
	table := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([\\w.-]+\\.yaml)` \\|").FindAllStringSubmatch(string(here), -1) {
		table[m[1]] = true
	}
	files, _ := filepath.Glob("*.yaml")
	for _, f := range files {
		if !table[f] {
			t.Errorf("k8s/README.md's file table does not list %s", f)
		}
	}
	for f := range table {
		if _, err := os.Stat(f); err != nil {
			if _, err := os.Stat(filepath.Join("monitoring", f)); err != nil {
				t.Errorf("k8s/README.md lists %s, which is not in k8s/ or k8s/monitoring/", f)
			}
		}
	}
}
