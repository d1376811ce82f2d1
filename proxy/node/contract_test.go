package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"

	"github.com/nemocache/nemo/adapters"
	azstore "github.com/nemocache/nemo/adapters/aztable"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
	"github.com/nemocache/nemo/txn"
)

// contractConfig is a node over the emulator or Azurite (backend) with
// backend.contract on.
func contractConfig(t *testing.T, backend config.BackendType, k config.ContractBackend) config.Config {
	cfg := testConfig(t)
	cfg.Backend.Type = backend
	switch backend {
	case config.BackendDatastore:
		cfg.Backend.Datastore.Project, cfg.Backend.Datastore.EmulatorHost = dstest.Project(t), dstest.Emulator(t)
	case config.BackendAzTable:
		cfg.Backend.AzTable.ConnectionString = aztest.ConnectionString(aztest.Azurite(t), aztest.Key)
	}
	k.Enabled = true
	cfg.Backend.Contract = k
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestContractBackend: backend.contract puts the backend under the
// contract, below the adapter: with every call failing, a read fails with
// the service's error the contract made up; with the defaults, what the
// node writes back is what a second node reads (through short and empty
// batches, deferred keys and transient failures).
func TestContractBackend(t *testing.T) {
	ctx := context.Background()
	cfg := contractConfig(t, config.BackendDatastore, config.ContractBackend{Seed: 1, ErrorRate: 1, DefiniteWrites: true})
	n, err := Open(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ks := dscodec.Partition{Project: cfg.Backend.Datastore.Project}.Keyspace()
	n.Buffer.OpenKeyspace(ks)
	_, _, err = n.Engine.Get(ctx, ks, dsKey(t, 1), txn.ReadLatest)
	if !errors.Is(err, adapters.ErrUnavailable) || !strings.Contains(err.Error(), "The service is currently unavailable.") {
		t.Fatalf("a read with every call failing: %v, want the contract's UNAVAILABLE", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for _, backend := range []config.BackendType{config.BackendDatastore, config.BackendAzTable} {
		t.Run(string(backend), func(t *testing.T) {
			k := config.Defaults().Backend.Contract
			k.Seed = 3 // lost answers too: a lease write's is settled by reading the record
			cfg := contractConfig(t, backend, k)
			var ks adapters.Keyspace
			var keys [][]byte
			var vals [][]byte
			if backend == config.BackendDatastore {
				ks = dscodec.Partition{Project: cfg.Backend.Datastore.Project}.Keyspace()
				for i := 1; i <= 60; i++ {
					keys = append(keys, dsKey(t, i))
					vals = append(vals, dsValue(t, cfg.Backend.Datastore.Project, i))
				}
			} else {
				ks = adapters.Keyspace(aztest.TableName("nc"))
				st, err := azstore.New(azstore.Options{ConnectionString: cfg.Backend.AzTable.ConnectionString})
				if err != nil {
					t.Fatal(err)
				}
				if err := st.CreateTable(ctx, string(ks)); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = st.DeleteTable(context.Background(), string(ks)) })
				for i := 1; i <= 60; i++ {
					e := &tablecodec.Entity{PartitionKey: "p", RowKey: fmt.Sprintf("r%03d", i)}
					keys = append(keys, tablecodec.EncodeKey(e.PartitionKey, e.RowKey))
					vals = append(vals, tablecodec.EncodeEntity(e))
				}
			}
			write, err := Open(cfg, quiet)
			if err != nil {
				t.Fatal(err)
			}
			checkAtStop(t, write)
			write.Buffer.OpenKeyspace(ks)
			// In transactions of 20 keys: legacy Datastore takes at most
			// 25 entity groups in one.
			for lo := 0; lo < len(keys); lo += 20 {
				if err := write.Engine.Run(ctx, false, func(tx *txn.Txn) error {
					for i := lo; i < lo+20; i++ {
						if err := tx.Upsert(ctx, ks, keys[i], vals[i]); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			if err := write.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			read, err := Open(cfg, quiet)
			if err != nil {
				t.Fatal(err)
			}
			checkAtStop(t, read)
			read.Buffer.OpenKeyspace(ks)
			recs, next, err := read.Engine.Scan(ctx, ks, nil, nil, 0, txn.ReadLatest)
			if err != nil || next != nil || len(recs) != len(keys) {
				t.Fatalf("scan of what the first node wrote back: %d records, next %q, %v", len(recs), next, err)
			}
			if err := read.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestContractOptions(t *testing.T) {
	cfg := config.Defaults()
	cfg.Backend.Contract = config.ContractBackend{Enabled: true, Seed: 5, ShortRate: 0.4, EmptyRate: 0.3, DeferRate: 0.2, ErrorRate: 0.1, LostRate: 0.05, DefiniteWrites: true}
	c := ContractOptions(cfg)
	if c.Seed != 5 || c.ShortRate != 0.4 || c.EmptyRate != 0.3 || c.DeferRate != 0.2 || c.ErrorRate != 0.1 || c.LostRate != 0.05 || !c.DefiniteWrites {
		t.Errorf("contract plan %+v", c)
	}
	cfg.Backend.Contract.Seed = 0
	if ContractOptions(cfg).Seed == 0 {
		t.Error("seed 0 was not replaced")
	}
	if err := ContractOptions(config.Defaults()).Validate(); err != nil {
		t.Errorf("the default contract plan: %v", err)
	}
}

// dsKey and dsValue are entity i of kind K in project.
func dsKey(t *testing.T, i int) []byte {
	t.Helper()
	k, err := dscodec.EncodePath([]*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: int64(i)}}})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func dsValue(t *testing.T, project string, i int) []byte {
	t.Helper()
	v, err := dscodec.EncodeValue(&datastorepb.EntityResult{Entity: &datastorepb.Entity{
		Key:        &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: project}, Path: []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: int64(i)}}}},
		Properties: map[string]*datastorepb.Value{"n": {ValueType: &datastorepb.Value_IntegerValue{IntegerValue: int64(i)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}
