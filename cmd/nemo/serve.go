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
	"github.com/nemocache/nemo/proxy"
	"github.com/nemocache/nemo/proxy/aztable"
	"github.com/nemocache/nemo/proxy/datastore"
)

// frontends lists the API dialects compiled into this binary, each with the
// listener address the configuration gives it (an empty address disables
// it). A dialect package plugs in with one entry here:
//
//	{Name: "aztable", Addr: cfg.Listen.AzureTable, New: func(env proxy.Env) (proxy.Frontend, error) { ... }}
func frontends(cfg config.Config) []proxy.Mount {
	return []proxy.Mount{
		{Name: "aztable", Addr: dialectAddr(cfg, config.BackendAzTable, cfg.Listen.AzureTable), New: func(env proxy.Env) (proxy.Frontend, error) {
			return aztable.New(env.Engine, aztable.Options{
				Account:         cfg.Frontend.Azure.Account,
				Key:             cfg.Frontend.Azure.Key,
				AllowAnonymous:  cfg.Frontend.Azure.AllowAnonymous,
				SASAcceptHTTP:   cfg.Frontend.Azure.SASAcceptHTTP,
				BodyCacheBytes:  int64(cfg.AzureBodyCacheBytes()),
				MaxRequestBytes: min(int64(cfg.Listen.MaxRequestBytes), 4<<20), // Azure's request limit
				Logger:          env.Logger,
			})
		}},
		{Name: "datastore", Addr: dialectAddr(cfg, config.BackendDatastore, cfg.Listen.Datastore), New: func(env proxy.Env) (proxy.Frontend, error) {
			// In front of Datastore ids come from Datastore, so they never
			// collide with other clients'; on the embedded store nemo
			// allocates them itself (a nil allocator).
			alloc, _ := env.Backend.(datastore.IDAllocator)
			meta, _ := env.Backend.(datastore.MetadataRunner)
			return datastore.New(env.Engine, datastore.Options{
				Project:         cfg.Frontend.Datastore.Project,
				Allocator:       alloc,
				Metadata:        meta,
				MaxRequestBytes: int(cfg.Listen.MaxRequestBytes),
				RequestTimeout:  proxy.RequestDeadline(cfg.Listen),
				ServerOptions:   env.GRPC,
				Logger:          env.Logger,
			})
		}},
	}
}

// dialectAddr is a frontend's listen address, or "" (disabled) when the
// backend cannot hold that dialect's data: the embedded store holds both,
// a cloud backend only its own.
func dialectAddr(cfg config.Config, native config.BackendType, addr string) string {
	if cfg.Backend.Type != config.BackendEmbedded && cfg.Backend.Type != native {
		return ""
	}
	return addr
}

func runServe(cmd *cobra.Command, stderr io.Writer) error {
	cfg, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log, stderr)
	slog.SetDefault(log)
	applyMemoryLimit(cfg, log)
	log.Info("starting nemo", "version", version, "backend", string(cfg.Backend.Type),
		"cache_policy", string(cfg.Cache.Policy), "cache_max_bytes", cfg.Cache.MaxBytes.String(),
		"write_mode", string(cfg.WAL.WriteMode), "wal_dir", cfg.WALDir())

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

// newLogger builds the process logger on stderr (where container runtimes
// collect it) in the configured format and level.
func newLogger(c config.Log, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.SlogLevel()}
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
