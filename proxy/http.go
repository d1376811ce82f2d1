package proxy

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/propagation"

	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/deadline"
	"github.com/nemocache/nemo/internal/tlsserve"
)

// frontendServer builds the echo instance and http.Server for one frontend,
// whose service bounds a request at service (Mount.ServiceTimeout).
func (s *Server) frontendServer(name string, service time.Duration, f Frontend, log *slog.Logger) *http.Server {
	l := s.opts.Config.Listen
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	mw := middleware(name, log, s.requests.api(name), l, service)
	if s.tls != nil {
		mw = append([]echo.MiddlewareFunc{tlsState}, mw...) // a TLS request's state, for SAS spr=https
	}
	e.Use(mw...)
	f.Register(e)

	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           e,
		Protocols:         &protos,
		ReadTimeout:       l.ReadTimeout,
		ReadHeaderTimeout: headerTimeout(l.ReadTimeout),
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
}

// connKey keys a request's connection in its context (http.Server's
// ConnContext).
type connKey struct{}

// tlsState gives a request that came over listen.tls its TLS state
// (Request.TLS), which net/http sets only for a *tls.Conn: the Azure
// frontend's SAS check (spr=https) and its URLs read it.
func tlsState(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if conn, ok := req.Context().Value(connKey{}).(*tlsserve.Conn); ok && req.TLS == nil {
			if st, ok := conn.ConnectionState(); ok {
				req.TLS = &st
			}
		}
		return next(c)
	}
}

// middleware is a frontend's echo middleware, one function (echo wraps a
// handler in each middleware per request): the request's record, metrics,
// span and deadline (observe), then panic recovery (recoverPanics) and the
// body limit (limitBody).
func middleware(name string, log *slog.Logger, m *apiMetrics, l config.Listen, service time.Duration) []echo.MiddlewareFunc {
	return []echo.MiddlewareFunc{observe(name, log, m, RequestDeadline(l, service), WriteDeadline(l), int64(l.MaxRequestBytes))}
}

// headerTimeout bounds reading request headers even when listen.read_timeout
// is 0 (disabled), so an idle client cannot hold a connection half-open.
func headerTimeout(read time.Duration) time.Duration {
	const most = 10 * time.Second
	if read > 0 && read < most {
		return read
	}
	return most
}

// observe is the outermost middleware: it gives the request its
// obs.Request (and, when tracing is on, its server span, continuing the
// client's W3C trace context) and its deadline, hands a handler's error to
// the error handler here, exactly once, so the status is known when the
// request is counted, records the request's metrics, and logs one line per
// request at debug level. The query string is not logged: it can carry SAS
// signatures. Inside it the handler runs under recoverPanics, with its
// body limited to limit (limitBody).
//
// The deadline is d (RequestDeadline), so that a handler's engine and
// backend calls give up in time for the handler to answer with the
// protocol's timeout error, before the client's retry policy gives up and
// before the server stops writing (a client would see the connection close
// instead); a commit the handler has sent to the store runs on to w
// (WriteDeadline; internal/deadline). Zero d disables both. gRPC calls do
// not come through here (a GRPCFrontend's server bounds its calls itself,
// with RequestDeadline and WriteDeadline).
func observe(frontend string, log *slog.Logger, m *apiMetrics, d, w time.Duration, limit int64) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			req := c.Request()
			ctx, r, span := beginRequest(req.Context(), frontend, propagation.HeaderCarrier(req.Header))
			if d > 0 {
				var cancel context.CancelFunc
				ctx, _, cancel = deadline.Start(ctx, d, w)
				defer cancel()
			}
			c.SetRequest(req.WithContext(ctx))
			if err := recoverPanics(c, log, limit, next); err != nil {
				c.Error(err)
			}
			res := c.Response()
			if m.end(r, span, start, httpClass(res.Status)) {
				httpSpanStatus(span, req.Method, res.Status)
				span.End()
			}
			if log.Enabled(ctx, slog.LevelDebug) {
				log.LogAttrs(ctx, slog.LevelDebug, "request",
					slog.String("frontend", frontend),
					slog.String("method", req.Method),
					slog.String("path", req.URL.Path),
					slog.String("proto", req.Proto),
					slog.Int("status", res.Status),
					slog.Int64("bytes_out", res.Size),
					slog.Duration("took", time.Since(start)),
					slog.String("remote", req.RemoteAddr))
			}
			return nil
		}
	}
}

// recoverPanics runs next under limitBody, and turns its panic into a
// 500 and an error log line with the stack, so one bad request does not
// take the sidecar down with it. http.ErrAbortHandler is re-raised: it is
// net/http's way to abort a response on purpose.
func recoverPanics(c echo.Context, log *slog.Logger, limit int64, next echo.HandlerFunc) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if r == http.ErrAbortHandler {
			panic(r)
		}
		req := c.Request()
		log.Error("handler panic", "method", req.Method, "path", req.URL.Path,
			"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		err = echo.NewHTTPError(http.StatusInternalServerError).SetInternal(fmt.Errorf("panic: %v", r))
	}()
	return limitBody(c, limit, next)
}

// limitBody refuses a declared body over limit at once, caps reading an
// undeclared (chunked) one at limit, and runs next. A request without a
// body (a GET's) is left as it is.
func limitBody(c echo.Context, limit int64, next echo.HandlerFunc) error {
	req := c.Request()
	if req.ContentLength > limit {
		return echo.ErrStatusRequestEntityTooLarge
	}
	if req.Body != http.NoBody {
		req.Body = http.MaxBytesReader(c.Response(), req.Body, limit)
	}
	return next(c)
}

// RequestDeadline is how long a request may wait for the backend and for
// locks before it is answered with the protocol's timeout error:
// listen.request_timeout when it is set, else service, the bound the
// service itself gives a request (Mount.ServiceTimeout: Azure's 30 s for an
// operation, the Datastore clients' 60 s); either way capped by
// WriteDeadline, the server's write timeout less what the request keeps to
// write its error. 0 when none of the three is set (no deadline).
func RequestDeadline(l config.Listen, service time.Duration) time.Duration {
	d := cmp.Or(l.RequestTimeout, service)
	if w := WriteDeadline(l); w > 0 && (d <= 0 || w < d) {
		return w
	}
	return d
}

// WriteDeadline is how long a request that has sent a commit to the store
// may run (internal/deadline): the server's write timeout
// (listen.write_timeout) less what the request keeps to write its answer, a
// fifth of it, at most a second (deadline.Within). 0 when there is no write
// timeout: the client's own deadline alone bounds it then.
func WriteDeadline(l config.Listen) time.Duration { return deadline.Within(l.WriteTimeout) }
