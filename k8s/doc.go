// Package k8s holds nemo's Kubernetes manifests: an example of each
// coherence mode with nemo as a native sidecar (a Deployment of several
// replicas in shared mode, which keeps nothing on disk; a StatefulSet of
// one replica in exclusive mode with its WAL and node id on a
// PersistentVolumeClaim; a Deployment of three replicas in partitioned
// mode, each table owned by one of them, the commit logs in the backend
// and a peer port only the other replicas may reach), the ConfigMap with
// nemo's YAML configuration, an example Secret for backend credentials and
// the peer secret, and example NetworkPolicies (README.md says when to
// pick which mode, and explains the image's data directory, the ports and
// who may reach them, the probes, the grace period and what a failure can
// lose), and in monitoring/ a PodMonitor, PrometheusRule alerts and a
// Grafana dashboard. It has no Go API: its tests decode every manifest
// strictly into the k8s.io/api types and load the embedded configuration
// with nemo's own loader under the image's environment, so the examples
// cannot drift from Kubernetes or from nemo; ask the real binary (nemo
// config print) where each nemo container's data and WAL land and check
// that it is a writable volume; check the alerts with promtool; and run a
// real Prometheus against a real nemo to show that every dashboard query
// returns data. helm/nemo holds the same examples as a Helm chart; its tests
// are a module of their own, helm/test, which renders the chart with helm's
// Go module and holds each example to its plain manifest here.
package k8s
