package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"github.com/labstack/echo/v4"
	"google.golang.org/grpc"

	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/obs"
	"github.com/nemocache/nemo/internal/testenv"
)

// The ceilings TestRequestPathAllocs holds the proxy's part of a request
// to: a little above what it makes today (the counts beside them).
const (
	grpcPathAllocs = 4 // 3 on 2026-12-07
	httpPathAllocs = 9 // 7 on 2026-12-07
)

// TestRequestPathAllocs: what the proxy adds to each request, its
// interceptors (gRPC) and its middleware (HTTP) around a handler that
// notes a buffer hit, with tracing off, at info level, allocates at most
// the ceilings above: their cost is that of a counter and a histogram
// observation, and stays so (their speed: BenchmarkHitPathLookup and
// BenchmarkHitPathGetEntity).
func TestRequestPathAllocs(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := newRequestMetrics()
	t.Run("grpc", func(t *testing.T) {
		intercept := unary(log, m.api("datastore"))
		info := &grpc.UnaryServerInfo{FullMethod: datastorepb.Datastore_Lookup_FullMethodName}
		handler := func(ctx context.Context, _ any) (any, error) {
			obs.Note(ctx, "k", obs.Hit)
			return nil, nil
		}
		ctx := context.Background()
		allocs := testing.AllocsPerRun(500, func() {
			if _, err := intercept(ctx, nil, info, handler); err != nil {
				t.Fatal(err)
			}
		})
		testenv.AllocsAtMost(t, "gRPC call", allocs, grpcPathAllocs)
	})
	t.Run("http", func(t *testing.T) {
		e := echo.New()
		l := config.Defaults().Listen
		e.Use(middleware("aztable", log, m.api("aztable"), l, 30e9)...)
		e.GET("/*", func(c echo.Context) error {
			obs.SetOp(c.Request().Context(), "get_entity")
			obs.Note(c.Request().Context(), "k", obs.Hit)
			return c.NoContent(http.StatusOK)
		})
		req := httptest.NewRequest(http.MethodGet, "/devstoreaccount1/t(PartitionKey='p',RowKey='r')", nil)
		w := httptest.NewRecorder()
		allocs := testing.AllocsPerRun(500, func() {
			e.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				t.Fatal(w.Code)
			}
		})
		testenv.AllocsAtMost(t, "HTTP request", allocs, httpPathAllocs)
	})
}
