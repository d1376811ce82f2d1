package node

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	azstore "github.com/nemocache/nemo/adapters/aztable"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/txn"
)

// BenchmarkPartitionedHotWrites: b.N upserts of 20 hot keys by 16
// concurrent writers, in front of Azurite and of the Datastore emulator
// (the test's own project) behind a simulated round trip
// (backend.fault.latency, on every store call), three ways in one run:
// shared mode (written through), partitioned through the table's owner,
// and partitioned through another replica (forwarded to the owner). It
// reports each one's mean write latency and store calls per write (every
// call of every node involved: log appends, write-back, leases, reads),
// and the forwarded/owner and shared/owner latency ratios.
//
//	go test ./proxy/node -run '^$' -bench PartitionedHotWrites -benchtime 2000x
func BenchmarkPartitionedHotWrites(b *testing.B) {
	for _, backend := range []config.BackendType{config.BackendAzTable, config.BackendDatastore} {
		for _, rtt := range []time.Duration{0, 2 * time.Millisecond, 10 * time.Millisecond} {
			b.Run(fmt.Sprintf("%s/rtt=%v", backend, rtt), func(b *testing.B) { benchHotWrites(b, backend, rtt) })
		}
	}
}

func benchHotWrites(b *testing.B, backend config.BackendType, rtt time.Duration) {
	ctx := context.Background()
	// The keyspace first: cleanups run last first, so the replicas
	// drain (writing everything back) before an Azure table is deleted.
	var ks adapters.Keyspace
	conn := aztest.ConnectionString(aztest.Azurite(b), aztest.Key)
	if backend == config.BackendAzTable {
		st, err := azstore.New(azstore.Options{ConnectionString: conn})
		if err != nil {
			b.Fatal(err)
		}
		name := aztest.TableName("hot")
		if err := st.CreateTable(ctx, name); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.DeleteTable(context.Background(), name) })
		ks = adapters.Keyspace(name)
	} else {
		ks = partitionedTable(b, "hot")
	}
	setup := func(c *config.Config) {
		if backend == config.BackendAzTable {
			c.Backend.Type, c.Backend.AzTable.ConnectionString = config.BackendAzTable, conn
		} else {
			c.Backend.Datastore.Project = testProject(b)
		}
		c.Backend.Fault.Enabled, c.Backend.Fault.Latency = rtt > 0, rtt
		c.Cache.MaxDirtyAge = 5 * time.Second
	}
	shared := remoteConfig(b, backend, txn.Shared, aztest.Key, "")
	setup(&shared)
	sn, err := Open(shared, quiet)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sn.Drain(context.Background()) })
	owner := startReplicaWith(b, "bench-owner", testPeerSecret, setup)
	fwd := startReplicaWith(b, "bench-fwd", testPeerSecret, setup)
	if err := owner.Engine.Upsert(ctx, ks, benchKey(backend, 0), benchValue(ks, backend, 0, 0)); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	sLat, sCalls := hotWrites(b, sn, []*Node{sn}, ks, backend)
	oLat, oCalls := hotWrites(b, owner.Node, []*Node{owner.Node, fwd.Node}, ks, backend)
	fLat, fCalls := hotWrites(b, fwd.Node, []*Node{owner.Node, fwd.Node}, ks, backend)
	b.StopTimer()
	b.ReportMetric(float64(sLat.Microseconds())/1000, "shared-ms/write")
	b.ReportMetric(float64(oLat.Microseconds())/1000, "owner-ms/write")
	b.ReportMetric(float64(fLat.Microseconds())/1000, "fwd-ms/write")
	b.ReportMetric(sCalls, "shared-calls/write")
	b.ReportMetric(oCalls, "owner-calls/write")
	b.ReportMetric(fCalls, "fwd-calls/write")
	b.ReportMetric(float64(fLat)/float64(oLat), "fwd/owner")
	b.ReportMetric(float64(sLat)/float64(oLat), "shared/owner")
}

// benchKey and benchValue are entity i of the benchmark's backend.
func benchKey(backend config.BackendType, i int) []byte {
	if backend == config.BackendAzTable {
		return azRowKey(i)
	}
	return rowKey(i)
}

func benchValue(ks adapters.Keyspace, backend config.BackendType, i, n int) []byte {
	if backend == config.BackendAzTable {
		return tablecodec.EncodeEntity(&tablecodec.Entity{PartitionKey: "p", RowKey: fmt.Sprintf("r%03d", i),
			Props: []tablecodec.Property{{Name: "N", Type: tablecodec.EdmInt32, Value: int32(n)}}})
	}
	return rowValue(ks, i, n)
}

// hotWrites makes b.N upserts of 20 keys of ks through via, 16 at a time,
// and returns their mean latency and the store calls the nodes counted
// made per write.
func hotWrites(b *testing.B, via *Node, counted []*Node, ks adapters.Keyspace, backend config.BackendType) (time.Duration, float64) {
	b.Helper()
	calls := func() (n uint64) {
		for _, c := range counted {
			for _, op := range c.Store.Stats() {
				n += op.Requests
			}
		}
		return n
	}
	before := calls()
	var next atomic.Int64
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				began := time.Now()
				if err := via.Engine.Upsert(context.Background(), ks, benchKey(backend, int(i%20)), benchValue(ks, backend, int(i%20), int(i))); err != nil {
					errs <- err
					return
				}
				total.Add(int64(time.Since(began)))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return time.Duration(total.Load() / int64(b.N)), float64(calls()-before) / float64(b.N)
}
