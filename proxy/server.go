package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/protosplit"
	"github.com/nemocache/nemo/internal/tlsserve"
	"github.com/nemocache/nemo/proxy/node"
	"github.com/nemocache/nemo/proxy/peer"
)

// Options configures a Server.
type Options struct {
	// Config is the validated configuration: listeners, limits, shutdown
	// grace, and everything Open needs.
	Config config.Config
	// Frontends are mounted in order; those with an empty Addr are
	// skipped. None is required: with no frontend nemo still serves the
	// admin and HTTP listeners.
	Frontends []Mount
	// Open builds the engine; nil means node.Open. It runs inside Run,
	// after the admin and HTTP listeners are up, so /startupz reports the
	// WAL replay.
	Open func(cfg config.Config, log *slog.Logger) (*node.Node, error)
	// Version is reported by /metrics (nemo_build_info) and the logs.
	Version string
	// Logger is the process logger; nil means slog.Default().
	Logger *slog.Logger
}

// adminDrainTimeout bounds the admin and HTTP listeners' own shutdown, the
// last step: probes and scrapes are short.
const adminDrainTimeout = 2 * time.Second

// Server runs nemo's listeners around one engine. Create it with New, run it
// once with Run.
type Server struct {
	opts     Options
	log      *slog.Logger
	requests *requestMetrics
	registry *prometheus.Registry // what /metrics serves

	adminLn net.Listener
	admin   *http.Server
	httpLn  net.Listener
	http    *http.Server
	mounts  []boundMount
	peerLn  net.Listener // listen.peer (coherence partitioned); nil otherwise
	peer    *peer.Server
	tls     *tlsserve.Reloader // listen.tls's certificate; nil serves plaintext

	node     atomic.Pointer[node.Node]
	started  atomic.Bool // the engine is open and every frontend is serving
	draining atomic.Bool // shutdown has begun: readiness is 503 from here on

	quitOnce sync.Once
	quit     chan struct{}
}

type boundMount struct {
	Mount
	ln    net.Listener
	srv   *http.Server
	fresh *freshConns // srv's connections that have not sent a request yet
	// grpc is a GRPCFrontend's server, which takes the listener's HTTP/2
	// connections (split); nil for other frontends.
	grpc  *grpc.Server
	split *protosplit.Split
	// front is the frontend; one that is an io.Closer is closed once its
	// listener is (it ends what it keeps open between requests).
	front Frontend
}

// New binds every listener (so a port conflict fails here, and port 0 is
// resolved before Run) without serving anything yet.
func New(opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Open == nil {
		opts.Open = node.Open
	}
	s := &Server{opts: opts, log: opts.Logger.With("component", "proxy"), requests: newRequestMetrics(), quit: make(chan struct{})}
	var lns []net.Listener
	fail := func(err error) (*Server, error) {
		for _, ln := range lns {
			ln.Close()
		}
		return nil, err
	}
	if t := opts.Config.Listen.TLS; t.Enabled() {
		r, err := tlsserve.NewReloader(t.CertFile, t.KeyFile, t.ReloadInterval, s.log)
		if err != nil {
			return nil, fmt.Errorf("proxy: listen.tls: %w", err)
		}
		s.tls = r
	}
	ln, err := net.Listen("tcp", opts.Config.Listen.Admin)
	if err != nil {
		return fail(fmt.Errorf("proxy: admin listener: %w", err))
	}
	lns = append(lns, ln)
	s.adminLn = ln
	if !isLoopback(ln.Addr()) {
		if !opts.Config.Listen.AdminAllowRemote {
			return fail(fmt.Errorf("proxy: admin listener: %s is not a loopback address (set listen.admin_allow_remote to allow it)", ln.Addr()))
		}
		s.log.Warn("admin listener is not on loopback: pprof, /quitquitquit and the debug API are reachable from the network", "addr", ln.Addr().String())
	}
	if ln, err = net.Listen("tcp", opts.Config.Listen.HTTP); err != nil {
		return fail(fmt.Errorf("proxy: http listener: %w", err))
	}
	lns = append(lns, ln)
	// listen.http serves no credentials or data: TLS is offered to every
	// client, required of none.
	s.httpLn = s.serveTLS(ln, true, "http/1.1")
	if a := opts.Config.Listen.Peer; a != "" {
		if ln, err = net.Listen("tcp", a); err != nil {
			return fail(fmt.Errorf("proxy: peer listener: %w", err))
		}
		lns = append(lns, ln)
		s.peerLn = ln
	}
	for _, m := range opts.Frontends {
		if m.Addr == "" {
			continue
		}
		if m.New == nil {
			return fail(fmt.Errorf("proxy: frontend %q has no constructor", m.Name))
		}
		ln, err := net.Listen("tcp", m.Addr)
		if err != nil {
			return fail(fmt.Errorf("proxy: %s listener: %w", m.Name, err))
		}
		lns = append(lns, ln)
		// A client offering both gets HTTP/1.1 (REST over the split
		// listener), a gRPC client, which offers only h2, gets h2.
		ln = s.serveTLS(ln, opts.Config.Listen.AllowRemote, "http/1.1", "h2")
		s.mounts = append(s.mounts, boundMount{Mount: m, ln: ln})
	}
	metrics := s.metricsHandler()
	s.admin = &http.Server{
		Handler:           s.adminHandler(metrics),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.http = &http.Server{
		Handler:           s.httpHandler(metrics),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// serveTLS wraps ln to serve listen.tls's certificate, offering nextProtos
// by ALPN, and plaintext to clients on loopback (to every client if plain);
// without listen.tls it returns ln.
func (s *Server) serveTLS(ln net.Listener, plain bool, nextProtos ...string) net.Listener {
	if s.tls == nil {
		return ln
	}
	return s.tls.Listen(ln, s.tls.Config(nextProtos...), plain)
}

// AdminAddr is the admin listener's address (host:port).
func (s *Server) AdminAddr() string { return s.adminLn.Addr().String() }

// HTTPAddr is the probe and metrics listener's address (host:port).
func (s *Server) HTTPAddr() string { return s.httpLn.Addr().String() }

// FrontendAddr is the address of the named frontend's listener, or "" if
// it is not mounted.
func (s *Server) FrontendAddr(name string) string {
	for _, m := range s.mounts {
		if m.Name == name {
			return m.ln.Addr().String()
		}
	}
	return ""
}

// Quit starts a graceful shutdown, as /quitquitquit does. Calling it more
// than once, or before Run, is harmless.
func (s *Server) Quit() { s.quitOnce.Do(func() { close(s.quit) }) }

// Draining reports whether shutdown has begun.
func (s *Server) Draining() bool { return s.draining.Load() }

// Run serves until ctx is cancelled, Quit is called or a listener fails, then
// shuts down in order: readiness 503; stop accepting and let in-flight
// frontend requests finish for up to half of listen.shutdown_grace (the rest
// is kept for the flush); drain the engine, which flushes every dirty record
// and closes the WAL, until the grace ends; close the store; close the admin
// listener. It returns nil after a clean drain, so the process exits 0.
func (s *Server) Run(ctx context.Context) error {
	s.log.Info("admin listener up", "addr", s.AdminAddr())
	s.log.Info("http listener up", "addr", s.HTTPAddr())
	adminErr := make(chan error, 2)
	go func() {
		if err := serve(s.admin, s.adminLn); err != nil {
			adminErr <- fmt.Errorf("proxy: admin listener: %w", err)
		}
	}()
	go func() {
		if err := serve(s.http, s.httpLn); err != nil {
			adminErr <- fmt.Errorf("proxy: http listener: %w", err)
		}
	}()

	n, err := s.start()
	if err != nil {
		s.draining.Store(true)
		s.closeMounts()
		s.stopAdmin(adminDrainTimeout)
		return err
	}
	serveErr := make(chan error, 2*len(s.mounts)+1)
	for _, m := range s.mounts {
		fail := func(err error) { serveErr <- fmt.Errorf("proxy: %s listener: %w", m.Name, err) }
		if m.split == nil {
			go func() {
				if err := serve(m.srv, m.ln); err != nil {
					fail(err)
				}
			}()
			continue
		}
		go m.split.Serve()
		go func() {
			if err := serve(m.srv, m.split.HTTP1()); err != nil {
				fail(err)
			}
		}()
		go func() {
			if err := m.grpc.Serve(m.split.HTTP2()); err != nil {
				fail(err)
			}
		}()
	}
	if s.peer = n.PeerServer(); s.peer != nil {
		go func() {
			if err := s.peer.Serve(s.peerLn); err != nil {
				serveErr <- fmt.Errorf("proxy: peer listener: %w", err)
			}
		}()
	} else if s.peerLn != nil {
		s.peerLn.Close()
	}
	s.started.Store(true)
	s.log.Info("nemo ready", s.addrAttrs()...)

	var cause error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down", "reason", context.Cause(ctx).Error())
	case <-s.quit:
		s.log.Info("shutting down", "reason", "quit requested")
	case cause = <-serveErr:
		s.log.Error("shutting down", "reason", cause.Error())
	case cause = <-adminErr:
		s.log.Error("shutting down", "reason", cause.Error())
	}
	return errors.Join(cause, s.shutdown(n))
}

// start opens the engine and builds every frontend. Until it returns,
// /startupz and /readyz answer 503 and frontend connections wait in the
// listen backlog.
func (s *Server) start() (*node.Node, error) {
	began := time.Now()
	n, err := s.opts.Open(s.opts.Config, s.opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("proxy: open engine: %w", err)
	}
	s.log.Info("engine open", "took", time.Since(began))
	for i := range s.mounts {
		m := &s.mounts[i]
		log := s.opts.Logger.With("frontend", m.Name)
		f, err := m.New(Env{Engine: n.Engine, Backend: n.Backend, Logger: log, GRPC: grpcOptions(log, m.Name, s.requests)})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("proxy: build %s frontend: %w", m.Name, err), n.Close())
		}
		m.front = f
		m.srv = s.frontendServer(m.Name, m.ServiceTimeout, f, log)
		m.fresh = trackFresh(m.srv)
		if g, ok := f.(GRPCFrontend); ok && g.GRPCServer() != nil {
			m.grpc = g.GRPCServer()
			m.split = protosplit.New(m.ln, headerTimeout(s.opts.Config.Listen.ReadTimeout))
		}
	}
	s.node.Store(n)
	return n, nil
}

func (s *Server) shutdown(n *node.Node) error {
	s.draining.Store(true)
	grace := s.opts.Config.Listen.ShutdownGrace
	began := time.Now()
	deadline := began.Add(grace)

	httpCtx, cancel := context.WithDeadline(context.Background(), began.Add(grace/2))
	var wg sync.WaitGroup
	for _, m := range s.mounts {
		// Shutdown waits for requests in flight, and for up to 5 s for a
		// connection that has not sent one yet: close those at once.
		m.fresh.closeAll()
		wg.Go(func() {
			if err := m.srv.Shutdown(httpCtx); err != nil {
				// Requests still running past their share of the
				// grace are cut off so the flush gets its time.
				s.log.Warn("in-flight requests cut off", "frontend", m.Name, "err", err.Error())
				m.srv.Close()
			}
		})
		if m.grpc != nil {
			wg.Go(func() { s.stopGRPC(httpCtx, m.Name, m.grpc) })
		}
	}
	wg.Wait()
	if s.peer != nil {
		// Transactions other replicas forwarded here finish first.
		s.peer.Stop(httpCtx)
	}
	cancel()
	// No client can reach what a frontend keeps open between requests
	// now (a Datastore transaction whose commit never came): the frontend
	// ends it, rather than let the drain wait for it until its deadline
	// and leave the flush no time. (A forwarded transaction ends with its
	// peer stream.) Transactions run in this process are waited for.
	for _, m := range s.mounts {
		if c, ok := m.front.(io.Closer); ok {
			if err := c.Close(); err != nil {
				s.log.Warn("closing a frontend", "frontend", m.Name, "err", err.Error())
			}
		}
	}
	s.log.Info("frontends stopped", "took", time.Since(began))

	// The drain ends a margin before the grace does: after it the WAL
	// is synced and closed, the store and the admin listener closed, all
	// before the grace is up (a kubelet kills the container then).
	drainCtx, cancel := context.WithDeadline(context.Background(), deadline.Add(-drainMargin(grace)))
	defer cancel()
	err := n.Drain(drainCtx)
	if err != nil {
		s.log.Error("engine drain failed; the WAL keeps what did not reach the store", "err", err.Error())
	} else {
		s.log.Info("engine drained, store closed", "took", time.Since(began))
	}
	s.stopAdmin(min(adminDrainTimeout, max(time.Until(deadline), 100*time.Millisecond)))
	return err
}

// stopGRPC stops g gracefully (no new calls; those in flight finish) until
// ctx ends, then cuts off what still runs.
func (s *Server) stopGRPC(ctx context.Context, name string, g *grpc.Server) {
	done := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.log.Warn("in-flight gRPC calls cut off", "frontend", name, "err", ctx.Err().Error())
		g.Stop()
		<-done
	}
}

// drainMargin is what a shutdown keeps of its grace after the drain: a
// tenth of it, at most a second.
func drainMargin(grace time.Duration) time.Duration { return min(grace/10, time.Second) }

// stopAdmin closes the admin and HTTP listeners last, so probes see 503
// (not a refused connection) for as long as the drain runs; it waits up to
// d for probes and scrapes in flight.
func (s *Server) stopAdmin(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for _, srv := range []*http.Server{s.admin, s.http} {
		wg.Go(func() {
			if err := srv.Shutdown(ctx); err != nil {
				srv.Close()
			}
		})
	}
	wg.Wait()
}

// closeMounts releases frontend listeners that never served.
func (s *Server) closeMounts() {
	for _, m := range s.mounts {
		m.ln.Close()
	}
	if s.peerLn != nil {
		s.peerLn.Close()
	}
}

func (s *Server) addrAttrs() []any {
	attrs := []any{"admin", s.AdminAddr(), "http", s.HTTPAddr(), "version", s.opts.Version}
	for _, m := range s.mounts {
		attrs = append(attrs, m.Name, m.ln.Addr().String())
	}
	if s.peerLn != nil {
		attrs = append(attrs, "peer", s.peerLn.Addr().String())
	}
	return attrs
}

// serve runs srv on ln until Shutdown or Close.
func serve(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// freshConns tracks a server's connections that have not sent a request
// yet (http.StateNew). net/http's Shutdown closes idle connections at once
// but waits up to 5 s for such a one to send its first request, so a
// client that has just connected, a pool's spare connection, or a probe
// that only opens a socket would hold a shutdown up that long. Nothing has
// been read from them, so closing them loses nothing: a client retries
// on a new connection (to the next instance).
type freshConns struct {
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closing bool
}

// trackFresh makes srv report its connections' states to a new
// freshConns.
func trackFresh(srv *http.Server) *freshConns {
	f := &freshConns{conns: map[net.Conn]struct{}{}}
	srv.ConnState = f.track
	return f
}

func (f *freshConns) track(c net.Conn, st http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case st != http.StateNew:
		delete(f.conns, c)
	case f.closing:
		c.Close()
	default:
		f.conns[c] = struct{}{}
	}
}

// closeAll closes every connection that has not sent a request, now and
// from now on.
func (f *freshConns) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closing = true
	for c := range f.conns {
		c.Close()
	}
	clear(f.conns)
}
