package datastore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
	"github.com/nemocache/nemo/internal/ycsb"
)

type benchEntity struct {
	N    int64
	Body string `datastore:",noindex"`
}

// seedEmulator writes n entities of kind K (ids 1..n) straight to the emulator.
func seedEmulator(b *testing.B, emu *datastore.Client, n int) {
	b.Helper()
	ctx := context.Background()
	for lo := 1; lo <= n; lo += 500 {
		var keys []*datastore.Key
		var vals []*benchEntity
		for i := lo; i < lo+500 && i <= n; i++ {
			keys = append(keys, datastore.IDKey("K", int64(i), nil))
			vals = append(vals, &benchEntity{N: int64(i), Body: "0123456789abcdef0123456789abcdef"})
		}
		if _, err := emu.PutMulti(ctx, keys, vals); err != nil {
			b.Fatal(err)
		}
	}
}

func startBenchNemo(b *testing.B, project string, policy cache.Policy) *nemo {
	b.Helper()
	return startNemo(b, emulatorBackend(), project, cache.Options{Policy: policy})
}

// BenchmarkHotLookup: the same hot keys looked up with the Go client
// through nemo in front of the emulator and against the emulator directly,
// interleaved in one run; reports both latencies and their ratio.
func BenchmarkHotLookup(b *testing.B) {
	emuAddr := dstest.Emulator(b)
	project := dstest.Project(b)
	ctx := context.Background()
	emu := client(b, emuAddr, project)
	const hot = 100
	seedEmulator(b, emu, hot)
	n := startBenchNemo(b, project, cache.PolicyNemo)
	c := client(b, n.addr, project)
	var e benchEntity
	for i := 1; i <= hot; i++ { // warm the buffer
		if err := c.Get(ctx, datastore.IDKey("K", int64(i), nil), &e); err != nil {
			b.Fatal(err)
		}
	}
	n.store.Reset()
	r := rand.New(rand.NewPCG(1, 2))
	var nemoT, emuT time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := datastore.IDKey("K", int64(1+r.IntN(hot)), nil)
		t0 := time.Now()
		if err := c.Get(ctx, k, &e); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := emu.Get(ctx, k, &e); err != nil {
			b.Fatal(err)
		}
		nemoT += t1.Sub(t0)
		emuT += time.Since(t1)
	}
	b.StopTimer()
	b.ReportMetric(float64(nemoT.Nanoseconds())/float64(b.N), "nemo-ns/lookup")
	b.ReportMetric(float64(emuT.Nanoseconds())/float64(b.N), "emulator-ns/lookup")
	b.ReportMetric(float64(emuT)/float64(nemoT), "speedup")
	b.ReportMetric(float64(n.store.Stats()[adapters.OpGet].Requests)/float64(b.N), "store-gets/lookup")
}

// BenchmarkNegativeLookup: lookups of which half name absent keys, both
// halves zipfian (theta 0.9) over 2000 items, through nemo with the nemo
// policy (negative results are cached) and with the record policy (only
// present records are), each in front of the emulator, interleaved in one
// run; reports latency and store requests per lookup for both.
func BenchmarkNegativeLookup(b *testing.B) {
	emuAddr := dstest.Emulator(b)
	project := dstest.Project(b)
	ctx := context.Background()
	emu := client(b, emuAddr, project)
	const items = 2000
	seedEmulator(b, emu, items)
	zipf, err := ycsb.NewScrambledZipfian(items, 0.9)
	if err != nil {
		b.Fatal(err)
	}
	nm := startBenchNemo(b, project, cache.PolicyNemo)
	rec := startBenchNemo(b, project, cache.PolicyRecord)
	cn, cr := client(b, nm.addr, project), client(b, rec.addr, project)
	key := func(r *rand.Rand) *datastore.Key {
		id := int64(1 + zipf.Next(r))
		if r.IntN(2) == 0 {
			return datastore.IDKey("K", id, nil) // present
		}
		return datastore.IDKey("K", items+id, nil) // absent
	}
	get := func(c *datastore.Client, k *datastore.Key) {
		var e benchEntity
		if err := c.Get(ctx, k, &e); err != nil && !errors.Is(err, datastore.ErrNoSuchEntity) {
			b.Fatal(err)
		}
	}
	// Warm both with the same draws.
	warm := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 5000; i++ {
		k := key(warm)
		get(cn, k)
		get(cr, k)
	}
	nm.store.Reset()
	rec.store.Reset()
	r := rand.New(rand.NewPCG(5, 6))
	var nemoT, recT time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := key(r)
		t0 := time.Now()
		get(cn, k)
		t1 := time.Now()
		get(cr, k)
		nemoT += t1.Sub(t0)
		recT += time.Since(t1)
	}
	b.StopTimer()
	nGets := float64(nm.store.Stats()[adapters.OpGet].Requests) / float64(b.N)
	rGets := float64(rec.store.Stats()[adapters.OpGet].Requests) / float64(b.N)
	b.ReportMetric(float64(nemoT.Nanoseconds())/float64(b.N), "nemo-ns/lookup")
	b.ReportMetric(float64(recT.Nanoseconds())/float64(b.N), "record-ns/lookup")
	b.ReportMetric(float64(recT)/float64(nemoT), "speedup")
	b.ReportMetric(nGets, "nemo-store-gets/lookup")
	b.ReportMetric(rGets, "record-store-gets/lookup")
}

// lookupTarget is one server BenchmarkHotLookupConcurrent drives.
type lookupTarget struct {
	name    string
	addr    string
	store   *adapters.Counted // nemo's store, for remote Gets per lookup; nil otherwise
	clients []*datastore.Client

	ops    int64
	took   time.Duration
	remote uint64
}

// fixedLookup is a bare grpc-go Datastore server that answers a Lookup of
// one key by id with a fixed response (nemo's, taken once): the floor for
// a Lookup through the Go client on grpc-go's transport.
type fixedLookup struct {
	datastorepb.UnimplementedDatastoreServer
	resp map[int64]*datastorepb.LookupResponse
}

func (s *fixedLookup) Lookup(_ context.Context, req *datastorepb.LookupRequest) (*datastorepb.LookupResponse, error) {
	if len(req.Keys) != 1 || s.resp[req.Keys[0].Path[0].GetId()] == nil {
		return nil, status.Error(codes.InvalidArgument, "not a key the bare server knows")
	}
	return s.resp[req.Keys[0].Path[0].GetId()], nil
}

// BenchmarkHotLookupConcurrent: hot Lookups of 1 KiB entities (100 keys,
// uniform) through the Go client, 16 clients at once, against nemo over
// the embedded store, nemo in front of the emulator (gRPC on grpc-go's own
// transport, as served), the same served the old way (grpc.Server's
// ServeHTTP behind echo and h2c), the emulator itself, and a bare grpc-go
// server returning a fixed LookupResponse of the same entity. The targets
// take turns (3 rounds of phase each); reports each one's ops/s, nemo's
// ratios to the emulator and to the bare server (bare/nemo: ≤ 1.3 is the
// target), the new transport's gain over the old, and remote Gets per
// lookup.
func BenchmarkHotLookupConcurrent(b *testing.B) {
	const (
		hot     = 100
		clients = 16
		rounds  = 3
		phase   = 700 * time.Millisecond
	)
	emuAddr := dstest.Emulator(b)
	project := dstest.Project(b)
	ctx := context.Background()
	body := strings.Repeat("0123456789abcdef", 64) // 1 KiB
	keys := make([]*datastore.Key, hot)
	vals := make([]*benchEntity, hot)
	for i := range keys {
		keys[i] = datastore.IDKey("K", int64(i+1), nil)
		vals[i] = &benchEntity{N: int64(i + 1), Body: body}
	}
	if _, err := client(b, emuAddr, project).PutMulti(ctx, keys, vals); err != nil {
		b.Fatal(err)
	}
	emb := startNemo(b, embeddedBackend(b.TempDir()), project, cache.Options{Policy: cache.PolicyNemo})
	if _, err := client(b, emb.addr, project).PutMulti(ctx, keys, vals); err != nil {
		b.Fatal(err)
	}
	native := startBenchNemo(b, project, cache.PolicyNemo)
	viaEcho := startNemoServed(b, emulatorBackend(), project, cache.Options{Policy: cache.PolicyNemo}, serving{viaEcho: true})

	// The bare server answers with nemo's own responses.
	fixed := &fixedLookup{resp: map[int64]*datastorepb.LookupResponse{}}
	pc := pbClient(b, native.addr)
	for id := int64(1); id <= hot; id++ {
		resp, err := pc.Lookup(ctx, &datastorepb.LookupRequest{ProjectId: project,
			Keys: []*datastorepb.Key{{PartitionId: &datastorepb.PartitionId{ProjectId: project},
				Path: []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: id}}}}}})
		if err != nil || len(resp.Found) != 1 {
			b.Fatalf("lookup for the bare server's response: %v, %d found", err, len(resp.GetFound()))
		}
		fixed.resp[id] = resp
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	bare := grpc.NewServer()
	datastorepb.RegisterDatastoreServer(bare, fixed)
	go bare.Serve(ln)
	b.Cleanup(bare.Stop)

	targets := []*lookupTarget{
		{name: "nemo-embedded", addr: emb.addr, store: emb.store},
		{name: "nemo", addr: native.addr, store: native.store},
		{name: "nemo-servehttp", addr: viaEcho.addr, store: viaEcho.store},
		{name: "emulator", addr: emuAddr},
		{name: "bare", addr: ln.Addr().String()},
	}
	for _, t := range targets {
		for range clients {
			t.clients = append(t.clients, client(b, t.addr, project))
		}
		var e benchEntity
		for _, k := range keys { // warm the buffer, and every connection
			if err := t.clients[0].Get(ctx, k, &e); err != nil {
				b.Fatal(err)
			}
		}
		for _, c := range t.clients {
			if err := c.Get(ctx, keys[0], &e); err != nil {
				b.Fatal(err)
			}
		}
	}
	run := func(t *lookupTarget) {
		var before uint64
		if t.store != nil {
			before = t.store.Stats()[adapters.OpGet].Requests
		}
		var ops atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(phase)
		began := time.Now()
		for i, c := range t.clients {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(i), 7))
				var e benchEntity
				n := int64(0)
				for time.Now().Before(stop) {
					if err := c.Get(ctx, keys[r.IntN(hot)], &e); err != nil {
						b.Error(err)
						return
					}
					n++
				}
				ops.Add(n)
			})
		}
		wg.Wait()
		t.took += time.Since(began)
		t.ops += ops.Load()
		if t.store != nil {
			t.remote += t.store.Stats()[adapters.OpGet].Requests - before
		}
	}
	b.ResetTimer()
	for range b.N {
		for range rounds {
			for _, t := range targets {
				run(t)
			}
		}
	}
	b.StopTimer()
	rate := map[string]float64{}
	for _, t := range targets {
		rate[t.name] = float64(t.ops) / t.took.Seconds()
		b.ReportMetric(rate[t.name], t.name+"-ops/s")
		if t.store != nil {
			b.ReportMetric(float64(t.remote)/float64(t.ops), t.name+"-remote-gets/op")
		}
	}
	b.ReportMetric(rate["nemo"]/rate["emulator"], "nemo/emulator")
	b.ReportMetric(rate["nemo-embedded"]/rate["emulator"], "nemo-embedded/emulator")
	b.ReportMetric(rate["nemo-servehttp"]/rate["emulator"], "servehttp/emulator")
	b.ReportMetric(rate["bare"]/rate["nemo"], "bare/nemo")
	b.ReportMetric(rate["bare"]/rate["nemo-embedded"], "bare/nemo-embedded")
	b.ReportMetric(rate["nemo"]/rate["nemo-servehttp"], "native/servehttp")
}

// BenchmarkAuditTransactions measures what a transaction that reads 20
// entities costs through nemo in each coherence mode, in front of each
// Datastore backend, beside the same transaction made against the backend
// directly, interleaved in one run: read-only and read-write, reading the
// entities with one Lookup or one kind query, then committing. In mode
// shared a read-only transaction reads the backend's own snapshot (past
// the buffer) and a read-write one has its reads checked at commit; in
// mode exclusive both are answered from the buffer. Reports each side's
// latency, their ratio and nemo's remote requests per transaction. (The
// legacy emulator takes no kind query in a transaction, the Firestore
// emulator no commit of a read-only one: those direct runs are left out.)
func BenchmarkAuditTransactions(b *testing.B) {
	type backendCase struct {
		name string
		host func(testing.TB) string
	}
	for _, bc := range []backendCase{{"datastore-emulator", dstest.Emulator}, {"firestore", dstest.FirestoreEmulator}} {
		for _, shared := range []bool{false, true} {
			for _, ro := range []bool{true, false} {
				for _, query := range []bool{false, true} {
					name := fmt.Sprintf("%s/shared=%v/readonly=%v/query=%v", bc.name, shared, ro, query)
					b.Run(name, func(b *testing.B) { benchAudit(b, bc.host(b), shared, ro, query, bc.name == "firestore") })
				}
			}
		}
	}
}

func benchAudit(b *testing.B, host string, shared, readOnly, query, firestore bool) {
	ctx := context.Background()
	project := dstest.Project(b)
	emu := client(b, host, project)
	const accounts = 20
	seedEmulator(b, emu, accounts)
	be := datastoreBackend("backend", func(testing.TB) string { return host }, shared)
	n := startNemo(b, be, project, cache.Options{})
	c := client(b, n.addr, project)
	keys := make([]*datastore.Key, accounts)
	for i := range keys {
		keys[i] = datastore.IDKey("K", int64(i+1), nil)
	}
	audit := func(c *datastore.Client) error {
		var opts []datastore.TransactionOption
		if readOnly {
			opts = append(opts, datastore.ReadOnly)
		}
		_, err := c.RunInTransaction(ctx, func(tx *datastore.Transaction) error {
			var got []benchEntity
			if query {
				_, err := c.GetAll(ctx, datastore.NewQuery("K").Transaction(tx), &got)
				return err
			}
			got = make([]benchEntity, accounts)
			return tx.GetMulti(keys, got)
		}, opts...)
		return err
	}
	// The direct run, where the backend takes the transaction.
	direct := !(query && !firestore) && !(readOnly && firestore)
	if err := audit(c); err != nil { // warm the buffer
		b.Fatal(err)
	}
	n.store.Reset()
	var nemoT, directT time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := audit(c); err != nil {
			b.Fatal(err)
		}
		nemoT += time.Since(t0)
		if direct {
			t0 = time.Now()
			if err := audit(emu); err != nil {
				b.Fatal(err)
			}
			directT += time.Since(t0)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(nemoT.Microseconds())/float64(b.N), "nemo-µs/txn")
	b.ReportMetric(float64(n.store.Stats().Total().Requests)/float64(b.N), "remote/txn")
	if direct {
		b.ReportMetric(float64(directT.Microseconds())/float64(b.N), "direct-µs/txn")
		b.ReportMetric(float64(nemoT)/float64(directT), "nemo/direct")
	}
}
