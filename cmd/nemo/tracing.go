package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/obs"
)

// tracingOn decides whether to trace: tracing.enabled or
// OTEL_TRACES_EXPORTER=otlp turn it on; OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none keep it off. Another exporter name is an error.
func tracingOn(c config.Tracing, env func(string) (string, bool)) (bool, error) {
	if v, _ := env("OTEL_SDK_DISABLED"); strings.EqualFold(strings.TrimSpace(v), "true") {
		return false, nil
	}
	switch v, _ := env("OTEL_TRACES_EXPORTER"); strings.TrimSpace(v) {
	case "":
		return c.Enabled, nil
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	default:
		return false, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: nemo exports traces with \"otlp\" (or \"none\")", config.ErrInvalid, v)
	}
}

// setupTracing starts OpenTelemetry tracing when it is on (tracingOn): an
// OTLP exporter over gRPC or HTTP (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL, "http/protobuf" by default as the
// specification says), configured by the standard OTEL_EXPORTER_OTLP_*
// variables, a batch span processor, the sampler of OTEL_TRACES_SAMPLER
// (parent-based, always on by default), the resource of OTEL_SERVICE_NAME
// and OTEL_RESOURCE_ATTRIBUTES (service.name "nemo" unless set), and W3C
// trace context and baggage as the propagator. The Google client libraries
// nemo calls Datastore with pick the provider up too. stop flushes what is
// buffered, within 5 s.
func setupTracing(ctx context.Context, c config.Tracing, env func(string) (string, bool), log *slog.Logger) (stop func(), err error) {
	on, err := tracingOn(c, env)
	if err != nil || !on {
		return func() {}, err
	}
	proto, ok := env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if !ok || proto == "" {
		proto, _ = env("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var client otlptrace.Client
	switch strings.TrimSpace(proto) {
	case "", "http/protobuf":
		proto, client = "http/protobuf", otlptracehttp.NewClient()
	case "grpc":
		client = otlptracegrpc.NewClient()
	default:
		return nil, fmt.Errorf("%w: OTLP protocol %q: nemo speaks \"grpc\" and \"http/protobuf\"", config.ErrInvalid, proto)
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("nemo"), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(obs.Propagator)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err.Error()) }))
	obs.EnableTracing(tp)
	log.Info("tracing on: exporting spans over OTLP", "protocol", proto)
	return func() {
		obs.EnableTracing(nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("tracing: flushing spans at exit", "err", err.Error())
		}
	}, nil
}
