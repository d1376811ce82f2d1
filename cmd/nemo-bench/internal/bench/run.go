package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nemocache/nemo/internal/ycsb"
)

// Report is what a Run measured and wrote.
type Report struct {
	Results []Result
	Files   []string // tables and plots written, in order
}

// Run runs the experiments the options name and writes, into o.Out, one
// markdown table per experiment, one PNG plot per figure and an index.
func Run(ctx context.Context, o Options) (rep Report, err error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return Report{}, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return Report{}, err
	}
	src := source(ctx, o, time.Now())
	r := &runner{o: o}
	// Closing the data deletes it from the backend and puts the
	// backend's nice back (Options.BackendNice): a failure is the run's.
	defer func() { err = errors.Join(err, r.close()) }()
	var done []experiment
	for _, name := range o.Experiments {
		e, _ := lookup(name)
		res, err := r.experiment(ctx, e)
		rep.Results = append(rep.Results, res...)
		if err != nil {
			return rep, fmt.Errorf("experiment %s: %w", name, err)
		}
		files, err := write(o, src, e, res)
		rep.Files = append(rep.Files, files...)
		if err != nil {
			return rep, err
		}
		done = append(done, e)
	}
	f, err := writeIndex(o, src, done)
	if err != nil {
		return rep, err
	}
	rep.Files = append(rep.Files, f)
	return rep, nil
}

// runner holds what the runs of one Run share: the loaded data of the
// cache experiments, per target, and what one of its records costs.
type runner struct {
	o        Options
	cache    cacheTarget
	closer   func() error
	recBytes int64
}

func (r *runner) close() error {
	if r.closer == nil {
		return nil
	}
	return r.closer()
}

// cacheTarget loads the target's data on first use.
func (r *runner) target(ctx context.Context) (cacheTarget, int64, error) {
	if r.cache != nil {
		return r.cache, r.recBytes, nil
	}
	var err error
	switch r.o.Target {
	case TargetEmbedded:
		var d *embeddedData
		d, err = newEmbeddedData(ctx, r.o)
		if err == nil {
			r.cache, r.closer = d, d.close
		}
	case TargetEmulator:
		var d *datastoreData
		d, err = newDatastoreData(ctx, r.o)
		if err == nil {
			r.cache, r.closer = d, d.close
		}
	default:
		var d *azureData
		d, err = newAzureData(ctx, r.o)
		if err == nil {
			r.cache, r.closer = d, d.close
		}
	}
	if err != nil {
		return nil, 0, fmt.Errorf("loading %d records into %s: %w", r.o.Scale.Records, r.o.Target, err)
	}
	r.recBytes, err = recordBytes(ctx, r.cache)
	return r.cache, r.recBytes, err
}

// task is one measured run of an experiment.
type task struct {
	fig figure
	s   series
	x   float64
	sp  runSpec
}

// tasks lists an experiment's runs: for every figure and point, every
// series in turn (so the baselines are measured interleaved with the
// rest), each series once per workload when the figure compares them.
func (r *runner) tasks(e experiment) []task {
	var out []task
	for _, f := range e.figures {
		var ss []series
		for _, s := range f.series {
			if !f.perWorkload {
				ss = append(ss, s)
				continue
			}
			for _, w := range r.o.workloads() {
				ss = append(ss, series{name: s.name, group: string(w), set: func(sp *runSpec) {
					s.set(sp)
					sp.workload = w
				}})
			}
		}
		for _, x := range f.points(*r.o.Scale) {
			for _, s := range ss {
				sp := f.base
				sp.workload = ycsb.WorkloadPaper
				if w := r.o.workloads(); len(w) == 1 {
					sp.workload = w[0]
				}
				f.vary(&sp, x)
				s.set(&sp)
				out = append(out, task{fig: f, s: s, x: x, sp: sp})
			}
		}
	}
	return out
}

func (r *runner) experiment(ctx context.Context, e experiment) ([]Result, error) {
	ts := r.tasks(e)
	bar := newProgress(r.o.Progress, r.o.Terminal, e.name, len(ts))
	var out []Result
	ycsbeSets := map[layout]*ycsbeData{}
	for i := 0; i < len(ts); {
		// A point's series measured together (sliced), or one task.
		j := i + 1
		for r.sliced(ts[i]) && j < len(ts) && ts[j].fig.name == ts[i].fig.name && ts[j].x == ts[i].x {
			j++
		}
		group := ts[i:j]
		t := group[0]
		bar.step(i, fmt.Sprintf("%s %s=%s", t.s.label(), t.fig.xlabel, t.fig.xfmt(t.x)))
		start := time.Now()
		var res []Result
		var err error
		if len(group) > 1 {
			res, err = r.measureSliced(ctx, group)
		} else {
			var one Result
			one, err = r.measure(ctx, t, ycsbeSets)
			res = []Result{one}
		}
		if err != nil {
			bar.fail()
			return out, fmt.Errorf("%s, %s at %s: %w", t.fig.name, t.s.label(), t.fig.xfmt(t.x), err)
		}
		for k, t := range group {
			res[k].Figure, res[k].Series, res[k].Group, res[k].X = t.fig.name, t.s.name, t.s.group, t.x
			out = append(out, res[k])
			r.o.Logger.Debug("bench run", "figure", t.fig.name, "series", t.s.label(), "x", t.x,
				"ops_per_s", res[k].Throughput(), "remote_per_op", res[k].RemotePerOp(), "took", time.Since(start))
			bar.step(i+k, "")
			bar.result(t, res[k])
		}
		i = j
	}
	bar.done()
	return out, nil
}

// sliced reports whether t's point is measured in slices with the other
// series of the point (Scale.Slices, real targets' cache runs).
func (r *runner) sliced(t task) bool {
	return r.o.Scale.Slices > 1 && r.o.real() && (t.sp.op == opGet || t.sp.op == opScan)
}

// sliceWarm is how long a series runs its workload, unmeasured, before
// each of its slices (at most Scale.Measure): coherence shared's default
// staleness bound (or Options.MaxStaleness, when longer), after which a
// buffer left idle while the other series ran is as fresh as in a run
// that never paused.
const sliceWarm = time.Second

// measureSliced measures the series of one point together: each opened
// and warmed, then Scale.Slices rounds in which every series in turn
// (starting one further each round) runs sliceWarm unmeasured and
// Scale.Measure/Slices measured, so that a change in the machine's load
// falls on all of them alike.
func (r *runner) measureSliced(ctx context.Context, group []task) (out []Result, err error) {
	tg, recBytes, err := r.target(ctx)
	if err != nil {
		return nil, err
	}
	sc := *r.o.Scale
	runs := make([]*cacheRun, 0, len(group))
	defer func() {
		if err != nil {
			for _, c := range runs {
				if c != nil {
					err = errors.Join(err, c.s.close())
				}
			}
		}
	}()
	for _, t := range group {
		c, err := openCache(ctx, tg, recBytes, t.sp, sc, r.o.Seed)
		if err != nil {
			return nil, err
		}
		runs = append(runs, c)
	}
	for k := range sc.Slices {
		for j := range runs {
			c := runs[(j+k)%len(runs)]
			if err := c.unmeasured(ctx, min(max(sliceWarm, r.o.MaxStaleness), sc.Measure), uint64(100+2*k)); err != nil {
				return nil, err
			}
			if err := c.slice(ctx, sc.Measure/time.Duration(sc.Slices), 0, uint64(101+2*k)); err != nil {
				return nil, err
			}
		}
	}
	for i, c := range runs {
		res, cerr := c.result()
		runs[i] = nil
		out = append(out, res)
		err = errors.Join(err, cerr)
	}
	return out, err
}

// layout identifies a locking data set.
type layout struct {
	domain, region uint
	w              ycsb.Workload
}

func (r *runner) measure(ctx context.Context, t task, sets map[layout]*ycsbeData) (Result, error) {
	switch t.sp.op {
	case opBank:
		return r.runBank(ctx, t.sp)
	case opTakeover:
		return r.runTakeover(ctx, t.x)
	case opWriteback:
		return r.runWriteback(ctx, t.x)
	}
	if t.sp.op != opYCSBE {
		tg, recBytes, err := r.target(ctx)
		if err != nil {
			return Result{}, err
		}
		return runCache(ctx, tg, recBytes, t.sp, *r.o.Scale, r.o.Seed)
	}
	if r.o.Target != TargetEmbedded {
		return Result{}, errors.New("the locking experiment runs on the embedded target only")
	}
	// Both strategies of one layout share the data (and scan ranges).
	k := layout{t.sp.domainBits, t.sp.regionBits, t.sp.workload}
	d := sets[k]
	if d == nil {
		var err error
		if d, err = newYCSBEData(t.sp, r.o.Scale.TxnRecords, r.o.Seed); err != nil {
			return Result{}, err
		}
		sets[k] = d
	}
	return runYCSBE(ctx, r.o, d, t.sp)
}
