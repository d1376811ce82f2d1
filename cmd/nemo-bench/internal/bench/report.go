package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// setup describes a run's parameters in one line, for every table.
func setup(o Options) string {
	sc := o.Scale
	tgt := o.Target
	if o.Target == TargetEmbedded {
		tgt = fmt.Sprintf("embedded store, %v per remote call + jitter up to %v", o.Latency, o.Jitter)
	}
	if o.RTT > 0 || o.RTTJitter > 0 {
		tgt += fmt.Sprintf(" behind a simulated round trip of %v (+ jitter up to %v each way) for every series", o.RTT, o.RTTJitter)
	}
	if o.BackendNice != 0 {
		tgt += fmt.Sprintf(", the backend's process at nice %d", o.BackendNice)
	}
	if o.MaxStaleness > 0 {
		tgt += fmt.Sprintf(" (coherence shared: max_staleness %v)", o.MaxStaleness)
	}
	return fmt.Sprintf("target %s; workload %s; %d records of %d bytes (locking: %d records), %d clients, %v measured per run; seed %d; %d CPUs (GOMAXPROCS %d)",
		tgt, o.Workload, sc.Records, sc.ValueSize, sc.TxnRecords, sc.Workers, sc.Measure, o.Seed, runtime.NumCPU(), runtime.GOMAXPROCS(0))
}

// baselineOf returns the result of f's baseline series in r's group at
// r's point.
func baselineOf(f figure, rs []Result, r Result) (Result, bool) {
	for _, b := range rs {
		if b.Figure == f.name && b.X == r.X && b.Group == r.Group && b.Series == f.baseline {
			return b, true
		}
	}
	return Result{}, false
}

// ratio formats a/b, or "–" when it is undefined.
func ratio(a, b float64) string {
	if b == 0 || math.IsNaN(a/b) {
		if a == 0 {
			return "–"
		}
		return "∞"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

func label(r Result) string { return series{name: r.Series, group: r.Group}.label() }

// table renders an experiment's results as markdown, under src (what
// produced them: see source). Runs on a real target add each server
// process's CPU time per operation (the nemo or bare proxy, and the
// backend when it runs on this machine) and the buffer's background
// refreshes per operation.
func table(o Options, src string, e experiment, rs []Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# nemo-bench: %s\n\n%s.\n\nThe paper: %s.\n\nSetup: %s.\n\n%s.\n", e.name, e.about, e.paper, setup(o), src)
	for _, f := range e.figures {
		var mine []Result
		for _, r := range rs {
			if r.Figure == f.name {
				mine = append(mine, r)
			}
		}
		if slices.ContainsFunc(mine, func(r Result) bool { return r.Writeback != nil }) {
			fmt.Fprintf(&b, "\n## %s\n\n![%s](%s.png)\n\n", f.title, f.name, f.name)
			writebackTable(&b, f, mine)
			continue
		}
		if slices.ContainsFunc(mine, func(r Result) bool { return r.Takeover != nil }) {
			fmt.Fprintf(&b, "\n## %s\n\n![%s](%s.png)\n\n", f.title, f.name, f.name)
			takeoverTable(&b, f, mine)
			continue
		}
		bank := slices.ContainsFunc(mine, func(r Result) bool { return r.Bank != nil })
		cpu := slices.ContainsFunc(mine, func(r Result) bool { return len(r.CPU) > 0 })
		owned := slices.ContainsFunc(mine, func(r Result) bool { return r.Replicas > 0 })
		fmt.Fprintf(&b, "\n## %s\n\n![%s](%s.png)\n\n", f.title, f.name, f.name)
		fmt.Fprintf(&b, "Ratios are against %s in the same group at the same point, measured in the same run: throughput ÷ baseline's, and the baseline's remote requests per operation ÷ this one's (higher is better for both).", f.baseline)
		if cpu {
			fmt.Fprintf(&b, " CPU/op is each process's CPU time (user and system) over the measured phase per operation: the server the clients talk to (nemo, or the bare proxy), the backend, and the clients (this benchmark's own process); cores busy is the three together per second of the phase (the machine's core count means the run was bound by CPU); server CPU vs %s is this server's ÷ the baseline's (lower is better); mean is the clients' mean latency per operation, store call the mean of nemo's own calls to the backend (set it beside the direct series' mean: what a miss costs through nemo), coalesced/op the misses that shared a fetch of the same key already in flight; net late is, with a simulated round trip, how much later than due its proxy wrote a chunk on average (a round trip is at least two chunks, so the round trip the series met was the one asked for plus about twice that).", f.baseline)
		}
		if owned {
			b.WriteString(" Owners: in coherence partitioned, the replicas that held the table's lease at the end of the run; forwarded writes: the share of the writes the clients sent to the other replicas (spread evenly over all), which forward them to the owner.")
		}
		if bank {
			fmt.Fprintf(&b, " An operation is a transfer (committed; aborts are its conflicts, each retried); remote/op counts the audits' requests too. Audits/s: audits completed (%d%% of the operations; not in ops/s or the latencies); inexact: audits that saw a total other than the bank's (a replica answering within its staleness bound); total: read straight from the backend after the series' nemos drained (a series whose total is not the bank's fails).", bankAuditPct)
		}
		fmt.Fprintf(&b, "\n\n| %s | series | ops/s | ops/s vs %s | remote/op | fewer remote vs %s | hit ratio | p50 | p99 | aborts |", f.xlabel, f.baseline, f.baseline)
		if cpu {
			fmt.Fprintf(&b, " server CPU/op | backend CPU/op | client CPU/op | cores busy | server CPU vs %s | refresh/op | mean | store call | coalesced/op | net late |", f.baseline)
		}
		if owned {
			b.WriteString(" owners | forwarded writes |")
		}
		if bank {
			b.WriteString(" audits/s | inexact audits | total |")
		}
		b.WriteString("\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
		if cpu {
			b.WriteString("---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		}
		if owned {
			b.WriteString("---:|---:|")
		}
		if bank {
			b.WriteString("---:|---:|---:|")
		}
		b.WriteString("\n")
		for _, r := range mine {
			tp, rem := "–", "–"
			base, ok := baselineOf(f, rs, r)
			if ok {
				tp = ratio(r.Throughput(), base.Throughput())
				rem = ratio(base.RemotePerOp(), r.RemotePerOp())
			}
			fmt.Fprintf(&b, "| %s | %s | %.0f | %s | %.3f | %s | %.3f | %s | %s | %d (%.1f%%) |",
				f.xfmt(r.X), label(r), r.Throughput(), tp, r.RemotePerOp(), rem, r.HitRatio(),
				dur(r.P50), dur(r.P99), r.Aborts, r.AbortPct())
			if cpu {
				b.WriteString(cpuCells(r, base, ok))
			}
			if owned {
				b.WriteString(ownersCells(r))
			}
			if bank {
				b.WriteString(bankCells(r))
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// ownersCells are a partitioned run's owners among its replicas and the
// share of writes the others forwarded to them ("–" for other runs).
func ownersCells(r Result) string {
	share, ok := r.ForwardedShare()
	if !ok {
		return " – | – |"
	}
	return fmt.Sprintf(" %d of %d | %.0f%% |", r.Owners, r.Replicas, 100*share)
}

// bankCells are a bank run's audits per second, inexact audits and final
// total.
func bankCells(r Result) string {
	if r.Bank == nil {
		return " – | – | – |"
	}
	return fmt.Sprintf(" %.1f | %d | %d |", float64(r.Bank.Audits)/max(r.Elapsed.Seconds(), 1e-9), r.Bank.Inexact, r.Bank.Total)
}

// takeoverTable renders the take-over runs, one row per kill.
func takeoverTable(b *strings.Builder, f figure, rs []Result) {
	fmt.Fprintf(b, "Each kill is a run of its own: three fresh replicas, %s of writes, then SIGKILL of the owner (out of the clients' rotation at once), writes going on through the two others. Lease taken: from the kill to the first sight (polled every 100 ms) of a survivor reporting the table's lease (nemo_lease_held). First write after the kill: from the kill to the first acknowledgement of an attempt sent after it (through a survivor). Latency after: of the writes in flight at some time in the %v after the kill (acknowledged after the kill, issued before the window's end; first attempt to acknowledgement, retries every 20 ms included: the writes caught by the kill wait out the take-over). Failed attempts: over the run, every one retried. Replayed: log entries the survivors' logs say they replayed on taking the table. Lost: keys whose value in the backend, read after the survivors drained, is older than their last acknowledged write (any fails the run). Ops/s, p50 and p99: every acknowledged write of the run.\n\n",
		"max(measure, 2 s)", takeoverWindow)
	b.WriteString("| kill | lease TTL | lease taken | first write after kill | p50 after | p99 after | max after | failed attempts | replayed | new owners | acknowledged writes | keys checked | lost | ops/s | p50 | p99 |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		t := r.Takeover
		if t == nil {
			continue
		}
		fmt.Fprintf(b, "| %s | %v | %s | %s | %s | %s | %s | %d | %d | %d of %d | %d | %d | %d | %.0f | %s | %s |\n",
			f.xfmt(r.X), t.LeaseTTL, dur(t.LeaseTaken), dur(t.FirstOK), dur(t.P50After), dur(t.P99After), dur(t.MaxAfter), t.Failed, t.Replayed,
			t.NewOwners, max(r.Replicas-1, 0), t.Acked, t.Keys, t.Lost, r.Throughput(), dur(r.P50), dur(r.P99))
	}
}

// writebackTable renders the write-back soak's runs, one row per
// parallelism.
func writebackTable(b *strings.Builder, f figure, rs []Result) {
	b.WriteString("Each parallelism is a run of its own: freshly loaded keys, a fresh nemo. Writes/s counts acknowledged client writes (a batch's upserts each) and reads/s point reads; records/s and calls/s are nemo's write-back (nemo_cache_writebacks_total, nemo_cache_writeback_batch_seconds_count); in flight, the oldest dirty record (nemo_cache_flush_lag_seconds) and dirty bytes are sampled from /metrics (in flight –: the nemo does not report it); over bound is the share of samples whose oldest dirty record was older than max_dirty_age; write p50 and p99 are of every acknowledged write; nemo and backend cores are each process's CPU time per second of the run (the backend, Azurite, runs one JavaScript thread: near 1.0 it is the ceiling); lost counts keys whose value in the backend after nemo drained differs from their last acknowledged write (any fails the run).\n\n")
	b.WriteString("| parallelism | writes/s | reads/s | write-back records/s | write-back calls/s | in flight mean | in flight max | oldest dirty max | over bound | dirty MiB mean | dirty MiB max | write p50 | write p99 | nemo cores | backend cores | keys checked | lost |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		if r.Writeback != nil {
			writebackRow(b, f, r)
		}
	}
}

// writebackRow is one run's row of writebackTable.
func writebackRow(b *strings.Builder, f figure, r Result) {
	w, sec := r.Writeback, max(r.Elapsed.Seconds(), 1e-9)
	inMean, inMax := "–", "–"
	if w.InFlightMax >= 0 {
		inMean, inMax = fmt.Sprintf("%.2f", w.InFlightMean), fmt.Sprintf("%.0f", w.InFlightMax)
	}
	fmt.Fprintf(b, "| %s | %.0f | %.0f | %.0f | %.1f | %s | %s | %s | %.0f%% | %.1f | %.1f | %s | %s | %s | %s | %d | %d |\n",
		f.xfmt(r.X), float64(w.Writes)/sec, float64(w.Reads)/sec, float64(w.Records)/sec, float64(w.Calls)/sec, inMean, inMax,
		dur(w.LagMax), 100*w.LagOver, w.DirtyMean/(1<<20), w.DirtyMax/(1<<20), dur(w.WriteP50), dur(w.WriteP99),
		coresCell(r, "server"), coresCell(r, "backend"), w.Keys, w.Lost)
}

// coresCell is the CPU time of role's processes per second of r, or "–"
// when the run did not measure one.
func coresCell(r Result, role string) string {
	var t time.Duration
	found := false
	for _, c := range r.CPU {
		if c.Role == role {
			t, found = t+c.Time, true
		}
	}
	if !found {
		return "–"
	}
	return fmt.Sprintf("%.2f", t.Seconds()/max(r.Elapsed.Seconds(), 1e-9))
}

// cpuCells is the CPU columns of r's row: each process's CPU per
// operation, cores busy, the server's CPU against base's (when hasBase),
// refreshes, the mean, nemo's store call, coalesced misses and the
// simulated round trip's lateness.
func cpuCells(r, base Result, hasBase bool) string {
	cpuRatio, busy, call, late := "–", "–", "–", "–"
	srv, sok := r.CPUPerOp("server")
	if bs, bok := base.CPUPerOp("server"); hasBase && sok && bok {
		cpuRatio = ratio(float64(srv), float64(bs))
	}
	if c, ok := r.CoresBusy(); ok {
		busy = fmt.Sprintf("%.2f", c)
	}
	if d, ok := r.StoreCallMean(); ok {
		call = dur(d)
	}
	if d, ok := r.NetLateMean(); ok {
		late = dur(d)
	}
	return fmt.Sprintf(" %s | %s | %s | %s | %s | %.3f | %s | %s | %.3f | %s |", cpuCell(r, "server"), cpuCell(r, "backend"), cpuCell(r, "client"), busy, cpuRatio, r.RefreshPerOp(),
		dur(r.Mean), call, float64(r.Coalesced)/max(float64(r.Ops), 1), late)
}

// cpuCell is a process's CPU time per operation, or "–" when the run did
// not measure one.
func cpuCell(r Result, role string) string {
	d, ok := r.CPUPerOp(role)
	if !ok {
		return "–"
	}
	return dur(d)
}

// dur renders a latency with three significant figures or so.
func dur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// write writes an experiment's table (under src) and its figures' plots
// into o.Out.
func write(o Options, src string, e experiment, rs []Result) ([]string, error) {
	md := filepath.Join(o.Out, e.name+".md")
	if err := os.WriteFile(md, []byte(table(o, src, e, rs)), 0o644); err != nil {
		return nil, err
	}
	files := []string{md}
	for _, f := range e.figures {
		png := filepath.Join(o.Out, f.name+".png")
		if err := plotFigure(png, f, rs); err != nil {
			return files, fmt.Errorf("plot %s: %w", f.name, err)
		}
		files = append(files, png)
	}
	return files, nil
}

// writeIndex writes index.md: what produced the run (src), its setup and
// a link to every table and plot.
func writeIndex(o Options, src string, es []experiment) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# nemo-bench results\n\n%s.\n\nSetup: %s.\n\n", src, setup(o))
	b.WriteString("| experiment | what | the paper | plots |\n|---|---|---|---|\n")
	for _, e := range es {
		var plots []string
		for _, f := range e.figures {
			plots = append(plots, fmt.Sprintf("[%s](%s.png)", f.name, f.name))
		}
		fmt.Fprintf(&b, "| [%s](%s.md) | %s | %s | %s |\n", e.name, e.name, e.about, e.paper, strings.Join(plots, ", "))
	}
	p := filepath.Join(o.Out, "index.md")
	return p, os.WriteFile(p, []byte(b.String()), 0o644)
}
