package proxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nemocache/nemo/proxy/node"
)

// backendUp is nemo_backend_up.
var backendUp = prometheus.NewDesc(prometheus.BuildFQName(namespace, "backend", "up"),
	"1 while the backend answers, 0 once no call to it or probe of it has succeeded for 10 s and the last 3 failed, until 3 succeed in a row (always 1 for the embedded store). "+
		"Readiness follows it where nemo keeps no WAL (coherence shared, write-through).", nil, nil)

// backendCollector exports whether the backend answers (node.Node.BackendUp),
// once the engine is open.
type backendCollector struct{ node func() *node.Node }

func (c backendCollector) Describe(ch chan<- *prometheus.Desc) { ch <- backendUp }

func (c backendCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.node()
	if n == nil {
		return
	}
	v := 0.0
	if n.BackendUp() {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(backendUp, prometheus.GaugeValue, v)
}
