package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/obs"
	"github.com/nemocache/nemo/proxy"
	"github.com/nemocache/nemo/proxy/aztable"
	"github.com/nemocache/nemo/proxy/datastore"
	"github.com/nemocache/nemo/proxy/node"
	"github.com/nemocache/nemo/txn"
)

// frontends lists the API dialects compiled into this binary, each with the
// listener address the configuration gives it (an empty address disables
// it; a cloud backend serves only its own dialect). A dialect package plugs
// in with one entry here:
//
//	{Name: "aztable", Addr: cfg.AzureTableListener(), New: func(env proxy.Env) (proxy.Frontend, error) { ... }}
func frontends(cfg config.Config) []proxy.Mount {
	return []proxy.Mount{
		{Name: "aztable", Addr: cfg.AzureTableListener(), ServiceTimeout: aztable.OperationTimeout, New: func(env proxy.Env) (proxy.Frontend, error) {
			return aztable.New(env.Engine, aztable.Options{
				Account:         cfg.Frontend.Azure.Account,
				Key:             cfg.Frontend.Azure.Key,
				AllowAnonymous:  cfg.Frontend.Azure.AllowAnonymous,
				SASAcceptHTTP:   cfg.Frontend.Azure.SASAcceptHTTP,
				RequireSAS:      cfg.Frontend.Azure.RequireSAS,
				BodyCacheBytes:  int64(cfg.AzureBodyCacheBytes()),
				MaxRequestBytes: min(int64(cfg.Listen.MaxRequestBytes), 4<<20), // Azure's request limit
				Logger:          env.Logger,
			})
		}},
		{Name: "datastore", Addr: cfg.DatastoreListener(), ServiceTimeout: datastore.ClientDeadline, New: func(env proxy.Env) (proxy.Frontend, error) {
			// In front of Datastore ids come from Datastore, so they never
			// collide with other clients'; on the embedded store nemo
			// allocates them itself (a nil allocator).
			alloc, _ := env.Backend.(datastore.IDAllocator)
			meta, _ := env.Backend.(datastore.MetadataRunner)
			return datastore.New(env.Engine, datastore.Options{
				Project:         cfg.Frontend.Datastore.Project,
				Token:           cfg.Frontend.Datastore.Token,
				Allocator:       alloc,
				Metadata:        meta,
				MaxRequestBytes: int(cfg.Listen.MaxRequestBytes),
				RequestTimeout:  proxy.RequestDeadline(cfg.Listen, datastore.ClientDeadline),
				FollowClient:    cfg.Listen.RequestTimeout == 0,
				WriteTimeout:    proxy.WriteDeadline(cfg.Listen),
				ServerOptions:   env.GRPC,
				Logger:          env.Logger,
			})
		}},
	}
}

func serveCmd(stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the proxy (the default)",
		Long: `Run the proxy until SIGTERM, SIGINT or POST /quitquitquit on the admin
listener, then drain: readiness turns 503, in-flight requests finish, every
dirty record is written back to the store, and nemo exits 0 (3 when writes
stayed unflushed past listen.shutdown_grace: the WAL keeps them for the next
start; a second signal exits at once with 1).

Listeners (flags or NEMO_LISTEN_*): the Azure Table API (127.0.0.1:10002),
the Datastore API, gRPC and REST (127.0.0.1:8081), probes and /metrics
(listen.http, 127.0.0.1:9091) and the loopback admin listener for pprof, the
debug API and /quitquitquit (listen.admin, 127.0.0.1:9090).`,
		Example: `  nemo serve                                        # embedded store in ./nemo-data
  nemo serve --config nemo.yaml
  nemo serve --backend datastore --listen-azure-table off   # with NEMO_BACKEND_DATASTORE_PROJECT set
  NEMO_CACHE_MAX_BYTES=1GiB nemo serve --listen-http 0.0.0.0:9091`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, stderr) },
	}
	config.RegisterFlags(cmd.Flags())
	return cmd
}

func runServe(cmd *cobra.Command, stderr io.Writer) error {
	cfg, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log, stderr)
	slog.SetDefault(log)
	applyMemoryLimit(cfg, log)
	log.Info("starting nemo", append([]any{"version", version, "backend", string(cfg.Backend.Type),
		"coherence_mode", string(cfg.CoherenceMode()), "cache_policy", string(cfg.Cache.Policy),
		"cache_max_bytes", cfg.Cache.MaxBytes.String()}, writePath(cfg)...)...)
	warnExposure(cfg, log)
	if cfg.InMemory() {
		log.Warn("in memory: the embedded store, the buffer and every acknowledged write live only in this process; no WAL, no file; all is lost when nemo exits (POST /reset on the admin listener empties it)")
	}

	stopTracing, err := setupTracing(cmd.Context(), cfg.Tracing, os.LookupEnv, log)
	if err != nil {
		return err
	}
	defer stopTracing()

	srv, err := proxy.New(proxy.Options{
		Config:    cfg,
		Frontends: frontends(cfg),
		Version:   version,
		Logger:    log,
	})
	if err != nil {
		return err
	}
	ctx, stop := shutdownOnSignal(cmd.Context(), log)
	defer stop()
	if err := srv.Run(ctx); err != nil {
		return err
	}
	log.Info("nemo stopped")
	return nil
}

// warnExposure logs, at every start, each frontend off loopback that anyone
// who reaches it may use, or whose remote clients authenticate over
// plaintext (without listen.tls, or with it under listen.allow_remote):
// allowed over the embedded store (a local emulator), and in front of a
// cloud backend only under listen.allow_remote (config.Validate refuses it
// otherwise). proxy.New warns about an admin listener off loopback itself.
func warnExposure(cfg config.Config, log *slog.Logger) {
	for _, e := range cfg.Exposures() {
		why, what, fix := e.Open, "frontend open to anyone who can reach it", e.Fix
		switch {
		case e.Open != "":
		case e.Clear != "":
			why, what = "remote clients send "+e.Clear+" over plaintext (listen.tls is not set)", "frontend takes remote credentials in the clear"
		case cfg.Listen.AllowRemote:
			why, what = "listen.tls is set, and listen.allow_remote lets clients not on loopback connect without it", "frontend accepts plaintext from remote clients"
			fix = "unset listen.allow_remote so that remote clients must use TLS"
		default:
			continue
		}
		msg := what + " (local emulator use: the embedded store)"
		if cfg.Backend.Type != config.BackendEmbedded {
			msg = "listen.allow_remote: " + what + ", in front of the " + string(cfg.Backend.Type) + " backend"
		}
		log.Warn(msg, "setting", e.Key, "addr", e.Addr, "why", why, "fix", fix)
	}
}

// newLogger builds the process logger on stderr (where container runtimes
// collect it) in the configured format and level; durations are written as
// durations ("1.502s") in both formats (obs.LogDurations).
func newLogger(c config.Log, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.SlogLevel(), ReplaceAttr: obs.LogDurations}
	if c.Format == config.LogFormatText {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// shutdownOnSignal returns a context cancelled by the first SIGTERM or
// SIGINT, which starts the graceful drain; a second signal exits the process
// at once with status 1 (acknowledged writes are in the WAL and replay on the
// next start, but nothing more is flushed). stop releases the signals.
func shutdownOnSignal(parent context.Context, log *slog.Logger) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchSignals(sigs, cancel, log, func() { os.Exit(exitFailure) })
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(sigs)
		<-done
		cancel(nil)
	}
}

// watchSignals cancels on the first signal and calls exit on the second. It
// returns when sigs is closed.
func watchSignals(sigs <-chan os.Signal, cancel context.CancelCauseFunc, log *slog.Logger, exit func()) {
	sig, ok := <-sigs
	if !ok {
		return
	}
	log.Info("signal received: draining; send it again to exit at once", "signal", sig.String())
	cancel(fmt.Errorf("signal %v", sig))
	sig, ok = <-sigs
	if !ok {
		return
	}
	log.Warn("second signal: exiting without finishing the drain", "signal", sig.String())
	exit()
}

// writePath is how the engine nemo starts will write, as log attributes:
// behind the WAL in its directory or in the backend (wal.location
// backend), or through to the store with no WAL (coherence shared,
// wal.write_mode through, cache.policy none), where wal.write_mode and
// wal.dir say nothing.
func writePath(cfg config.Config) []any {
	switch o := node.TxnOptions(cfg, slog.New(slog.DiscardHandler)); {
	case cfg.InMemory():
		return []any{"writes", string(o.Mode), "wal_dir", "none: in memory"}
	case o.WAL != nil:
		return []any{"writes", "back", "wal_dir", o.WAL.Dir}
	case o.Mode == txn.WriteBack:
		return []any{"writes", "back", "wal_dir", "none: a log per table in the backend"}
	}
	return []any{"writes", "through", "wal_dir", "none"}
}
