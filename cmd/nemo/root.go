package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/txn"
)

// Exit codes.
const (
	exitOK = 0
	// exitFailure: the command ran and failed (a listener could not bind,
	// the drain failed, the proxy could not be reached).
	exitFailure = 1
	// exitUsage: the command line or the configuration is wrong; fix the
	// manifest, retrying will not help.
	exitUsage = 2
	// exitUnflushed: the drain ran out of listen.shutdown_grace with
	// acknowledged writes the store has not received; the WAL keeps them
	// and the next start replays them (it must find the same WAL).
	exitUnflushed = 3
)

// Execute runs the command line of the process and returns its exit code.
func Execute() int {
	return run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
}

// run executes one command line; it is Execute with its inputs explicit,
// for tests.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ran := false // set once parsing is done and a command's RunE is reached
	root := newRoot(stdout, stderr, &ran)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, config.ErrInvalid):
		fmt.Fprintf(stderr, "nemo: %v\n", err)
		return exitUsage
	case !ran || errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "nemo: %v\nRun 'nemo help' for usage.\n", err)
		return exitUsage
	case errors.Is(err, txn.ErrUnflushed):
		fmt.Fprintf(stderr, "nemo: %v\n", err)
		return exitUnflushed
	}
	fmt.Fprintf(stderr, "nemo: %v\n", err)
	return exitFailure
}

func newRoot(stdout, stderr io.Writer, ran *bool) *cobra.Command {
	root := &cobra.Command{
		Use:   "nemo",
		Short: "A sidecar caching proxy for Azure Table Storage and Google Cloud Datastore",
		Long: `nemo answers Azure Table and Datastore API calls from a local record buffer
(hot records, negative results, empty ranges), logs writes durably and writes
them back to the real store. Without a cloud backend it runs on an embedded
store, as a local emulator for both APIs.

Run with no subcommand, nemo serves (as "nemo serve", with the same flags).

Configuration, in increasing precedence: defaults, a YAML file (--config or
NEMO_CONFIG), NEMO_* environment variables (cache.max_bytes is
NEMO_CACHE_MAX_BYTES), flags. Every key is in config/nemo.example.yaml.`,
		Example: `  nemo                                  # serve: embedded store in ./nemo-data
  nemo serve --config nemo.yaml         # serve with a configuration file
  nemo health readyz                    # probe a running nemo
  nemo --version`,
		Version:       versionString(),
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(*cobra.Command, []string) {
			*ran = true
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, stderr) },
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	config.RegisterFlags(root.Flags())
	root.AddCommand(
		serveCmd(stderr),
		versionCmd(stdout),
		shutdownCmd(stdout),
		healthCmd(stdout),
		configCmd(stdout),
	)
	return root
}

// usageError marks a bad command line found by a command itself (after
// cobra's parsing), so it exits 2 like a parse error.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// loadConfig loads the configuration from the command's flags, the
// environment and the file they name.
func loadConfig(cmd *cobra.Command) (config.Config, error) {
	return config.Load(config.LoadOptions{Flags: cmd.Flags()})
}
