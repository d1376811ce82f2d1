package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// observeDuration records a request's latency in o, a child of
// nemo_request_duration_seconds, with the trace ID of span as an exemplar
// when span belongs to a sampled trace (tracing on and the request
// traced): /metrics shows it to scrapers that ask for OpenMetrics, which
// link the bucket to the trace. Without a sampled trace it is a plain
// Observe, and allocates nothing more.
func observeDuration(o prometheus.Observer, seconds float64, span trace.Span) {
	sc := span.SpanContext()
	if eo, ok := o.(prometheus.ExemplarObserver); ok && sc.IsSampled() {
		eo.ObserveWithExemplar(seconds, prometheus.Labels{"trace_id": sc.TraceID().String()})
		return
	}
	o.Observe(seconds)
}
