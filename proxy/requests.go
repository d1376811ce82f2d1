package proxy

import (
	"context"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// api are requestMetrics' series for one API, each resolved once (a
// request costs a map read, a counter's and a histogram's update): the
// prometheus vectors hash and check every label value on each lookup.
func (m *requestMetrics) api(name string) *apiMetrics {
	return &apiMetrics{api: name, m: m}
}

// apiMetrics are one API's request series, by operation.
type apiMetrics struct {
	api string
	m   *requestMetrics
	ops memo[*opMetrics]
}

// opMetrics are one operation's series: its latency, and its request
// counters by status class and source, each made at its first request
// (a series nothing counted is not exported).
type opMetrics struct {
	name     string
	duration prometheus.Observer
	total    [numClasses][2]atomic.Pointer[prometheus.Counter] // by class, and source (remote: 1)
}

// class is a status class, a requests_total label.
type class uint8

const (
	class2xx class = iota
	class3xx
	class4xx
	class5xx
	numClasses
)

var classNames = [numClasses]string{"2xx", "3xx", "4xx", "5xx"}

// end records a finished request of status class c: its counter and its
// latency. When its span records, end also names the span and sets its
// attributes, and returns true: the caller then sets the span's status
// and ends it.
func (a *apiMetrics) end(r *obs.Request, span trace.Span, start time.Time, c class) bool {
	op := r.Op()
	if op == "" {
		op = "other"
	}
	o := a.ops.get(op, func(op string) *opMetrics {
		return &opMetrics{name: op, duration: a.m.duration.WithLabelValues(a.api, op)}
	})
	source := r.Source()
	remote := 0
	if source == sourceRemote {
		remote = 1
	}
	total := o.total[c][remote].Load()
	if total == nil {
		cnt := a.m.total.WithLabelValues(a.api, op, classNames[c], source)
		total = &cnt
		o.total[c][remote].Store(total)
	}
	(*total).Inc()
	observeDuration(o.duration, time.Since(start).Seconds(), span)
	if !span.IsRecording() {
		return false
	}
	waits, waited := r.LockWaits()
	span.SetName(a.api + " " + op)
	span.SetAttributes(
		attribute.String("nemo.api", a.api),
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
	return true
}

// sourceRemote is obs.Request.Source for a request that made remote calls.
const sourceRemote = "remote"

// memo is a map from names met a few times each (operations, methods) to
// what they resolve to, read on every request without a lock and written
// by copying under one.
type memo[V any] struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]V]
}

// get returns k's value, resolving it with build the first time.
func (c *memo[V]) get(k string, build func(string) V) V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v
		}
	}
	next := make(map[string]V, 1)
	if old != nil {
		maps.Copy(next, *old)
	}
	v := build(k)
	next[k] = v
	c.m.Store(&next)
	return v
}

// httpClass is an HTTP status's class.
func httpClass(code int) class {
	switch {
	case code >= 500:
		return class5xx
	case code >= 400:
		return class4xx
	case code >= 300:
		return class3xx
	}
	return class2xx
}

// grpcClass is a gRPC code's class by Google's HTTP mapping (Canceled is
// 499, DeadlineExceeded 504, ...).
func grpcClass(c grpccodes.Code) class {
	switch c {
	case grpccodes.OK:
		return class2xx
	case grpccodes.Canceled, grpccodes.InvalidArgument, grpccodes.NotFound, grpccodes.AlreadyExists,
		grpccodes.PermissionDenied, grpccodes.ResourceExhausted, grpccodes.FailedPrecondition,
		grpccodes.Aborted, grpccodes.OutOfRange, grpccodes.Unauthenticated:
		return class4xx
	}
	return class5xx
}

// grpcOps caches grpcOp's answers by full method name. Interceptors see
// only the methods a server registered, so it stays that small.
var grpcOps memo[string]

// grpcOp is a gRPC method's operation label (obs.MethodOp):
// "/google.datastore.v1.Datastore/RunQuery" is "run_query", as the REST
// API's :runQuery is.
func grpcOp(fullMethod string) string {
	return grpcOps.get(fullMethod, func(fullMethod string) string {
		if name := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]; name != "" {
			return obs.MethodOp(name)
		}
		return "other"
	})
}

// unary is the proxy's gRPC interceptor (one: grpc-go's chain builds a
// handler per call for each interceptor but the last): the request's
// obs.Request, metrics and span, as observe does for HTTP, the debug
// request log, and panic recovery inside them, so that a panic is counted
// and logged as the INTERNAL it is answered with.
func unary(log *slog.Logger, a *apiMetrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		var carrier metadataCarrier
		if obs.Tracing() {
			// A copy of every header: only worth it for trace context.
			md, _ := metadata.FromIncomingContext(ctx)
			carrier = metadataCarrier(md)
		}
		ctx, r, span := beginRequest(ctx, a.api, carrier)
		r.SetOp(grpcOp(info.FullMethod))
		resp, err := recovered(ctx, log, req, info, handler)
		code := status.Code(err)
		if a.end(r, span, start, grpcClass(code)) {
			span.SetAttributes(attribute.String("rpc.system", "grpc"), attribute.String("rpc.method", info.FullMethod),
				attribute.Int("rpc.grpc.status_code", int(code)))
			if code != grpccodes.OK {
				span.SetStatus(codes.Error, code.String())
			}
			span.End()
		}
		if log.Enabled(ctx, slog.LevelDebug) {
			logCall(ctx, log, info.FullMethod, start, err)
		}
		return resp, err
	}
}

// httpSpanStatus sets an HTTP request span's status attributes; a 5xx
// marks it failed. The path is left out: it names entity keys.
func httpSpanStatus(span trace.Span, method string, code int) {
	span.SetAttributes(attribute.String("http.request.method", method), attribute.Int("http.response.status_code", code))
	if code >= 500 {
		span.SetStatus(codes.Error, strconv.Itoa(code))
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
