package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/obs"
)

func TestTracingOn(t *testing.T) {
	for _, tc := range []struct {
		enabled bool
		env     map[string]string
		want    bool
		invalid bool
	}{
		{false, nil, false, false},
		{true, nil, true, false},
		{false, map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, false},
		{true, map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false, false},
		{true, map[string]string{"OTEL_SDK_DISABLED": "true"}, false, false},
		{false, map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, true},
	} {
		env := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		on, err := tracingOn(config.Tracing{Enabled: tc.enabled}, env)
		if on != tc.want || errors.Is(err, config.ErrInvalid) != tc.invalid {
			t.Errorf("enabled %v env %v: on %v err %v", tc.enabled, tc.env, on, err)
		}
	}
	env := func(k string) (string, bool) {
		if k == "OTEL_EXPORTER_OTLP_PROTOCOL" {
			return "http/json", true
		}
		return "", false
	}
	if _, err := setupTracing(context.Background(), config.Tracing{Enabled: true}, env, slog.New(slog.DiscardHandler)); !errors.Is(err, config.ErrInvalid) {
		t.Errorf("http/json: %v, want a configuration error", err)
	}
}

// TestTracingExportsOverOTLP: with tracing on, a request span reaches an
// OTLP/HTTP receiver named by OTEL_EXPORTER_OTLP_ENDPOINT when tracing
// stops (the batch is flushed).
func TestTracingExportsOverOTLP(t *testing.T) {
	var posts atomic.Int32
	var body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/traces" && r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			body.Store(string(b))
			posts.Add(1)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "nemo-under-test")
	stop, err := setupTracing(context.Background(), config.Tracing{Enabled: true}, os.LookupEnv, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if !obs.Tracing() {
		t.Fatal("tracing is not on")
	}
	ctx, span := obs.StartRequest(context.Background(), "aztable get")
	_, child := obs.StartChild(ctx, "remote get", trace.SpanKindClient)
	child.End()
	span.End()
	stop()
	if obs.Tracing() {
		t.Error("tracing still on after stop")
	}
	b, _ := body.Load().(string)
	if posts.Load() == 0 || !strings.Contains(b, "aztable get") || !strings.Contains(b, "remote get") || !strings.Contains(b, "nemo-under-test") {
		t.Errorf("%d posts; body %q", posts.Load(), b)
	}
}
