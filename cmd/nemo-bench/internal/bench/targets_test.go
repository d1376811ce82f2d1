package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
)

// TestMain lets this test binary serve as the bare proxy the forward
// experiment starts (it runs its own program again: RunChild).
func TestMain(m *testing.M) {
	RunChild()
	code := m.Run()
	if nemoDir != "" {
		os.RemoveAll(nemoDir)
	}
	os.Exit(code)
}

var (
	nemoOnce sync.Once
	nemoDir  string
	nemoBin  string
	nemoErr  error
)

// nemoBinary builds cmd/nemo once for the package's tests: the real
// targets run it as a process.
func nemoBinary(t *testing.T) string {
	t.Helper()
	nemoOnce.Do(func() {
		if nemoDir, nemoErr = os.MkdirTemp("", "nemo-bench-test-"); nemoErr != nil {
			return
		}
		nemoBin = filepath.Join(nemoDir, "nemo")
		if out, err := exec.Command("go", "build", "-o", nemoBin, "../../../nemo").CombinedOutput(); err != nil {
			nemoErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if nemoErr != nil {
		t.Fatalf("building nemo: %v", nemoErr)
	}
	return nemoBin
}

// The real targets' runs measure a time: a millisecond per store call
// would make 1,500 operations seconds long.
func azuriteOptions(t *testing.T, exps ...string) Options {
	o := tinyOptions(t, exps...)
	o.Scale.MeasureOps = 0
	o.Target, o.AzuriteURL, o.Nemo = TargetAzurite, aztest.Azurite(t), nemoBinary(t)
	return o
}

// privateAzuriteOptions is azuriteOptions in front of an Azurite of the
// test's own (aztest.Private): the partitioned replicas of the replicas
// experiments recover, at start, every commit log pending in their
// account, and in the shared one the cmd/nemo tests running at the same
// time leave their killed owners' logs (each test's replicas then own
// exactly the tables they wrote, and no other test's).
func privateAzuriteOptions(t *testing.T, exps ...string) Options {
	o := azuriteOptions(t, exps...)
	o.AzuriteURL = aztest.Private(t)
	return o
}

func emulatorOptions(t *testing.T, exps ...string) Options {
	o := tinyOptions(t, exps...)
	o.Scale.MeasureOps = 0
	o.Target, o.EmulatorHost, o.Nemo = TargetEmulator, dstest.Emulator(t), nemoBinary(t)
	return o
}

// TestAzurite runs the point and range experiments through a nemo
// process in front of Azurite, with the aztables SDK.
func TestAzurite(t *testing.T) {
	checkRealTarget(t, azuriteOptions(t, "point", "range"))
}

// TestEmulator runs them through a nemo process in front of the Datastore
// emulator, with the Go Datastore client.
func TestEmulator(t *testing.T) {
	checkRealTarget(t, emulatorOptions(t, "point", "range"))
}

// checkRealTarget runs o and checks that no buffer asks the store once
// per point read, nemo less than that, and less than the record cache
// for range reads; and that every run measured nemo's process and the
// backend's.
func checkRealTarget(t *testing.T, o Options) {
	t.Helper()
	rep := runChecked(t, o)
	for _, r := range rep.Results {
		t.Logf("%s %s at %v: %.0f ops/s, %.3f remote/op, hit %.2f, CPU %v", r.Figure, label(r), r.X, r.Throughput(), r.RemotePerOp(), r.HitRatio(), r.CPU)
		if r.Ops == 0 {
			t.Errorf("%s %s at %v: no operations", r.Figure, label(r), r.X)
		}
		checkProcs(t, r, "server", "backend", "client")
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

// checkProcs: the run measured a process of each role (its CPU time may
// round to zero in a tiny run: /proc counts 10 ms ticks), and they cannot
// have kept more cores busy than the machine has (a tick's rounding and
// the clients' goroutines finishing after the phase aside).
func checkProcs(t *testing.T, r Result, roles ...string) {
	t.Helper()
	for _, role := range roles {
		if _, ok := r.CPUPerOp(role); !ok {
			t.Errorf("%s %s at %v: no %s process measured (%v)", r.Figure, label(r), r.X, role, r.CPU)
		}
	}
	if c, ok := r.CoresBusy(); !ok || c > float64(runtime.NumCPU())*1.25+0.1 {
		t.Errorf("%s %s at %v: %.2f cores busy on %d (%v over %v)", r.Figure, label(r), r.X, c, runtime.NumCPU(), r.CPU, r.Elapsed)
	}
}

// TestForward runs the forward experiment in front of Azurite and the
// emulator, each point's series measured together in two slices: the
// bare proxy, nemo with policy none, and nemo in coherence shared
// (reading items in turn: every read a miss) each send one store request
// per client request, and nemo in front of Azurite at most one read of
// the table's catalog entry per slice besides (in coherence shared a
// table's handle lives 1s, and the other series run between slices).
func TestForward(t *testing.T) {
	for name, o := range map[string]Options{"azurite": azuriteOptions(t, "forward"), "emulator": emulatorOptions(t, "forward")} {
		t.Run(name, func(t *testing.T) {
			o.Scale.Slices = 2
			rep := runChecked(t, o)
			for _, x := range []float64{0, 1} {
				for _, s := range []string{"proxy", "none", "shared"} {
					r := find(t, rep.Results, "forward", s, "", x)
					t.Logf("%s %s: %.0f ops/s, %.3f remote/op, CPU %v", opName(x), s, r.Throughput(), r.RemotePerOp(), r.CPU)
					checkProcs(t, r, "server", "backend", "client")
					if r.Remote < uint64(r.Ops) || r.Remote > uint64(r.Ops)+uint64(o.Scale.Slices) {
						t.Errorf("%s %s: %d remote requests for %d operations in %d slices", opName(x), s, r.Remote, r.Ops, o.Scale.Slices)
					}
				}
			}
		})
	}
}

// TestServers runs the servers experiment in front of Azurite: point
// reads, negative lookups, ranges and YCSB-B through nemo in both modes,
// and straight to Azurite (one request per operation); nemo exclusive,
// whose buffer holds the table, asks the store less than once per read.
// Each run measures 400 operations: in 60 ms a loaded machine completed
// a few dozen, most of them the first lookups of their absent keys.
func TestServers(t *testing.T) {
	o := azuriteOptions(t, "servers")
	o.Scale.MeasureOps = 400
	rep := runChecked(t, o)
	for _, r := range rep.Results {
		t.Logf("%s %s at %v: %.0f ops/s, %.3f remote/op, hit %.2f, CPU %v", r.Figure, label(r), r.X, r.Throughput(), r.RemotePerOp(), r.HitRatio(), r.CPU)
		if r.Series == "direct" {
			checkProcs(t, r, "backend", "client")
			if got := r.RemotePerOp(); got < 0.99 || got > 1.01 {
				t.Errorf("%s direct at %v: %.3f remote/op, want 1", r.Figure, r.X, got)
			}
			continue
		}
		checkProcs(t, r, "server", "backend", "client")
	}
	for _, fig := range []string{"servers-point", "servers-negative"} {
		if r := find(t, rep.Results, fig, "exclusive", "paper", 0.99); r.RemotePerOp() >= 0.5 {
			t.Errorf("%s, exclusive at 0.99: %.3f remote/op, want most answered from the buffer", fig, r.RemotePerOp())
		}
	}
}

// TestReplicas runs the replicas experiment in front of Azurite behind a
// simulated round trip of 5 ms, at a tiny scale: three nemos in
// coherence shared and partitioned (each drained, exit 0, before the next
// series starts) and the clients straight to Azurite. Every direct read
// or write is one request and takes at least the round trip; the nemos'
// requests are summed over the three, whose processes are all measured;
// shared mode writes YCSB-A's updates through (at least one request per
// write).
func TestReplicas(t *testing.T) {
	const rtt = 5 * time.Millisecond
	o := privateAzuriteOptions(t, "replicas")
	o.RTT = rtt
	o.Scale.MeasureOps = 300
	rep := runChecked(t, o)
	for _, fig := range []string{"replicas-a", "replicas-b"} {
		for _, s := range []string{"direct", "shared", "partitioned"} {
			r := find(t, rep.Results, fig, s, "", 0.99)
			t.Logf("%s %s: %.0f ops/s, %.3f remote/op, p50 %v, p99 %v, CPU %v", fig, s, r.Throughput(), r.RemotePerOp(), r.P50, r.P99, r.CPU)
			if r.Ops < 300 || r.Aborts != 0 {
				t.Errorf("%s %s: %d operations, %d aborts", fig, s, r.Ops, r.Aborts)
			}
			if s == "direct" {
				checkProcs(t, r, "backend", "client")
				if got := r.RemotePerOp(); got < 0.99 || got > 1.01 {
					t.Errorf("%s direct: %.3f remote/op, want 1", fig, got)
				}
				if r.P50 < rtt {
					t.Errorf("%s direct: p50 %v, want at least the round trip %v", fig, r.P50, rtt)
				}
				continue
			}
			checkProcs(t, r, "server", "backend", "client")
			if n := countRole(r, "server"); n != 3 {
				t.Errorf("%s %s: %d nemo processes measured, want 3", fig, s, n)
			}
			if r.Remote == 0 || r.RemotePerOp() > 3 {
				t.Errorf("%s %s: %.3f remote/op", fig, s, r.RemotePerOp())
			}
			checkOwners(t, fig+" "+s, s == "partitioned", r)
		}
	}
	if r := find(t, rep.Results, "replicas-a", "shared", "", 0.99); r.RemotePerOp() < 0.35 {
		t.Errorf("replicas-a shared: %.3f remote/op, want every update written through (about half the operations)", r.RemotePerOp())
	}
}

func countRole(r Result, role string) int {
	n := 0
	for _, c := range r.CPU {
		if c.Role == role {
			n++
		}
	}
	return n
}

// TestReplicasBank runs the bank in front of Azurite and the emulator
// behind a 5 ms round trip, at a tiny scale: transfers commit through
// the clients straight to the backend and through three nemos in
// coherence shared and partitioned, some conflict and retry, audits run,
// and after each series (its nemos drained) the total in the backend is
// the bank's (runBank fails the series otherwise).
func TestReplicasBank(t *testing.T) {
	for name, o := range map[string]Options{"azurite": privateAzuriteOptions(t, "replicas-bank"), "emulator": emulatorOptions(t, "replicas-bank")} {
		t.Run(name, func(t *testing.T) {
			o.RTT = 5 * time.Millisecond
			o.Scale.Measure = 600 * time.Millisecond
			rep := runChecked(t, o)
			for _, s := range []string{"direct", "shared", "partitioned"} {
				r := find(t, rep.Results, "replicas-bank", s, "", bankAccounts)
				t.Logf("%s: %.0f transfers/s, %d aborts, %.3f remote/op, p50 %v, p99 %v, bank %+v, owners %d of %d", s, r.Throughput(), r.Aborts, r.RemotePerOp(), r.P50, r.P99, *r.Bank, r.Owners, r.Replicas)
				if r.Ops == 0 || r.Bank == nil || r.Bank.Total != bankAccounts*bankInitial || r.P99 < r.P50 {
					t.Errorf("%s: %d transfers, bank %+v, p50 %v, p99 %v", s, r.Ops, r.Bank, r.P50, r.P99)
				}
				if s == "direct" {
					checkProcs(t, r, "backend", "client")
					if got := r.RemotePerOp(); got < 2.9 {
						t.Errorf("direct: %.3f remote/op, want at least 3 (two reads and a commit per transfer)", got)
					}
					continue
				}
				if n := countRole(r, "server"); n != 3 {
					t.Errorf("%s: %d nemo processes measured, want 3", s, n)
				}
				checkOwners(t, s, s == "partitioned", r)
			}
		})
	}
}

// checkOwners checks the owners a replicas run reports: in partitioned
// mode (only) one replica holds the table's lease, and two thirds of the
// writes were forwarded to it (nemo_lease_held counts every keyspace: the
// backend must be the test's own, privateAzuriteOptions).
func checkOwners(t *testing.T, label string, partitioned bool, r Result) {
	t.Helper()
	share, ok := r.ForwardedShare()
	if partitioned != ok || ok && (r.Owners != 1 || share < 0.66 || share > 0.67) {
		t.Errorf("%s: %d owners of %d replicas, forwarded share %.2f (measured %v), want one owner and 2/3 forwarded in partitioned mode only",
			label, r.Owners, r.Replicas, share, ok)
	}
}

// TestReplicasTakeover runs one kill of the take-over experiment in front
// of Azurite and the emulator: the owner of the table killed with
// SIGKILL, a survivor takes the lease and writes through the two others
// are acknowledged again (within the run's minute), and no acknowledged
// write is missing from the backend (a lost one fails the run).
func TestReplicasTakeover(t *testing.T) {
	for name, o := range map[string]Options{"azurite": privateAzuriteOptions(t, "replicas-takeover"), "emulator": emulatorOptions(t, "replicas-takeover")} {
		t.Run(name, func(t *testing.T) {
			rep := runChecked(t, o)
			if len(rep.Results) != 1 {
				t.Fatalf("%d results, want one kill", len(rep.Results))
			}
			r := rep.Results[0]
			tk := r.Takeover
			if tk == nil {
				t.Fatal("no take-over measured")
			}
			t.Logf("%+v; %d writes, %.0f/s, p50 %v, p99 %v", *tk, r.Ops, r.Throughput(), r.P50, r.P99)
			if tk.LeaseTaken <= 0 || tk.FirstOK <= 0 || tk.FirstOK > takeoverGiveUp || tk.Lost != 0 || tk.Keys == 0 || tk.NewOwners != 1 || tk.P99After < tk.P50After {
				t.Errorf("take-over: %+v", *tk)
			}
			md, err := os.ReadFile(filepath.Join(o.Out, "replicas-takeover.md"))
			if err != nil || !strings.Contains(string(md), "| kill | lease TTL |") {
				t.Errorf("replicas-takeover.md: %v\n%s", err, md)
			}
		})
	}
}

// TestWriteback runs the write-back soak for a few seconds in front of
// Azurite at parallelism 1 and 8: writes and reads were acknowledged,
// write-back calls were made (their records may still be in flight when
// the phase ends: the drain settles them), the gauges were sampled (in
// flight at most the parallelism), and no key in the backend differs from
// its last acknowledged write (a lost one fails the run).
func TestWriteback(t *testing.T) {
	o := azuriteOptions(t, "writeback")
	o.Scale.Records, o.Scale.Measure = 2000, 7*time.Second
	rep := runChecked(t, o)
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want parallelism 1 and 8", len(rep.Results))
	}
	for _, r := range rep.Results {
		w := r.Writeback
		if w == nil {
			t.Fatalf("parallelism %v: nothing measured", r.X)
		}
		t.Logf("parallelism %v: %+v", r.X, *w)
		if w.Writes == 0 || w.Reads == 0 || w.Calls == 0 || w.Keys == 0 || w.Lost != 0 ||
			w.InFlightMax < 0 || w.InFlightMax > r.X || w.DirtyMax <= 0 || w.WriteP99 < w.WriteP50 {
			t.Errorf("parallelism %v: %+v", r.X, *w)
		}
	}
	md, err := os.ReadFile(filepath.Join(o.Out, "writeback.md"))
	if err != nil || !strings.Contains(string(md), "| parallelism | writes/s |") {
		t.Errorf("writeback.md: %v\n%s", err, md)
	}
}
