package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/ycsb"
	"github.com/nemocache/nemo/txn"
	"github.com/nemocache/nemo/wal"
)

const ks = adapters.Keyspace("usertable")

var quiet = slog.New(slog.DiscardHandler)

// encKey is the 8-byte big-endian key of v: byte order is integer order,
// and PCL's partition of the key is v / PCLPartitionSize.
func encKey(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func decKey(k []byte) (uint64, bool) {
	if len(k) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(k), true
}

// valueFor is the value stored under key, by the preload and by every
// insert alike, so a scan's values can be checked without a lookup table.
func valueFor(key []byte, n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = key[i%len(key)] ^ byte(i)
	}
	return v
}

// ycsbSpec is one YCSB-E style configuration.
type ycsbSpec struct {
	// Keys are integers in [0, 2^domainBits). The preloaded records and
	// the inserted keys are uniform over [0, 2^regionBits): regionBits ==
	// domainBits spreads the data over the whole domain; a smaller one
	// keeps it in the domain's low end (dense ids in a wide key type).
	domainBits, regionBits uint
	// PCL gets 2^budgetBits partitions over the domain (its lock-table
	// budget), so its partition size is 2^(domainBits-budgetBits).
	budgetBits uint
	records    int           // preloaded into the store
	valueSize  int           // bytes per value
	latency    time.Duration // the fault store's delay on every remote call
	cacheFrac  float64       // buffer budget as a fraction of the preloaded bytes
	workers    int           // concurrent clients, one transaction at a time each
	insertPct  int           // percent of transactions that insert; the rest scan
	scanLen    int           // records per scan
	// unbounded scans pass a nil end (YCSB's scan(start, n)) instead of
	// the key scanLen preloaded records further on.
	unbounded bool
	// warm runs the workload unmeasured first; measure is the measured
	// phase. Both are wall-clock durations, so a run's length is fixed.
	warm, measure time.Duration
	// scanHold keeps each scan transaction open this long after its scan
	// (an interactive client), to make lock overlap certain in tests.
	scanHold time.Duration
	// check verifies every scan against a model of the committed keys.
	check bool
	seed  uint64
	// durable gives the engine a WAL (group commit, real fsyncs, in the
	// test's temporary directory), so commits hold their locks across the
	// fsync; early releases them once the commit is sequenced in the log
	// (txn.Options.EarlyRelease).
	durable, early bool
	// noWait makes a conflicting lock request fail at once (NO_WAIT, the
	// paper's 2PL; txn.Options.LockWait < 0) instead of waiting: the
	// client retries after a backoff.
	noWait bool
}

func (sp ycsbSpec) pclPartitionSize() uint64 { return 1 << (sp.domainBits - sp.budgetBits) }

// draw returns a uniform key in [0, 2^regionBits).
func (sp ycsbSpec) draw(rng *rand.Rand) uint64 { return rng.Uint64() >> (64 - sp.regionBits) }

// dataset is a spec's preloaded keys, shared by the runs of both
// strategies so they see the same data and the same scan ranges.
type dataset struct {
	sp   ycsbSpec
	keys []uint64 // sorted, distinct
	gen  *ycsb.ScrambledZipfian
}

func newDataset(tb testing.TB, sp ycsbSpec) *dataset {
	tb.Helper()
	if sp.regionBits > sp.domainBits || sp.budgetBits > sp.domainBits || sp.regionBits == 0 {
		tb.Fatalf("bad spec: domain 2^%d, region 2^%d, budget 2^%d", sp.domainBits, sp.regionBits, sp.budgetBits)
	}
	if sp.regionBits < 63 && uint64(sp.records) > (uint64(1)<<sp.regionBits)/2 {
		tb.Fatalf("%d records do not fit sparsely in 2^%d keys", sp.records, sp.regionBits)
	}
	rng := rand.New(rand.NewPCG(sp.seed, 0xda7a))
	set := make(map[uint64]struct{}, sp.records)
	for len(set) < sp.records {
		set[sp.draw(rng)] = struct{}{}
	}
	keys := make([]uint64, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// Scan start ranks are zipfian, scrambled so the hot ranges are
	// scattered over the key space. A bounded scan runs from keys[i] to
	// keys[i+scanLen], so i stops scanLen short of the end.
	gen, err := ycsb.NewScrambledZipfian(uint64(len(keys)-sp.scanLen), ycsb.DefaultTheta)
	if err != nil {
		tb.Fatal(err)
	}
	return &dataset{sp: sp, keys: keys, gen: gen}
}

// stack is one fresh engine over a freshly loaded store.
type stack struct {
	store *embedded.Store
	fault *fault.Store
	buf   *cache.Buffer
	eng   *txn.Engine
}

func (d *dataset) open(tb testing.TB, phantom txn.Phantom) *stack {
	tb.Helper()
	ctx := context.Background()
	st, err := embedded.Open(tb.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	var batch []adapters.Record
	flush := func() {
		if _, err := st.Upsert(ctx, ks, adapters.Puts(batch)); err != nil {
			tb.Fatal(err)
		}
		batch = batch[:0]
	}
	for _, k := range d.keys {
		key := encKey(k)
		if batch = append(batch, adapters.Record{Key: key, Value: valueFor(key, d.sp.valueSize)}); len(batch) == 1000 {
			flush()
		}
	}
	flush()
	f := fault.New(st, fault.Config{Default: fault.OpConfig{Latency: d.sp.latency}})
	data := float64(len(d.keys)) * float64(8+d.sp.valueSize+64) // 64: the default RecordOverhead
	buf, err := cache.New(f, cache.Options{MaxBytes: max(int64(d.sp.cacheFrac*data), 64<<10), Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	buf.OpenKeyspace(ks)
	topts := txn.Options{Phantom: phantom, PCLPartitionSize: d.sp.pclPartitionSize(), Logger: quiet, EarlyRelease: d.sp.early}
	if d.sp.noWait {
		topts.LockWait = -1
	}
	if d.sp.durable {
		wo := wal.Options{Dir: tb.TempDir()}
		wo.Logger = quiet
		topts.WAL = &wo
	}
	eng, err := txn.New(buf, topts)
	if err != nil {
		tb.Fatal(err)
	}
	return &stack{store: st, fault: f, buf: buf, eng: eng}
}

func (s *stack) close() {
	s.eng.Close()
	s.buf.Close()
	s.store.Close()
}

// model knows which keys exist, for checking scans: the preloaded ones
// (never deleted) and the inserted ones with the order they were
// acknowledged in.
type model struct {
	pre   []uint64
	seq   atomic.Uint64 // acknowledgements so far
	mu    sync.Mutex
	tried map[uint64]int // insert attempts per key
	acked []ackedKey     // sorted by key
}

type ackedKey struct{ key, seq uint64 }

func (m *model) try(k uint64) {
	m.mu.Lock()
	m.tried[k]++
	m.mu.Unlock()
}

func (m *model) ack(k uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i, _ := slices.BinarySearchFunc(m.acked, k, func(a ackedKey, k uint64) int { return cmpU64(a.key, k) })
	m.acked = slices.Insert(m.acked, i, ackedKey{k, m.seq.Add(1)})
}

// mayExist reports whether k may be in the store: preloaded, or attempted
// more than others times (an inserter passes 1 for its own attempt).
func (m *model) mayExist(k uint64, others int) bool {
	if _, ok := slices.BinarySearch(m.pre, k); ok {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tried[k] > others
}

// mustSee lists the keys in [lo, hi) (hi 0 with open: unbounded) that a
// scan which began after acknowledgement seq0 must return: every preloaded
// key and every insert acknowledged by then.
func (m *model) mustSee(lo, hi uint64, open bool, seq0 uint64) []uint64 {
	in := func(k uint64) bool { return k >= lo && (open || k < hi) }
	var out []uint64
	for i, _ := slices.BinarySearch(m.pre, lo); i < len(m.pre) && in(m.pre[i]); i++ {
		out = append(out, m.pre[i])
	}
	m.mu.Lock()
	i, _ := slices.BinarySearchFunc(m.acked, lo, func(a ackedKey, k uint64) int { return cmpU64(a.key, k) })
	for ; i < len(m.acked) && in(m.acked[i].key); i++ {
		if m.acked[i].seq <= seq0 {
			out = append(out, m.acked[i].key)
		}
	}
	m.mu.Unlock()
	slices.Sort(out)
	return out
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// tally is what the workers of one phase did.
type tally struct {
	scans, inserts  atomic.Int64 // committed transactions
	scanConflicts   atomic.Int64 // scan attempts aborted by a lock conflict
	insertConflicts atomic.Int64
	dups            atomic.Int64 // inserts that drew an existing key
	continuations   atomic.Int64 // extra Scan calls after a short page
	mu              sync.Mutex
	errs            []string // the first few failures
}

func (t *tally) fail(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.errs) < 5 {
		t.errs = append(t.errs, fmt.Sprintf(format, args...))
	}
}

// result is one strategy's measured phase.
type result struct {
	phantom                 txn.Phantom
	elapsed                 time.Duration
	scans, inserts          int64
	scanConflicts, insConfl int64
	dups, continuations     int64
	eng                     txn.Stats // engine counters over the phase
	rangeFetches, keyMisses uint64    // remote reads over the phase
	stale                   uint64    // unlocked scan passes redone after racing a write-back
	errs                    []string
	checkErr                error // Buffer.Check and leftovers, with check
}

func (r *result) add(o result) {
	r.phantom = o.phantom
	r.elapsed += o.elapsed
	r.scans += o.scans
	r.inserts += o.inserts
	r.scanConflicts += o.scanConflicts
	r.insConfl += o.insConfl
	r.dups += o.dups
	r.continuations += o.continuations
	r.eng.Commits += o.eng.Commits
	r.eng.Aborts += o.eng.Aborts
	r.eng.Conflicts += o.eng.Conflicts
	r.eng.LockHold += o.eng.LockHold
	r.eng.LockWaits += o.eng.LockWaits
	r.eng.LockWait += o.eng.LockWait
	r.rangeFetches += o.rangeFetches
	r.keyMisses += o.keyMisses
	r.stale += o.stale
	r.errs = append(r.errs, o.errs...)
	r.checkErr = errors.Join(r.checkErr, o.checkErr)
}

func (r result) conflicts() int64 { return r.scanConflicts + r.insConfl }

// insertRate is inserts committed per second.
func (r result) insertRate() float64 { return float64(r.inserts) / r.elapsed.Seconds() }
func (r result) scanRate() float64   { return float64(r.scans) / r.elapsed.Seconds() }

// abortRate is conflict aborts per attempt (an attempt that drew an
// existing key is neither).
func (r result) abortRate() float64 {
	return float64(r.conflicts()) / max(float64(r.scans+r.inserts+r.conflicts()), 1)
}

// insertAbortRate is the same for insert attempts alone.
func (r result) insertAbortRate() float64 {
	return float64(r.insConfl) / max(float64(r.inserts+r.insConfl), 1)
}

// lockHold is the engine's mean lock-hold time per finished transaction.
func (r result) lockHold() time.Duration {
	n := r.eng.Commits + r.eng.Aborts
	if n == 0 {
		return 0
	}
	return r.eng.LockHold / time.Duration(n)
}

func (r result) String() string {
	return fmt.Sprintf("%-7s %7.0f ins/s %8.0f scans/s  abort %5.2f%% (ins %5.2f%%, scan conflicts %d, ins conflicts %d)  waits %d (%v)  hold %7.1fµs  dups %d  cont %d  fetch/scan %.2f  stale/scan %.2f  miss/ins %.2f",
		r.phantom, r.insertRate(), r.scanRate(), 100*r.abortRate(), 100*r.insertAbortRate(), r.scanConflicts, r.insConfl,
		r.eng.LockWaits, r.eng.LockWait.Round(time.Millisecond), float64(r.lockHold())/float64(time.Microsecond), r.dups, r.continuations,
		float64(r.rangeFetches)/max(float64(r.scans), 1), float64(r.stale)/max(float64(r.scans), 1),
		float64(r.keyMisses)/max(float64(r.inserts), 1))
}

// run measures one strategy on a fresh stack: a warm-up phase, then the
// measured phase, then (with check) the buffer's invariants.
func (d *dataset) run(tb testing.TB, phantom txn.Phantom) result {
	tb.Helper()
	r := d.start(tb, phantom)
	r.measure(d.sp.measure)
	return r.finish(tb)
}

// runPair measures both strategies on stacks of their own, alternating
// slices of the measured phase between them (slices of them each), so a
// change in the machine's load meanwhile (other work on a shared machine)
// falls on both alike.
func (d *dataset) runPair(tb testing.TB, slices int) (nk, pcl result) {
	tb.Helper()
	a, b := d.start(tb, txn.NextKey), d.start(tb, txn.PCL)
	for range slices {
		a.measure(d.sp.measure / time.Duration(slices))
		b.measure(d.sp.measure / time.Duration(slices))
	}
	return a.finish(tb), b.finish(tb)
}

// runner is one strategy's stack between start and finish, and what its
// measured slices did.
type runner struct {
	d       *dataset
	phantom txn.Phantom
	s       *stack
	m       *model
	t       tally
	slices  uint64 // measured so far: each slice draws from its own seed
	elapsed time.Duration
	eng     txn.Stats
	buf     cache.Stats
}

// start opens a fresh stack for phantom and runs the warm-up.
func (d *dataset) start(tb testing.TB, phantom txn.Phantom) *runner {
	tb.Helper()
	r := &runner{d: d, phantom: phantom, s: d.open(tb, phantom)}
	if d.sp.check {
		r.m = &model{pre: d.keys, tried: map[uint64]int{}}
	}
	if d.sp.warm > 0 {
		w := d.phase(context.Background(), r.s.eng, r.m, d.sp.warm, 1)
		if len(w.errs) > 0 {
			r.s.close()
			tb.Fatalf("%s warm-up: %s", phantom, w.errs[0])
		}
	}
	return r
}

// measure runs one measured slice of dur and adds up what it did.
func (r *runner) measure(dur time.Duration) {
	e0, b0 := r.s.eng.Stats(), r.s.buf.Stats()
	start := time.Now()
	r.slices++
	t := r.d.phase(context.Background(), r.s.eng, r.m, dur, 1+r.slices)
	r.elapsed += time.Since(start)
	e1, b1 := r.s.eng.Stats(), r.s.buf.Stats()
	r.t.scans.Add(t.scans.Load())
	r.t.inserts.Add(t.inserts.Load())
	r.t.scanConflicts.Add(t.scanConflicts.Load())
	r.t.insertConflicts.Add(t.insertConflicts.Load())
	r.t.dups.Add(t.dups.Load())
	r.t.continuations.Add(t.continuations.Load())
	r.t.errs = append(r.t.errs, t.errs...)
	r.eng.Commits += e1.Commits - e0.Commits
	r.eng.Aborts += e1.Aborts - e0.Aborts
	r.eng.Conflicts += e1.Conflicts - e0.Conflicts
	r.eng.LockHold += e1.LockHold - e0.LockHold
	r.eng.LockWaits += e1.LockWaits - e0.LockWaits
	r.eng.LockWait += e1.LockWait - e0.LockWait
	r.buf.RangeFetches += b1.RangeFetches - b0.RangeFetches
	r.buf.Misses += b1.Misses - b0.Misses
	r.buf.EvictDeferred += b1.EvictDeferred - b0.EvictDeferred
}

// finish closes the stack (with check, after the buffer's invariants) and
// returns the result of the measured slices.
func (r *runner) finish(tb testing.TB) result {
	tb.Helper()
	defer r.s.close()
	res := result{
		phantom: r.phantom, elapsed: r.elapsed,
		scans: r.t.scans.Load(), inserts: r.t.inserts.Load(),
		scanConflicts: r.t.scanConflicts.Load(), insConfl: r.t.insertConflicts.Load(),
		dups: r.t.dups.Load(), continuations: r.t.continuations.Load(),
		eng:          r.eng,
		rangeFetches: r.buf.RangeFetches, keyMisses: r.buf.Misses, stale: r.buf.EvictDeferred,
		errs: r.t.errs,
	}
	if r.d.sp.check {
		if n := r.s.eng.Stats().Live; n != 0 {
			res.checkErr = fmt.Errorf("%d transactions still live", n)
		}
		// Check needs a quiescent buffer: stop the evictor and the
		// flusher first (it reads the byte counters after letting go of
		// the latches, so a background eviction would look like an
		// accounting error).
		r.s.eng.Close()
		r.s.buf.Close()
		r.s.fault.SetConfig(fault.Config{}) // Check reads the store per record
		res.checkErr = errors.Join(res.checkErr, r.s.buf.Check(context.Background()))
	}
	return res
}

// phase runs sp.workers clients for dur, each with its own random
// generator seeded by (seed, phase, worker).
func (d *dataset) phase(ctx context.Context, eng *txn.Engine, m *model, dur time.Duration, phase uint64) *tally {
	t := &tally{}
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for g := range d.sp.workers {
		wg.Go(func() {
			c := client{d: d, eng: eng, m: m, t: t, deadline: deadline,
				rng: rand.New(rand.NewPCG(d.sp.seed^phase<<32, uint64(g)))}
			for time.Now().Before(deadline) {
				if c.rng.IntN(100) < d.sp.insertPct {
					c.insert(ctx)
				} else {
					c.scan(ctx)
				}
			}
		})
	}
	wg.Wait()
	return t
}

// client is one worker: one transaction at a time, retried on conflict.
type client struct {
	d        *dataset
	eng      *txn.Engine
	m        *model
	t        *tally
	rng      *rand.Rand
	deadline time.Time
}

// retry runs attempt until it succeeds, fails otherwise than by a lock
// conflict, or the phase ends (a transaction cut off by the deadline is
// simply dropped), backing off after each conflict. It reports whether the
// attempt succeeded.
func (c *client) retry(conflicts *atomic.Int64, attempt func() error) (bool, error) {
	backoff := 50 * time.Microsecond
	for {
		err := attempt()
		if !errors.Is(err, txn.ErrConflict) {
			return err == nil, err
		}
		conflicts.Add(1)
		if !time.Now().Before(c.deadline) {
			return false, nil
		}
		time.Sleep(backoff/2 + rand.N(backoff))
		backoff = min(2*backoff, 5*time.Millisecond)
	}
}

func (c *client) scan(ctx context.Context) {
	sp := c.d.sp
	i := c.d.gen.Next(c.rng)
	lo := c.d.keys[i]
	hi := c.d.keys[i+uint64(sp.scanLen)]
	start, end := encKey(lo), encKey(hi)
	if sp.unbounded {
		end = nil
	}
	var seq0 uint64
	var got []adapters.Record
	ok, err := c.retry(&c.t.scanConflicts, func() error {
		if c.m != nil {
			seq0 = c.m.seq.Load()
		}
		// A read-write transaction, so that the scan locks (the benchmark
		// measures the phantom strategies); a read-only one would read a
		// snapshot without locks.
		tx, err := c.eng.Begin(false)
		if err != nil {
			return err
		}
		got = got[:0]
		from := start
		for {
			recs, next, err := tx.Scan(ctx, ks, from, end, sp.scanLen-len(got))
			if err != nil {
				tx.Abort()
				return err
			}
			got = append(got, recs...)
			if len(got) >= sp.scanLen || next == nil {
				break
			}
			c.t.continuations.Add(1)
			from = next
		}
		if sp.scanHold > 0 {
			time.Sleep(sp.scanHold)
		}
		return tx.Commit(ctx)
	})
	if err != nil {
		c.t.fail("scan [%d, %d): %v", lo, hi, err)
		return
	}
	if !ok {
		return
	}
	c.t.scans.Add(1)
	if c.m != nil {
		if err := c.checkScan(lo, hi, got, seq0); err != nil {
			c.t.fail("scan [%d, %d): %v", lo, hi, err)
		}
	}
}

// checkScan verifies a committed scan: at most scanLen records, ascending,
// in range, each a key that may exist with its value, and none missing
// that existed when the scan began, up to where the scan stopped. The
// range holds scanLen preloaded keys, so a bounded scan returns exactly
// scanLen records.
func (c *client) checkScan(lo, hi uint64, got []adapters.Record, seq0 uint64) error {
	sp := c.d.sp
	if len(got) > sp.scanLen || (!sp.unbounded && len(got) != sp.scanLen) {
		return fmt.Errorf("%d records, want %d", len(got), sp.scanLen)
	}
	keys := make([]uint64, len(got))
	for j, r := range got {
		k, ok := decKey(r.Key)
		switch {
		case !ok:
			return fmt.Errorf("record %d has key %x, not an 8-byte key", j, r.Key)
		case k < lo || (!sp.unbounded && k >= hi):
			return fmt.Errorf("record %d: key %d out of range", j, k)
		case j > 0 && k <= keys[j-1]:
			return fmt.Errorf("record %d: key %d not after %d", j, k, keys[j-1])
		case !c.m.mayExist(k, 0):
			return fmt.Errorf("record %d: key %d was never written", j, k)
		case !bytes.Equal(r.Value, valueFor(r.Key, sp.valueSize)):
			return fmt.Errorf("record %d: key %d has a wrong value", j, k)
		}
		keys[j] = k
	}
	// The scan examined [lo, cut): all of the range if it came back
	// short, else up to and including its last record.
	cut, open := hi, sp.unbounded
	if len(keys) == sp.scanLen {
		cut, open = keys[len(keys)-1]+1, false
	}
	for _, k := range c.m.mustSee(lo, cut, open, seq0) {
		if _, ok := slices.BinarySearch(keys, k); !ok {
			return fmt.Errorf("key %d, existing before the scan began, is missing from %v", k, keys)
		}
	}
	return nil
}

func (c *client) insert(ctx context.Context) {
	sp := c.d.sp
	val := make([]byte, sp.valueSize)
	for time.Now().Before(c.deadline) {
		k := sp.draw(c.rng)
		key := encKey(k)
		copy(val, valueFor(key, sp.valueSize))
		if c.m != nil {
			c.m.try(k)
		}
		ok, err := c.retry(&c.t.insertConflicts, func() error {
			tx, err := c.eng.Begin(false)
			if err != nil {
				return err
			}
			if err := tx.Insert(ctx, ks, key, val); err != nil {
				tx.Abort()
				return err
			}
			return tx.Commit(ctx)
		})
		switch {
		case errors.Is(err, txn.ErrExists):
			// Not fresh after all: draw another key.
			c.t.dups.Add(1)
			if c.m != nil && !c.m.mayExist(k, 1) {
				c.t.fail("insert %d: exists, but nobody else wrote it", k)
			}
			continue
		case err != nil:
			c.t.fail("insert %d: %v", k, err)
		case ok:
			c.t.inserts.Add(1)
			if c.m != nil {
				c.m.ack(k)
			}
		}
		return
	}
}

// compareYCSB runs both strategies on one dataset (each iteration of the
// benchmark loop runs both) and reports each one's figures and the ratios.
func compareYCSB(b *testing.B, sp ycsbSpec) {
	d := newDataset(b, sp)
	var nk, pcl result
	for b.Loop() {
		n, p := d.runPair(b, 8)
		nk.add(n)
		pcl.add(p)
	}
	for _, r := range []result{nk, pcl} {
		b.Log(r)
		if len(r.errs) > 0 {
			b.Fatalf("%s: %d failures, first: %s", r.phantom, len(r.errs), r.errs[0])
		}
	}
	b.ReportMetric(nk.insertRate(), "nk_ins/s")
	b.ReportMetric(pcl.insertRate(), "pcl_ins/s")
	b.ReportMetric(nk.insertRate()/pcl.insertRate(), "ins_ratio")
	b.ReportMetric(nk.scanRate()/pcl.scanRate(), "scan_ratio")
	b.ReportMetric(100*nk.abortRate(), "nk_abort%")
	b.ReportMetric(100*pcl.abortRate(), "pcl_abort%")
	b.ReportMetric(100*nk.insertAbortRate(), "nk_insabort%")
	b.ReportMetric(100*pcl.insertAbortRate(), "pcl_insabort%")
	b.ReportMetric(float64(nk.eng.LockWaits)/max(float64(nk.scans+nk.inserts), 1), "nk_waits/op")
	b.ReportMetric(float64(pcl.eng.LockWaits)/max(float64(pcl.scans+pcl.inserts), 1), "pcl_waits/op")
	b.ReportMetric(float64(nk.lockHold())/float64(time.Microsecond), "nk_hold_µs")
	b.ReportMetric(float64(pcl.lockHold())/float64(time.Microsecond), "pcl_hold_µs")
}
