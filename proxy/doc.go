// Package proxy is nemo's server process: it owns the listeners, the order
// in which things start and stop, and everything an operator talks to. A
// Server binds an HTTP listener (listen.http: health probes and Prometheus
// /metrics, nothing that reads data or changes state, so it may face the
// network), an admin listener (listen.admin, loopback unless allowed:
// pprof, /quitquitquit and a JSON debug API over the record buffer) and
// one echo v4 listener per mounted frontend, shared with the frontend's gRPC server
// (on grpc-go's own transport) when it has one (GRPCFrontend): each
// connection goes to one or the other by its first bytes
// (internal/protosplit). With listen.tls the frontend listeners and
// listen.http serve TLS too, with a certificate reloaded from its files
// (internal/tlsserve): a connection is TLS or plaintext by its first byte,
// and a frontend refuses plaintext from clients off loopback unless
// listen.allow_remote. It opens the engine (waiting for the WAL
// replay, during which /startupz answers 503), builds each frontend over the
// engine and serves it behind request-size limits, timeouts and panic
// recovery (for gRPC, the same log line and recovery as interceptors,
// Env.GRPC). Every client request gets an obs.Request in its context, which
// the layers below note into, and is counted and timed by API and operation
// (nemo_requests_total, nemo_request_duration_seconds); with tracing on it
// is a server span continuing the client's W3C trace context. On shutdown it turns readiness to 503, stops accepting, lets
// in-flight requests finish up to a deadline (gRPC: GracefulStop, then Stop), drains the engine (flush every
// dirty record, sync and close the WAL) and closes the store. The API
// dialects themselves live in proxy/aztable and proxy/datastore and plug in
// through Mount; this package knows nothing of either protocol.
package proxy
