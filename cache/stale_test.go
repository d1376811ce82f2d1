package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/internal/testenv"
)

// The read staleness bound (Options.MaxStaleness): a change made behind the
// buffer (written to the memStore directly: "another writer") is seen by
// reads outside transactions once the buffered knowledge of it is older
// than the bound, and not before. Time is stepped with a fake clock.

const testStaleness = time.Second

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// staleEnv is a buffer with MaxStaleness max over a versioned memStore.
type staleEnv struct {
	t   *testing.T
	b   *Buffer
	m   *memStore
	clk *fakeClock
	ctx context.Context
}

func newStaleEnv(t *testing.T, p Policy, max time.Duration, store ...adapters.Store) *staleEnv {
	t.Helper()
	e := &staleEnv{t: t, m: newMemStore(), clk: &fakeClock{t: time.Unix(1_000_000, 0)}, ctx: context.Background()}
	var st adapters.Store = e.m
	if len(store) > 0 {
		st = store[0]
	}
	b, err := New(st, Options{Policy: p, DisableWorkers: true, Logger: quietLog, MaxStaleness: max, now: e.clk.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	b.OpenKeyspace(testKS)
	e.b = b
	return e
}

// other writes key behind the buffer's back (val nil: delete).
func (e *staleEnv) other(key string, val []byte) {
	e.t.Helper()
	w := []adapters.Write{{Key: []byte(key), Value: val}}
	var err error
	if val == nil {
		err = e.m.Delete(e.ctx, testKS, w)
	} else {
		_, err = e.m.Upsert(e.ctx, testKS, w)
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *staleEnv) get(key string) string {
	e.t.Helper()
	v, ok, err := e.b.Get(e.ctx, testKS, []byte(key))
	if err != nil {
		e.t.Fatal(err)
	}
	if !ok {
		return "<absent>"
	}
	return string(v)
}

func (e *staleEnv) scan(start, end string, limit int) string {
	e.t.Helper()
	var lo, hi []byte
	if start != "" {
		lo = []byte(start)
	}
	if end != "" {
		hi = []byte(end)
	}
	recs, _, err := e.b.Scan(e.ctx, testKS, lo, hi, limit)
	if err != nil {
		e.t.Fatal(err)
	}
	return dumpRecs(recs)
}

func (e *staleEnv) check() {
	e.t.Helper()
	if err := e.b.Check(e.ctx); err != nil {
		e.t.Fatal(err)
	}
}

// expect runs read before and after the bound passes: before, the old
// answer; after, the new one. Callers run check once every change behind
// the buffer has been read (what was refreshed must match the store).
func (e *staleEnv) expect(read func() string, old, updated string) {
	e.t.Helper()
	e.clk.add(testStaleness / 2)
	if got := read(); got != old {
		e.t.Fatalf("within the bound: got %s, want the buffered %s", got, old)
	}
	e.clk.add(testStaleness/2 + testStaleness/8) // past it, ticks and rounding included
	if got := read(); got != updated {
		e.t.Fatalf("past the bound: got %s, want the store's %s", got, updated)
	}
	if got := read(); got != updated {
		e.t.Fatalf("again: got %s, want %s", got, updated)
	}
}

func TestStalePointHit(t *testing.T) {
	e := newStaleEnv(t, PolicyNemo, testStaleness)
	e.other("a", []byte("1"))
	if got := e.get("a"); got != "1" {
		t.Fatal(got)
	}
	e.other("a", []byte("2"))
	e.expect(func() string { return e.get("a") }, "1", "2")
	e.check()
	if st := e.b.Stats(); st.Refreshed != 1 || st.StaleReads != 1 {
		t.Fatalf("refreshed %d stale reads %d, want 1 and 1", st.Refreshed, st.StaleReads)
	}
	// The refresh took the store's version: a write now is conditioned
	// on it and goes through without a conflict.
	if err := condWrite(e.ctx, e.b, testKS, Write{Key: []byte("a"), Value: []byte("3")}, MustExist); err != nil {
		t.Fatal(err)
	}
	if err := flushAll(e.ctx, e.b); err != nil {
		t.Fatal(err)
	}
	if st := e.b.Stats(); st.WritebackConflicts != 0 {
		t.Fatalf("%d write-back conflicts after a refresh", st.WritebackConflicts)
	}
	e.check()
	// Deleted behind the buffer: the stale record becomes a tombstone.
	e.other("a", nil)
	e.expect(func() string { return e.get("a") }, "3", "<absent>")
	e.check()
	if d := dump(t, e.b, testKS); d != `"" T g1 | a T g1 r` {
		t.Fatalf("buffer %s", d)
	}
}

func TestStaleTombstone(t *testing.T) {
	e := newStaleEnv(t, PolicyNemo, testStaleness)
	if got := e.get("b"); got != "<absent>" {
		t.Fatal(got)
	}
	e.other("b", []byte("1"))
	e.expect(func() string { return e.get("b") }, "<absent>", "1")
	e.check()
}

func TestStaleSealedGap(t *testing.T) {
	e := newStaleEnv(t, PolicyNemo, testStaleness)
	e.other("a", []byte("1"))
	e.other("m", []byte("2"))
	if got := e.scan("", "", 0); got != "a=1 m=2" {
		t.Fatal(got)
	}
	negs := e.b.Stats().NegativeHits
	if got := e.get("c"); got != "<absent>" || e.b.Stats().NegativeHits != negs+1 {
		t.Fatalf("c: %s, want a negative hit from the sealed gap", got)
	}
	e.other("c", []byte("3"))
	e.expect(func() string { return e.get("c") }, "<absent>", "3")
	e.check()
	// The key after the end of the stored range, too (the gap after m).
	e.scan("", "", 0)
	e.other("x", []byte("4"))
	e.expect(func() string { return e.get("x") }, "<absent>", "4")
	e.check()
}

func TestStaleScan(t *testing.T) {
	e := newStaleEnv(t, PolicyNemo, testStaleness)
	for _, k := range []string{"a", "b", "c", "e"} {
		e.other(k, []byte(k+"0"))
	}
	if got := e.scan("", "", 0); got != "a=a0 b=b0 c=c0 e=e0" {
		t.Fatal(got)
	}
	e.other("b", []byte("b1")) // update
	e.other("c", nil)          // delete
	e.other("d", []byte("d1")) // insert into a sealed gap
	e.other("f", []byte("f1")) // insert after the last key
	fetches := e.b.Stats().RangeFetches
	e.expect(func() string { return e.scan("", "", 0) }, "a=a0 b=b0 c=c0 e=e0", "a=a0 b=b1 d=d1 e=e0 f=f1")
	e.check()
	// Refreshed: the next scan within the bound is a hit again.
	if got, n := e.scan("", "", 0), e.b.Stats().RangeFetches; got != "a=a0 b=b1 d=d1 e=e0 f=f1" || n != fetches+1 {
		t.Fatalf("after the refresh: %s with %d range fetches, want one", got, n-fetches)
	}
	// Bounded and limited scans past the bound.
	e.other("a", []byte("a2"))
	e.other("d", nil)
	e.expect(func() string { return e.scan("a", "e", 2) }, "a=a0 b=b1", "a=a2 b=b1")
	e.clk.add(2 * testStaleness)
	if got := e.scan("b", "f", 0); got != "b=b1 e=e0" {
		t.Fatal(got)
	}
	e.check()
	// Points read from a range's knowledge follow the range's stamp.
	e.other("e", []byte("e3"))
	e.expect(func() string { return e.get("e") }, "e0", "e3")
	e.check()
}

// TestStaleOff: with MaxStaleness 0 buffered knowledge never expires
// (today's behaviour): no read goes to the store for what is buffered.
func TestStaleOff(t *testing.T) {
	e := newStaleEnv(t, PolicyNemo, 0)
	e.other("a", []byte("1"))
	e.scan("", "", 0)
	e.get("z")
	e.other("a", []byte("2"))
	e.other("c", []byte("3"))
	before := e.b.Stats()
	e.clk.add(1000 * time.Hour)
	if got := e.get("a") + e.get("c") + e.scan("", "", 0); got != "1<absent>a=1" {
		t.Fatal(got)
	}
	if st := e.b.Stats(); st.Misses != before.Misses || st.RangeFetches != before.RangeFetches || st.StaleReads != 0 {
		t.Fatalf("stats %+v after %+v", st, before)
	}
}

// TestStaleDirty: the buffer's own unwritten writes are never stale; once
// written back they are as fresh as the write.
func TestStaleDirty(t *testing.T) {
	e := newStaleEnv(t, PolicyNemo, testStaleness)
	if err := e.b.Apply(e.ctx, testKS, []Write{{Key: []byte("a"), Value: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	e.clk.add(10 * testStaleness)
	if got := e.get("a"); got != "1" || e.b.Stats().Misses != 0 {
		t.Fatalf("dirty a: %s, %d misses", got, e.b.Stats().Misses)
	}
	if err := flushAll(e.ctx, e.b); err != nil {
		t.Fatal(err)
	}
	e.other("a", []byte("2"))
	e.expect(func() string { return e.get("a") }, "1", "2")
	e.check()
}

// TestStaleLocked: a record a transaction holds is not refreshed under it;
// a read outside the transaction still gets the store's answer.
func TestStaleLocked(t *testing.T) {
	e := newStaleEnv(t, PolicyNemo, testStaleness)
	e.other("a", []byte("1"))
	o := &Owner{ID: 1}
	if v, _, _, err := e.b.LockKey(e.ctx, testKS, []byte("a"), o, ModeS); err != nil || string(v) != "1" {
		t.Fatal(v, err)
	}
	e.other("a", []byte("2"))
	e.clk.add(2 * testStaleness)
	if got := e.get("a"); got != "2" {
		t.Fatalf("outside the transaction: %s, want the store's 2", got)
	}
	if v, _, _, err := e.b.LockKey(e.ctx, testKS, []byte("a"), o, ModeS); err != nil || string(v) != "1" {
		t.Fatalf("the lock holder's view changed: %s %v", v, err)
	}
	if got := e.scan("", "", 0); got != "a=2" {
		t.Fatalf("scan outside the transaction: %s", got)
	}
	e.b.Release(o)
	if got := e.get("a"); got != "2" || e.b.Stats().Refreshed != 1 {
		t.Fatalf("after release: %s, refreshed %d", got, e.b.Stats().Refreshed)
	}
	e.check()
}

// TestStaleRefreshAfterWriteBack: a fetch that read a key before the
// buffer's own write-back of it stored a newer value must not refresh the
// record with what it read (fetch epochs, as for eviction).
func TestStaleRefreshAfterWriteBack(t *testing.T) {
	h := &hookStore{}
	e := newStaleEnv(t, PolicyNemo, testStaleness, h)
	h.Store = e.m
	e.other("a", []byte("1"))
	e.get("a")
	e.clk.add(2 * testStaleness)
	h.after(adapters.OpGet, func() {
		if err := e.b.Apply(e.ctx, testKS, []Write{{Key: []byte("a"), Value: []byte("2")}}); err != nil {
			t.Error(err)
		}
		if err := flushAll(e.ctx, e.b); err != nil {
			t.Error(err)
		}
	})
	if got := e.get("a"); got != "1" {
		t.Fatalf("the fetch read %s, want 1 (from before the write)", got)
	}
	if got := e.get("a"); got != "2" {
		t.Fatalf("buffered after the fetch: %s, want the written 2", got)
	}
	e.check()
}

// TestStaleRecordPolicy: the positive-only cache refreshes stale values
// and forgets keys found absent; its scans always fetch anyway.
func TestStaleRecordPolicy(t *testing.T) {
	e := newStaleEnv(t, PolicyRecord, testStaleness)
	e.other("a", []byte("1"))
	e.get("a")
	e.other("a", []byte("2"))
	e.expect(func() string { return e.get("a") }, "1", "2")
	e.check()
	e.other("a", nil)
	e.expect(func() string { return e.get("a") }, "2", "<absent>")
	e.check()
	e.other("a", []byte("3"))
	if got := e.scan("", "", 0); got != "a=3" {
		t.Fatal(got)
	}
	e.check()
}

// TestStaleTicks: the bound is met, never exceeded, at every offset.
func TestStaleTicks(t *testing.T) {
	for _, max := range []time.Duration{500 * time.Microsecond, time.Millisecond, 40 * time.Millisecond, time.Second, time.Minute} {
		b, err := New(newMemStore(), Options{DisableWorkers: true, Logger: quietLog, MaxStaleness: max, now: (&fakeClock{}).now})
		if err != nil {
			t.Fatal(err)
		}
		tl := b.clock.tickLen
		for seen := uint32(0); seen < 5; seen++ {
			for now := seen; now < seen+uint32(max/tl)+4; now++ {
				// Knowledge stamped at tick seen was confirmed no earlier
				// than seen*tl; read at tick now, it is at most
				// (now+1)*tl - seen*tl old.
				worst := time.Duration(now+1-seen) * tl
				if b.fresh(seen, now) && worst > max {
					t.Fatalf("max %v tick %v: seen %d fresh at %d (up to %v old)", max, tl, seen, now, worst)
				}
				if !b.fresh(seen, now) && worst <= max {
					t.Fatalf("max %v tick %v: seen %d stale at %d although at most %v old", max, tl, seen, now, worst)
				}
			}
		}
		_ = b.Close()
	}
	if _, err := New(newMemStore(), Options{MaxStaleness: -time.Second}); err == nil {
		t.Fatal("negative MaxStaleness accepted")
	}
}

// TestModelStale is TestModel with a staleness bound and time moving on
// between steps: with no writer behind the buffer, stale knowledge is
// refetched and refreshed constantly, and every answer and Check must be
// as without the bound.
func TestModelStale(t *testing.T) {
	steps := 1500
	if testing.Short() {
		steps = 300
	}
	first, last, steps := modelSeedRange(t, steps)
	for _, p := range []Policy{PolicyNemo, PolicyRecord} {
		for seed := first; seed <= last; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", p, seed), func(t *testing.T) {
				raw := openEmbedded(t)
				fs := fault.New(raw, faultPlan(seed, 0.05))
				sw := &switchStore{faulty: fs, clean: raw}
				sw.on.Store(true)
				clk := &fakeClock{t: time.Unix(1_000_000, 0)}
				opts := modelOptions(p)
				opts.MaxStaleness, opts.now = testStaleness, clk.now
				b, err := New(sw, opts)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				r := newRunner(t, b, raw, fs, sw, "t", "u")
				g := &gen{rng: rand.New(rand.NewPCG(seed, 7)), spaces: []adapters.Keyspace{"t", "u"}, faults: true}
				for range steps {
					clk.add(time.Duration(g.rng.IntN(200)) * time.Millisecond)
					r.do(g.next())
				}
				r.finish()
				if st := b.Stats(); st.StaleReads == 0 || st.Refreshed == 0 {
					t.Fatalf("stale reads %d, refreshed %d: the bound was never exercised", st.StaleReads, st.Refreshed)
				}
			})
		}
	}
}

// TestRefreshAhead: a hit on a record whose knowledge has used most of the
// bound (¾ of it) answers from the buffer at once and fetches the record in the
// background, so the next read after the bound is a hit with the store's
// newer value instead of a fetch in the request path. A record changed
// meanwhile by the buffer's own write is not overwritten by the refresh.
func TestRefreshAhead(t *testing.T) {
	e := newStaleEnv(t, PolicyNemo, testStaleness)
	e.other("a", []byte("1"))
	if got := e.get("a"); got != "1" {
		t.Fatalf("first read %s", got)
	}
	e.other("a", []byte("2"))          // behind the buffer
	e.clk.add(testStaleness * 13 / 16) // past the ¾ mark
	misses := e.b.Stats().Misses
	// The first hit since the fetch: read once, so not refreshed.
	if got := e.get("a"); got != "1" {
		t.Fatalf("within the bound: %s, want the buffered 1", got)
	}
	if st := e.b.Stats(); st.RefreshCold != 1 || st.RefreshedAhead != 0 {
		t.Fatalf("an aging record read once: %d cold, %d refreshed ahead, want 1 and 0", st.RefreshCold, st.RefreshedAhead)
	}
	// The second: refreshed ahead, answered at once.
	if got := e.get("a"); got != "1" {
		t.Fatalf("within the bound: %s, want the buffered 1", got)
	}
	if e.b.Stats().Misses != misses {
		t.Fatal("an aging hit waited for the store")
	}
	testenv.WaitFor(t, 5*time.Second, "a refresh ahead", func() bool { return e.b.Stats().RefreshedAhead == 1 })
	testenv.WaitFor(t, 5*time.Second, "the refreshed value", func() bool { return e.get("a") == "2" })
	e.clk.add(testStaleness * 5 / 8) // past the first fetch's bound, not the refresh's
	if got := e.get("a"); got != "2" || e.b.Stats().Misses != misses {
		t.Fatalf("after the bound: %s (misses %d → %d), want a hit on 2", got, misses, e.b.Stats().Misses)
	}
	if st := e.b.Stats(); st.RefreshSkipped != 0 {
		t.Fatalf("%d refreshes skipped by the budget, want none", st.RefreshSkipped)
	}
	e.check()
}

// TestRefreshAheadBudget: refreshes ahead are held to a share of the
// buffer's store calls over the last two windows of the bound; what the
// budget declines is counted and left to the read that finds the record
// stale.
func TestRefreshAheadBudget(t *testing.T) {
	var g refreshBudget
	// 10 store calls in window 0: at most 5 refreshes of them (the
	// sixth would make 6 of 11).
	n := 0
	for g.allow(0.5, 0, 10) {
		n++
	}
	if n != 5 {
		t.Fatalf("window 0, 10 calls: %d refreshes allowed, want 5", n)
	}
	// Window 1: window 0's refreshes still count, against its calls
	// and the new ones.
	if g.allow(0.5, 1, 10) {
		t.Fatal("window 1 with no new calls: a refresh allowed")
	}
	if !g.allow(0.5, 1, 12) {
		t.Fatal("window 1 after 2 more calls: refresh refused (6 of 13 is under half)")
	}
	// Window 3: windows 0 and 1 are forgotten, and so are the calls made
	// in them: a refresh needs calls of its own window.
	if g.allow(0.5, 3, 40) {
		t.Fatal("window 3 with no calls in it yet: refresh allowed")
	}
	if !g.allow(0.5, 3, 42) {
		t.Fatal("window 3 after 2 calls: refresh refused")
	}
	for i := range 100 {
		if !g.allow(1, 5, uint64(100+i)) {
			t.Fatal("share 1 refused a refresh")
		}
	}

	// Through the buffer: with a share too small for one refresh, a hot
	// aging record is not refreshed ahead; the read after the bound
	// fetches it.
	for _, tc := range []struct {
		share   float64
		skipped uint64
	}{{0.01, 1}, {1, 0}} {
		e := newStaleEnv(t, PolicyNemo, testStaleness)
		e.b.opts.RefreshAheadShare = tc.share
		e.other("a", []byte("1"))
		e.get("a")
		e.clk.add(testStaleness * 13 / 16)
		e.get("a")
		e.get("a")
		st := e.b.Stats()
		if st.RefreshSkipped != tc.skipped {
			t.Errorf("share %v: %d refreshes skipped, want %d", tc.share, st.RefreshSkipped, tc.skipped)
		}
		if tc.skipped == 0 {
			testenv.WaitFor(t, 5*time.Second, "a refresh ahead", func() bool { return e.b.Stats().RefreshedAhead == 1 })
		}
		e.b.ahead.close()
		if st := e.b.Stats(); st.RefreshedAhead != 1-tc.skipped {
			t.Errorf("share %v: %d refreshed ahead, want %d", tc.share, st.RefreshedAhead, 1-tc.skipped)
		}
	}
}

// TestFreshness pins the read decision, case by case: what a read outside
// a transaction does with a record's own state, or the sealed gap after
// it, at a tick (the bound is 32 ticks; refresh ahead starts at 24).
func TestFreshness(t *testing.T) {
	on := newStaleEnv(t, PolicyNemo, testStaleness).b
	if on.clock.maxAge != 32 {
		t.Fatalf("bound of %d ticks, the cases below assume 32", on.clock.maxAge)
	}
	off := newStaleEnv(t, PolicyNemo, 0).b
	noAhead, err := New(newMemStore(), Options{Policy: PolicyNemo, DisableWorkers: true, Logger: quietLog, MaxStaleness: testStaleness, RefreshAheadShare: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = noAhead.Close() })
	recordPolicy, err := New(newMemStore(), Options{Policy: PolicyRecord, DisableWorkers: true, Logger: quietLog, MaxStaleness: testStaleness})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = recordPolicy.Close() })

	const now = 100
	// rec is a clean regular record stamped seen, with the gap after it
	// unknown and reads hits since the store vouched for it; opts change
	// it further.
	rec := func(seen uint32, reads int, opts ...func(*record)) *record {
		r := newRecord([]byte("k"), []byte("v"), Regular)
		r.setGap(true)
		r.seen = seen
		for range reads {
			r.touch(0, true)
		}
		for _, o := range opts {
			o(r)
		}
		return r
	}
	dirty := func(r *record) { r.setDirty(true) }
	sealed := func(r *record) { r.setGap(false) }
	head := func(r *record) { r.setBit(flagHead, true); r.set(Tombstone, nil) }
	sentinel := func(r *record) { r.set(Sentinel, nil) }
	tombstone := func(r *record) { r.set(Tombstone, nil) }
	locked := func(r *record) { r.lk.Store(&lockState{pins: []*Owner{{}}}) }

	for _, c := range []struct {
		name string
		b    *Buffer
		r    *record
		a    about
		now  uint32
		want decision
	}{
		{"bound off", off, rec(0, 3), itsState, now, answer},
		{"bound off, gap", off, rec(0, 3, sealed), theGapAfter, now, answer},
		{"young", on, rec(now-23, 3), itsState, now, answer},
		{"stamped after now", on, rec(now+1, 3), itsState, now, answer},
		{"aging, read once before", on, rec(now-24, 1), itsState, now, answerAhead},
		{"aging, not read before", on, rec(now-24, 0), itsState, now, answerCold},
		{"aging tombstone", on, rec(now-31, 2, tombstone), itsState, now, answerAhead},
		{"last fresh tick", on, rec(now-31, 3), itsState, now, answerAhead},
		{"at the bound", on, rec(now-32, 3), itsState, now, refetch},
		{"stale tombstone", on, rec(now-32, 3, tombstone), itsState, now, refetch},
		{"saturated clock", on, rec(now, 3), itsState, saturatedTck, refetch},
		{"dirty, old stamp", on, rec(0, 3, dirty), itsState, now, answer},
		{"head fence, old stamp", on, rec(0, 3, head), itsState, now, answer},
		{"sentinel, old stamp", on, rec(0, 3, sentinel), itsState, now, answer},
		{"aging, stamp speaks for a sealed gap", on, rec(now-24, 3, sealed), itsState, now, answer},
		{"aging, gap bit under policy record (gaps never answer)", recordPolicy, rec(now-24, 3, sealed), itsState, now, answerAhead},
		{"aging, locked", on, rec(now-24, 3, locked), itsState, now, answer},
		{"aging, refresh ahead off", noAhead, rec(now-24, 3), itsState, now, answer},
		{"stale, refresh ahead off", noAhead, rec(now-32, 3), itsState, now, refetch},
		{"fresh gap", on, rec(now-31, 0, sealed), theGapAfter, now, answer},
		{"stale gap", on, rec(now-32, 0, sealed), theGapAfter, now, refetch},
		{"stale gap after a dirty record", on, rec(now-32, 0, sealed, dirty), theGapAfter, now, refetch},
		{"stale gap after the head fence", on, rec(now-32, 0, sealed, head), theGapAfter, now, refetch},
	} {
		if got := c.b.freshness(c.r, c.a, c.now); got != c.want {
			t.Errorf("%s: decision %d, want %d", c.name, got, c.want)
		}
	}
}

// TestStaleExactAndForget: an exact keyspace (SetExact: this node is its
// only writer) answers reads outside transactions from whatever it knows,
// however old; turned off, the bound applies at once again. Forget makes
// the next read of a key ask the store within the bound, whether the
// buffer held a record of it or only a sealed gap around it.
func TestStaleExactAndForget(t *testing.T) {
	e := newStaleEnv(t, PolicyNemo, testStaleness)
	e.other("a", []byte("1"))
	e.other("m", []byte("2"))
	if got := e.scan("", "", 0); got != "a=1 m=2" {
		t.Fatal(got)
	}
	e.b.SetExact(testKS, true)
	e.other("a", []byte("9"))
	e.other("c", []byte("3"))
	e.clk.add(10 * testStaleness)
	if a, c, s := e.get("a"), e.get("c"), e.scan("", "", 0); a != "1" || c != "<absent>" || s != "a=1 m=2" {
		t.Fatalf("exact, past the bound: a=%s c=%s scan %s, want the buffer's answers", a, c, s)
	}
	e.b.SetExact(testKS, false)
	if a, c := e.get("a"), e.get("c"); a != "9" || c != "3" {
		t.Fatalf("bounded again: a=%s c=%s, want the store's", a, c)
	}
	e.check()

	// Forget, within the bound: a record, and a key in a sealed gap.
	e.other("a", []byte("10"))
	e.other("e", []byte("5"))
	e.b.Forget(testKS, [][]byte{[]byte("a"), []byte("e")})
	if a, ee := e.get("a"), e.get("e"); a != "10" || ee != "5" {
		t.Fatalf("after Forget: a=%s e=%s, want the store's", a, ee)
	}
	e.check()
}
