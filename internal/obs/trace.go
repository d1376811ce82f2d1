package obs

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracerName is the instrumentation scope of nemo's spans.
const TracerName = "github.com/nemocache/nemo"

var (
	tracing atomic.Bool
	tracer  atomic.Pointer[trace.Tracer]
)

// EnableTracing starts (or with a nil provider, stops) tracing: request
// spans are started from then on, by a tracer of tp.
func EnableTracing(tp trace.TracerProvider) {
	if tp == nil {
		tracing.Store(false)
		return
	}
	t := tp.Tracer(TracerName)
	tracer.Store(&t)
	tracing.Store(true)
}

// Tracing reports whether request spans are started.
func Tracing() bool { return tracing.Load() }

// Propagator is how trace context reaches nemo: W3C trace context
// (traceparent, tracestate) and baggage, in HTTP headers and gRPC
// metadata, whatever the process's global propagator is.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// StartRequest starts the server span of a client request when tracing is
// on; with it off it returns ctx and a span that records nothing.
func StartRequest(ctx context.Context, name string) (context.Context, trace.Span) {
	if !tracing.Load() {
		return ctx, noop.Span{}
	}
	return (*tracer.Load()).Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
}

// StartChild starts a child span (a remote call, a WAL fsync) when ctx
// holds a recording span; otherwise it returns ctx and a span that records
// nothing, so work outside traced requests starts no trace.
func StartChild(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if !tracing.Load() || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noop.Span{}
	}
	return (*tracer.Load()).Start(ctx, name, trace.WithSpanKind(kind))
}

// EndSpan marks span failed with err (if any) and ends it.
func EndSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
