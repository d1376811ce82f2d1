package proxy

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/internal/obs"
)

// requestMetrics are the frontends' per-request metrics: requests by API,
// operation, status class and source (answered from the buffer alone or
// with remote calls), and latency by API and operation. The operation is
// what the frontend named on the request's obs.Request ("other" when it
// named none: an unknown route, a refusal before routing); gRPC calls are
// named after their method ("run_query", obs.MethodOp).
type requestMetrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newRequestMetrics() *requestMetrics {
	return &requestMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "requests_total",
			Help: "Client requests by API, operation, status class (2xx, 4xx, 5xx; gRPC codes by Google's HTTP mapping) and source (buffer: answered without a remote call; remote).",
		}, []string{"api", "op", "status", "source"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "request_duration_seconds",
			Help:    "Client request latency by API and operation, from the request's arrival to its answer.",
			Buckets: obs.LatencySeconds(),
		}, []string{"api", "op"}),
	}
}

// Describe implements prometheus.Collector.
func (m *requestMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.total.Describe(ch)
	m.duration.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *requestMetrics) Collect(ch chan<- prometheus.Metric) {
	m.total.Collect(ch)
	m.duration.Collect(ch)
}

// beginRequest starts a client request of api: its obs.Request in ctx and, when
// tracing is on, its server span, a child of the trace context the client
// sent (carrier: HTTP headers or gRPC metadata).
func beginRequest(ctx context.Context, api string, carrier propagation.TextMapCarrier) (context.Context, *obs.Request, trace.Span) {
	r := &obs.Request{}
	ctx = obs.WithRequest(ctx, r)
	if !obs.Tracing() {
		return ctx, r, noop.Span{}
	}
	ctx = obs.Propagator.Extract(ctx, carrier)
	ctx, span := obs.StartRequest(ctx, api)
	return ctx, r, span
}

// end records a finished request: its metrics, and its span's name and
// attributes. class is its status class ("2xx", "4xx", "5xx").
func (m *requestMetrics) end(api string, r *obs.Request, span trace.Span, start time.Time, class string, setStatus func(trace.Span)) {
	op := r.Op()
	if op == "" {
		op = "other"
	}
	m.total.WithLabelValues(api, op, class, r.Source()).Inc()
	observeDuration(m.duration.WithLabelValues(api, op), time.Since(start).Seconds(), span)
	if !span.IsRecording() {
		return
	}
	waits, waited := r.LockWaits()
	span.SetName(api + " " + op)
	span.SetAttributes(
		attribute.String("nemo.api", api),
		attribute.String("nemo.op", op),
		attribute.String("nemo.keyspace", r.Keyspace()),
		attribute.String("nemo.cache.outcome", r.Outcome()),
		attribute.Int("nemo.cache.hits", int(r.Count(obs.Hit)+r.Count(obs.RangeHit))),
		attribute.Int("nemo.cache.negative_hits", int(r.Count(obs.NegativeHit))),
		attribute.Int("nemo.cache.misses", int(r.Count(obs.Miss)+r.Count(obs.RangeFetch))),
		attribute.Int("nemo.remote_calls", int(r.RemoteCalls())),
		attribute.Int("nemo.lock_waits", int(waits)),
		attribute.Float64("nemo.lock_wait_seconds", waited.Seconds()),
	)
	setStatus(span)
	span.End()
}

// httpClass is an HTTP status's class.
func httpClass(code int) string {
	switch {
	case code >= 500:
		return "5xx"
	case code >= 400:
		return "4xx"
	case code >= 300:
		return "3xx"
	}
	return "2xx"
}

// grpcClass is a gRPC code's class by Google's HTTP mapping (Canceled is
// 499, DeadlineExceeded 504, ...).
func grpcClass(c grpccodes.Code) string {
	switch c {
	case grpccodes.OK:
		return "2xx"
	case grpccodes.Canceled, grpccodes.InvalidArgument, grpccodes.NotFound, grpccodes.AlreadyExists,
		grpccodes.PermissionDenied, grpccodes.ResourceExhausted, grpccodes.FailedPrecondition,
		grpccodes.Aborted, grpccodes.OutOfRange, grpccodes.Unauthenticated:
		return "4xx"
	}
	return "5xx"
}

// grpcOps caches grpcOp's answers by full method name. Interceptors see
// only the methods a server registered, so it stays that small.
var grpcOps sync.Map

// grpcOp is a gRPC method's operation label (obs.MethodOp):
// "/google.datastore.v1.Datastore/RunQuery" is "run_query", as the REST
// API's :runQuery is.
func grpcOp(fullMethod string) string {
	if op, ok := grpcOps.Load(fullMethod); ok {
		return op.(string)
	}
	op := "other"
	if name := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]; name != "" {
		op = obs.MethodOp(name)
	}
	grpcOps.Store(fullMethod, op)
	return op
}

// instrumentUnary is the outermost gRPC interceptor: the request's
// obs.Request, metrics and span, as observe does for HTTP.
func instrumentUnary(api string, m *requestMetrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		var carrier metadataCarrier
		if obs.Tracing() {
			// A copy of every header: only worth it for trace context.
			md, _ := metadata.FromIncomingContext(ctx)
			carrier = metadataCarrier(md)
		}
		ctx, r, span := beginRequest(ctx, api, carrier)
		r.SetOp(grpcOp(info.FullMethod))
		resp, err := handler(ctx, req)
		code := status.Code(err)
		m.end(api, r, span, start, grpcClass(code), func(span trace.Span) {
			span.SetAttributes(attribute.String("rpc.system", "grpc"), attribute.String("rpc.method", info.FullMethod),
				attribute.Int("rpc.grpc.status_code", int(code)))
			if code != grpccodes.OK {
				span.SetStatus(codes.Error, code.String())
			}
		})
		return resp, err
	}
}

// httpSpanStatus sets an HTTP request span's status attributes; a 5xx
// marks it failed. The path is left out: it names entity keys.
func httpSpanStatus(method string, code int) func(trace.Span) {
	return func(span trace.Span) {
		span.SetAttributes(attribute.String("http.request.method", method), attribute.Int("http.response.status_code", code))
		if code >= 500 {
			span.SetStatus(codes.Error, strconv.Itoa(code))
		}
	}
}

// metadataCarrier reads trace context from incoming gRPC metadata.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
