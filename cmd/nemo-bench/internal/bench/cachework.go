package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/ycsb"
)

// The cache experiments' data: item i is stored under key index
// spacing*i, so the keys between two items are absent. A negative point
// lookup of item i asks for key index spacing*i+2; an empty range read of
// item i covers (spacing*i, spacing*(i+1)).
const spacing = 4

func itemKey(i uint64) []byte   { return ycsb.Key(spacing * i) }
func absentKey(i uint64) []byte { return ycsb.Key(spacing*i + 2) }

// valueFor is the value stored under key, the same on every load, so an
// answer can be checked without a table of values.
func valueFor(key []byte, n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = 'a' + (key[i%len(key)]^byte(i))%26
	}
	return v
}

// reader is a client of one target: point and range reads and writes
// through the target's way in (the engine, or a server and its SDK).
type reader interface {
	// get reads key and returns the length of its value, or found false.
	get(ctx context.Context, key []byte) (n int, found bool, err error)
	// scan reads at most limit records of [start, end) and returns their
	// keys, in order.
	scan(ctx context.Context, start, end []byte, limit int) ([][]byte, error)
	// put writes val under key (insert or replace, unconditionally).
	put(ctx context.Context, key, val []byte) error
}

// cacheStack is a fresh buffer and engine over a target's loaded data
// (or, on a real target, whatever the run's spec puts in front of it),
// and a reader through them.
type cacheStack interface {
	reader
	// remote is the count of store requests so far.
	remote() uint64
	buffer() cache.Stats
	// warming turns the injected latency off (on a target that injects
	// it) while the buffer is warmed.
	warming(on bool)
	// procs are the server processes whose CPU time the run measures
	// (none when the engine runs in this process).
	procs() []proc
	close() error
}

// cacheTarget holds a target's loaded items and opens stacks over them.
type cacheTarget interface {
	items() uint64
	valueSize() int
	// real reports a real backend (Azurite, the emulator, a URL), whose
	// stacks run their servers as processes.
	real() bool
	open(ctx context.Context, spec stackSpec) (cacheStack, error)
}

// recordBytes measures what one buffered record costs the budget on t:
// the growth of the buffer's used bytes by the point read of one more
// item (keys and values are encoded differently by each target).
func recordBytes(ctx context.Context, t cacheTarget) (int64, error) {
	s, err := t.open(ctx, stackSpec{policy: cache.PolicyNemo, maxBytes: 64 << 20})
	if err != nil {
		return 0, err
	}
	defer s.close()
	s.warming(true)
	var used [2]int64
	for i := range used {
		if _, _, err := s.get(ctx, itemKey(uint64(i))); err != nil {
			return 0, err
		}
		used[i] = s.buffer().UsedBytes
	}
	if d := used[1] - used[0]; d > 0 {
		return d, nil
	}
	return 0, fmt.Errorf("bench: a buffered record costs %d bytes", used[1]-used[0])
}

// cacheWork is one cache run's requests.
type cacheWork struct {
	sp  runSpec
	gen ycsb.Ranked
	n   uint64 // items
	vsz int    // value size, for checking answers
}

// do is one client operation: a point read or a range read of a zipfian
// item, of an absent key or empty range with probability sp.negative, or
// with probability sp.updatePct percent a write of the item (its own
// value again, so reads stay checkable). Every answer is checked against
// the data's layout.
func (w *cacheWork) do(ctx context.Context, r reader, rng *rand.Rand) error {
	item := w.gen.Next(rng)
	if w.sp.updatePct > 0 && rng.IntN(100) < w.sp.updatePct {
		key := itemKey(item)
		if err := r.put(ctx, key, valueFor(key, w.vsz)); err != nil {
			return fmt.Errorf("put %s: %w", key, err)
		}
		return nil
	}
	neg := w.sp.negative > 0 && rng.Float64() < w.sp.negative
	switch w.sp.op {
	case opGet:
		key := itemKey(item)
		if neg {
			key = absentKey(item)
		}
		n, found, err := r.get(ctx, key)
		switch {
		case err != nil:
			return fmt.Errorf("get %s: %w", key, err)
		case found == neg || (found && n != w.vsz):
			return fmt.Errorf("get %s: found %v with %d bytes, want found %v with %d", key, found, n, !neg, w.vsz)
		}
		return nil
	case opScan:
		return w.scan(ctx, r, item, neg)
	}
	return fmt.Errorf("bench: operation %d is not a cache operation", w.sp.op)
}

// scan reads sp.scanLen items from item on, bounded by the key of the
// item after the last, or (neg) the empty range after item.
func (w *cacheWork) scan(ctx context.Context, r reader, item uint64, neg bool) error {
	start, end := itemKey(item), itemKey(item+uint64(w.sp.scanLen))
	want := min(uint64(w.sp.scanLen), w.n-item)
	if neg {
		start, end, want = ycsb.Key(spacing*item+1), itemKey(item+1), 0
	}
	keys, err := r.scan(ctx, start, end, w.sp.scanLen)
	if err != nil {
		return fmt.Errorf("scan [%s, %s): %w", start, end, err)
	}
	if uint64(len(keys)) != want {
		return fmt.Errorf("scan [%s, %s): %d records, want %d", start, end, len(keys), want)
	}
	for j, k := range keys {
		if string(k) != string(itemKey(item+uint64(j))) {
			return fmt.Errorf("scan [%s, %s): record %d is %s, want %s", start, end, j, k, itemKey(item+uint64(j)))
		}
	}
	return nil
}

// warmTopK reads the k hottest items once each (the paper's warm-up): a
// point read for point workloads, a one-record range read for range
// workloads, so that with the paper's adjacent hot set the buffer ends
// up holding the hot run of keys sealed, as the prototype's loading does.
func (w *cacheWork) warmTopK(ctx context.Context, r reader, k, workers int) error {
	top := ycsb.TopK(w.gen, k)
	var next atomic.Int64
	_, err := drive(ctx, workers, 0, len(top), 0, 0, func(ctx context.Context, _ *rand.Rand, _ time.Time) (int, error) {
		i := top[next.Add(1)-1]
		if w.sp.op == opScan {
			_, err := r.scan(ctx, itemKey(i), itemKey(i+1), 1)
			return 0, err
		}
		_, _, err := r.get(ctx, itemKey(i))
		return 0, err
	})
	return err
}

// runCache measures one cache run on t: a fresh buffer with the spec's
// policy and budget (on a real target, the spec's server in front of the
// backend), warmed as the workload says with the latency off, then
// sc.Measure (or sc.MeasureOps operations) of sc.Workers clients. On a
// real target the CPU time of every server process over the measured
// phase is part of the result.
func runCache(ctx context.Context, t cacheTarget, recBytes int64, sp runSpec, sc Scale, seed uint64) (Result, error) {
	c, err := openCache(ctx, t, recBytes, sp, sc, seed)
	if err != nil {
		return Result{}, err
	}
	if err := c.slice(ctx, sc.Measure, sc.MeasureOps, 2); err != nil {
		return Result{}, errors.Join(err, c.s.close())
	}
	return c.result()
}

// cacheRun is one series' run at one point: its stack, opened and
// warmed, and what its measured slices added up to.
type cacheRun struct {
	s       cacheStack
	w       *cacheWork
	workers int
	seed    uint64
	p       phase
	res     Result      // the counters' sums; the phase is set by result
	net     *delayProxy // the simulated round trip's (Options.RTT), or nil
}

// openCache opens and warms a run's stack (see runCache).
func openCache(ctx context.Context, t cacheTarget, recBytes int64, sp runSpec, sc Scale, seed uint64) (*cacheRun, error) {
	n := t.items()
	gen, err := sp.generator(n)
	if err != nil {
		return nil, err
	}
	fit := sp.buffer * float64(n)
	spec := stackSpec{server: sp.server, policy: sp.policy, mode: sp.mode, maxBytes: max(int64(fit*float64(recBytes)), 8<<10), replicas: sp.replicas}
	if t.real() {
		spec.maxBytes = max(spec.maxBytes, 64<<10) // nemo's smallest budget with room for the limits the run sets
	}
	s, err := t.open(ctx, spec)
	if err != nil {
		return nil, err
	}
	c := &cacheRun{s: s, w: &cacheWork{sp: sp, gen: gen, n: n, vsz: t.valueSize()}, workers: sc.Workers, seed: seed}
	if d, ok := t.(interface{ delayProxy() *delayProxy }); ok {
		c.net = d.delayProxy()
	}
	if sp.workers > 0 {
		c.workers = sp.workers
	}
	s.warming(true)
	// One read opens the keyspace (a frontend looks the table up once),
	// so that no policy is charged for it.
	if _, _, err := s.get(ctx, itemKey(0)); err != nil {
		return nil, errors.Join(fmt.Errorf("first read: %w", err), s.close())
	}
	s.warming(false)
	if err := c.w.warm(ctx, s, t.real(), fit, c.workers, sc, seed); err != nil {
		return nil, errors.Join(fmt.Errorf("warm-up: %w", err), s.close())
	}
	return c, nil
}

// slice measures dur (or n operations) of the run's workload, request
// stream stream, and adds it to the run's totals.
func (c *cacheRun) slice(ctx context.Context, dur time.Duration, n int, stream uint64) error {
	s := c.s
	r0, b0, t0, n0 := s.remote(), s.buffer(), storeCalls(s), c.net.tally()
	c0, err := cpuSnapshot(s.procs())
	if err != nil {
		return err
	}
	p, err := drive(ctx, c.workers, dur, n, c.seed, stream, func(ctx context.Context, rng *rand.Rand, _ time.Time) (int, error) {
		return 0, c.w.do(ctx, s, rng)
	})
	if err != nil {
		return err
	}
	c1, err := cpuSnapshot(s.procs())
	if err != nil {
		return err
	}
	r1, b1, t1, n1 := s.remote(), s.buffer(), storeCalls(s), c.net.tally()
	c.p.ops += p.ops
	c.p.aborts += p.aborts
	c.p.elapsed += p.elapsed
	c.p.lat = append(c.p.lat, p.lat...)
	res := &c.res
	res.Remote += r1 - r0
	hits := b1.Hits + b1.NegativeHits + b1.RangeHits - b0.Hits - b0.NegativeHits - b0.RangeHits
	res.Hits += hits
	res.Lookups += hits + b1.Misses + b1.RangeFetches - b0.Misses - b0.RangeFetches
	res.RefreshedAhead += b1.RefreshedAhead - b0.RefreshedAhead
	res.RefreshSkipped += b1.RefreshSkipped - b0.RefreshSkipped
	res.Coalesced += b1.Coalesced - b0.Coalesced
	res.StoreTime += t1.time - t0.time
	res.StoreCalls += t1.calls - t0.calls
	res.NetLate += n1.late - n0.late
	res.NetChunks += n1.chunks - n0.chunks
	for i, pr := range s.procs() {
		if i == len(res.CPU) {
			res.CPU = append(res.CPU, ProcCPU{Role: pr.role})
		}
		res.CPU[i].Time += c1[i] - c0[i]
	}
	return nil
}

// storeTally is how long a nemo's calls to its backend took so far, and
// how many there were.
type storeTally struct {
	time  time.Duration
	calls uint64
}

// storeCalls is s's storeTally, when it runs nemo processes (zero
// otherwise).
func storeCalls(s any) storeTally {
	if t, ok := s.(interface{ storeCalls() storeTally }); ok {
		return t.storeCalls()
	}
	return storeTally{}
}

// unmeasured runs the workload for dur without counting it.
func (c *cacheRun) unmeasured(ctx context.Context, dur time.Duration, stream uint64) error {
	_, err := drive(ctx, c.workers, dur, 0, c.seed, stream, func(ctx context.Context, rng *rand.Rand, _ time.Time) (int, error) {
		return 0, c.w.do(ctx, c.s, rng)
	})
	return err
}

// result closes the run's stack and returns what its slices measured.
func (c *cacheRun) result() (Result, error) {
	slices.Sort(c.p.lat)
	res := c.res
	if o, ok := c.s.(interface{ owners() (int, int, bool) }); ok {
		if n, k, ok := o.owners(); ok {
			res.Replicas, res.Owners = n, k
		}
	}
	res.setPhase(c.p)
	return res, c.s.close()
}

// warm warms a fresh stack as the workload says: the paper's top-K (95%
// of what the buffer holds), or the workload itself (sc.WarmOps
// operations; on a real target, whose calls take a millisecond, for
// sc.Measure instead). A cold run, or one with no buffer (policy none, or
// no nemo), is not warmed. With sc.Settle the workload then runs that
// long unmeasured (see Scale.Settle).
func (w *cacheWork) warm(ctx context.Context, s cacheStack, real bool, fit float64, workers int, sc Scale, seed uint64) error {
	if w.sp.cold || w.sp.server != serverNemo || w.sp.policy == cache.PolicyNone {
		return nil
	}
	s.warming(true)
	defer s.warming(false)
	if err := w.warmUp(ctx, s, real, fit, workers, sc, seed); err != nil || sc.Settle <= 0 {
		return err
	}
	_, err := drive(ctx, workers, sc.Settle, 0, seed, 3, func(ctx context.Context, rng *rand.Rand, _ time.Time) (int, error) {
		return 0, w.do(ctx, s, rng)
	})
	return err
}

func (w *cacheWork) warmUp(ctx context.Context, s cacheStack, real bool, fit float64, workers int, sc Scale, seed uint64) error {
	if w.sp.workload == ycsb.WorkloadPaper {
		return w.warmTopK(ctx, s, int(0.95*fit), workers)
	}
	ops, dur := sc.WarmOps, time.Duration(0)
	if real {
		ops, dur = 0, sc.Measure
	}
	_, err := drive(ctx, workers, dur, ops, seed, 1, func(ctx context.Context, rng *rand.Rand, _ time.Time) (int, error) {
		return 0, w.do(ctx, s, rng)
	})
	return err
}
