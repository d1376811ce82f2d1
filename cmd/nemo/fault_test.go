package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
)

var bothPorts = []string{"--listen-azure-table", "127.0.0.1:0", "--listen-datastore", "127.0.0.1:0"}

type faultEntity struct{ N int }

// healthyFor is how long after startup the fault tests' backends work,
// before their scheduled outage begins: long enough to create a table and
// register a namespace, whose catalog reads need the store.
const healthyFor = 2 * time.Second

// untilOutage polls probe until it reports the outage has begun.
func untilOutage(t *testing.T, probe func() bool) {
	t.Helper()
	if !eventually(healthyFor+10*time.Second, probe) {
		t.Fatal("the scheduled outage never began")
	}
}

// TestBinaryFaultErrors is issue 13 point 7: backend.fault set in the
// environment (an outage from 2s after startup, failing with "unavailable",
// every call 20ms slower) makes backend calls fail; the real clients see
// the protocol's own errors (Azure 503 ServerBusy, Datastore UNAVAILABLE)
// for calls that must reach the store, while writes that need no read (an
// Azure InsertOrReplace, a Datastore upsert of a buffered entity) are
// acknowledged into the WAL and served from the buffer, and
// nemo_cache_flush_lag_seconds
// grows with the failing write-back. Restarted without faults, nemo has
// every acknowledged write.
func TestBinaryFaultErrors(t *testing.T) {
	dataDir := t.TempDir()
	p := startBare(t, dataDir, bothPorts,
		"NEMO_BACKEND_FAULT_ENABLED=true", "NEMO_BACKEND_FAULT_OUTAGE_SCHEDULE="+healthyFor.String()+"+1h",
		"NEMO_BACKEND_FAULT_LATENCY=20ms", "NEMO_CACHE_MAX_DIRTY_AGE=50ms", "NEMO_CACHE_FLUSH_INTERVAL=50ms",
		"NEMO_LISTEN_SHUTDOWN_GRACE=3s")
	p.waitReady(t)
	ctx := context.Background()
	addrs := readyAddrs(t, p)
	svc := azNemoService(t, p)
	ds := dsClient(t, "faults", addrs["datastore"])

	// Healthy: a table, and a first entity of the Datastore namespace.
	if _, err := svc.CreateTable(ctx, "faults", nil); err != nil {
		t.Fatalf("create table: %v", err)
	}
	tc := svc.NewClient("faults")
	if _, err := ds.Put(ctx, datastore.NameKey("K", "first", nil), &faultEntity{N: 1}); err != nil {
		t.Fatalf("datastore put before the outage: %v", err)
	}
	start := time.Now()
	if _, err := tc.GetEntity(ctx, "p", "absent0", nil); err == nil {
		t.Fatal("absent entity found")
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Errorf("a get that reached the store took %v, less than the injected 20ms latency", d)
	}

	var n int
	untilOutage(t, func() bool {
		n++
		_, err := tc.GetEntity(ctx, "p", fmt.Sprintf("absent%d", n), nil)
		st, code := aztest.Status(err)
		if st == http.StatusNotFound {
			return false
		}
		if st != http.StatusServiceUnavailable || code != "ServerBusy" {
			t.Fatalf("get of an uncached entity: %d %s (%v), want 404, or 503 ServerBusy in the outage", st, code, err)
		}
		return true
	})
	_, err := tc.GetEntity(ctx, "p", "absent", nil)
	if st, code := aztest.Status(err); st != http.StatusServiceUnavailable || code != "ServerBusy" {
		t.Fatalf("get of an uncached entity: %d %s (%v), want 503 ServerBusy", st, code, err)
	}
	e, _ := json.Marshal(map[string]any{"PartitionKey": "p", "RowKey": "r", "N": 1})
	if _, err := tc.UpsertEntity(ctx, e, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}); err != nil {
		t.Fatalf("blind upsert during the outage: %v", err)
	}
	written := time.Now()
	if _, err := tc.GetEntity(ctx, "p", "r", nil); err != nil {
		t.Fatalf("get of the buffered entity: %v", err)
	}

	var fe faultEntity
	err = ds.Get(ctx, datastore.NameKey("K", "absent", nil), &fe)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("datastore get of an uncached entity: %v, want UNAVAILABLE", err)
	}
	// A Datastore upsert is blind (it reads nothing): of an uncached
	// entity it is acknowledged during the outage too, as of a buffered
	// one; an insert must read, and fails.
	if _, err := ds.Put(ctx, datastore.NameKey("K", "b", nil), &faultEntity{N: 2}); err != nil {
		t.Fatalf("datastore put of an uncached entity during the outage: %v, want it buffered", err)
	}
	if _, err := ds.Mutate(ctx, datastore.NewInsert(datastore.NameKey("K", "c", nil), &faultEntity{N: 3})); status.Code(errors.Unwrap(err)) != codes.Unavailable && status.Code(err) != codes.Unavailable {
		t.Fatalf("datastore insert of an uncached entity during the outage: %v, want UNAVAILABLE", err)
	}
	if _, err := ds.Put(ctx, datastore.NameKey("K", "first", nil), &faultEntity{N: 2}); err != nil {
		t.Fatalf("datastore put of a buffered entity during the outage: %v", err)
	}
	if err := ds.Get(ctx, datastore.NameKey("K", "first", nil), &fe); err != nil || fe.N != 2 {
		t.Fatalf("datastore get of the buffered entity: %+v %v", fe, err)
	}

	// Write-back fails against the outage, and the writes stay dirty.
	p.waitMetric(t, "nemo_cache_writeback_errors_total", func(n float64) bool { return n > 0 })
	if want, lag := time.Since(written).Seconds(), p.metric(t, "nemo_cache_flush_lag_seconds"); lag < want {
		t.Errorf("nemo_cache_flush_lag_seconds %v during the outage, want at least %v", lag, want)
	}
	if d := p.metric(t, "nemo_cache_dirty_bytes"); d == 0 {
		t.Error("no dirty bytes during the outage")
	}
	// The drain cannot write back: it fails within the grace, and the WAL
	// keeps the writes.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.waitExit(t); code == 0 {
		t.Error("drain over a failing backend exited 0")
	}

	p = startBare(t, dataDir, bothPorts)
	p.waitReady(t)
	addrs = readyAddrs(t, p)
	if _, err := azNemoService(t, p).NewClient("faults").GetEntity(ctx, "p", "r", nil); err != nil {
		t.Errorf("acknowledged Azure write after the restart: %v", err)
	}
	if err := dsClient(t, "faults", addrs["datastore"]).Get(ctx, datastore.NameKey("K", "first", nil), &fe); err != nil || fe.N != 2 {
		t.Errorf("acknowledged Datastore write after the restart: %+v %v", fe, err)
	}
	drain(t, p)
	assertStoreHas(t, dataDir, "faults", 1)
}

// assertStoreHas checks that the embedded store in dataDir holds n records
// in keyspace ks.
func assertStoreHas(t *testing.T, dataDir, ks string, n int) {
	t.Helper()
	s := openStore(t, dataDir)
	recs, _, err := s.GetRange(context.Background(), adapters.Keyspace(ks), nil, nil, 0)
	if err != nil || len(recs) != n {
		t.Errorf("store keyspace %s: %d records, %v; want %d", ks, len(recs), err, n)
	}
}

// TestBinaryFaultOutages: periodic outages over the real cloud backends
// (Azurite, the Datastore emulator), failing with timeouts: the clients see
// Azure 500 OperationTimedOut and Datastore DEADLINE_EXCEEDED during the
// outages and the store's own answers between them.
func TestBinaryFaultOutages(t *testing.T) {
	faults := []string{"NEMO_BACKEND_FAULT_ENABLED=true", "NEMO_BACKEND_FAULT_OUTAGE_EVERY=600ms",
		"NEMO_BACKEND_FAULT_OUTAGE_FOR=300ms", "NEMO_BACKEND_FAULT_ERROR=timeout"}
	// seen polls probe until it has answered both ways.
	seen := func(t *testing.T, probe func() (healthy, outage bool, other error)) {
		t.Helper()
		var up, down int
		for deadline := time.Now().Add(20 * time.Second); up == 0 || down == 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("in 20s: %d healthy answers, %d outage answers", up, down)
			}
			healthy, outage, err := probe()
			switch {
			case healthy:
				up++
			case outage:
				down++
			default:
				t.Fatalf("neither the store's answer nor the outage's: %v", err)
			}
		}
	}
	t.Run("azure", func(t *testing.T) {
		conn, _, name := azuriteTable(t, "fault")
		p := startBare(t, t.TempDir(), []string{"--listen-azure-table", "127.0.0.1:0"},
			append(faults, "NEMO_BACKEND_TYPE=aztable", "NEMO_BACKEND_AZTABLE_CONNECTION_STRING="+conn)...)
		p.waitReady(t)
		tc := azNemoService(t, p).NewClient(name)
		seen(t, func() (bool, bool, error) {
			_, err := tc.GetEntity(context.Background(), "p", "absent", nil)
			st, code := aztest.Status(err)
			return st == http.StatusNotFound && code == "ResourceNotFound",
				st == http.StatusInternalServerError && code == "OperationTimedOut", err
		})
		drain(t, p)
	})
	t.Run("datastore", func(t *testing.T) {
		emu := dstest.Emulator(t)
		project := dstest.Project(t)
		p := startBare(t, t.TempDir(), []string{"--listen-datastore", "127.0.0.1:0"},
			append(faults, "NEMO_BACKEND_TYPE=datastore", "NEMO_BACKEND_DATASTORE_PROJECT="+project,
				"NEMO_BACKEND_DATASTORE_EMULATOR_HOST="+emu)...)
		p.waitReady(t)
		c := dsClient(t, project, readyAddrs(t, p)["datastore"])
		seen(t, func() (bool, bool, error) {
			var fe faultEntity
			err := c.Get(context.Background(), datastore.NameKey("K", "absent", nil), &fe)
			return errors.Is(err, datastore.ErrNoSuchEntity), status.Code(err) == codes.DeadlineExceeded, err
		})
		drain(t, p)
	})
}

// TestBinaryFaultHung: with a hanging outage (from 2s after startup) every
// call that needs the store blocks until just before the client would give
// up (nemo answers at the client's deadline less its margin), nemo stays
// live, and its drain ends within listen.shutdown_grace although
// write-back hangs too.
func TestBinaryFaultHung(t *testing.T) {
	p := startBare(t, t.TempDir(), bothPorts, "NEMO_BACKEND_FAULT_ENABLED=true",
		"NEMO_BACKEND_FAULT_OUTAGE_SCHEDULE="+healthyFor.String()+"+1h", "NEMO_BACKEND_FAULT_OUTAGE_MODE=hang",
		"NEMO_CACHE_MAX_DIRTY_AGE=50ms", "NEMO_CACHE_FLUSH_INTERVAL=50ms", "NEMO_LISTEN_SHUTDOWN_GRACE=2s")
	p.waitReady(t)
	ds := dsClient(t, "hung", readyAddrs(t, p)["datastore"])
	if _, err := ds.Put(context.Background(), datastore.NameKey("K", "first", nil), &faultEntity{N: 1}); err != nil {
		t.Fatalf("put before the outage: %v", err)
	}
	get := func(name string) (time.Duration, error) {
		// Timed from before the deadline is set, so that an answer at the
		// deadline counts its whole 300 ms.
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		var fe faultEntity
		err := ds.Get(ctx, datastore.NameKey("K", name, nil), &fe)
		return time.Since(start), err
	}
	n := 0
	untilOutage(t, func() bool {
		n++
		_, err := get(fmt.Sprintf("absent%d", n))
		if errors.Is(err, datastore.ErrNoSuchEntity) {
			return false
		}
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("get: %v, want not found, or the client's deadline once the backend hangs", err)
		}
		return true
	})
	// nemo answers at the client's deadline less what it keeps to answer
	// in (a fifth of the 300 ms), so the answer is its own, not the
	// client's giving up.
	if took, err := get("absent"); status.Code(err) != codes.DeadlineExceeded || took < 240*time.Millisecond || took > time.Second {
		t.Fatalf("get from a hung backend: %v after %v, want DEADLINE_EXCEEDED from nemo at 240 ms, a fifth before the client's deadline", err, took)
	}
	// A write of a buffered entity is acknowledged; its write-back hangs.
	if _, err := ds.Put(context.Background(), datastore.NameKey("K", "first", nil), &faultEntity{N: 2}); err != nil {
		t.Fatalf("put: %v", err)
	}
	// It is due after 50 ms: the flush lag passes 150 ms while its
	// write-back hangs, and nemo stays live.
	p.waitMetric(t, "nemo_cache_flush_lag_seconds", func(lag float64) bool { return lag >= 0.15 })
	if code, body := p.get("/livez"); code != http.StatusOK {
		t.Fatalf("/livez with a hung backend: %d %s", code, body)
	}
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.waitExit(t); code == 0 {
		t.Error("drain over a hung backend exited 0")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("shutdown over a hung backend took %v with a 2s grace", d)
	}
}
