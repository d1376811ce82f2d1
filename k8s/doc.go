// Package k8s holds nemo's Kubernetes manifests: a native-sidecar Deployment
// with the WAL on an emptyDir, a StatefulSet variant with the WAL on a
// PersistentVolumeClaim, the ConfigMap with nemo's YAML configuration, an
// example Secret for backend credentials and example NetworkPolicies
// (README.md explains the ports and who may reach them, the probes, the
// grace period and the durability trade-off). It has no Go API: its test
// decodes every manifest strictly into the k8s.io/api types and loads the
// embedded configuration with nemo's own loader, so the examples cannot
// drift from Kubernetes or from nemo.
package k8s
