package bench

import (
	"testing"

	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
)

// TestAzurite runs the point and range experiments through nemo's Azure
// Table frontend in front of Azurite, with the aztables SDK.
func TestAzurite(t *testing.T) {
	o := tinyOptions(t, "point", "range")
	o.Target, o.AzuriteURL = TargetAzurite, aztest.Azurite(t)
	checkRealTarget(t, o)
}

// TestEmulator runs them through nemo's Datastore frontend in front of the
// Datastore emulator, with the Go Datastore client.
func TestEmulator(t *testing.T) {
	o := tinyOptions(t, "point", "range")
	o.Target, o.EmulatorHost = TargetEmulator, dstest.Emulator(t)
	checkRealTarget(t, o)
}

// checkRealTarget runs o and checks that no buffer asks the store once
// per point read, nemo less than that, and less than the record cache
// for range reads.
func checkRealTarget(t *testing.T, o Options) {
	t.Helper()
	rep := runChecked(t, o)
	for _, r := range rep.Results {
		t.Logf("%s %s at %v: %.0f ops/s, %.3f remote/op, hit %.2f", r.Figure, label(r), r.X, r.Throughput(), r.RemotePerOp(), r.HitRatio())
		if r.Ops == 0 {
			t.Errorf("%s %s at %v: no operations", r.Figure, label(r), r.X)
		}
	}
	for _, x := range []float64{0.05, 0.2, 0.5} {
		none := find(t, rep.Results, "point", "none", "paper", x)
		nemo := find(t, rep.Results, "point", "nemo", "paper", x)
		if got := none.RemotePerOp(); got < 0.99 || got > 1.01 {
			t.Errorf("point, none at %v: %.3f remote/op, want 1", x, got)
		}
		if nemo.RemotePerOp() >= 0.9 {
			t.Errorf("point, nemo at %v: %.3f remote/op", x, nemo.RemotePerOp())
		}
	}
	// Scans of 64 of 400 records do not fit a buffer of 30%; 1 and 8 do.
	for _, x := range []float64{1, 8} {
		rec := find(t, rep.Results, "range", "record", "paper", x)
		nemo := find(t, rep.Results, "range", "nemo", "paper", x)
		if nemo.RemotePerOp() >= rec.RemotePerOp() {
			t.Errorf("range of %v: nemo %.3f remote/op, record %.3f", x, nemo.RemotePerOp(), rec.RemotePerOp())
		}
	}
}
