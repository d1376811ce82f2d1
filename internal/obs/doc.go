// Package obs is what every layer shares to be observed: latency and size
// histograms that the layers' Stats snapshots report (and the proxy's
// collector exports as Prometheus histograms), the per-request record a
// client request carries in its context (which operation it is, the
// keyspace it touched, its buffer hits, negative hits and misses, remote
// calls and lock waits), and nemo's OpenTelemetry tracer with the span
// helpers the layers call.
//
// It sits below every other package of nemo (it imports none of them), so
// the buffer, the engine, the WAL and the adapters note what happens to a
// request without knowing who asked. A Request is created by the proxy for
// each client request; code that runs without one (background write-back,
// refreshes, replay) finds none in its context and notes nothing.
//
// Tracing is off unless EnableTracing was called (the proxy's tracing
// setup does, when tracing is configured): with it off, span helpers
// return at once and cost no allocation. Child spans (remote calls, WAL
// fsyncs, lock waits) are started only under a recording request span, so
// background work never starts a trace of its own.
//
// No locks: every counter is atomic.
package obs
