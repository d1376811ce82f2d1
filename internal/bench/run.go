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
func Run(ctx context.Context, o Options) (Report, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return Report{}, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return Report{}, err
	}
	r := &runner{o: o}
	defer r.close()
	var rep Report
	var done []experiment
	for _, name := range o.Experiments {
		e, _ := lookup(name)
		res, err := r.experiment(ctx, e)
		rep.Results = append(rep.Results, res...)
		if err != nil {
			return rep, fmt.Errorf("experiment %s: %w", name, err)
		}
		files, err := write(o, e, res)
		rep.Files = append(rep.Files, files...)
		if err != nil {
			return rep, err
		}
		done = append(done, e)
	}
	f, err := writeIndex(o, done)
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
	for i, t := range ts {
		bar.step(i, fmt.Sprintf("%s %s=%s", t.s.label(), t.fig.xlabel, t.fig.xfmt(t.x)))
		start := time.Now()
		res, err := r.measure(ctx, t, ycsbeSets)
		if err != nil {
			bar.fail()
			return out, fmt.Errorf("%s, %s at %s: %w", t.fig.name, t.s.label(), t.fig.xfmt(t.x), err)
		}
		res.Figure, res.Series, res.Group, res.X = t.fig.name, t.s.name, t.s.group, t.x
		out = append(out, res)
		r.o.Logger.Debug("bench run", "figure", t.fig.name, "series", t.s.label(), "x", t.x,
			"ops_per_s", res.Throughput(), "remote_per_op", res.RemotePerOp(), "took", time.Since(start))
		bar.result(t, res)
	}
	bar.done()
	return out, nil
}

// layout identifies a locking data set.
type layout struct {
	domain, region uint
	w              ycsb.Workload
}

func (r *runner) measure(ctx context.Context, t task, sets map[layout]*ycsbeData) (Result, error) {
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
