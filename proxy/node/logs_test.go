package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	azstore "github.com/nemocache/nemo/adapters/aztable"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
	"github.com/nemocache/nemo/internal/enum"
	"github.com/nemocache/nemo/txn"
)

// logsConfig is an exclusive node with its commit logs in backend
// (Azurite or a Datastore emulator at host), its own data directory and
// node id, a short lease, and nothing written back unless asked.
func logsConfig(t testing.TB, backend config.BackendType, host, id string) config.Config {
	t.Helper()
	cfg := testConfig(t)
	cfg.Backend.Type = backend
	switch backend {
	case config.BackendDatastore:
		cfg.Backend.Datastore.Project, cfg.Backend.Datastore.EmulatorHost = dstest.Project(t), host
	case config.BackendAzTable:
		cfg.Backend.AzTable.ConnectionString = aztest.ConnectionString(host, aztest.Key)
	}
	cfg.Coherence.Mode, cfg.Coherence.NodeID, cfg.Coherence.LeaseTTL = txn.Exclusive, id, 2*time.Second
	cfg.WAL.Location = enum.WALBackend
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestBackendLogsSurviveALostDisk: in coherence exclusive with
// wal.location backend, a node that crashes (its disk gone with it: the
// next node has another data directory and node id) with acknowledged
// writes it never wrote back loses none. The next node takes the lease once
// the dead one's has stayed unrenewed for its TTL, replays the keyspace's
// log before its first read, and its drain writes everything to the
// store and empties the log. With a local WAL those writes would be lost
// with the disk.
func TestBackendLogsSurviveALostDisk(t *testing.T) {
	ctx := context.Background()
	backends := []struct {
		name string
		typ  config.BackendType
		host string
		ks   func(cfg config.Config) adapters.Keyspace
		key  func(i int) []byte
		val  func(cfg config.Config, i int) []byte
	}{
		{"azurite", config.BackendAzTable, aztest.Azurite(t),
			func(cfg config.Config) adapters.Keyspace {
				st, err := azstore.New(azstore.Options{ConnectionString: cfg.Backend.AzTable.ConnectionString})
				if err != nil {
					t.Fatal(err)
				}
				name := aztest.TableName("blog")
				if err := st.CreateTable(ctx, name); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = st.DeleteTable(context.Background(), name) })
				return adapters.Keyspace(name)
			},
			func(i int) []byte { return tablecodec.EncodeKey("p", fmt.Sprintf("r%03d", i)) },
			func(_ config.Config, i int) []byte {
				return tablecodec.EncodeEntity(&tablecodec.Entity{PartitionKey: "p", RowKey: fmt.Sprintf("r%03d", i),
					Props: []tablecodec.Property{{Name: "N", Type: tablecodec.EdmInt32, Value: int32(i)}}})
			}},
		{"datastore", config.BackendDatastore, dstest.Emulator(t),
			func(cfg config.Config) adapters.Keyspace {
				return dscodec.Partition{Project: cfg.Backend.Datastore.Project}.Keyspace()
			},
			func(i int) []byte { return dsKey(t, i) },
			func(cfg config.Config, i int) []byte { return dsValue(t, cfg.Backend.Datastore.Project, i) }},
		{"firestore", config.BackendDatastore, dstest.FirestoreEmulator(t),
			func(cfg config.Config) adapters.Keyspace {
				return dscodec.Partition{Project: cfg.Backend.Datastore.Project}.Keyspace()
			},
			func(i int) []byte { return dsKey(t, i) },
			func(cfg config.Config, i int) []byte { return dsValue(t, cfg.Backend.Datastore.Project, i) }},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			first := logsConfig(t, b.typ, b.host, "node-a")
			ks := b.ks(first)
			a, err := Open(first, quiet)
			if err != nil {
				t.Fatal(err)
			}
			a.Buffer.OpenKeyspace(ks)
			const n = 40
			for i := 1; i <= n; i++ {
				if err := a.Engine.Upsert(ctx, ks, b.key(i), b.val(first, i)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := a.Engine.Delete(ctx, ks, b.key(n)); err != nil {
				t.Fatal(err)
			}
			recs, err := a.Backend.Get(ctx, ks, [][]byte{b.key(1)})
			if err != nil || recs[0].Value != nil {
				t.Fatalf("the store holds the write already (%v): the test needs it unflushed", err)
			}
			if st, ok := a.LogStats(); !ok || st.Appends != n+1 || st.Calls == 0 || st.Calls > st.Appends {
				t.Fatalf("the first node's log counters: %+v %v, want %d appends in at most as many calls", st, ok, n+1)
			}
			// kill -9: nothing flushed, nothing released, the lease left
			// to lapse; the disk (data directory, node id) gone.
			a.Leases.Stop()
			_ = a.Close()

			second := logsConfig(t, b.typ, b.host, "node-b")
			second.Backend.Datastore.Project = first.Backend.Datastore.Project
			bn, err := Open(second, quiet)
			if err != nil {
				t.Fatal(err)
			}
			// (No checkAtStop: these raw values carry none of the store's
			// stamps, so clean records differ from the store byte for byte.)
			bn.Buffer.OpenKeyspace(ks)
			direct := bn.Backend
			began := time.Now()
			var v []byte
			var ok bool
			for {
				v, ok, err = bn.Engine.Get(ctx, ks, b.key(1), txn.ReadLatest)
				if err == nil || time.Since(began) > 15*time.Second {
					break
				}
				time.Sleep(100 * time.Millisecond) // the dead node's lease lapses: a TTL (2s) without renewal
			}
			if err != nil || !ok || string(v) != string(b.val(first, 1)) {
				t.Fatalf("the first read through the next node after %v: %q %v %v, want the dead node's write", time.Since(began), v, ok, err)
			}
			t.Logf("the next node answered after %v (the dead node's lease TTL is 2s)", time.Since(began).Round(time.Millisecond))
			for i := 2; i <= n; i++ {
				v, ok, err := bn.Engine.Get(ctx, ks, b.key(i), txn.ReadLatest)
				want := i < n
				if err != nil || ok != want || ok && string(v) != string(b.val(first, i)) {
					t.Fatalf("key %d through the next node: %v %v, want present=%v", i, ok, err, want)
				}
			}
			keys := make([][]byte, n)
			for i := range keys {
				keys[i] = b.key(i + 1)
			}
			bn.closeStore = func() error { return nil } // read the store after the drain
			t.Cleanup(func() { _ = closeBackend(direct) })
			if err := bn.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			if st, ok := bn.LogStats(); !ok || st.Truncated != n+1 || st.Appends != 0 {
				t.Fatalf("the next node's log counters after its drain: %+v %v, want the %d entries it replayed truncated", st, ok, n+1)
			}
			recs, err = direct.Get(ctx, ks, keys)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range recs {
				if (r.Value != nil) != (i+1 < n) {
					t.Fatalf("the store after the drain: key %d present=%v", i+1, r.Value != nil)
				}
			}
		})
	}
}

// closeBackend closes a backend adapter that has a Close.
func closeBackend(s adapters.Store) error {
	if c, ok := s.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}
