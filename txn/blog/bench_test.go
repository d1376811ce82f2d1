package blog

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"google.golang.org/grpc"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/adapters/datastore"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
	"github.com/nemocache/nemo/txn/logrec"
	"github.com/nemocache/nemo/wal"
)

// delayed holds every request a fixed time before sending it: a cloud
// round trip in front of a local emulator.
type delayed struct {
	next policy.Transporter
	rtt  time.Duration
}

func (d delayed) Do(req *http.Request) (*http.Response, error) {
	time.Sleep(d.rtt)
	return d.next.Do(req)
}

// benchBackend opens a backend with every wire request counted and
// delayed by rtt; it returns the store, the log codec, a keyspace for the
// log and a writer of one entity (shared mode's write-through of one
// write), and the request counter.
type benchBackend struct {
	store adapters.Store
	codec Codec
	ks    adapters.Keyspace
	// write writes one small entity i through the adapter, as coherence
	// shared writes a client's write through.
	write func(ctx context.Context, i int) error
	wire  *atomic.Int64
}

func azureBench(b *testing.B, rtt time.Duration) benchBackend {
	url := aztest.Azurite(b)
	wire := &atomic.Int64{}
	tr := countingTransport{delayed{&http.Client{Transport: http.DefaultTransport}, rtt}, wire}
	s, err := aztable.New(aztable.Options{ConnectionString: aztest.ConnectionString(url, aztest.Key), Transport: tr})
	if err != nil {
		b.Fatal(err)
	}
	table := aztest.TableName("bench")
	if err := s.CreateKeyspace(context.Background(), adapters.Keyspace(table)); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = s.DropKeyspace(context.Background(), adapters.Keyspace(table))
		dropLog(s, aztable.LogCodec(), adapters.Keyspace(table))
	})
	write := func(ctx context.Context, i int) error {
		e := &tablecodec.Entity{PartitionKey: "p", RowKey: fmt.Sprint(i), Props: []tablecodec.Property{
			{Name: "V", Type: tablecodec.EdmBinary, Value: make([]byte, 200)}}}
		_, err := s.Upsert(ctx, adapters.Keyspace(table), []adapters.Write{{Key: tablecodec.EncodeKey("p", fmt.Sprint(i)), Value: tablecodec.EncodeEntity(e)}})
		return err
	}
	return benchBackend{store: s, codec: aztable.LogCodec(), ks: adapters.Keyspace(table), write: write, wire: wire}
}

func datastoreBench(b *testing.B, host string, rtt time.Duration) benchBackend {
	wire := &atomic.Int64{}
	delay := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		wire.Add(1)
		time.Sleep(rtt)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	s, err := datastore.Open(context.Background(), datastore.Options{EmulatorHost: host, Interceptors: []grpc.UnaryClientInterceptor{delay}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	p := dscodec.Partition{Project: dstest.Project(b), Namespace: "bench"}
	write := func(ctx context.Context, i int) error {
		path := []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: int64(i + 1)}}}
		k, _ := dscodec.EncodePath(path)
		v, _ := dscodec.EncodeValue(&datastorepb.EntityResult{Entity: &datastorepb.Entity{
			Key:        &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: p.Project, NamespaceId: p.Namespace}, Path: path},
			Properties: map[string]*datastorepb.Value{"V": {ValueType: &datastorepb.Value_BlobValue{BlobValue: make([]byte, 200)}, ExcludeFromIndexes: true}},
		}})
		_, err := s.Upsert(ctx, p.Keyspace(), []adapters.Write{{Key: k, Value: v}})
		return err
	}
	return benchBackend{store: s, codec: datastore.LogCodec(), ks: p.Keyspace(), write: write, wire: wire}
}

// BenchmarkAppend measures an Append of 200 bytes with 1, 4 and 16
// appenders at once, on Azurite and on both Datastore emulators, as they
// answer locally and behind a simulated 10 ms round trip per request:
// its latency (the mean Append, ms/append), atomic store calls and wire
// requests per append, and group size; and, as a baseline, a write of one
// 200-byte entity through the adapter (coherence shared's write-through:
// ms/write, requests/write). The local WAL's commit of the same write, with
// the same appenders on this machine's disk (fsync included), is the
// third baseline (local-wal: ms/commit, commits/fsync).
func BenchmarkAppend(b *testing.B) {
	for _, n := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("local-wal/appenders=%d", n), func(b *testing.B) { benchLocalWAL(b, n) })
	}
	backends := []struct {
		name string
		open func(b *testing.B, rtt time.Duration) benchBackend
	}{
		{"azurite", azureBench},
		{"datastore-emulator", func(b *testing.B, rtt time.Duration) benchBackend { return datastoreBench(b, dstest.Emulator(b), rtt) }},
		{"firestore", func(b *testing.B, rtt time.Duration) benchBackend {
			return datastoreBench(b, dstest.FirestoreEmulator(b), rtt)
		}},
	}
	for _, be := range backends {
		for _, rtt := range []time.Duration{0, 10 * time.Millisecond} {
			for _, n := range []int{1, 4, 16} {
				b.Run(fmt.Sprintf("%s/rtt=%v/appenders=%d", be.name, rtt, n), func(b *testing.B) {
					bb := be.open(b, rtt)
					benchLog(b, bb, n)
				})
				b.Run(fmt.Sprintf("%s/rtt=%v/writers=%d/write-through", be.name, rtt, n), func(b *testing.B) {
					bb := be.open(b, rtt)
					benchWrites(b, bb, n)
				})
			}
		}
	}
}

// spread runs b.N calls of op over n goroutines.
func spread(b *testing.B, n int, op func(i int) error) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range n {
		wg.Go(func() {
			for i := int(next.Add(1)); i <= b.N; i = int(next.Add(1)) {
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	return time.Since(start)
}

func benchLog(b *testing.B, bb benchBackend, n int) {
	l, _, err := Open(context.Background(), Options{Store: bb.store, Codec: bb.codec, Logger: quiet}, bb.ks, 1, "bench")
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 200)
	before, wire := l.Stats(), bb.wire.Load()
	spread(b, n, func(int) error { _, err := l.Append(context.Background(), data); return err })
	st := l.Stats()
	appends := float64(st.Appends - before.Appends)
	b.ReportMetric(st.Latency.Mean()*1e3, "ms/append")
	b.ReportMetric(float64(st.Calls-before.Calls)/appends, "calls/append")
	b.ReportMetric(float64(bb.wire.Load()-wire)/appends, "requests/append")
	b.ReportMetric(appends/float64(st.Batches-before.Batches), "appends/group")
}

func benchWrites(b *testing.B, bb benchBackend, n int) {
	var total atomic.Int64
	wire := bb.wire.Load()
	spread(b, n, func(i int) error {
		start := time.Now()
		err := bb.write(context.Background(), i)
		total.Add(int64(time.Since(start)))
		return err
	})
	b.ReportMetric(float64(total.Load())/float64(b.N)/1e6, "ms/write")
	b.ReportMetric(float64(bb.wire.Load()-wire)/float64(b.N), "requests/write")
}

func benchLocalWAL(b *testing.B, n int) {
	l, err := wal.Open(wal.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var total atomic.Int64
	spread(b, n, func(i int) error {
		start := time.Now()
		_, err := l.Append(context.Background(), uint64(i), benchData(i))
		total.Add(int64(time.Since(start)))
		return err
	})
	st := l.Stats()
	b.ReportMetric(float64(total.Load())/float64(b.N)/1e6, "ms/commit")
	b.ReportMetric(float64(st.Commits)/float64(st.Batches), "commits/fsync")
}

// benchData is a commit of one put of 200 bytes, as the engine logs it.
func benchData(i int) []wal.Data {
	r := logrec.Record{Type: logrec.RecordPut, Keyspace: "bench", Key: fmt.Appendf(nil, "p\x00%d", i), Value: make([]byte, 200)}
	return []wal.Data{{Type: r.WireType(), Body: r.AppendBody(nil)}}
}
