package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/adapters/storetest"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/txn"
)

var quiet = slog.New(slog.DiscardHandler)

func testConfig(t testing.TB) config.Config {
	cfg := config.Defaults()
	// Free ports, not the emulators' defaults: CI runs the Datastore
	// emulator on 8081, nemo's default listen.datastore, and Validate
	// refuses a backend that is nemo's own listener.
	cfg.Listen.AzureTable, cfg.Listen.Datastore = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Backend.Embedded.DataDir = t.TempDir()
	cfg.Cache.MaxDirtyAge = time.Hour
	cfg.WAL.CheckpointInterval = time.Hour
	return cfg
}

// checkAtStop makes n check its buffer's invariants against the store when
// it stops (Drain or Close): after the engine and the buffer have stopped,
// before the store closes. The check is skipped once the test has failed.
func checkAtStop(t testing.TB, n *Node) {
	t.Helper()
	closeStore := n.closeStore
	n.closeStore = func() error {
		if !t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := n.Buffer.Check(ctx); err != nil {
				t.Errorf("buffer invariants when the node stops: %v", err)
			}
		}
		return closeStore()
	}
}

func storeValue(t *testing.T, dir, key string) []byte {
	t.Helper()
	s, err := embedded.Open(dir, embedded.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v, err := storetest.Values(s.Get(context.Background(), "t", [][]byte{[]byte(key)}))
	if err != nil {
		t.Fatal(err)
	}
	return v[0]
}

func TestDrainPutsCommittedWritesInTheStore(t *testing.T) {
	cfg := testConfig(t)
	n, err := Open(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	checkAtStop(t, n)
	n.Buffer.OpenKeyspace("t")
	if err := n.Engine.Upsert(context.Background(), "t", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if n.Buffer.Stats().DirtyBytes == 0 {
		t.Fatal("write not dirty: the test proves nothing")
	}
	if st := n.Store.Stats(); st[adapters.OpUpsert].Requests != 0 {
		t.Fatalf("store written before the drain: %+v", st)
	}
	if err := n.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := n.Drain(context.Background()); err != nil {
		t.Errorf("second Drain: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Errorf("Close after Drain: %v", err)
	}
	if _, err := n.Engine.Begin(false); !errors.Is(err, txn.ErrClosed) {
		t.Errorf("Begin after Drain = %v, want ErrClosed", err)
	}
	if v := storeValue(t, cfg.Backend.Embedded.DataDir, "k"); string(v) != "v" {
		t.Errorf("store holds %q after drain", v)
	}
}

// TestCloseLeavesWritesInTheWAL: Close does not flush, the next Open replays
// the WAL (before it returns) and a drain then completes the job.
func TestCloseLeavesWritesInTheWAL(t *testing.T) {
	cfg := testConfig(t)
	n, err := Open(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	checkAtStop(t, n)
	n.Buffer.OpenKeyspace("t")
	if err := n.Engine.Upsert(context.Background(), "t", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if v := storeValue(t, cfg.Backend.Embedded.DataDir, "k"); v != nil {
		t.Fatalf("Close flushed %q; it should leave the write to the WAL", v)
	}
	n, err = Open(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	checkAtStop(t, n)
	if n.Buffer.Stats().DirtyBytes == 0 {
		t.Error("reopen did not replay the WAL into the buffer")
	}
	v, ok, err := n.Engine.Get(context.Background(), "t", []byte("k"), txn.ReadLatest)
	if err != nil || !ok || string(v) != "v" {
		t.Errorf("after replay Get = %q %v %v", v, ok, err)
	}
	if err := n.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := storeValue(t, cfg.Backend.Embedded.DataDir, "k"); string(v) != "v" {
		t.Errorf("store holds %q after drain", v)
	}
}

func TestOpenErrors(t *testing.T) {
	cfg := testConfig(t)
	cfg.Backend.Type = config.BackendAzTable // with no account, key or connection string
	if _, err := Open(cfg, quiet); !errors.Is(err, adapters.ErrInvalid) {
		t.Errorf("aztable backend without credentials: %v, want adapters.ErrInvalid", err)
	}
	cfg.Backend.Type = "tape"
	if _, err := Open(cfg, quiet); !errors.Is(err, ErrBackendUnavailable) {
		t.Errorf("unknown backend: %v, want ErrBackendUnavailable", err)
	}
	// A data dir already in use fails (and does not hang).
	cfg = testConfig(t)
	n, err := Open(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	checkAtStop(t, n)
	defer n.Close()
	if _, err := Open(cfg, quiet); err == nil {
		t.Error("second Open of the same data dir succeeded")
	}
	// An engine that cannot start releases the store.
	cfg = testConfig(t)
	cfg.Txn.Phantom = "bogus"
	if _, err := Open(cfg, quiet); err == nil {
		t.Fatal("Open with an invalid phantom strategy succeeded")
	}
	s, err := embedded.Open(cfg.Backend.Embedded.DataDir, embedded.Options{Logger: quiet})
	if err != nil {
		t.Fatalf("store left locked after a failed Open: %v", err)
	}
	s.Close()
}

func TestOptionsMapping(t *testing.T) {
	cfg := config.Defaults()
	cfg.Backend.Embedded.DataDir = "/data"
	cfg.Cache.MaxBytes = 3 * config.MiB
	cfg.Cache.RecordOverheadBytes = 48
	cfg.Cache.MaxKeyBytes = 2 * config.KiB
	cfg.Txn.Phantom = txn.PCL
	cfg.Txn.PCLPartitions = 512
	cfg.WAL.SegmentSize = 8 * config.MiB
	cfg.WAL.CheckpointInterval = 7 * time.Second
	cfg.WAL.CheckpointBytes = 3 * config.MiB
	cfg.Coherence.MaxStaleness = 1500 * time.Millisecond

	c := CacheOptions(cfg, quiet)
	if c.Policy != cache.PolicyNemo || c.MaxBytes != 3<<20 || c.RecordOverhead != 48 || c.MaxKeyBytes != 2048 ||
		c.MaxValueBytes != 768<<10 || c.MaxDirtyBytes != 768<<10 || c.MaxDirtyAge != 5*time.Second || c.EvictBatch != 64 || c.MaxStaleness != 1500*time.Millisecond {
		t.Errorf("cache options = %+v", c)
	}
	o := TxnOptions(cfg, quiet)
	if o.Phantom != txn.PCL || o.PCLPartitionSize != txn.PartitionSize(512) || o.Mode != txn.WriteBack || o.CheckpointInterval != 7*time.Second ||
		o.CheckpointBytes != 3<<20 {
		t.Errorf("txn options = %+v", o)
	}
	if o.WAL == nil || o.WAL.Dir != "/data/wal" || o.WAL.SegmentSize != 8<<20 || o.WAL.NoGroupCommit {
		t.Errorf("wal options = %+v", o.WAL)
	}
	if o.LockWait != 5*time.Second || o.SnapshotBytes != 64<<20 {
		t.Errorf("lock wait %v, snapshot bytes %d: want the defaults", o.LockWait, o.SnapshotBytes)
	}
	noWait := cfg
	noWait.Txn.LockWait = 0
	if o := TxnOptions(noWait, quiet); o.LockWait >= 0 {
		t.Errorf("txn.lock_wait 0 gives the engine LockWait %v; want NO_WAIT (negative)", o.LockWait)
	}

	early := cfg
	early.Txn.EarlyRelease = true
	if o := TxnOptions(early, quiet); !o.EarlyRelease || o.Validate() != nil {
		t.Errorf("txn.early_release: engine EarlyRelease %v, options %v", o.EarlyRelease, o.Validate())
	}
	for _, mod := range []func(*config.Config){
		func(c *config.Config) { c.WAL.WriteMode = txn.WriteThrough },
		func(c *config.Config) { c.Cache.Policy = cache.PolicyNone },
	} {
		c := early // early release has no log to release before here
		mod(&c)
		if o := TxnOptions(c, quiet); o.Mode != txn.WriteThrough || o.WAL != nil || o.EarlyRelease || o.Validate() != nil {
			t.Errorf("write-through options = mode %q wal %+v early %v: %v", o.Mode, o.WAL, o.EarlyRelease, o.Validate())
		}
	}
}

// TestCoherenceModes checks the mode each backend gets by default and what
// each mode sets in the buffer and the engine.
func TestCoherenceModes(t *testing.T) {
	for _, tc := range []struct {
		backend   config.BackendType
		mode      txn.Coherence // configured
		want      txn.Coherence
		staleness time.Duration // configured
		wantStale time.Duration
	}{
		{config.BackendEmbedded, "", txn.Exclusive, 0, 0},
		{config.BackendAzTable, "", txn.Shared, 0, time.Second},
		{config.BackendDatastore, "", txn.Shared, 250 * time.Millisecond, 250 * time.Millisecond},
		{config.BackendAzTable, txn.Exclusive, txn.Exclusive, 0, 0},
		{config.BackendEmbedded, txn.Shared, txn.Shared, 0, time.Second},
	} {
		cfg := config.Defaults()
		cfg.Backend.Type, cfg.Coherence.Mode, cfg.Coherence.MaxStaleness = tc.backend, tc.mode, tc.staleness
		if got := cfg.CoherenceMode(); got != tc.want {
			t.Errorf("%s with mode %q: effective mode %s, want %s", tc.backend, tc.mode, got, tc.want)
		}
		c, o := CacheOptions(cfg, quiet), TxnOptions(cfg, quiet)
		shared := tc.want == txn.Shared
		if c.FreshLocks != shared || c.MaxStaleness != tc.wantStale {
			t.Errorf("%s/%s: cache FreshLocks %v MaxStaleness %v", tc.backend, tc.want, c.FreshLocks, c.MaxStaleness)
		}
		if shared && (o.Mode != txn.WriteThrough || o.Coherence != txn.Shared || o.WAL != nil || o.RetryWait != SharedRetryWait) {
			t.Errorf("%s/shared: txn options mode %q coherence %q wal %v", tc.backend, o.Mode, o.Coherence, o.WAL)
		}
		if !shared && (o.Mode != txn.WriteBack || o.WAL == nil) {
			t.Errorf("%s/exclusive: txn options mode %q wal %v", tc.backend, o.Mode, o.WAL)
		}
	}
}

// TestModeChangeFlushesAPendingWAL: a data directory whose WAL holds
// acknowledged writes (left by mode exclusive with write-back, stopped
// without a flush, as an exit with status 3 leaves it) starting with a
// configuration that keeps no WAL (coherence shared, write mode through,
// cache policy none) writes them to the store first; the log is then
// empty. With the store down it refuses to start, saying how to drain the
// log, and keeps it.
func TestModeChangeFlushesAPendingWAL(t *testing.T) {
	ctx := context.Background()
	pending := func(t *testing.T, cfg config.Config) {
		t.Helper()
		n, err := Open(cfg, quiet)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if err := n.Engine.Upsert(ctx, "t", fmt.Appendf(nil, "k%02d", i), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		if err := n.Close(); err != nil { // no flush: the writes are only in the WAL
			t.Fatal(err)
		}
		if p, err := pendingWAL(cfg, quiet); err != nil || p != 5 {
			t.Fatalf("pending transactions %d %v, want 5", p, err)
		}
	}
	for _, tc := range []struct {
		name string
		set  func(*config.Config)
	}{
		{"coherence shared", func(c *config.Config) { c.Coherence.Mode = txn.Shared }},
		{"write mode through", func(c *config.Config) { c.WAL.WriteMode = txn.WriteThrough }},
		{"cache policy none", func(c *config.Config) { c.Cache.Policy = cache.PolicyNone }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			pending(t, cfg)
			other := cfg
			tc.set(&other)
			n, err := Open(other, quiet)
			if err != nil {
				t.Fatalf("start over a pending WAL: %v", err)
			}
			if p, err := pendingWAL(other, quiet); err != nil || p != 0 {
				t.Fatalf("after the start the WAL holds %d transactions (%v), want 0", p, err)
			}
			recs, _, err := n.Backend.GetRange(ctx, "t", nil, nil, 0)
			if err != nil || len(recs) != 5 {
				t.Fatalf("the store holds %d records (%v), want the WAL's 5", len(recs), err)
			}
			if err := n.Drain(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("store down", func(t *testing.T) {
		cfg := testConfig(t)
		pending(t, cfg)
		cfg.Coherence.Mode = txn.Shared
		cfg.Listen.ShutdownGrace = 300 * time.Millisecond
		st, err := embedded.Open(cfg.Backend.Embedded.DataDir, embedded.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		down := fault.New(st, fault.Config{Seed: 1, Default: fault.OpConfig{ErrorRate: 1}})
		_, err = New(down, nil, cfg, quiet)
		if !errors.Is(err, ErrPendingWAL) || !strings.Contains(err.Error(), "wal.write_mode back") {
			t.Fatalf("start in mode shared over a pending WAL with the store down: %v, want ErrPendingWAL saying how to drain it", err)
		}
		if p, err := pendingWAL(cfg, quiet); err != nil || p != 5 {
			t.Fatalf("after the refusal the WAL holds %d transactions (%v), want 5", p, err)
		}
	})
}

func TestWriteThroughNeedsNoWAL(t *testing.T) {
	cfg := testConfig(t)
	cfg.WAL.WriteMode = txn.WriteThrough
	n, err := Open(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	checkAtStop(t, n)
	if _, ok := n.Engine.WALStats(); ok {
		t.Error("write-through engine has a WAL")
	}
	n.Buffer.OpenKeyspace("t")
	if err := n.Engine.Upsert(context.Background(), "t", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if v := storeValue(t, cfg.Backend.Embedded.DataDir, "k"); string(v) != "v" {
		t.Errorf("write-through: store holds %q", v)
	}
}

// TestWriteBackConflictIsRecorded: a write nemo acknowledged that loses to
// a change made behind its back is counted and appended, in full, to the
// conflicts file in the data directory; the other writer's change stands.
func TestWriteBackConflictIsRecorded(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t)
	st, err := embedded.Open(cfg.Backend.Embedded.DataDir, embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(st, st.Close, cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	checkAtStop(t, n)
	if err := n.Engine.Upsert(ctx, "t", []byte("k"), []byte("mine-1")); err != nil {
		t.Fatal(err)
	}
	if err := n.Engine.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Another writer changes k in the store; nemo still holds mine-1.
	if _, err := st.Upsert(ctx, "t", []adapters.Write{{Key: []byte("k"), Value: []byte("theirs")}}); err != nil {
		t.Fatal(err)
	}
	if err := n.Engine.Update(ctx, "t", []byte("k"), []byte("mine-2")); err != nil {
		t.Fatal(err)
	}
	if err := n.Engine.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _, err := n.Engine.Get(ctx, "t", []byte("k"), txn.ReadLatest); err != nil || string(v) != "theirs" {
		t.Fatalf("after the conflict: %q %v, want the store's value", v, err)
	}
	if got := n.Buffer.Stats().WritebackConflicts; got != 1 {
		t.Fatalf("conflict counter %d", got)
	}
	if err := n.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(cfg.ConflictsFile())
	if err != nil {
		t.Fatal(err)
	}
	var c cache.Conflict
	if err := json.Unmarshal(bytes.TrimSpace(raw), &c); err != nil {
		t.Fatalf("conflicts file %q: %v", raw, err)
	}
	if c.Keyspace != "t" || string(c.Key) != "k" || string(c.Value) != "mine-2" || !c.Exists || c.Resolution != cache.ConflictStoreWins {
		t.Fatalf("recorded conflict %+v", c)
	}
}
