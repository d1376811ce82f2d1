package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/obs"
	"github.com/nemocache/nemo/proxy/node"
	"github.com/nemocache/nemo/txn"
)

// testConfig is the default configuration on free loopback ports with the
// embedded store in a fresh directory.
func testConfig(t testing.TB) config.Config {
	t.Helper()
	cfg := config.Defaults()
	cfg.Backend.Embedded.DataDir = t.TempDir()
	cfg.Backend.Embedded.NoSync = true
	cfg.Listen.Admin = "127.0.0.1:0"
	cfg.Listen.HTTP = "127.0.0.1:0"
	cfg.Listen.AzureTable = "127.0.0.1:0"
	cfg.Listen.Datastore = "127.0.0.1:0"
	cfg.Listen.ShutdownGrace = 5 * time.Second
	cfg.Cache.EvictWorkers = 1
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// checkedOpen is node.Open for the embedded backend, except that the node
// checks its buffer's invariants against the store when it stops (Drain or
// Close): after the engine and the buffer have stopped, before the store
// closes. The check is skipped once t has failed.
func checkedOpen(t testing.TB) func(config.Config, *slog.Logger) (*node.Node, error) {
	return func(cfg config.Config, log *slog.Logger) (*node.Node, error) {
		if log == nil {
			log = slog.Default()
		}
		st, err := embedded.Open(cfg.Backend.Embedded.DataDir, embedded.Options{
			NoSync: cfg.Backend.Embedded.NoSync,
			Logger: log.With("component", "store"),
		})
		if err != nil {
			return nil, fmt.Errorf("open embedded store: %w", err)
		}
		var n *node.Node
		n, err = node.New(st, func() error {
			if !t.Failed() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := n.Buffer.Check(ctx); err != nil {
					t.Errorf("buffer invariants when the node stops: %v", err)
				}
			}
			return st.Close()
		}, cfg, log)
		if err != nil {
			return nil, errors.Join(err, st.Close())
		}
		return n, nil
	}
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// kvFrontend is a minimal dialect over the engine for tests: PUT
// /kv/{ks}/{key} upserts the body, GET reads it back. Keyspaces are opened
// on first use.
type kvFrontend struct {
	eng *txn.Engine
	// hold, when set, makes PUT /slow/{ks}/{key} wait for it to close
	// before writing, to keep a request in flight.
	hold    chan struct{}
	entered chan struct{}
}

func (f *kvFrontend) Register(e *echo.Echo) {
	put := func(c echo.Context) error {
		obs.SetOp(c.Request().Context(), "put")
		ks := adapters.Keyspace(c.Param("ks"))
		body, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return echo.NewHTTPError(http.StatusRequestEntityTooLarge, err.Error())
		}
		if err := f.eng.Upsert(c.Request().Context(), ks, []byte(c.Param("key")), body); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
	e.PUT("/kv/:ks/:key", put)
	e.GET("/kv/:ks/:key", func(c echo.Context) error {
		obs.SetOp(c.Request().Context(), "get")
		ks := adapters.Keyspace(c.Param("ks"))
		v, ok, err := f.eng.Get(c.Request().Context(), ks, []byte(c.Param("key")), txn.ReadLatest)
		if err != nil {
			return err
		}
		if !ok {
			return c.NoContent(http.StatusNotFound)
		}
		return c.Blob(http.StatusOK, "application/octet-stream", v)
	})
	e.PUT("/slow/:ks/:key", func(c echo.Context) error {
		close(f.entered)
		<-f.hold
		return put(c)
	})
}

// kvMount mounts f, which gets the engine from the Env.
func kvMount(f *kvFrontend) Mount {
	return Mount{Name: "kv", Addr: "127.0.0.1:0", New: func(env Env) (Frontend, error) {
		if _, ok := env.Backend.(*embedded.Store); !ok {
			return nil, fmt.Errorf("Env.Backend is %T, want the unwrapped *embedded.Store", env.Backend)
		}
		f.eng = env.Engine
		return f, nil
	}}
}

// runServer starts s.Run and returns a channel with its result.
func runServer(ctx context.Context, s *Server) <-chan error {
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return done
}

// waitStatus polls url until it answers want.
func waitStatus(t testing.TB, url string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := get(url)
		if code == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: status %d, want %d", url, code, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// get returns the status and body of a GET, status 0 if it failed.
func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func do(t *testing.T, method, url string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// scrape reads /metrics into "name{labels}" -> value, as exposed.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	code, body := get("http://" + addr + "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func runtimeVersion() string { return runtime.Version() }
