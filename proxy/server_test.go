package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/storetest"
	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/testenv"
	"github.com/nemocache/nemo/proxy/node"
)

// TestShutdownDrainsEverythingIntoTheStore is the end-to-end shutdown test
// in process: writes go through a frontend listener into the engine; on
// cancel readiness turns 503 at once, the frontend stops accepting, the
// in-flight request finishes, a live transaction is allowed to commit, and
// after Run returns every acknowledged write is in the store on disk.
func TestShutdownDrainsEverythingIntoTheStore(t *testing.T) {
	cfg := testConfig(t)
	cfg.Cache.MaxDirtyAge = time.Hour // nothing is written back before the drain
	cfg.WAL.CheckpointInterval = time.Hour
	f := &kvFrontend{hold: make(chan struct{}), entered: make(chan struct{})}
	s, err := New(Options{Config: cfg, Frontends: []Mount{kvMount(f)}, Open: checkedOpen(t), Logger: testLogger(&syncBuffer{})})
	if err != nil {
		t.Fatal(err)
	}
	admin, front := "http://"+s.AdminAddr(), "http://"+s.FrontendAddr("kv")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runServer(ctx, s)
	waitStatus(t, admin+"/startup", http.StatusOK)
	waitStatus(t, admin+"/readyz", http.StatusOK)

	const n = 50
	for i := range n {
		if code, body := do(t, http.MethodPut, fmt.Sprintf("%s/kv/t/k%03d", front, i), strings.NewReader(fmt.Sprint("v", i))); code != http.StatusNoContent {
			t.Fatalf("put %d: %d %s", i, code, body)
		}
	}
	if d := s.node.Load().Buffer.Stats().DirtyBytes; d == 0 {
		t.Fatal("writes are not dirty in the buffer; the test would not prove the drain flushes")
	}

	// A request in flight and an open transaction when shutdown starts.
	slow := make(chan int, 1)
	go func() {
		code, _ := do(t, http.MethodPut, front+"/slow/t/slow", strings.NewReader("slow"))
		slow <- code
	}()
	<-f.entered
	tx, err := f.eng.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Upsert(context.Background(), "t", []byte("txn"), []byte("in-txn")); err != nil {
		t.Fatal(err)
	}

	cancel()
	waitStatus(t, admin+"/readyz", http.StatusServiceUnavailable)
	if code, body := get(admin + "/readyz"); !strings.Contains(body, "draining") {
		t.Errorf("/readyz while draining: %d %q", code, body)
	}
	if code, _ := get(admin + "/livez"); code != http.StatusOK {
		t.Errorf("/livez while draining: %d", code)
	}
	// Stop accepting: the frontend listener closes while the slow request
	// is still running.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.FrontendAddr("kv"), time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("frontend still accepts connections during the drain")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(f.hold)
	if code := <-slow; code != http.StatusNoContent {
		t.Fatalf("in-flight request during drain: %d", code)
	}
	// The engine waits for the live transaction.
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while a transaction was live", err)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := f.eng.Begin(false); err == nil {
		t.Error("engine admitted a new transaction while draining")
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatalf("commit of a live transaction during the drain: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the drain")
	}
	if _, err := net.DialTimeout("tcp", s.AdminAddr(), time.Second); err == nil {
		t.Error("admin listener still open after Run returned")
	}

	store, err := embedded.Open(cfg.Backend.Embedded.DataDir, embedded.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("reopen store (was it closed?): %v", err)
	}
	defer store.Close()
	want := map[string]string{"slow": "slow", "txn": "in-txn"}
	for i := range n {
		want[fmt.Sprintf("k%03d", i)] = fmt.Sprint("v", i)
	}
	keys := make([][]byte, 0, len(want))
	for k := range want {
		keys = append(keys, []byte(k))
	}
	vals, err := storetest.Values(store.Get(context.Background(), "t", keys))
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if string(vals[i]) != want[string(k)] {
			t.Errorf("store[%s] = %q, want %q", k, vals[i], want[string(k)])
		}
	}
}

// TestStartupWaitsForEngine: while the engine opens (WAL replay), /startup
// and /readyz answer 503 and /livez 200; the debug API says it is starting.
func TestStartupWaitsForEngine(t *testing.T) {
	cfg := testConfig(t)
	release := make(chan struct{})
	open := func(c config.Config, log *slog.Logger) (*node.Node, error) {
		<-release
		return checkedOpen(t)(c, log)
	}
	s, err := New(Options{Config: cfg, Open: open, Logger: testLogger(&syncBuffer{})})
	if err != nil {
		t.Fatal(err)
	}
	admin := "http://" + s.AdminAddr()
	done := runServer(context.Background(), s)
	waitStatus(t, admin+"/livez", http.StatusOK)
	for _, p := range []string{"/startup", "/readyz"} {
		if code, body := get(admin + p); code != http.StatusServiceUnavailable || body != "starting\n" {
			t.Errorf("%s during startup: %d %q", p, code, body)
		}
	}
	if code, body := get(admin + "/debug/keyspaces"); code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
		t.Errorf("/debug/keyspaces during startup: %d %q", code, body)
	}
	// A quit during startup is honoured once the engine is open.
	if code, _ := do(t, http.MethodPost, admin+"/quitquitquit", nil); code != http.StatusOK {
		t.Fatalf("quitquitquit: %d", code)
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

func TestQuitQuitQuit(t *testing.T) {
	s, err := New(Options{Config: testConfig(t), Open: checkedOpen(t), Logger: testLogger(&syncBuffer{})})
	if err != nil {
		t.Fatal(err)
	}
	admin := "http://" + s.AdminAddr()
	done := runServer(context.Background(), s)
	waitStatus(t, admin+"/readyz", http.StatusOK)
	if code, _ := get(admin + "/quitquitquit"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /quitquitquit: %d, want 405", code)
	}
	if s.Draining() {
		t.Fatal("GET /quitquitquit started a shutdown")
	}
	code, body := do(t, http.MethodPost, admin+"/quitquitquit", nil)
	if code != http.StatusOK || !strings.Contains(body, `"draining"`) {
		t.Fatalf("POST /quitquitquit: %d %s", code, body)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after /quitquitquit")
	}
	if !s.Draining() {
		t.Error("Draining() false after shutdown")
	}
}

// TestShutdownCutsOffStuckRequests: a request that never finishes is cut
// off at half the grace so the engine drain still runs and Run returns.
func TestShutdownCutsOffStuckRequests(t *testing.T) {
	cfg := testConfig(t)
	cfg.Listen.ShutdownGrace = 400 * time.Millisecond
	f := &kvFrontend{hold: make(chan struct{}), entered: make(chan struct{})}
	defer close(f.hold)
	log := &syncBuffer{}
	s, err := New(Options{Config: cfg, Frontends: []Mount{kvMount(f)}, Open: checkedOpen(t), Logger: testLogger(log)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := runServer(ctx, s)
	waitStatus(t, "http://"+s.AdminAddr()+"/readyz", http.StatusOK)
	go func() {
		req, _ := http.NewRequest(http.MethodPut, "http://"+s.FrontendAddr("kv")+"/slow/t/k", strings.NewReader("x"))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-f.entered
	if took := stopRun(t, cancel, done, 5*time.Second); took < 150*time.Millisecond {
		t.Errorf("Run returned after %v: it did not wait for the in-flight request", took)
	}
	if !strings.Contains(log.String(), "in-flight requests cut off") {
		t.Errorf("no cut-off logged:\n%s", log)
	}
}

// TestShutdownClosesConnectionsThatSentNothing: a connection that has
// not sent a request (a client that has just connected, a pool's spare
// one) and an idle kept-alive one do not hold a shutdown up: net/http
// alone waits 5 s for the first kind.
func TestShutdownClosesConnectionsThatSentNothing(t *testing.T) {
	cfg := testConfig(t)
	f := &kvFrontend{hold: make(chan struct{}), entered: make(chan struct{})}
	close(f.hold)
	s, err := New(Options{Config: cfg, Frontends: []Mount{kvMount(f)}, Open: checkedOpen(t), Logger: testLogger(&syncBuffer{})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runServer(ctx, s)
	waitStatus(t, "http://"+s.AdminAddr()+"/readyz", http.StatusOK)
	front := "http://" + s.FrontendAddr("kv")
	if code, body := do(t, http.MethodPut, front+"/kv/t/k", strings.NewReader("v")); code != http.StatusNoContent { // leaves an idle kept-alive connection
		t.Fatalf("put: %d %s", code, body)
	}
	silent, err := net.Dial("tcp", s.FrontendAddr("kv"))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	testenv.WaitFor(t, 10*time.Second, "the server to accept the silent connection", func() bool { return s.freshConns("kv") == 1 })
	if took := stopRun(t, cancel, done, 10*time.Second); took > 2*time.Second {
		t.Errorf("shutdown took %v with only idle connections open (net/http's 5 s wait for a connection that sent nothing)", took)
	}
}

func TestOpenFailureStopsRun(t *testing.T) {
	boom := errors.New("boom")
	s, err := New(Options{
		Config: testConfig(t),
		Open:   func(config.Config, *slog.Logger) (*node.Node, error) { return nil, boom },
		Logger: testLogger(&syncBuffer{}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want boom", err)
	}
	// Ask the listener itself: dialling its port could reach another
	// process's listener that took the freed port meanwhile.
	tl, ok := s.adminLn.(*net.TCPListener)
	if !ok {
		t.Fatalf("admin listener is a %T", s.adminLn)
	}
	err = tl.SetDeadline(time.Now().Add(100 * time.Millisecond))
	if err == nil {
		_, err = tl.Accept()
	}
	if !errors.Is(err, net.ErrClosed) {
		t.Errorf("admin listener left open after a failed start (accept: %v)", err)
	}
}

func TestFrontendBuildFailureClosesEngine(t *testing.T) {
	cfg := testConfig(t)
	boom := errors.New("no frontend today")
	var opened *node.Node
	s, err := New(Options{
		Config: cfg,
		Frontends: []Mount{{Name: "bad", Addr: "127.0.0.1:0", New: func(Env) (Frontend, error) {
			return nil, boom
		}}},
		Open: func(c config.Config, log *slog.Logger) (*node.Node, error) {
			n, err := checkedOpen(t)(c, log)
			opened = n
			return n, err
		},
		Logger: testLogger(&syncBuffer{}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want the frontend's error", err)
	}
	if _, err := opened.Engine.Begin(false); err == nil {
		t.Error("engine still admits transactions after a failed start")
	}
	// The store was closed: the data dir can be opened again.
	st, err := embedded.Open(cfg.Backend.Embedded.DataDir, embedded.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("store left open: %v", err)
	}
	st.Close()
}

func TestNewRefusesBusyPortAndSkipsDisabledFrontends(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := testConfig(t)
	cfg.Listen.Admin = ln.Addr().String()
	if _, err := New(Options{Config: cfg, Logger: testLogger(&syncBuffer{})}); err == nil || !strings.Contains(err.Error(), "admin listener") {
		t.Fatalf("New on a busy admin port = %v", err)
	}

	cfg = testConfig(t)
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen.Admin = free.Addr().String()
	free.Close()
	called := false
	s, err := New(Options{Config: cfg, Logger: testLogger(&syncBuffer{}), Frontends: []Mount{
		{Name: "off", Addr: "", New: func(Env) (Frontend, error) { called = true; return nil, nil }},
		{Name: "busy", Addr: ln.Addr().String(), New: func(Env) (Frontend, error) { return nil, nil }},
	}})
	if err == nil || !strings.Contains(err.Error(), "busy listener") {
		t.Fatalf("New with a busy frontend port = %v, %v", s, err)
	}
	// The admin listener New bound before failing was released.
	s, err = New(Options{Config: cfg, Open: checkedOpen(t), Logger: testLogger(&syncBuffer{}), Frontends: []Mount{
		{Name: "off", Addr: "", New: func(Env) (Frontend, error) { called = true; return nil, nil }},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if s.FrontendAddr("off") != "" {
		t.Error("a frontend with no address got a listener")
	}
	done := runServer(context.Background(), s)
	waitStatus(t, "http://"+s.AdminAddr()+"/startup", http.StatusOK)
	s.Quit()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if called {
		t.Error("a disabled frontend was built")
	}
}

// TestAdminRefusesRemoteBind: the admin listener binds only loopback unless
// listen.admin_allow_remote, and then says so in a WARN line; the HTTP
// listener may bind any address.
func TestAdminRefusesRemoteBind(t *testing.T) {
	cfg := testConfig(t)
	cfg.Listen.Admin = "0.0.0.0:0"
	if s, err := New(Options{Config: cfg, Logger: testLogger(io.Discard)}); err == nil || !strings.Contains(err.Error(), "is not a loopback address") {
		t.Fatalf("New with a wildcard admin address = %v, %v", s, err)
	}
	cfg.Listen.AdminAllowRemote = true
	cfg.Listen.HTTP = "0.0.0.0:0"
	log := &syncBuffer{}
	s, err := New(Options{Config: cfg, Logger: testLogger(log)})
	if err != nil {
		t.Fatal(err)
	}
	s.adminLn.Close()
	s.httpLn.Close()
	if !strings.Contains(log.String(), "admin listener is not on loopback") {
		t.Errorf("no WARN for a remote admin listener:\n%s", log)
	}
}

// stopRun cancels a running server's context and waits up to limit for
// Run (done) to return nil; it returns how long that took.
func stopRun(t *testing.T, cancel context.CancelFunc, done <-chan error, limit time.Duration) time.Duration {
	t.Helper()
	began := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(limit):
		t.Fatalf("Run did not return within %v", limit)
	}
	return time.Since(began)
}

// freshConns is how many connections of frontend name are open and have
// sent no request yet.
func (s *Server) freshConns(name string) int {
	if !s.started.Load() { // after start has set each mount's fresh
		return 0
	}
	for i := range s.mounts {
		if m := &s.mounts[i]; m.Name == name {
			m.fresh.mu.Lock()
			defer m.fresh.mu.Unlock()
			return len(m.fresh.conns)
		}
	}
	return 0
}
