package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/testenv"
	"github.com/nemocache/nemo/txn"
)

// TestFaultBackend: backend.fault wraps the configured backend, under the
// counters; the engine's reads fail with the configured error; frontends
// still find the backend itself for dialect operations.
func TestFaultBackend(t *testing.T) {
	for _, tc := range []struct {
		kind config.FaultError
		want error
	}{
		{config.FaultUnavailable, adapters.ErrUnavailable},
		{config.FaultTimeout, context.DeadlineExceeded},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Backend.Fault = config.FaultBackend{Enabled: true, Seed: 7, ErrorRate: 1, Error: tc.kind, OutageMode: config.OutageFail}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			n, err := Open(cfg, quiet)
			if err != nil {
				t.Fatal(err)
			}
			checkAtStop(t, n)
			if _, ok := n.Store.Unwrap().(*fault.Store); !ok || n.faults == nil {
				t.Fatalf("counted store wraps %T, want *fault.Store", n.Store.Unwrap())
			}
			if _, ok := n.Backend.(*embedded.Store); !ok {
				t.Fatalf("Backend is %T, want the embedded store itself", n.Backend)
			}
			n.Buffer.OpenKeyspace("t")
			_, _, err = n.Engine.Get(context.Background(), "t", []byte("k"), txn.ReadLatest)
			if !errors.Is(err, tc.want) || !errors.Is(err, fault.ErrInjected) {
				t.Fatalf("Get through a failing backend: %v, want %v", err, tc.want)
			}
			if st := n.Store.Stats()[adapters.OpGet]; st.Errors == 0 {
				t.Errorf("injected failures not counted: %+v", st)
			}
			n.faults.SetConfig(fault.Config{}) // healthy again, for the check at stop
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestFaultOptions(t *testing.T) {
	cfg := config.Defaults()
	cfg.Backend.Fault = config.FaultBackend{Enabled: true, Seed: 3, Latency: 20 * time.Millisecond, Jitter: 5 * time.Millisecond,
		ErrorRate: 0.1, Error: config.FaultTimeout, OutageEvery: time.Minute, OutageFor: 10 * time.Second,
		OutageSchedule: "30s+5s", OutageMode: config.OutageHang, Hung: true}
	f := FaultOptions(cfg)
	if f.Seed != 3 || f.Default.Latency != 20*time.Millisecond || f.Default.Jitter != 5*time.Millisecond ||
		f.Default.ErrorRate != 0.1 || f.Default.Error != fault.Timeout || !f.Hung {
		t.Errorf("fault plan %+v", f)
	}
	o := f.Outages
	if o.Every != time.Minute || o.For != 10*time.Second || !o.Hang || o.Error != fault.Timeout ||
		len(o.Windows) != 1 || o.Windows[0] != (fault.Window{Start: 30 * time.Second, Duration: 5 * time.Second}) {
		t.Errorf("outages %+v", o)
	}
	cfg.Backend.Fault.Seed = 0
	if FaultOptions(cfg).Seed == 0 {
		t.Error("seed 0 was not replaced")
	}
}

// TestHungBackendDrainEnds: with a hung backend, the drain ends at its
// deadline although the background write-back hangs in a call with none;
// the write stays in the WAL and reaches the store at the next drain.
func TestHungBackendDrainEnds(t *testing.T) {
	cfg := testConfig(t)
	cfg.Cache.MaxDirtyAge = time.Millisecond
	cfg.Cache.FlushInterval = time.Millisecond
	cfg.Backend.Fault = config.FaultBackend{Enabled: true, Hung: true, Error: config.FaultUnavailable, OutageMode: config.OutageFail}
	n, err := Open(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	n.Buffer.OpenKeyspace("t")
	if err := n.Engine.Upsert(context.Background(), "t", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	testenv.WaitFor(t, 10*time.Second, "the flusher to hang in the store", func() bool { return n.faults.Hanging() > 0 })
	if want, lag := time.Since(written), n.Buffer.Stats().FlushLag; lag < want {
		t.Errorf("FlushLag %v while the write-back hangs, want at least %v", lag, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := n.Drain(ctx); err == nil {
		t.Fatal("drain over a hung backend succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("drain took %v with a 200ms deadline", d)
	}
	if v := storeValue(t, cfg.Backend.Embedded.DataDir, "k"); v != nil {
		t.Fatalf("store holds %q; the hung backend took nothing", v)
	}

	cfg.Backend.Fault = config.Defaults().Backend.Fault
	n, err = Open(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	checkAtStop(t, n)
	if err := n.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := storeValue(t, cfg.Backend.Embedded.DataDir, "k"); string(v) != "v" {
		t.Fatalf("store holds %q after the healthy drain", v)
	}
}
