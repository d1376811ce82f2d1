package bench

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/ycsb"
)

const ks = adapters.Keyspace("usertable")

// scale is how big and how long one run is.
type scale struct {
	records    int           // records loaded into the store
	valueSize  int           // bytes per value
	latency    time.Duration // charged by the fault store to every measured remote call
	workers    int           // concurrent clients
	warmOps    int           // operations before measuring, without latency (skipped for policy none)
	ops        int           // measured operations per policy, split evenly over workers
	checkEvery int           // verify every n-th operation of each worker against the data
}

// workload is one YCSB-style experiment.
type workload struct {
	name     string
	theta    float64            // zipfian skew of the requested items
	domain   func(n int) uint64 // item space requests are drawn from, for n loaded records
	loaded   func(i uint64) bool
	budget   float64 // buffer size as a fraction of the loaded key+value bytes
	scanLen  int     // 0: point reads; else YCSB-E scans of this many records
	baseline cache.Policy
	// clustered draws items from the plain zipfian (hot items adjacent in
	// key order) instead of the scrambled one (hot items spread out).
	clustered bool
	// topK warms the buffer as the paper's prototype does: it loads the
	// hottest items in rank order until they fill the buffer (see warmTopK)
	// instead of running the workload for scale.warmOps operations.
	topK bool
}

var (
	// pointReads: (a) in the brief, nemo vs no buffer at all.
	pointReads = workload{
		name: "point", theta: 0.9, budget: 0.10, baseline: cache.PolicyNone,
		domain: func(n int) uint64 { return uint64(n) },
		loaded: func(uint64) bool { return true },
	}
	// negativeLookups: half the requested keys do not exist (odd items
	// are never loaded), where a positive-only record cache must ask the
	// store every time.
	negativeLookups = workload{
		name: "negative", theta: 0.9, budget: 0.30, baseline: cache.PolicyRecord,
		domain: func(n int) uint64 { return 2 * uint64(n) },
		loaded: func(i uint64) bool { return i%2 == 0 },
	}
	// rangeScans: YCSB-E's operation, scan(startkey, recordcount): the
	// records from a zipfian start key on, at most 8, with no upper bound.
	rangeScans = workload{
		name: "scan", theta: 0.9, budget: 0.30, scanLen: 8, baseline: cache.PolicyRecord,
		domain: func(n int) uint64 { return uint64(n) },
		loaded: func(uint64) bool { return true },
	}
	// rangeScansClustered: the same scans with the unscrambled zipfian, so
	// hot scans overlap in key order (a time-ordered or tenant-prefixed key
	// space) and their ranges share records.
	rangeScansClustered = workload{
		name: "scan-clustered", theta: 0.9, budget: 0.30, scanLen: 8, baseline: cache.PolicyRecord,
		domain: func(n int) uint64 { return uint64(n) }, clustered: true,
		loaded: func(uint64) bool { return true },
	}
)

// The paper's workloads: its prototype's YCSB generator draws the hot set
// as the zipfian top-K, unscrambled (hot keys adjacent), and warms the
// buffer with that top-K before measuring.
var (
	pointReadsPaper      = paper(pointReads)
	negativeLookupsPaper = paper(negativeLookups)
	rangeScansPaper      = paper(rangeScans)
)

func paper(w workload) workload {
	w.name += "-paper"
	w.clustered, w.topK = true, true
	return w
}

// env is a loaded store behind the fault and counting wrappers.
type env struct {
	w         workload
	sc        scale
	counted   *adapters.Counted
	fault     *fault.Store
	values    [][]byte // by item; nil = not loaded
	dataBytes int64
	gen       ycsb.Generator
}

var quiet = slog.New(slog.DiscardHandler)

func newEnv(tb testing.TB, w workload, sc scale) *env {
	tb.Helper()
	st, err := embedded.Open(tb.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	n := w.domain(sc.records)
	var gen ycsb.Generator
	if w.clustered || w.topK {
		gen, err = ycsb.NewZipfian(n, w.theta)
	} else {
		gen, err = ycsb.NewScrambledZipfian(n, w.theta)
	}
	if err != nil {
		tb.Fatal(err)
	}
	e := &env{w: w, sc: sc, values: make([][]byte, n), gen: gen}
	rng := rand.New(rand.NewPCG(1, 1))
	var batch []adapters.Record
	flush := func() {
		if _, err := st.Upsert(tb.Context(), ks, adapters.Puts(batch)); err != nil {
			tb.Fatal(err)
		}
		batch = batch[:0]
	}
	for i := range n {
		if !w.loaded(i) {
			continue
		}
		v := value(rng, sc.valueSize)
		e.values[i] = v
		k := ycsb.Key(i)
		e.dataBytes += int64(len(k) + len(v))
		if batch = append(batch, adapters.Record{Key: k, Value: v}); len(batch) == 1000 {
			flush()
		}
	}
	flush()
	e.fault = fault.New(st, fault.Config{Default: fault.OpConfig{Latency: sc.latency}})
	e.counted = adapters.Count(e.fault)
	return e
}

// result is what one policy did in the measured phase.
type result struct {
	policy        cache.Policy
	ops           int
	elapsed       time.Duration
	remote        uint64 // store calls of every kind
	remoteStats   adapters.Stats
	hits, lookups uint64 // buffer lookups answered locally, and all lookups
	negatives     int64  // operations whose answer was "absent"
	continuations int64  // extra Scan calls because a page came back short
	checked       int64
	wrong         []string // the first few wrong answers
	end           cache.Stats
}

func (r *result) add(o result) {
	r.policy = o.policy
	r.ops += o.ops
	r.elapsed += o.elapsed
	r.remote += o.remote
	for i := range r.remoteStats {
		r.remoteStats[i].Requests += o.remoteStats[i].Requests
		r.remoteStats[i].Keys += o.remoteStats[i].Keys
		r.remoteStats[i].Records += o.remoteStats[i].Records
		r.remoteStats[i].BytesReceived += o.remoteStats[i].BytesReceived
	}
	r.hits += o.hits
	r.lookups += o.lookups
	r.negatives += o.negatives
	r.continuations += o.continuations
	r.checked += o.checked
	r.wrong = append(r.wrong, o.wrong...)
	r.end = o.end
}

func (r result) opsPerSec() float64   { return float64(r.ops) / r.elapsed.Seconds() }
func (r result) remotePerOp() float64 { return float64(r.remote) / float64(r.ops) }

func (r result) hitRatio() float64 {
	if r.lookups == 0 {
		return 0 // policy none never consults a buffer
	}
	return float64(r.hits) / float64(r.lookups)
}

func (r result) String() string {
	get, rng := r.remoteStats[adapters.OpGet], r.remoteStats[adapters.OpGetRange]
	return fmt.Sprintf("%-6s %6d ops %9.0f ops/s  remote/op %.3f  hit %.3f  negative %.2f  cont %d  checked %d  wrong %d"+
		" | remote get: %d found %d absent; get_range: %d calls %.1f recs/call; KiB received/op %.2f"+
		" | evictions %d admitted %d bypass %d filtered %d stale %d resident %d used %d/%d",
		r.policy, r.ops, r.opsPerSec(), r.remotePerOp(), r.hitRatio(), float64(r.negatives)/float64(r.ops),
		r.continuations, r.checked, len(r.wrong),
		get.Records, get.Keys-get.Records, rng.Requests, float64(rng.Records)/max(float64(rng.Requests), 1),
		float64(r.remoteStats.Total().BytesReceived)/1024/float64(r.ops),
		r.end.Evictions, r.end.Admitted, r.end.AdmitBypass, r.end.RangeFiltered, r.end.EvictDeferred, r.end.Records, r.end.UsedBytes, r.end.MaxBytes)
}

// run builds a fresh buffer with policy p over the loaded store, warms it,
// and measures sc.ops operations. Every policy sees the same operation
// sequence (the seeds depend only on the phase and the worker). The warm-up
// runs with no remote latency: it only has to bring the buffer to its
// steady state, and it must be long for that, because the zipfian tail
// keeps drawing keys for the first time long after the buffer is full and
// such compulsory misses would otherwise be counted against every policy.
func (e *env) run(tb testing.TB, p cache.Policy) result {
	tb.Helper()
	ctx := tb.Context()
	buf, err := cache.New(e.counted, cache.Options{
		Policy:   p,
		MaxBytes: int64(e.w.budget * float64(e.dataBytes)),
		Logger:   quiet,
	})
	if err != nil {
		tb.Fatal(err)
	}
	defer buf.Close()
	buf.OpenKeyspace(ks)
	if p != cache.PolicyNone {
		e.fault.SetConfig(fault.Config{})
		var r result
		if e.w.topK {
			r = e.warmTopK(ctx, buf)
		} else {
			r = e.phase(ctx, buf, e.sc.warmOps, 1)
		}
		e.fault.SetConfig(fault.Config{Default: fault.OpConfig{Latency: e.sc.latency}})
		if len(r.wrong) > 0 {
			tb.Fatalf("%s %s warm-up: %d wrong answers, first: %s", e.w.name, p, len(r.wrong), r.wrong[0])
		}
	}
	e.counted.Reset()
	before := buf.Stats()
	start := time.Now()
	r := e.phase(ctx, buf, e.sc.ops, 2)
	r.elapsed = time.Since(start)
	r.policy = p
	r.remoteStats = e.counted.Stats()
	r.remote = r.remoteStats.Total().Requests
	r.end = buf.Stats()
	r.hits = r.end.Hits + r.end.NegativeHits + r.end.RangeHits - before.Hits - before.NegativeHits - before.RangeHits
	r.lookups = r.hits + r.end.Misses + r.end.RangeFetches - before.Misses - before.RangeFetches
	e.check(tb, buf)
	return r
}

// check runs the buffer's invariant checker against the store at the end
// of a test's run (unless the test failed), with the fault store's latency
// off while it reads the store. Benchmarks skip it: their timer covers run.
func (e *env) check(tb testing.TB, buf *cache.Buffer) {
	tb.Helper()
	if _, bench := tb.(*testing.B); bench || tb.Failed() {
		return
	}
	e.fault.SetConfig(fault.Config{})
	defer e.fault.SetConfig(fault.Config{Default: fault.OpConfig{Latency: e.sc.latency}})
	if err := buf.Check(tb.Context()); err != nil {
		tb.Errorf("%s %s: buffer invariants at the end of the run: %v", e.w.name, buf.Options().Policy, err)
	}
}

// warmTopK loads the hottest items, in rank order (the generator is the
// plain zipfian: rank r is item r), until the buffer holds as many bytes as
// the evictor leaves it with (MaxBytes - MaxBytes/8), so the measured phase
// starts with the top-K resident and nothing evicted: K is sized to the
// buffer, by what each policy keeps (a positive-only cache stores no
// absent item, so its K spans more ranks). Point workloads read each item;
// scan workloads scan the top-K in overlapping pages of pageLen records,
// as a scan from item 0 to item K-1 would, so nemo holds the run sealed. A policy
// that never admits what it warms with (record, for scans) goes through
// the whole domain and keeps nothing.
func (e *env) warmTopK(ctx context.Context, buf *cache.Buffer) result {
	const pageLen = 64
	full := func() bool {
		st := buf.Stats()
		return st.UsedBytes >= st.MaxBytes-st.MaxBytes/8
	}
	var r result
	n := e.gen.Items()
	for item := uint64(0); item < n && !full(); {
		if e.w.scanLen == 0 {
			if _, err := e.get(ctx, buf, item, true); err != nil {
				r.wrong = append(r.wrong, fmt.Sprintf("item %d: %v", item, err))
				return r
			}
			item++
			continue
		}
		// Each page starts at the last one's last record, so the gap
		// after it is fetched, and sealed, with the next page.
		recs, _, err := buf.Scan(ctx, ks, ycsb.Key(item), nil, pageLen)
		if err != nil {
			r.wrong = append(r.wrong, fmt.Sprintf("scan from item %d: %v", item, err))
			return r
		}
		if len(recs) < 2 {
			break
		}
		item, _ = parseKey(recs[len(recs)-1].Key)
	}
	return r
}

// phase runs ops operations on sc.workers goroutines, each with its own
// generator of random numbers seeded by (phase, worker).
func (e *env) phase(ctx context.Context, buf *cache.Buffer, ops int, phase uint64) result {
	var (
		wg                       sync.WaitGroup
		mu                       sync.Mutex
		neg, cont, checked, done atomic.Int64
		wrong                    []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(wrong) < 5 {
			wrong = append(wrong, fmt.Sprintf(format, args...))
		}
	}
	for g := range e.sc.workers {
		n := ops / e.sc.workers
		if g < ops%e.sc.workers {
			n++
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(phase, uint64(g)))
			for k := range n {
				item := e.gen.Next(rng)
				check := k%e.sc.checkEvery == 0
				if check {
					checked.Add(1)
				}
				var err error
				var absent bool
				var extra int64
				if e.w.scanLen == 0 {
					absent, err = e.get(ctx, buf, item, check)
				} else {
					extra, err = e.scan(ctx, buf, item, check)
				}
				if err != nil {
					fail("item %d: %v", item, err)
				}
				if absent {
					neg.Add(1)
				}
				cont.Add(extra)
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return result{ops: int(done.Load()), negatives: neg.Load(), continuations: cont.Load(), checked: checked.Load(), wrong: wrong}
}

// get is one point read; with check it compares the answer with the data.
func (e *env) get(ctx context.Context, buf *cache.Buffer, item uint64, check bool) (absent bool, err error) {
	v, ok, err := buf.Get(ctx, ks, ycsb.Key(item))
	if err != nil {
		return false, err
	}
	if want := e.values[item]; check && (ok != (want != nil) || !bytes.Equal(v, want)) {
		return !ok, fmt.Errorf("get: found=%v with %d bytes, want found=%v with %d bytes (or different bytes)", ok, len(v), want != nil, len(want))
	}
	return !ok, nil
}

// scan is YCSB-E's scan: up to scanLen records from item's key on. A short
// page with a continuation key is followed, as a client would.
func (e *env) scan(ctx context.Context, buf *cache.Buffer, item uint64, check bool) (continuations int64, err error) {
	var got []adapters.Record
	start := ycsb.Key(item)
	for {
		recs, next, err := buf.Scan(ctx, ks, start, nil, e.w.scanLen-len(got))
		if err != nil {
			return continuations, err
		}
		got = append(got, recs...)
		if len(got) >= e.w.scanLen || next == nil {
			break
		}
		continuations++
		start = next
	}
	if !check {
		return continuations, nil
	}
	j := item
	for idx := 0; idx < e.w.scanLen; idx++ {
		for j < uint64(len(e.values)) && e.values[j] == nil {
			j++
		}
		if j >= uint64(len(e.values)) {
			if idx != len(got) {
				return continuations, fmt.Errorf("scan: %d records, want %d", len(got), idx)
			}
			return continuations, nil
		}
		if idx >= len(got) {
			return continuations, fmt.Errorf("scan: %d records, want more (next is item %d)", len(got), j)
		}
		if i, ok := parseKey(got[idx].Key); !ok || i != j || !bytes.Equal(got[idx].Value, e.values[j]) {
			return continuations, fmt.Errorf("scan: record %d is %q (%d value bytes), want item %d", idx, got[idx].Key, len(got[idx].Value), j)
		}
		j++
	}
	if len(got) > e.w.scanLen {
		return continuations, fmt.Errorf("scan: %d records, limit %d", len(got), e.w.scanLen)
	}
	return continuations, nil
}
