package bench

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tinyScale runs an experiment in well under a second per run.
var tinyScale = Scale{Records: 400, ValueSize: 256, Workers: 4, Measure: 60 * time.Millisecond, WarmOps: 2000, TxnRecords: 512, Short: true}

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

// TestPoint: with no buffer every point read is one remote request; a
// buffer takes fewer, nemo no more than the record cache, and the
// buffered policies hit.
func TestPoint(t *testing.T) {
	o := tinyOptions(t, "point")
	rep, err := Run(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, o, rep)
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
		if nemo.RemotePerOp() > rec.RemotePerOp()*1.1+0.02 {
			t.Errorf("nemo at %v: %.3f remote/op, record %.3f", x, nemo.RemotePerOp(), rec.RemotePerOp())
		}
		if nemo.RemotePerOp() >= 0.9 || nemo.HitRatio() <= 0.1 {
			t.Errorf("nemo at %v: %.3f remote/op, hit ratio %.2f: the buffer is not used", x, nemo.RemotePerOp(), nemo.HitRatio())
		}
	}
}
