package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nemocache/nemo/proxy/node"
	"github.com/nemocache/nemo/txn"
)

// httpHandler serves the probe and metrics listener (listen.http), which
// may bind the pod IP: nothing here reads data or changes state.
//
//	GET /startupz  200 once the engine is open (WAL replayed), the backend checked and the frontends serve; 503 before
//	GET /healthz   200 while the process serves at all (liveness)
//	GET /readyz    200 when started, not draining, and the node can serve (node.Node.Ready); 503 otherwise
//	GET /metrics   Prometheus, namespace nemo (OpenMetrics, with exemplars, when the scraper asks for it)
//
// /startup and /livez, the admin listener's earlier names, answer too.
func (s *Server) httpHandler(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	s.probes(mux)
	mux.Handle("GET /metrics", metrics)
	return mux
}

// probes mounts the probe endpoints, under their names and the earlier
// ones (/startup, /livez).
func (s *Server) probes(mux *http.ServeMux) {
	started := s.probe(func() string {
		if s.started.Load() {
			return ""
		}
		return s.state()
	})
	live := s.probe(func() string { return "" })
	mux.HandleFunc("GET /startupz", started)
	mux.HandleFunc("GET /startup", started)
	mux.HandleFunc("GET /healthz", live)
	mux.HandleFunc("GET /livez", live)
	mux.HandleFunc("GET /readyz", s.probe(s.readiness))
}

// readiness is /readyz's verdict: "" when ready, else why: "starting",
// "draining", or what the node says (node.Node.Ready: "backend
// unavailable", "wal full", "wal failed").
func (s *Server) readiness() string {
	if st := s.state(); st != "ok" {
		return st
	}
	if ok, why := s.node.Load().Ready(); !ok {
		return why
	}
	return ""
}

// metricsHandler is /metrics: the engine's collector, the Go runtime and
// the process.
func (s *Server) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	s.registry = reg
	reg.MustRegister(
		newCollector(s.node.Load, s.Draining, s.opts.Version),
		backendCollector{s.node.Load},
		s.requests,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if s.tls != nil {
		reg.MustRegister(s.tls)
	}
	// OpenMetrics to a scraper that asks for it (Accept:
	// application/openmetrics-text, as Prometheus sends): it carries the
	// request-duration histograms' exemplars (trace IDs, observeDuration).
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{s}, EnableOpenMetrics: true})
}

// adminHandler serves the admin listener (listen.admin, loopback unless
// listen.admin_allow_remote):
//
//	POST /quitquitquit     start a graceful shutdown (what `nemo shutdown` calls)
//	POST /reset            empty the buffer and the in-memory embedded store
//	                       (test suites); 409 in front of any other store (JSON)
//	GET  /debug/pprof/...  the Go profiler
//	GET  /debug/keyspaces  per-keyspace buffer statistics (JSON)
//	GET  /debug/records    buffered records in a key range with their bits and locks (JSON)
//	POST /debug/flush      write every dirty record back to the store now (JSON)
//	POST /debug/handover?keyspace=K
//	                       coherence partitioned: hand keyspace K over (write it
//	                       back, truncate its log, release its lease) so the next
//	                       replica that writes it owns it (JSON)
//
// It answers the probes and /metrics as well, so scripts that ask it
// (nemo served them only here before listen.http) keep working.
func (s *Server) adminHandler(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	s.probes(mux)
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("POST /quitquitquit", func(w http.ResponseWriter, r *http.Request) {
		s.log.Info("quit requested", "remote", r.RemoteAddr)
		s.Quit()
		writeJSON(w, http.StatusOK, map[string]string{"status": "draining"})
	})

	mux.HandleFunc("POST /reset", s.withNode(reset))

	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)

	mux.HandleFunc("GET /debug/keyspaces", s.withNode(debugKeyspaces))
	mux.HandleFunc("GET /debug/records", s.withNode(debugRecords))
	mux.HandleFunc("POST /debug/flush", s.withNode(debugFlush))
	mux.HandleFunc("POST /debug/handover", s.withNode(debugHandover))
	return mux
}

// reset is POST /reset (node.Node.Reset): 200 once the buffer and the
// in-memory store are empty, 409 with the reason for any other store, 503
// while nemo drains.
func reset(n *node.Node, w http.ResponseWriter, r *http.Request) {
	err := n.Reset(r.Context())
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, map[string]string{"status": "reset"})
	case errors.Is(err, node.ErrResetRefused):
		writeJSON(w, http.StatusConflict, debugError{err.Error()})
	case errors.Is(err, txn.ErrClosed):
		writeJSON(w, http.StatusServiceUnavailable, debugError{"nemo is draining: " + err.Error()})
	default:
		writeJSON(w, http.StatusInternalServerError, debugError{err.Error()})
	}
}

// probe answers 200 "ok" when why() is "" and 503 with why otherwise, a
// short state so a human curling it sees the reason.
func (s *Server) probe(why func() string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if st := why(); st != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(st + "\n"))
			return
		}
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("ok\n"))
	}
}

func (s *Server) state() string {
	switch {
	case s.draining.Load():
		return "draining"
	case !s.started.Load():
		return "starting"
	}
	return "ok"
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v) // the status is sent; a failed write has no one to tell
}

// slogPrinter routes promhttp's error log to slog.
type slogPrinter struct{ s *Server }

func (p slogPrinter) Println(v ...any) { p.s.log.Error("metrics", "err", fmt.Sprint(v...)) }
