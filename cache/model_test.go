package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/adapters/storetest"
)

// The model test runs random operation sequences against a Buffer and a
// reference ordered map side by side, asserting every answer, running Check
// after every step, and comparing the store with the model at the end.

type opKind uint8

const (
	opGet opKind = iota
	opScan
	opUpsert
	opDelete
	opInsert // LockKey, MustNotExist, Apply
	opUpdate // LockKey, MustExist, Apply
	opBatch  // Apply of several writes, possibly to the same key
	opEvictStep
	opEvictUntil
	opFlush
	opFailNext // the next call of failOp fails
	opOutage   // the store goes down (down) or comes back
	numOpKinds
)

type op struct {
	kind   opKind
	ks     adapters.Keyspace
	key    []byte // Get / write key; Scan start (nil: from the first key)
	end    []byte // Scan end (nil: unbounded)
	val    []byte
	limit  int
	writes []Write
	target int64
	failOp adapters.Op
	down   bool
}

func (o op) String() string {
	switch o.kind {
	case opGet:
		return fmt.Sprintf("Get(%s, %s)", o.ks, fmtKey(o.key))
	case opScan:
		s, e := "nil", "nil"
		if o.key != nil {
			s = fmtKey(o.key)
		}
		if o.end != nil {
			e = fmtKey(o.end)
		}
		return fmt.Sprintf("Scan(%s, %s, %s, %d)", o.ks, s, e, o.limit)
	case opUpsert:
		return fmt.Sprintf("Upsert(%s, %s=%s)", o.ks, fmtKey(o.key), o.val)
	case opDelete:
		return fmt.Sprintf("Delete(%s, %s)", o.ks, fmtKey(o.key))
	case opInsert:
		return fmt.Sprintf("Insert(%s, %s=%s)", o.ks, fmtKey(o.key), o.val)
	case opUpdate:
		return fmt.Sprintf("Update(%s, %s=%s)", o.ks, fmtKey(o.key), o.val)
	case opBatch:
		var ws []string
		for _, w := range o.writes {
			if w.Delete {
				ws = append(ws, "-"+fmtKey(w.Key))
			} else {
				ws = append(ws, fmtKey(w.Key)+"="+string(w.Value))
			}
		}
		return fmt.Sprintf("Apply(%s, %s)", o.ks, strings.Join(ws, " "))
	case opEvictStep:
		return fmt.Sprintf("EvictStep(%s)", o.ks)
	case opEvictUntil:
		return fmt.Sprintf("EvictUntil(%d)", o.target)
	case opFlush:
		return "Flush"
	case opFailNext:
		return fmt.Sprintf("FailNext(%s)", o.failOp)
	case opOutage:
		return fmt.Sprintf("Outage(%v)", o.down)
	}
	return "?"
}

// runner drives one Buffer and its model.
type runner struct {
	tb     testing.TB
	ctx    context.Context
	b      *Buffer
	raw    adapters.Store // the store itself, no faults
	fs     *fault.Store
	sw     *switchStore // nil when Check must not run between steps (concurrent use)
	model  map[adapters.Keyspace]map[string][]byte
	policy Policy
	step   int
	trace  []string // recent operations, printed on failure
}

func newRunner(tb testing.TB, b *Buffer, raw adapters.Store, fs *fault.Store, sw *switchStore, spaces ...adapters.Keyspace) *runner {
	r := &runner{tb: tb, ctx: context.Background(), b: b, raw: raw, fs: fs, sw: sw, policy: b.Options().Policy,
		model: map[adapters.Keyspace]map[string][]byte{}}
	for _, ks := range spaces {
		b.OpenKeyspace(ks)
		r.model[ks] = map[string][]byte{}
	}
	return r
}

func (r *runner) fail(f string, args ...any) {
	r.tb.Helper()
	start := max(0, len(r.trace)-25)
	var sb strings.Builder
	for i, s := range r.trace[start:] {
		fmt.Fprintf(&sb, "\n  %d: %s", r.step-len(r.trace[start:])+i+1, s)
	}
	msg := fmt.Sprintf("policy %s step %d: %s\nrecent operations:%s", r.policy, r.step, fmt.Sprintf(f, args...), sb.String())
	if r.sw == nil {
		// Concurrent runs: FailNow belongs to the test goroutine.
		r.tb.Error(msg)
		runtime.Goexit()
	}
	r.tb.Fatal(msg)
}

// isStoreErr reports whether err is a backend failure surfaced properly:
// wrapped in ErrStore with adapters.ErrUnavailable reachable.
func isStoreErr(err error) bool {
	return errors.Is(err, ErrStore) && errors.Is(err, adapters.ErrUnavailable)
}

// modelRange returns the model's records in [start, end) in key order.
func (r *runner) modelRange(ks adapters.Keyspace, start, end []byte) []adapters.Record {
	var out []adapters.Record
	for k, v := range r.model[ks] {
		if bytes.Compare([]byte(k), start) >= 0 && (end == nil || k < string(end)) {
			out = append(out, adapters.Record{Key: []byte(k), Value: v})
		}
	}
	slices.SortFunc(out, func(a, b adapters.Record) int { return bytes.Compare(a.Key, b.Key) })
	return out
}

// faultsOff runs fn with injected faults suspended (sequential runs only).
func (r *runner) faultsOff(fn func()) {
	if r.sw == nil {
		fn()
		return
	}
	was := r.sw.on.Load()
	r.sw.on.Store(false)
	defer r.sw.on.Store(was)
	fn()
}

// verifyKey reads key with faults off and compares it with the model: used
// right after an operation failed, to show that it changed nothing visible.
func (r *runner) verifyKey(ks adapters.Keyspace, key []byte, after string) {
	r.tb.Helper()
	if r.sw == nil {
		return
	}
	r.faultsOff(func() {
		v, ok, err := r.b.Get(r.ctx, ks, key)
		mv, mok := r.model[ks][string(key)]
		if err != nil || ok != mok || !bytes.Equal(v, mv) {
			r.fail("after %s, Get(%s) = %q %v %v, model %q %v", after, fmtKey(key), v, ok, err, mv, mok)
		}
	})
}

// resync handles an ambiguous failed write-through (policy none): the store
// may or may not have applied it, but each key must hold its old value or
// the written one. The model takes what the store has.
func (r *runner) resync(ks adapters.Keyspace, writes []Write) {
	r.tb.Helper()
	last := map[string]Write{}
	for _, w := range writes {
		last[string(w.Key)] = w
	}
	for k, w := range last {
		vals, err := storetest.Values(r.raw.Get(r.ctx, ks, [][]byte{[]byte(k)}))
		if err != nil {
			r.fail("resync: %v", err)
		}
		old, had := r.model[ks][k]
		got := vals[0]
		okOld := (got == nil && !had) || (got != nil && had && bytes.Equal(got, old))
		okNew := (w.Delete && got == nil) || (!w.Delete && got != nil && bytes.Equal(got, w.Value))
		if !okOld && !okNew {
			r.fail("failed write-through left %s = %q: neither the old %q nor the new value", fmtKey([]byte(k)), got, old)
		}
		if got == nil {
			delete(r.model[ks], k)
		} else {
			r.model[ks][k] = got
		}
	}
}

func (r *runner) applyModel(ks adapters.Keyspace, writes []Write) {
	for _, w := range writes {
		if w.Delete {
			delete(r.model[ks], string(w.Key))
		} else {
			r.model[ks][string(w.Key)] = bytes.Clone(w.Value)
			if r.model[ks][string(w.Key)] == nil {
				r.model[ks][string(w.Key)] = []byte{}
			}
		}
	}
}

// do runs one operation and asserts its outcome.
func (r *runner) do(o op) {
	r.tb.Helper()
	r.step++
	r.trace = append(r.trace, o.String())
	if len(r.trace) > 200 {
		r.trace = slices.Delete(r.trace, 0, 100)
	}
	switch o.kind {
	case opGet:
		v, ok, err := r.b.Get(r.ctx, o.ks, o.key)
		if err != nil {
			if !isStoreErr(err) {
				r.fail("Get: untyped error %v", err)
			}
			break
		}
		mv, mok := r.model[o.ks][string(o.key)]
		if ok != mok || !bytes.Equal(v, mv) || (ok && v == nil) {
			r.fail("Get(%s) = %q %v, model %q %v", fmtKey(o.key), v, ok, mv, mok)
		}
	case opScan:
		r.scan(o)
	case opUpsert, opDelete, opBatch:
		writes := o.writes
		if o.kind != opBatch {
			writes = []Write{{Key: o.key, Value: o.val, Delete: o.kind == opDelete}}
		}
		err := r.b.Apply(r.ctx, o.ks, writes)
		switch {
		case err == nil:
			r.applyModel(o.ks, writes)
		case r.policy == PolicyNone && isStoreErr(err):
			r.resync(o.ks, writes)
		default:
			r.fail("Apply: %v", err)
		}
	case opInsert, opUpdate:
		cond := MustNotExist
		if o.kind == opUpdate {
			cond = MustExist
		}
		_, exists := r.model[o.ks][string(o.key)]
		w := Write{Key: o.key, Value: o.val}
		err := condWrite(r.ctx, r.b, o.ks, w, cond)
		switch {
		case err == nil:
			if (cond == MustNotExist) == exists {
				r.fail("conditional write succeeded against the model (exists %v)", exists)
			}
			r.applyModel(o.ks, []Write{w})
		case errors.Is(err, ErrExists):
			if cond != MustNotExist || !exists {
				r.fail("conditional write: %v, model exists %v", err, exists)
			}
			r.verifyKey(o.ks, o.key, "refused conditional write")
		case errors.Is(err, ErrNotFound):
			if cond != MustExist || exists {
				r.fail("conditional write: %v, model exists %v", err, exists)
			}
			r.verifyKey(o.ks, o.key, "refused conditional write")
		case isStoreErr(err):
			if r.policy == PolicyNone {
				r.resync(o.ks, []Write{w})
			}
			r.verifyKey(o.ks, o.key, "failed conditional write")
		default:
			r.fail("conditional write: untyped error %v", err)
		}
	case opEvictStep:
		if _, err := evictStep(r.ctx, r.b, o.ks); err != nil && !isStoreErr(err) {
			r.fail("EvictStep: untyped error %v", err)
		}
	case opEvictUntil:
		evictUntil(r.ctx, r.b, o.target)
	case opFlush:
		if err := flushAll(r.ctx, r.b); err != nil && !isStoreErr(err) {
			r.fail("Flush: untyped error %v", err)
		}
	case opFailNext:
		r.fs.SetFailNext(o.failOp, 1)
	case opOutage:
		r.fs.SetDown(o.down)
	}
	if r.sw != nil {
		r.faultsOff(func() {
			if err := r.b.Check(r.ctx); err != nil {
				r.fail("Check: %v", err)
			}
		})
	}
}

// scan runs one Scan, checks the page, then follows next to the end and
// checks that the pages concatenate to the model's range.
func (r *runner) scan(o op) {
	r.tb.Helper()
	start, end := o.key, o.end
	recs, next, err := r.b.Scan(r.ctx, o.ks, start, end, o.limit)
	if err != nil {
		if !isStoreErr(err) {
			r.fail("Scan: untyped error %v", err)
		}
		return
	}
	r.checkPage(o, start, recs, next)
	all := recs
	for pages := 0; next != nil; pages++ {
		if pages > 4*(len(r.model[o.ks])+4) {
			r.fail("Scan cursor does not terminate")
		}
		from := next
		recs, next, err = r.b.Scan(r.ctx, o.ks, from, end, o.limit)
		if err != nil {
			if !isStoreErr(err) {
				r.fail("Scan page: untyped error %v", err)
			}
			return // a failed page ends the walk; the pages so far were checked
		}
		r.checkPage(o, from, recs, next)
		all = append(all, recs...)
	}
	if start == nil {
		start = []byte{}
	}
	if want := r.modelRange(o.ks, start, end); dumpRecs(all) != dumpRecs(want) {
		r.fail("%s pages concatenate to %s, model %s", o, dumpRecs(all), dumpRecs(want))
	}
}

// checkPage asserts one page: at most limit records, and exactly the
// model's records in [from, next) (or [from, end) when next is nil); next
// must make progress and stay below end.
func (r *runner) checkPage(o op, from []byte, recs []adapters.Record, next []byte) {
	r.tb.Helper()
	if o.limit > 0 && len(recs) > o.limit {
		r.fail("%s from %s: %d records over limit", o, fmtKey(from), len(recs))
	}
	upper := o.end
	if next != nil {
		if bytes.Compare(next, from) <= 0 || (o.end != nil && bytes.Compare(next, o.end) >= 0) {
			r.fail("%s from %s: next %s makes no progress or passes end", o, fmtKey(from), fmtKey(next))
		}
		upper = next
	}
	if from == nil {
		from = []byte{}
	}
	want := r.modelRange(o.ks, from, upper)
	if dumpRecs(recs) != dumpRecs(want) {
		r.fail("%s from %s: got %s (next %q), model %s", o, fmtKey(from), dumpRecs(recs), next, dumpRecs(want))
	}
	for _, rec := range recs {
		if rec.Value == nil {
			r.fail("%s: present record %s with a nil value", o, fmtKey(rec.Key))
		}
	}
}

// finish turns faults off, flushes, and asserts that nothing dirty is left
// and the store equals the model exactly.
func (r *runner) finish() {
	r.tb.Helper()
	if r.sw != nil {
		r.sw.on.Store(false)
	}
	r.fs.SetDown(false)
	for op := adapters.OpGet; op <= adapters.OpDelete; op++ {
		r.fs.SetFailNext(op, 0)
	}
	r.trace = append(r.trace, "final Flush")
	if err := flushAll(r.ctx, r.b); err != nil {
		r.fail("final Flush: %v", err)
	}
	if d := r.b.Stats().DirtyBytes; d != 0 {
		r.fail("%d dirty bytes left after Flush", d)
	}
	if err := r.b.Check(r.ctx); err != nil {
		r.fail("final Check: %v", err)
	}
	for ks := range r.model {
		want := dumpRecs(r.modelRange(ks, []byte{}, nil))
		if got := dumpStore(r.tb, r.raw, ks); got != want {
			r.fail("keyspace %s: store %s, model %s", ks, got, want)
		}
	}
}

// gen draws random operations over a small key alphabet with a zero byte in
// it, so that keys and their successors (k, k\x00) both occur.
type gen struct {
	rng    *rand.Rand
	spaces []adapters.Keyspace
	prefix string // keys of this generator (disjoint key sets in the concurrent test)
	faults bool   // may inject failures and outages
	down   bool
}

func (g *gen) key() []byte {
	const alphabet = "\x00ab"
	n := 1 + g.rng.IntN(3)
	k := []byte(g.prefix)
	for range n {
		k = append(k, alphabet[g.rng.IntN(len(alphabet))])
	}
	return k
}

func (g *gen) val() []byte {
	if g.rng.IntN(8) == 0 {
		return []byte{} // a present empty value
	}
	v := make([]byte, 1+g.rng.IntN(6))
	for i := range v {
		v[i] = 'a' + byte(g.rng.IntN(26))
	}
	return v
}

// bounds draws scan bounds; with a prefix they stay inside its key set.
func (g *gen) bounds() (start, end []byte) {
	if g.prefix == "" {
		if g.rng.IntN(4) > 0 {
			start = g.key()
		}
	} else {
		start = []byte(g.prefix)
		if g.rng.IntN(2) == 0 {
			start = g.key()
		}
	}
	switch g.rng.IntN(4) {
	case 0:
		if g.prefix != "" {
			end = []byte(g.prefix[:len(g.prefix)-1] + string(g.prefix[len(g.prefix)-1]+1))
		}
	case 1:
		end = adapters.Successor(g.key())
	default:
		end = g.key()
	}
	if start != nil && end != nil && bytes.Compare(start, end) > 0 {
		start, end = end, start
	}
	return start, end
}

func (g *gen) next() op {
	o := op{ks: g.spaces[g.rng.IntN(len(g.spaces))]}
	if g.down && g.rng.IntN(6) == 0 {
		g.down = false
		o.kind, o.down = opOutage, false
		return o
	}
	switch n := g.rng.IntN(100); {
	case n < 22:
		o.kind, o.key = opGet, g.key()
	case n < 36:
		o.kind = opScan
		o.key, o.end = g.bounds()
		o.limit = []int{0, 0, 1, 2, 3, 5}[g.rng.IntN(6)]
	case n < 50:
		o.kind, o.key, o.val = opUpsert, g.key(), g.val()
	case n < 58:
		o.kind, o.key = opDelete, g.key()
	case n < 66:
		o.kind, o.key, o.val = opInsert, g.key(), g.val()
	case n < 72:
		o.kind, o.key, o.val = opUpdate, g.key(), g.val()
	case n < 78:
		o.kind = opBatch
		for range 2 + g.rng.IntN(3) {
			w := Write{Key: g.key()}
			if g.rng.IntN(3) == 0 {
				w.Delete = true
			} else {
				w.Value = g.val()
			}
			o.writes = append(o.writes, w)
		}
	case n < 88:
		o.kind = opEvictStep
	case n < 92:
		o.kind, o.target = opEvictUntil, int64(g.rng.IntN(1200))
	case n < 95:
		o.kind = opFlush
	case n < 98 && g.faults:
		o.kind, o.failOp = opFailNext, adapters.Op(g.rng.IntN(4))
	case g.faults && !g.down:
		g.down = true
		o.kind, o.down = opOutage, true
	default:
		o.kind, o.key = opGet, g.key()
	}
	return o
}

// faultPlan is the random failure mix of the model tests: errors on every
// operation, half of the failing writes applied in part.
func faultPlan(seed uint64, rate float64) fault.Config {
	return fault.Config{Seed: seed, Default: fault.OpConfig{ErrorRate: rate, PartialRate: 0.5}}
}

// modelOptions is a tiny buffer: about twenty records, small batches, so
// eviction, bypass and write-back batching all happen constantly.
func modelOptions(p Policy) Options {
	return Options{Policy: p, MaxBytes: 1500, RecordOverhead: 64, MaxKeyBytes: 16, EvictBatch: 4,
		WriteBatch: 3, DisableWorkers: true, Logger: quietLog}
}

// modelSeeds per policy; thousands pass, a few keep the suite fast.
var modelSeeds uint64 = 5

// modelSeedRange is the seeds TestModel and TestModelStale run, 1 to
// modelSeeds unless NEMO_MODEL_SEED_FIRST and NEMO_MODEL_SEEDS (how many)
// say otherwise; NEMO_MODEL_STEPS replaces the steps per seed. CI runs the
// defaults; the knobs are for hunting with new seeds and longer runs.
func modelSeedRange(t *testing.T, steps int) (first, last uint64, n int) {
	t.Helper()
	first = uint64(modelEnv(t, "NEMO_MODEL_SEED_FIRST", 1))
	last = first + uint64(modelEnv(t, "NEMO_MODEL_SEEDS", int(modelSeeds))) - 1
	return first, last, modelEnv(t, "NEMO_MODEL_STEPS", steps)
}

// modelEnv reads an integer knob of the model tests.
func modelEnv(t *testing.T, name string, dflt int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return dflt
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a count", name, v)
	}
	return n
}

func TestModel(t *testing.T) {
	steps := 1500
	if testing.Short() {
		steps = 300
	}
	first, last, steps := modelSeedRange(t, steps)
	for _, p := range []Policy{PolicyNemo, PolicyRecord, PolicyNone} {
		for seed := first; seed <= last; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", p, seed), func(t *testing.T) {
				raw := openEmbedded(t)
				fs := fault.New(raw, faultPlan(seed, 0.05))
				sw := &switchStore{faulty: fs, clean: raw}
				sw.on.Store(true)
				b, err := New(sw, modelOptions(p))
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				r := newRunner(t, b, raw, fs, sw, "t", "u")
				g := &gen{rng: rand.New(rand.NewPCG(seed, 7)), spaces: []adapters.Keyspace{"t", "u"}, faults: true}
				for range steps {
					r.do(g.next())
				}
				r.finish()
				st := b.Stats()
				t.Logf("hits %d neg %d misses %d range hits %d fetches %d evictions %d writebacks %d bypass %d stale %d wb errors %d",
					st.Hits, st.NegativeHits, st.Misses, st.RangeHits, st.RangeFetches, st.Evictions, st.Writebacks,
					st.AdmitBypass, st.EvictDeferred, st.WritebackErr)
			})
		}
	}
}

// TestModelConcurrent runs several goroutines on disjoint key sets of one
// keyspace with the background evictor and write-back running and faults
// injected, each checking its answers against its own model; Check and the
// store comparison run at the end.
func TestModelConcurrent(t *testing.T) {
	const workers = 4
	steps := 1000
	if testing.Short() {
		steps = 200
	}
	// NEMO_MODEL_CONC_SEED (default 0, what CI runs) shifts the fault plan's
	// and the workers' seeds; NEMO_MODEL_STEPS replaces the steps.
	seed := uint64(modelEnv(t, "NEMO_MODEL_CONC_SEED", 0))
	steps = modelEnv(t, "NEMO_MODEL_STEPS", steps)
	for _, p := range []Policy{PolicyNemo, PolicyRecord, PolicyNone} {
		t.Run(string(p), func(t *testing.T) {
			raw := openEmbedded(t)
			fs := fault.New(raw, faultPlan(9+seed, 0.02))
			sw := &switchStore{faulty: fs, clean: raw}
			sw.on.Store(true)
			opts := modelOptions(p)
			opts.MaxBytes = 4000
			opts.DisableWorkers = false
			opts.FlushInterval = 2 * time.Millisecond
			opts.MaxDirtyAge = 5 * time.Millisecond
			opts.AdmitWait = time.Millisecond
			b, err := New(sw, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			stopWriteBack := startWriteBack(b) // the engine's background write-back
			defer stopWriteBack()
			b.OpenKeyspace(testKS)
			runners := make([]*runner, workers)
			var wg sync.WaitGroup
			for i := range runners {
				r := newRunner(t, b, raw, fs, nil)
				r.model[testKS] = map[string][]byte{}
				runners[i] = r
				g := &gen{rng: rand.New(rand.NewPCG(uint64(i)+seed*workers, 11)), spaces: []adapters.Keyspace{testKS}, prefix: fmt.Sprintf("g%d:", i)}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range steps {
						r.do(g.next())
						if t.Failed() {
							return
						}
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			sw.on.Store(false)
			if err := flushAll(context.Background(), b); err != nil {
				t.Fatal(err)
			}
			stopWriteBack()
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if err := flushAll(context.Background(), b); err != nil {
				t.Fatal(err)
			}
			if err := b.Check(context.Background()); err != nil {
				t.Fatal(err)
			}
			merged := map[string][]byte{}
			for _, r := range runners {
				for k, v := range r.model[testKS] {
					merged[k] = v
				}
			}
			final := &runner{model: map[adapters.Keyspace]map[string][]byte{testKS: merged}}
			want := dumpRecs(final.modelRange(testKS, []byte{}, nil))
			if got := dumpStore(t, raw, testKS); got != want {
				t.Fatalf("store %s\nmodel %s", got, want)
			}
			st := b.Stats()
			t.Logf("hits %d misses %d range fetches %d evictions %d writebacks %d bypass %d stale %d",
				st.Hits, st.Misses, st.RangeFetches, st.Evictions, st.Writebacks, st.AdmitBypass, st.EvictDeferred)
		})
	}
}
