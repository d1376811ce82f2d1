package bench

import (
	"bytes"
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// tinyScale runs an experiment in well under a second per run. A cache
// run measures 1,500 operations rather than a time: in a fixed time a
// loaded machine completes fewer, and the first fetches of a short run
// then weigh more (nemo at 100% negative ranges: 0.55 remote requests per
// operation over 269 operations, 0.33 over 1,542).
//
// Comparisons between nemo and the record cache allow a margin where the
// two do the same work (point reads of keys that exist): the background
// evictor's timing on a loaded machine moves a tiny run's miss count.
var tinyScale = Scale{Records: 400, ValueSize: 256, Workers: 4, Measure: 60 * time.Millisecond, MeasureOps: 1500, WarmOps: 2000, TxnRecords: 512, Short: true}

func tinyOptions(t *testing.T, exps ...string) Options {
	sc := tinyScale
	return Options{Experiments: exps, Out: t.TempDir(), Scale: &sc, Latency: 200 * time.Microsecond, Jitter: 20 * time.Microsecond}
}

// find returns the result of series/group at figure's point x.
func find(t *testing.T, rs []Result, figure, series, group string, x float64) Result {
	t.Helper()
	for _, r := range rs {
		if r.Figure == figure && r.Series == series && r.Group == group && r.X == x {
			return r
		}
	}
	t.Fatalf("no result for %s %s (%s) at %v", figure, series, group, x)
	return Result{}
}

// checkFiles: every table and plot the run names exists, the tables
// mention every figure, and every PNG decodes to a non-empty image.
func checkFiles(t *testing.T, o Options, rep Report) {
	t.Helper()
	if len(rep.Files) == 0 {
		t.Fatal("no files written")
	}
	for _, f := range rep.Files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			t.Errorf("%s is empty", f)
		}
		switch filepath.Ext(f) {
		case ".png":
			img, err := png.Decode(bytes.NewReader(b))
			if err != nil {
				t.Errorf("%s: %v", f, err)
				continue
			}
			if r := img.Bounds(); r.Dx() < 100 || r.Dy() < 100 {
				t.Errorf("%s is %v", f, r)
			}
		case ".md":
			if !strings.Contains(string(b), "|") && filepath.Base(f) != "index.md" {
				t.Errorf("%s has no table", f)
			}
			// What produced it: the command, the commit, the nemo run.
			if !strings.Contains(string(b), "Produced by `nemo-bench") || !strings.Contains(string(b), "nemo-bench: commit ") {
				t.Errorf("%s does not say what produced it:\n%s", f, b)
			}
			if o.Target != "" && o.real() && !strings.Contains(string(b), "the nemo it ran: nemo ") {
				t.Errorf("%s does not name the nemo it ran:\n%s", f, b)
			}
		}
	}
	for _, name := range o.Experiments {
		e, _ := lookup(name)
		for _, fig := range e.figures {
			if _, err := os.Stat(filepath.Join(o.Out, fig.name+".png")); err != nil {
				t.Errorf("figure %s: %v", fig.name, err)
			}
		}
	}
}

// runChecked runs o and checks the files it wrote (checkFiles).
func runChecked(t *testing.T, o Options) Report {
	t.Helper()
	rep, err := Run(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, o, rep)
	return rep
}

// noWorse reports whether nemo asked the store no more often per
// operation than the baseline, within the margin tinyScale explains.
func noWorse(nemo, base Result) bool { return nemo.RemotePerOp() <= 1.25*base.RemotePerOp()+0.03 }

// TestPoint: with no buffer every point read is one remote request; a
// buffer takes fewer, nemo no more than the record cache, and the
// buffered policies hit.
func TestPoint(t *testing.T) {
	o := tinyOptions(t, "point")
	rep := runChecked(t, o)
	for _, x := range []float64{0.05, 0.2, 0.5} {
		none := find(t, rep.Results, "point", "none", "paper", x)
		rec := find(t, rep.Results, "point", "record", "paper", x)
		nemo := find(t, rep.Results, "point", "nemo", "paper", x)
		for _, r := range []Result{none, rec, nemo} {
			t.Logf("x=%v %s: %.0f ops/s, %.3f remote/op, hit %.2f, p50 %v p99 %v", x, r.Series, r.Throughput(), r.RemotePerOp(), r.HitRatio(), r.P50, r.P99)
			if r.Ops == 0 || r.P50 <= 0 || r.P99 < r.P50 {
				t.Errorf("%s at %v: %d ops, p50 %v, p99 %v", r.Series, x, r.Ops, r.P50, r.P99)
			}
		}
		if got := none.RemotePerOp(); got < 0.99 || got > 1.01 || none.Lookups != 0 {
			t.Errorf("none at %v: %.3f remote/op and %d lookups, want 1 and none", x, got, none.Lookups)
		}
		if !noWorse(nemo, rec) {
			t.Errorf("nemo at %v: %.3f remote/op, record %.3f", x, nemo.RemotePerOp(), rec.RemotePerOp())
		}
		if nemo.RemotePerOp() >= 0.9 || nemo.HitRatio() <= 0.1 {
			t.Errorf("nemo at %v: %.3f remote/op, hit ratio %.2f: the buffer is not used", x, nemo.RemotePerOp(), nemo.HitRatio())
		}
	}
}

// TestSkew: at every skew the buffered policies ask the store less than
// no buffer, and nemo no more than the record cache.
func TestSkew(t *testing.T) {
	o := tinyOptions(t, "skew")
	rep := runChecked(t, o)
	for _, x := range []float64{0.5, 0.8, 0.99} {
		none := find(t, rep.Results, "skew", "none", "paper", x)
		rec := find(t, rep.Results, "skew", "record", "paper", x)
		nemo := find(t, rep.Results, "skew", "nemo", "paper", x)
		if got := none.RemotePerOp(); got < 0.99 || got > 1.01 {
			t.Errorf("none at theta %v: %.3f remote/op, want 1", x, got)
		}
		if rec.RemotePerOp() >= 1 || !noWorse(nemo, rec) {
			t.Errorf("theta %v: record %.3f remote/op, nemo %.3f", x, rec.RemotePerOp(), nemo.RemotePerOp())
		}
	}
	lo := find(t, rep.Results, "skew", "nemo", "paper", 0.5)
	hi := find(t, rep.Results, "skew", "nemo", "paper", 0.99)
	if hi.HitRatio() <= lo.HitRatio() {
		t.Errorf("nemo's hit ratio %.2f at theta 0.99, %.2f at 0.5: want higher with more skew", hi.HitRatio(), lo.HitRatio())
	}
}

// TestNegative: the record cache asks the store for every absent key and
// every range; nemo remembers absence, so it asks less, and the more the
// lookups are negative, the larger the gap.
func TestNegative(t *testing.T) {
	o := tinyOptions(t, "negative")
	rep := runChecked(t, o)
	for _, fig := range []string{"negative-lookups", "negative-ranges"} {
		for _, x := range []float64{0, 0.5, 1} {
			rec := find(t, rep.Results, fig, "record", "paper", x)
			nemo := find(t, rep.Results, fig, "nemo", "paper", x)
			t.Logf("%s at %v: record %.3f remote/op, nemo %.3f", fig, x, rec.RemotePerOp(), nemo.RemotePerOp())
			if !noWorse(nemo, rec) {
				t.Errorf("%s at %v: nemo %.3f remote/op, record %.3f", fig, x, nemo.RemotePerOp(), rec.RemotePerOp())
			}
		}
		// Every lookup of the record cache reaches the store, a fetch
		// shared by concurrent misses of one key counting for each.
		if rec := find(t, rep.Results, fig, "record", "paper", 1); rec.RemotePerOp()+float64(rec.Coalesced)/float64(rec.Ops) < 0.99 {
			t.Errorf("%s: record at 100%% negative: %.3f remote/op and %d of %d coalesced, want 1 (it caches no absence)", fig, rec.RemotePerOp(), rec.Coalesced, rec.Ops)
		}
		if nemo := find(t, rep.Results, fig, "nemo", "paper", 1); nemo.RemotePerOp() > 0.5 {
			t.Errorf("%s: nemo at 100%% negative: %.3f remote/op, want most answered from the buffer", fig, nemo.RemotePerOp())
		}
	}
}

// TestNegativeSettled: the paper workload warms only its top-K items, so
// without Settle the first read of each absent key falls in the measured
// phase; with it, nemo's negative lookups are answered from what it
// learned (the record cache, which keeps no absence, is unchanged).
func TestNegativeSettled(t *testing.T) {
	at := func(settle time.Duration) (rec, nemo Result) {
		o := tinyOptions(t, "negative-lookups")
		o.Scale.Settle = settle
		rep := runChecked(t, o)
		return find(t, rep.Results, "negative-lookups", "record", "paper", 0.5), find(t, rep.Results, "negative-lookups", "nemo", "paper", 0.5)
	}
	rec0, nemo0 := at(0)
	rec1, nemo1 := at(300 * time.Millisecond)
	t.Logf("50%% absent: record %.3f remote/op, nemo %.3f; settled: record %.3f, nemo %.3f",
		rec0.RemotePerOp(), nemo0.RemotePerOp(), rec1.RemotePerOp(), nemo1.RemotePerOp())
	if nemo1.RemotePerOp() >= nemo0.RemotePerOp() {
		t.Errorf("settled nemo %.3f remote/op, not below the unsettled %.3f", nemo1.RemotePerOp(), nemo0.RemotePerOp())
	}
	if rec1.RemotePerOp() < 0.5 {
		t.Errorf("settled record %.3f remote/op: every absent key (half the lookups) must still reach the store", rec1.RemotePerOp())
	}
}

// TestRange: with both workloads, every range read of the record cache
// goes to the store (one request), and nemo asks less.
func TestRange(t *testing.T) {
	o := tinyOptions(t, "range")
	o.Workload = WorkloadBoth
	rep := runChecked(t, o)
	for _, w := range []string{"paper", "scrambled"} {
		for _, x := range []float64{1, 8, 64} {
			rec := find(t, rep.Results, "range", "record", w, x)
			nemo := find(t, rep.Results, "range", "nemo", w, x)
			t.Logf("%s, %v records: record %.3f remote/op, nemo %.3f", w, x, rec.RemotePerOp(), nemo.RemotePerOp())
			// The record cache sends range reads to the store (a read of
			// one record whose start it holds may be answered locally).
			if got := rec.RemotePerOp(); got > 1.01 || (x > 1 && got < 0.99) {
				t.Errorf("record, %s, %v records: %.3f remote/op, want 1", w, x, got)
			}
			if nemo.RemotePerOp() >= rec.RemotePerOp() {
				t.Errorf("nemo, %s, %v records: %.3f remote/op, record %.3f", w, x, nemo.RemotePerOp(), rec.RemotePerOp())
			}
		}
	}
}

// TestLocking: both strategies commit transactions at every point of
// both sweeps, both layouts and both lock protocols, each scan finding its
// 8 records (a wrong count fails the run); under NO_WAIT, PCL over the
// dense layout (all the data in one of its partitions) aborts.
func TestLocking(t *testing.T) {
	o := tinyOptions(t, "locking")
	rep := runChecked(t, o)
	if len(rep.Results) != 3*8+3*8 {
		t.Fatalf("%d results, want 48", len(rep.Results))
	}
	var noWaitAborts int64
	for _, r := range rep.Results {
		if r.Ops == 0 || r.Remote == 0 || r.HitRatio() <= 0 || r.P99 < r.P50 {
			t.Errorf("%s %s at %v: %d ops, %d remote, hit %.2f, p50 %v p99 %v", r.Figure, label(r), r.X, r.Ops, r.Remote, r.HitRatio(), r.P50, r.P99)
		}
		if r.Series == "pcl" && r.Group == "dense, no-wait" {
			noWaitAborts += r.Aborts
		}
	}
	if noWaitAborts == 0 {
		t.Error("PCL under NO_WAIT over the dense layout never aborted")
	}
}

// TestValidate: every problem is reported at once, as ErrInvalid.
func TestValidate(t *testing.T) {
	o := Options{Target: "ftp://x", Experiments: []string{"point", "nope", "locking"}, Workload: "zipf"}
	o.EnsureDefaults()
	o.Scale.Records = 3
	err := o.Validate()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Validate = %v, want ErrInvalid", err)
	}
	for _, want := range []string{`target "ftp://x"`, `experiment "nope"`, `workload "zipf"`, "3 records"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, lacks %q", err, want)
		}
	}
	o = Options{Target: TargetAzurite, AzuriteURL: "http://127.0.0.1:10002/devstoreaccount1", Experiments: []string{"locking"}, Nemo: "/no/such/nemo"}
	o.EnsureDefaults()
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "embedded target only") {
		t.Errorf("locking on azurite: %v", err)
	}
	t.Setenv("PATH", t.TempDir()) // no nemo beside the test binary or on $PATH
	o = Options{Target: TargetAzurite, AzuriteURL: "http://127.0.0.1:10002/devstoreaccount1", Experiments: []string{"servers"}}
	o.EnsureDefaults()
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--nemo") {
		t.Errorf("azurite without a nemo binary: %v", err)
	}
	o = Options{Experiments: []string{"forward"}, Workload: string(WorkloadLongTail), Scale: &Scale{Records: 400, ValueSize: 8, Workers: 1, Measure: time.Second, TxnRecords: 64}}
	o.EnsureDefaults()
	err = o.Validate()
	for _, want := range []string{`experiment "forward" runs on the real targets only`, "workload longtail: 400 records, want at least 20000"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("forward with longtail on the embedded target: %v, lacks %q", err, want)
		}
	}
	o = Options{BackendNice: 3, RTT: time.Millisecond}
	o.EnsureDefaults()
	err = o.Validate()
	for _, want := range []string{"backend nice: the real targets only", "rtt: the real targets only"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("backend nice and rtt on the embedded target: %v, lacks %q", err, want)
		}
	}
	o = Options{Target: TargetAzurite, AzuriteURL: "http://127.0.0.1:10002/devstoreaccount1", Experiments: []string{"servers"}, Nemo: "/no/such/nemo", BackendNice: -21}
	o.EnsureDefaults()
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "backend nice -21: want -20 to 19") {
		t.Errorf("backend nice -21: %v", err)
	}
	o = Options{Workload: string(WorkloadLongTail), Quick: true}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil || o.Scale.Records != LongTailRecords {
		t.Errorf("quick longtail: %v, %d records, want %d", err, o.Scale.Records, LongTailRecords)
	}
	if e, ok := lookup("negative-ranges"); !ok || e.name != "negative" || len(e.figures) != 1 || e.figures[0].name != "negative-ranges" {
		t.Errorf("lookup of a figure: %v %+v", ok, e)
	}
	o = Options{}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	var embedded []string
	for _, e := range experiments {
		if e.runsOn(false) {
			embedded = append(embedded, e.name)
		}
	}
	if !slices.Equal(o.Experiments, embedded) || o.Scale.Records != defaultScale.Records {
		t.Errorf("defaults: %v experiments (want %v), scale %+v", o.Experiments, embedded, *o.Scale)
	}
}
