// Package helmtest tests the Helm chart k8s/helm/nemo. It is a module of
// its own, so that helm's Go module (helm.sh/helm/v4, with client-go and
// the Prometheus Operator's API types) is a dependency of these tests only,
// not of nemo; it reaches nemo's config package through a replace of the
// main module. It has no Go API.
//
// The tests render the chart with helm's engine for each values file in
// k8s/helm/nemo/examples, decode every object strictly into the Kubernetes
// and Prometheus Operator API types (an unknown or misspelt field fails),
// lint the chart as helm lint does, and check that each rendered example
// agrees with its plain manifest in k8s/ in what matters: the image, args,
// ports, probes, lifecycle, resources (the memory limit derived from
// cache.max_bytes), security contexts, volumes, selectors and labels, the
// application containers, the Services and the NetworkPolicy, and nemo's
// effective configuration (its file and environment, loaded with nemo's
// own loader); the monitoring objects agree with k8s/monitoring. The plain
// manifests stay the documented, commented examples; these tests are what
// keeps the chart and them one configuration.
package helmtest
