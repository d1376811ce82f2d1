package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// probes are the admin endpoints `nemo health` can check.
var probes = map[string]bool{"startup": true, "livez": true, "readyz": true}

// healthCmd checks one probe endpoint of the running nemo. It exists for
// Kubernetes exec probes: the admin listener stays on loopback (it also
// serves pprof and /quitquitquit), and kubelet's httpGet probes connect to
// the pod IP, which a loopback listener does not answer.
func healthCmd(stdout io.Writer) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health [startup|livez|readyz]",
		Short: "Check a probe endpoint of the running nemo (exit 0 if healthy)",
		Long: `Ask the nemo whose admin listener the configuration names for one of its
probes (default readyz) and exit 0 if it answers 200, 1 otherwise. Use it
as a Kubernetes exec probe.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			probe := "readyz"
			if len(args) == 1 {
				probe = args[0]
			}
			if !probes[probe] {
				return usageError{fmt.Errorf("unknown probe %q: want startup, livez or readyz", probe)}
			}
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			url := "http://" + dialAddr(cfg.Listen.Admin) + "/" + probe
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
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "give up after this long")
	return cmd
}
