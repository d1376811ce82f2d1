package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nemocache/nemo/config"
)

// probes are the endpoints `nemo health` can check: the HTTP listener's,
// and the names the admin listener used before it (startup, livez), which
// the HTTP listener answers too.
var probes = map[string]bool{"startupz": true, "healthz": true, "readyz": true, "startup": true, "livez": true}

// healthCmd checks one probe endpoint of the running nemo, for scripts and
// exec probes (the manifests probe listen.http with httpGet).
func healthCmd(stdout io.Writer) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health [startupz|healthz|readyz]",
		Short: "Check a probe endpoint of the running nemo (exit 0 if healthy)",
		Long: `Ask the nemo whose HTTP listener the configuration names (listen.http,
NEMO_LISTEN_HTTP or --listen-http) for one of its probes (default readyz)
and exit 0 if it answers 200, 1 otherwise: startupz (the engine is open and
the frontends serve), healthz (the process serves) or readyz (started, not
draining, and able to serve: in coherence shared the backend answers, with a
WAL the WAL takes writes). The earlier names startup and livez are accepted.`,
		Example: `  nemo health
  nemo health startupz --listen-http 127.0.0.1:9091 --timeout 5s`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			probe := "readyz"
			if len(args) == 1 {
				probe = args[0]
			}
			if !probes[probe] {
				return usageError{fmt.Errorf("unknown probe %q: want startupz, healthz or readyz", probe)}
			}
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			url := "http://" + dialAddr(cfg.Listen.HTTP) + "/" + probe
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("health: %w", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
			state := strings.TrimSpace(string(body))
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("health: %s: %s (%s)", probe, state, resp.Status)
			}
			fmt.Fprintf(stdout, "%s: %s\n", probe, state)
			return nil
		},
	}
	config.RegisterFlags(cmd.Flags(), "listen.http")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "give up after this long")
	return cmd
}
