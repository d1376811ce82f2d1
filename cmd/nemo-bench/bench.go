package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nemocache/nemo/cmd/nemo-bench/internal/bench"
)

// benchCmd is the nemo-bench command: the Nemo paper's experiments, each
// with its baselines in the same run, written as tables and plots (package
// bench, under internal/).
func benchCmd(stdout io.Writer, args []string) *cobra.Command {
	var (
		o     bench.Options
		list  bool
		scale bench.Scale
	)
	cmd := &cobra.Command{
		Use:   "nemo-bench",
		Short: "Run the Nemo paper's experiments and write tables and plots",
		Long: `nemo-bench runs named experiments that mirror the Nemo paper's figures, each
with its baselines (cache policies none and record, or PCL locking) measured
in the same run, and writes into --out a markdown table per experiment
(throughput, remote requests per operation, hit ratio, p50/p99 latency,
aborts, ratios against the baseline) and a PNG plot per figure.

The default target is the embedded store behind an injected latency per
remote call (--latency, --jitter), driven through the transactional engine
the frontends use. --target azurite (or an Azure Table endpoint URL) runs
the point, range, forward and servers experiments through a nemo process
(--nemo) in front of Azurite ($NEMO_TEST_AZURITE), with the aztables SDK,
and replicas through three; --target emulator in front of the Datastore
emulator ($NEMO_TEST_DATASTORE), with the Go Datastore client. There every
table also gives each server process's CPU time per operation: nemo's (or
a bare reverse proxy's, forward's baseline) and the backend's. --rtt adds
a simulated round trip between the backend and everything that talks to
it, the clients of the direct series included.`,
		Example: `  nemo-bench --quick                      # every experiment at a small scale, under a minute
  nemo-bench --list                       # the experiments and the figures they draw
  nemo-bench --experiments point,range    # two experiments at full scale, into bench-results/
  nemo-bench --target azurite --nemo ./nemo --experiments servers --workload longtail
  nemo-bench --target azurite --nemo ./nemo --experiments replicas --measure 4s --rtt 10ms
  nemo-bench --target azurite --nemo ./nemo --experiments replicas-bank,replicas-takeover --measure 4s --rtt 10ms`,
		Version:       version,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if list {
				if err := printExperiments(stdout); err != nil {
					return runError{err}
				}
				return nil
			}
			o.AzuriteURL, o.EmulatorHost = os.Getenv("NEMO_TEST_AZURITE"), os.Getenv("NEMO_TEST_DATASTORE")
			if cmd.Flags().Changed("records") || cmd.Flags().Changed("value-size") || cmd.Flags().Changed("clients") || cmd.Flags().Changed("measure") || cmd.Flags().Changed("slices") || cmd.Flags().Changed("settle") {
				base := bench.DefaultScale(o.Quick)
				if o.Workload == string(bench.WorkloadLongTail) {
					base.Records = max(base.Records, bench.LongTailRecords)
				}
				if cmd.Flags().Changed("records") {
					base.Records, base.TxnRecords = scale.Records, scale.Records
				}
				if cmd.Flags().Changed("value-size") {
					base.ValueSize = scale.ValueSize
				}
				if cmd.Flags().Changed("clients") {
					base.Workers = scale.Workers
				}
				if cmd.Flags().Changed("measure") {
					base.Measure = scale.Measure
				}
				base.Slices, base.Settle = scale.Slices, scale.Settle
				o.Scale = &base
			}
			// On the command line 0 means none (in Options, the default).
			if o.Latency == 0 {
				o.Latency = -1
			}
			if o.Jitter == 0 {
				o.Jitter = -1
			}
			o.Progress, o.Terminal = stdout, isTerminal(stdout)
			o.Args = args
			start := time.Now()
			rep, err := bench.Run(cmd.Context(), o)
			if errors.Is(err, bench.ErrInvalid) {
				return usageError{err}
			}
			if err != nil {
				return runError{err}
			}
			fmt.Fprintf(stdout, "%d runs in %v; results in %s:\n", len(rep.Results), time.Since(start).Round(time.Second), o.Out)
			for _, f := range rep.Files {
				fmt.Fprintln(stdout, "  "+f)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&list, "list", false, "list the experiments and exit")
	fs.StringSliceVar(&o.Experiments, "experiments", nil, "experiments to run, comma-separated (default all that run on the target); a figure's name runs that figure alone")
	fs.StringVar(&o.Target, "target", bench.TargetEmbedded, `"embedded", "azurite", "emulator" or an Azure Table endpoint URL`)
	fs.StringVar(&o.Workload, "workload", "paper", `"paper" (unscrambled zipfian top-K, top-K warm-up), "scrambled" (YCSB's), "both", or "longtail" (scrambled over at least 20000 records)`)
	fs.StringVar(&o.Nemo, "nemo", "", `real targets: the nemo binary to run (default: "nemo" beside nemo-bench, else on $PATH)`)
	fs.BoolVar(&o.Quick, "quick", false, "a pass of about a minute: small data, short runs, three points per sweep")
	fs.StringVar(&o.Out, "out", "bench-results", "results folder")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the data and the request streams")
	fs.DurationVar(&o.Latency, "latency", time.Millisecond, "embedded target: latency injected into every remote call (0: none)")
	fs.DurationVar(&o.Jitter, "jitter", 100*time.Microsecond, "embedded target: plus a uniform random delay up to this")
	fs.DurationVar(&o.RTT, "rtt", 0, "real targets: a simulated cloud round trip: every series (the direct clients too) reaches the backend through a TCP proxy that delays each chunk rtt/2 each way")
	fs.DurationVar(&o.RTTJitter, "rtt-jitter", 0, "real targets: plus a uniform random delay up to this, each way")
	fs.IntVar(&o.BackendNice, "backend-nice", 0, "real targets: run the backend's process (found by its port) at this nice for the session, then put it back; with --rtt, -10 stands for a store with CPU of its own (below the current nice needs root)")
	fs.IntVar(&scale.Records, "records", 0, "records loaded (default 20000, quick 2000)")
	fs.IntVar(&scale.ValueSize, "value-size", 0, "bytes per value (default 1024, quick 512)")
	fs.IntVar(&scale.Workers, "clients", 0, "concurrent clients of the cache experiments (default 16)")
	fs.DurationVar(&scale.Measure, "measure", 0, "measured time of each run (default 2s, quick 300ms)")
	fs.DurationVar(&scale.Settle, "settle", 0, "after each warm-up, run the workload this long unmeasured, so the measured phase is the steady state (the paper workload warms only its top-K items: the first reads of its absent keys come after)")
	fs.DurationVar(&o.MaxStaleness, "max-staleness", 0, "real targets: coherence.max_staleness of nemo in coherence shared (default nemo's, 1s); sliced runs warm each slice at least this long")
	fs.IntVar(&scale.Slices, "slices", 0, "real targets: measure a point's series together, in this many alternating slices of --measure/slices (each after 1s unmeasured)")
	return cmd
}

func printExperiments(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EXPERIMENT\tFIGURES\tTARGETS\tWHAT")
	for _, e := range bench.Experiments() {
		targets := bench.TargetEmbedded
		switch {
		case e.RealOnly:
			targets = bench.TargetAzurite + "," + bench.TargetEmulator
		case e.Real:
			targets += "," + bench.TargetAzurite + "," + bench.TargetEmulator
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Name, e.Figures, targets, e.About)
	}
	return tw.Flush()
}

// isTerminal reports whether w is a character device (a terminal), where
// progress bars are redrawn in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
