package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/nemocache/nemo/cmd/nemo-bench/internal/bench"
)

// version is stamped at build time, as nemo's is:
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/nemo-bench
var version = "dev"

// Exit codes: 0 done, 1 a run failed, 2 a bad command line.
const (
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	bench.RunChild() // this program run again as a bare proxy (package bench)
	// A signal ends the run, which stops the nemo and proxy processes it
	// started.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the exit code; tests call it
// with their own writers.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := benchCmd(stdout, args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SetArgs(args)
	cmd.SetContext(ctx)
	err := cmd.Execute()
	switch {
	case err == nil:
		return 0
	case errors.As(err, new(usageError)) || !ranCommand(err):
		fmt.Fprintf(stderr, "nemo-bench: %v\nRun 'nemo-bench --help' for usage.\n", err)
		return exitUsage
	}
	fmt.Fprintf(stderr, "nemo-bench: %v\n", err)
	return exitFailure
}

// usageError marks a bad command line found after cobra's parsing (an
// unknown experiment), so it exits 2 like a parse error.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// runError marks an error returned by a run (not by flag parsing).
type runError struct{ error }

func (e runError) Unwrap() error { return e.error }

func ranCommand(err error) bool { return errors.As(err, new(runError)) }
