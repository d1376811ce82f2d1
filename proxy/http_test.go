package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/nemocache/nemo/config"
)

// frontendFunc adapts a function to the Frontend interface: a frontend of
// test routes.
type frontendFunc func(e *echo.Echo)

// Register calls f(e).
func (f frontendFunc) Register(e *echo.Echo) { f(e) }

// middlewareServer builds the frontend http.Server exactly as Run does,
// around routes, with small limits.
func middlewareServer(t *testing.T, log *syncBuffer, routes func(e *echo.Echo)) *http.Server {
	t.Helper()
	cfg := testConfig(t)
	cfg.Listen.MaxRequestBytes = 16
	cfg.Listen.WriteTimeout = 3 * time.Second
	s := &Server{opts: Options{Config: cfg}, requests: newRequestMetrics()}
	return s.frontendServer("test", 0, frontendFunc(routes), testLogger(log))
}

func serveOnce(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestPanicBecomes500(t *testing.T) {
	log := &syncBuffer{}
	srv := middlewareServer(t, log, func(e *echo.Echo) {
		e.GET("/panic", func(echo.Context) error { panic("kaboom") })
		e.GET("/ok", func(c echo.Context) error { return c.String(200, "fine") })
	})
	if rec := serveOnce(srv.Handler, httptest.NewRequest("GET", "/panic", nil)); rec.Code != 500 {
		t.Fatalf("panic: %d %s", rec.Code, rec.Body)
	}
	if l := log.String(); !strings.Contains(l, "handler panic") || !strings.Contains(l, "kaboom") || !strings.Contains(l, "http_test.go") {
		t.Errorf("panic log lacks the message or the stack:\n%s", l)
	}
	if rec := serveOnce(srv.Handler, httptest.NewRequest("GET", "/ok", nil)); rec.Code != 200 || rec.Body.String() != "fine" {
		t.Errorf("after a panic: %d %s", rec.Code, rec.Body)
	}
	// ErrAbortHandler is net/http's deliberate abort, not a bug: it passes.
	abort := middlewareServer(t, log, func(e *echo.Echo) {
		e.GET("/abort", func(echo.Context) error { panic(http.ErrAbortHandler) })
	})
	func() {
		defer func() {
			if r := recover(); r != http.ErrAbortHandler {
				t.Errorf("recovered %v, want http.ErrAbortHandler re-raised", r)
			}
		}()
		serveOnce(abort.Handler, httptest.NewRequest("GET", "/abort", nil))
	}()
}

func TestRequestBodyLimit(t *testing.T) {
	var readErr atomic.Value
	srv := middlewareServer(t, &syncBuffer{}, func(e *echo.Echo) {
		e.POST("/echo", func(c echo.Context) error {
			b, err := io.ReadAll(c.Request().Body)
			if err != nil {
				readErr.Store(err)
				return echo.NewHTTPError(http.StatusRequestEntityTooLarge)
			}
			return c.String(200, string(b))
		})
	})
	if rec := serveOnce(srv.Handler, httptest.NewRequest("POST", "/echo", strings.NewReader("sixteen bytes!!!"))); rec.Code != 200 || rec.Body.String() != "sixteen bytes!!!" {
		t.Errorf("body at the limit: %d %s", rec.Code, rec.Body)
	}
	rec := serveOnce(srv.Handler, httptest.NewRequest("POST", "/echo", strings.NewReader("seventeen bytes!!")))
	if rec.Code != http.StatusRequestEntityTooLarge || readErr.Load() != nil {
		t.Errorf("declared body over the limit: %d (handler read error %v), want 413 before the handler", rec.Code, readErr.Load())
	}
	// An undeclared length (chunked) is cut off while reading.
	req := httptest.NewRequest("POST", "/echo", io.MultiReader(strings.NewReader("0123456789"), strings.NewReader("0123456789")))
	req.ContentLength = -1
	if rec := serveOnce(srv.Handler, req); rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked body over the limit: %d", rec.Code)
	}
	var mbe *http.MaxBytesError
	if err, _ := readErr.Load().(error); !errors.As(err, &mbe) || mbe.Limit != 16 {
		t.Errorf("handler read error = %v, want *http.MaxBytesError with limit 16", readErr.Load())
	}
}

func TestRequestDeadlineAndErrorsHandledOnce(t *testing.T) {
	log := &syncBuffer{}
	var handled atomic.Int32
	srv := middlewareServer(t, log, func(e *echo.Echo) {
		e.HTTPErrorHandler = func(err error, c echo.Context) {
			handled.Add(1)
			c.String(http.StatusTeapot, "dialect error: "+err.Error())
		}
		e.GET("/deadline", func(c echo.Context) error {
			d, ok := c.Request().Context().Deadline()
			if !ok {
				return errors.New("no deadline")
			}
			// The write timeout (3s) less its margin (a fifth).
			if left := time.Until(d); left <= 2200*time.Millisecond || left > 2400*time.Millisecond {
				return errors.New("deadline " + left.String() + " away, want about 2.4s")
			}
			return c.NoContent(204)
		})
		e.GET("/fail", func(echo.Context) error { return errors.New("nope") })
	})
	// Every request gets the same deadline (the margin is not taken
	// again per request).
	for i := 0; i < 50; i++ {
		if rec := serveOnce(srv.Handler, httptest.NewRequest("GET", "/deadline", nil)); rec.Code != 204 {
			t.Fatalf("deadline, request %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	handled.Store(0)
	rec := serveOnce(srv.Handler, httptest.NewRequest("GET", "/fail", nil))
	if rec.Code != http.StatusTeapot || rec.Body.String() != "dialect error: nope" || handled.Load() != 1 {
		t.Errorf("handler error: %d %q, error handler ran %d times, want the frontend's handler once", rec.Code, rec.Body, handled.Load())
	}
	// The request log line carries the status the error handler chose.
	if l := log.String(); !strings.Contains(l, "msg=request frontend=test method=GET path=/fail") || !strings.Contains(l, "status=418") {
		t.Errorf("request log:\n%s", l)
	}
}

// TestRequestDeadline: listen.request_timeout when set, else the service's
// own bound (Azure's 30 s, the Datastore clients' 60 s); either way capped
// by the write timeout less its margin; without a write timeout, what is
// left.
func TestRequestDeadline(t *testing.T) {
	for _, tc := range []struct{ request, service, write, want time.Duration }{
		{5 * time.Second, 30 * time.Second, time.Minute, 5 * time.Second},
		{5 * time.Second, 0, 3 * time.Second, 2400 * time.Millisecond},
		{0, 30 * time.Second, time.Minute, 30 * time.Second},
		{0, 60 * time.Second, time.Minute, 59 * time.Second},
		{0, 30 * time.Second, 20 * time.Second, 19 * time.Second},
		{0, 0, time.Minute, 59 * time.Second},
		{0, 30 * time.Second, 0, 30 * time.Second},
		{5 * time.Second, 60 * time.Second, 0, 5 * time.Second},
		{0, 0, 0, 0},
	} {
		if got := RequestDeadline(config.Listen{RequestTimeout: tc.request, WriteTimeout: tc.write}, tc.service); got != tc.want {
			t.Errorf("request_timeout %v, service %v, write_timeout %v: deadline %v, want %v", tc.request, tc.service, tc.write, got, tc.want)
		}
	}
}

func TestRequestLogOnlyAtDebug(t *testing.T) {
	cfg := testConfig(t)
	var out syncBuffer
	s := &Server{opts: Options{Config: cfg}, requests: newRequestMetrics()}
	info := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv := s.frontendServer("test", 0, frontendFunc(func(e *echo.Echo) {
		e.GET("/x", func(c echo.Context) error { return c.NoContent(204) })
	}), info)
	serveOnce(srv.Handler, httptest.NewRequest("GET", "/x", nil))
	if strings.Contains(out.String(), "msg=request") {
		t.Errorf("request logged at info level:\n%s", out.String())
	}
}

// TestFrontendSpeaksH2C: the listener accepts HTTP/2 with prior knowledge,
// which is how gRPC clients talk to an emulator, and HTTP/1.1 on the same
// port.
func TestFrontendSpeaksH2C(t *testing.T) {
	f := &protoFrontend{}
	cfg := testConfig(t)
	s, err := New(Options{Config: cfg, Open: checkedOpen(t), Logger: testLogger(io.Discard), Frontends: []Mount{
		{Name: "proto", Addr: "127.0.0.1:0", New: func(Env) (Frontend, error) { return f, nil }},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := runServer(ctx, s)
	defer func() { cancel(); <-done }()
	waitStatus(t, "http://"+s.AdminAddr()+"/readyz", 200)
	url := "http://" + s.FrontendAddr("proto") + "/proto"

	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	resp, err := h2.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "HTTP/2.0" {
		t.Errorf("h2c request served as %q", b)
	}
	if code, body := get(url); code != 200 || body != "HTTP/1.1" {
		t.Errorf("HTTP/1.1 request: %d %q", code, body)
	}
}

type protoFrontend struct{}

func (protoFrontend) Register(e *echo.Echo) {
	e.GET("/proto", func(c echo.Context) error { return c.String(200, c.Request().Proto) })
}
