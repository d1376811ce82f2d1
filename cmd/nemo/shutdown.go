package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/nemocache/nemo/config"
)

// pollInterval is how often `nemo shutdown --wait` checks whether the proxy
// has exited.
const pollInterval = 100 * time.Millisecond

func shutdownCmd(stdout io.Writer) *cobra.Command {
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "shutdown",
		Short: "Ask a running nemo to drain and exit",
		Long: `Ask the nemo whose admin listener the configuration names (listen.admin,
NEMO_LISTEN_ADMIN or --listen-admin) to shut down gracefully: it turns
readiness to 503, finishes in-flight requests, writes every dirty record back
to the store and exits 0. With --wait (the default) the command returns only
once the proxy has stopped answering, so a Kubernetes preStop hook running it
holds termination until the data is flushed.`,
		Example: `  nemo shutdown
  nemo shutdown --listen-admin 127.0.0.1:9090 --timeout 30s
  nemo shutdown --wait=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			if timeout == 0 {
				timeout = cfg.Listen.ShutdownGrace + 5*time.Second
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			base := "http://" + dialAddr(cfg.Listen.Admin)
			if err := requestQuit(ctx, base); err != nil {
				return err
			}
			fmt.Fprintln(stdout, "nemo is draining")
			if !wait {
				return nil
			}
			if err := waitGone(ctx, base); err != nil {
				return err
			}
			fmt.Fprintln(stdout, "nemo has stopped")
			return nil
		},
	}
	config.RegisterFlags(cmd.Flags(), "listen.admin")
	cmd.Flags().BoolVar(&wait, "wait", true, "wait until the proxy has exited")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (default: listen.shutdown_grace + 5s)")
	return cmd
}

// dialAddr turns a listen address into one to connect to: a wildcard host
// (":9090", "0.0.0.0:9090") is reached on loopback.
func dialAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func requestQuit(ctx context.Context, base string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/quitquitquit", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("shutdown: %s answered %s", base, resp.Status)
	}
	return nil
}

// waitGone polls /livez until the connection is refused: the proxy closes
// its admin listener last, after the drain.
func waitGone(ctx context.Context, base string) error {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/livez", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("shutdown: nemo still running: %w", ctx.Err())
			}
			return nil
		}
		resp.Body.Close()
		select {
		case <-ctx.Done():
			return fmt.Errorf("shutdown: nemo still running: %w", ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}
