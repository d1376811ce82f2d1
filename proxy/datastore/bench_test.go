package datastore

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"cloud.google.com/go/datastore"

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
