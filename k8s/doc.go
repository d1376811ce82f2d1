// Package k8s holds nemo's Kubernetes manifests: a native-sidecar Deployment
// with the WAL on an emptyDir, a StatefulSet variant with the WAL on a
// PersistentVolumeClaim, the ConfigMap with nemo's YAML configuration, an
// example Secret for backend credentials and example NetworkPolicies
// (README.md explains the ports and who may reach them, the probes, the
// grace period and the durability trade-off), and in monitoring/ a
// PodMonitor, PrometheusRule alerts and a Grafana dashboard. It has no Go
// API: its tests decode every manifest strictly into the k8s.io/api types
// and load the embedded configuration with nemo's own loader, so the
// examples cannot drift from Kubernetes or from nemo; check the alerts with
// promtool; and run a real Prometheus against a real nemo to show that
// every dashboard query returns data.
package k8s
