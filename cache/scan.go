package cache

import (
	"bytes"
	"context"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/invariants"
	"github.com/nemocache/nemo/internal/obs"
)

// scanPlan is what one pass over the buffer learns about [start, end): the
// buffered regular records (copied) and the holes, coalesced into one
// covering range to fetch (Algorithm 3).
type scanPlan struct {
	recs    []adapters.Record // buffered regular records, in order
	holes   int
	covLo   []byte // fetch [covLo, covHi); covHi nil = unbounded
	covHi   []byte
	fetchHi []byte     // covHi, or Successor(end) when the last hole runs to end
	fence   []byte     // key to fence with a tombstone at covLo if absent (the scan's start)
	fenceHi []byte     // key to fence at the top (the scan's end) if absent
	sealLo  []byte     // first record whose gap bit the fetch may seal
	inCov   int        // buffered tombstones inside the coverage: each can hide one fetched record, so the fetch asks for limit+inCov
	cut     []byte     // the walk stopped here (exclusive) because limit was reached
	stale   []staleRec // clean records too old to answer from (Options.MaxStaleness): holes, fetched again
}

// before counts the buffered regular records the plan found before the
// coverage (fewer than the scan's limit: the walk stops at the limit-th).
func (p *scanPlan) before() int {
	n := 0
	for n < len(p.recs) && bytes.Compare(p.recs[n].Key, p.covLo) < 0 {
		n++
	}
	return n
}

// staleRec is a record the plan found stale, as it was then: if it is
// unchanged when the answer is built (the fetch could not refresh it), the
// fetched state wins over it.
type staleRec struct {
	r         *record
	ver, seen uint32
}

// scanned is a buffered regular record as a scan returns it (latch held):
// with FreshLocks (coherence shared) with its version, which a
// transaction's range read is checked against at commit.
func (b *Buffer) scanned(r *record) adapters.Record {
	rec := adapters.Record{Key: cloneBytes(r.key()), Value: cloneBytes(r.value())}
	if b.opts.FreshLocks {
		rec.Version = r.baseExpect().Version
	}
	return rec
}

func inRange(k, end []byte) bool { return end == nil || bytes.Compare(k, end) < 0 }

// plan walks [start, end) under the shared latch. With checkStale, what
// is too old at tick now to answer from is a hole: a clean record stale
// at now is treated like a sentinel (its key and the gap after it are
// fetched), and a sealed gap after a record stale at now like an unknown
// one.
func (b *Buffer) plan(s *keyspace, start, end []byte, limit int, now uint32, checkStale bool) scanPlan {
	w := planner{b: b, limit: limit, now: now, checkStale: checkStale, trust: b.opts.Policy == PolicyNemo}
	first := s.floor(start)
	cont := true
	if bytes.Equal(first.key(), start) {
		cont = w.visit(first)
	} else if !w.gapKnown(first) {
		w.open(start, start, start)
	}
	if cont {
		iter := func(r *record) bool {
			if bytes.Equal(r.key(), first.key()) {
				return true
			}
			return w.visit(r)
		}
		if end == nil {
			s.tree.AscendGreaterOrEqual(first, iter)
		} else {
			s.tree.AscendRange(first, s.probe(end), iter)
		}
	}
	w.finish(end)
	return w.p
}

// planner is plan's walk: the plan so far and whether a hole is open.
type planner struct {
	b          *Buffer
	p          scanPlan
	limit      int
	now        uint32
	checkStale bool
	trust      bool // gap bits answer (PolicyNemo)
	inHole     bool
	regular    int // regular records collected
}

// gapKnown says whether the gap after r may be answered from the buffer.
func (w *planner) gapKnown(r *record) bool {
	return w.trust && !r.gap() && !(w.checkStale && w.b.freshness(r, theGapAfter, w.now) == refetch)
}

// open starts a hole at lo; the first hole starts the coverage.
func (w *planner) open(lo, seal, fence []byte) {
	w.inHole = true
	if w.p.covLo == nil {
		w.p.covLo, w.p.sealLo, w.p.fence = lo, seal, fence
	}
}

// closeAt ends the open hole at hi.
func (w *planner) closeAt(hi []byte) {
	w.inHole = false
	w.p.holes++
	w.p.covHi = hi
}

// visit takes the next record of the walk; false stops it (the limit is
// reached).
func (w *planner) visit(r *record) bool {
	w.b.touch(r)
	if r.kind() == Sentinel || (w.checkStale && w.b.freshness(r, itsState, w.now) == refetch) {
		w.visitUnknown(r)
		return true
	}
	k := r.key()
	if w.inHole {
		w.closeAt(k)
	}
	if w.p.covLo != nil && r.kind() == Tombstone {
		w.p.inCov++
	}
	if r.kind() == Regular && !r.head() {
		w.p.recs = append(w.p.recs, w.b.scanned(r))
		w.regular++
		if w.limit > 0 && w.regular >= w.limit {
			w.p.cut = adapters.Successor(k)
			return false
		}
	}
	if !w.gapKnown(r) {
		w.open(adapters.Successor(k), k, nil)
	}
	return true
}

// visitUnknown takes a record that cannot answer for its key (a sentinel,
// or a record stale at now): the key is a hole, and so is the gap after
// it unless that is known.
func (w *planner) visitUnknown(r *record) {
	k := r.key()
	if r.kind() != Sentinel {
		w.p.stale = append(w.p.stale, staleRec{r: r, ver: r.ver, seen: r.seen})
	}
	if !w.inHole {
		w.open(k, k, nil)
	}
	if w.gapKnown(r) {
		w.closeAt(adapters.Successor(k))
	}
}

// finish ends the walk at end: a hole still open runs to end, which is
// fenced and fetched inclusively.
func (w *planner) finish(end []byte) {
	p := &w.p
	if p.cut != nil && w.inHole {
		// The hole starts after the limit-th record: it cannot change
		// the first limit results.
		w.inHole = false
		if p.covHi == nil && p.holes == 0 {
			p.covLo = nil
		}
	}
	if !w.inHole {
		p.fetchHi = p.covHi
		return
	}
	p.holes++
	p.covHi = end
	if end != nil {
		p.fenceHi = end
		p.fetchHi = adapters.Successor(end)
	}
	// inCov counted records after covLo; all of them are inside.
}

// Scan returns the live records in [start, end) (end nil: unbounded), at
// most limit of them when limit > 0. next, when non-nil, is where to
// continue: records at or after it were not examined.
func (b *Buffer) Scan(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) (recs []adapters.Record, next []byte, err error) {
	return b.scan(ctx, ks, start, end, limit, false)
}

func (b *Buffer) scan(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int, locked bool) ([]adapters.Record, []byte, error) {
	if len(start) > b.opts.MaxKeyBytes || len(end) > b.opts.MaxKeyBytes+1 {
		return nil, nil, ErrKeyTooLarge
	}
	s, err := b.space(ks)
	if err != nil {
		return nil, nil, err
	}
	if start == nil {
		start = []byte{}
	}
	if end != nil && bytes.Compare(start, end) >= 0 {
		return nil, nil, nil
	}
	if b.opts.Policy == PolicyNone {
		obs.Note(ctx, string(ks), obs.RangeFetch)
		recs, more, err := b.store.GetRange(ctx, ks, start, end, limit)
		if err != nil {
			return nil, nil, storeErr("get_range", err)
		}
		var next []byte
		if more && len(recs) > 0 {
			next = adapters.Successor(recs[len(recs)-1].Key)
		}
		return recs, next, nil
	}
	return b.scanOnce(ctx, s, start, end, limit, locked)
}

// scanTries bounds the plan-fetch-merge passes of one scan: a pass whose
// merge finds writes applied since its plan is run again (scanOnce).
const scanTries = 4

// scanOnce is a plan-fetch-merge pass (Algorithm 3), run again while
// writes landed between its plan and its merge (at most scanTries
// times). Its answer joins the buffered records the plan read outside the
// fetched coverage with the buffer's records inside it as the merge reads
// them; a commit in between (an Azure batch moving money between two
// accounts, one on each side) would show half of itself. The next pass
// finds the range admitted by the last one, and answers from the buffer
// alone under one latch. locked says the caller holds S locks over the
// range (LockRange), so it owns the sentinels there and must see them
// resolved.
func (b *Buffer) scanOnce(ctx context.Context, s *keyspace, start, end []byte, limit int, locked bool) ([]adapters.Record, []byte, error) {
	for try := 1; ; try++ {
		out, next, torn, err := b.scanPass(ctx, s, start, end, limit, locked)
		if err != nil || !torn || try == scanTries {
			return out, next, err
		}
		b.stats.rangeRetries.Add(1)
	}
}

// scanPass is one pass of scanOnce; torn reports writes applied between
// its plan and its merge.
func (b *Buffer) scanPass(ctx context.Context, s *keyspace, start, end []byte, limit int, locked bool) (_ []adapters.Record, _ []byte, torn bool, _ error) {
	ks := s.name
	checkStale := b.staleOn() && !locked && !s.exact.Load() // transactions read what they lock as buffered
	now := b.tick()
	s.mu.RLock()
	p := b.plan(s, start, end, limit, now, checkStale)
	planned := s.writes.Load()
	s.mu.RUnlock()
	if len(p.stale) > 0 {
		b.stats.staleReads.Add(1)
	}
	if p.holes == 0 {
		b.stats.rangeHits.Add(1)
		obs.Note(ctx, string(ks), obs.RangeHit)
		return p.recs, clampNext(p.cut, end), false, nil
	}
	b.stats.rangeHoles.Add(uint64(p.holes))
	b.stats.rangeFetches.Add(1)
	obs.Note(ctx, string(ks), obs.RangeFetch)
	// Registered from before the read until the answer is built: no
	// record written back meanwhile can leave the buffer (see removable).
	t := b.tick() // before the read: what it returns is at least this fresh
	e := s.beginFetch()
	defer s.endFetch(e)
	f, err := b.fetchCoverage(ctx, s, &p, limit)
	if err != nil {
		return nil, nil, false, err
	}
	b.admitFetch(ctx, s, &p, &f, start, end, locked, fetchStamp{t: t, e: e, refresh: checkStale})
	// The answer is built under the shared latch: what changed since the
	// admission is newer than the fetch (the buffer wins), or a clean
	// record evicted, which the fetch also holds.
	s.mu.RLock()
	out := b.merge(s, &p, &f, end)
	torn = s.writes.Load() != planned
	s.mu.RUnlock()
	out, next := page(out, limit, &f, p.cut, end)
	return out, next, torn, nil
}

// rangeFetch is what one read of a plan's coverage returned.
type rangeFetch struct {
	recs    []adapters.Record
	more    bool   // the store holds more after recs
	knownHi []byte // exclusive top of what the fetch covered; nil = unbounded
}

// fetchCoverage reads the plan's coverage from the store, enough of it to
// answer limit records.
func (b *Buffer) fetchCoverage(ctx context.Context, s *keyspace, p *scanPlan, limit int) (rangeFetch, error) {
	flimit := 0
	if limit > 0 {
		// The buffered records before the coverage are answers already;
		// each tombstone inside it may hide one fetched record. When the
		// fetch returns flimit records with more, the answer holds
		// limit; when it returns fewer, more is false (the store is done).
		flimit = max(limit-p.before(), 1) + p.inCov
	}
	fctx := ctx
	var report *adapters.RangeReport
	if invariants.Enabled {
		fctx, report = adapters.WithRangeReport(ctx)
	}
	fetched, more, err := b.store.GetRange(fctx, s.name, p.covLo, p.fetchHi, flimit)
	if err != nil {
		return rangeFetch{}, storeErr("get_range", err)
	}
	if more && len(fetched) == 0 {
		// "More" after nothing says nothing: no gap can be sealed from
		// it, and no answer built.
		return rangeFetch{}, storeErr("get_range", errMoreWithoutRecords)
	}
	f := rangeFetch{recs: fetched, more: more, knownHi: p.fetchHi}
	if more {
		f.knownHi = adapters.Successor(fetched[len(fetched)-1].Key)
	}
	if invariants.Enabled {
		// Everything below knownHi is about to be taken as complete
		// (gaps sealed, the range cached empty, tombstones fenced): the
		// backend itself must have said so, not a short or empty batch
		// that it marked unfinished.
		if covers, ok := report.Covers(f.knownHi); ok && !covers {
			panic(invariants.Errorf("keyspace %q: range [%q, %q) taken as complete up to %q from batches the backend did not mark final", s.name, p.covLo, p.fetchHi, f.knownHi))
		}
	}
	return f, nil
}

// admitFetch admits what a fetch of [start, end) returned when the budget
// and the range admission filter let it, and resolves the sentinels of a
// locked scan in any case.
func (b *Buffer) admitFetch(ctx context.Context, s *keyspace, p *scanPlan, f *rangeFetch, start, end []byte, locked bool, fs fetchStamp) {
	// A full buffer admits a range on its second fetch (rangeadmit.go),
	// unless the fetch refreshes stale records it holds already.
	admit := b.opts.Policy == PolicyNemo && (len(p.stale) > 0 || b.rangeAdmissible(s, f.recs))
	var reserved int64
	if admit {
		reserved = b.rangeBytes(f.recs, start, end)
		if !b.reserve(ctx, reserved, true) {
			admit, reserved = false, 0
		}
	}
	// Admission needs the exclusive latch; without anything to admit and
	// no sentinels of ours to resolve (they exist only under locks), skip it.
	if !admit && !locked {
		return
	}
	// Build the records to admit before taking the latch: allocation and
	// copying stay out of the exclusive section.
	var pre []*record
	if admit {
		pre = make([]*record, len(f.recs))
		for i, r := range f.recs {
			pre[i] = newRecord(r.Key, r.Value, Regular)
			pre[i].setBase(fetchedBase(r))
		}
	}
	s.mu.Lock()
	a := admission{b: b, s: s, p: p, f: f, pre: pre, admit: admit && !s.dropped, fs: fs}
	charged := a.admitRange()
	s.mu.Unlock()
	if u := b.used.Add(charged - reserved); invariants.Enabled && u < 0 {
		panic(invariants.Errorf("resident bytes %d after admitting a range", u))
	}
}

// rangeBytes is what admitting recs, fetched for [start, end), reserves:
// the records and two fences.
func (b *Buffer) rangeBytes(recs []adapters.Record, start, end []byte) int64 {
	var n int64
	for _, f := range recs {
		n += int64(len(f.Key)+len(f.Value)+len(f.Version)) + b.opts.RecordOverhead
	}
	return n + 2*(int64(len(start)+len(end))+b.opts.RecordOverhead)
}

// page cuts the answer at limit and says where to continue (nil: nowhere).
func page(out []adapters.Record, limit int, f *rangeFetch, cut, end []byte) ([]adapters.Record, []byte) {
	var next []byte
	switch {
	case limit > 0 && len(out) >= limit:
		out = out[:limit]
		next = adapters.Successor(out[limit-1].Key)
	case f.more:
		next = f.knownHi
	case cut != nil:
		next = cut
	}
	return out, clampNext(next, end)
}

// clampNext drops a cursor at or past end: nothing is left to continue with.
func clampNext(next, end []byte) []byte {
	if next != nil && end != nil && bytes.Compare(next, end) >= 0 {
		return nil
	}
	return next
}

// fetchStamp is when a fetch began (tick and fetch epoch) and whether it
// may refresh stale records (Options.MaxStaleness; not under a
// transaction's locks).
type fetchStamp struct {
	t, e    uint32
	refresh bool
}

// absentBase is the base of a key read as absent.
var absentBase = adapters.Expect{Kind: adapters.ExpectAbsent}

// admission is one fetch entering the buffer (AdmitRange, exclusive latch).
type admission struct {
	b       *Buffer
	s       *keyspace
	p       *scanPlan
	f       *rangeFetch
	pre     []*record // f.recs as records, built before the latch (nil: none)
	admit   bool      // false: only resolve sentinels (budget full, or the keyspace dropped)
	fs      fetchStamp
	charged int64 // bytes charged so far
	// confirmed are the records whose own state the fetch set.
	confirmed []*record
}

// admitRange is AdmitRange: fetched records enter clean, never over an
// existing record except a stale one the fetch may refresh (see
// refreshable); the coverage is fenced with tombstones at the scan's
// bounds; sentinels inside it are resolved, and stale records it did not
// return become tombstones; every gap bit the fetch proved empty is
// sealed (all but the last), and what the fetch vouched for is stamped
// with its tick. It returns the bytes it charged. With admit false
// (budget full or the keyspace dropped) it only resolves sentinels,
// which locks need.
func (a *admission) admitRange() int64 {
	a.putFetched()
	a.resolveAbsent()
	if invariants.Enabled {
		a.checkFetchedBuffered()
	}
	if !a.admit {
		for _, r := range a.confirmed {
			a.b.confirm(r, a.fs.t)
		}
		return a.charged
	}
	sealHi := a.sealHi()
	a.stamp(sealHi)
	a.seal(sealHi)
	if invariants.Enabled && a.b.opts.Policy == PolicyNemo {
		a.checkResolved()
	}
	a.b.stats.admitted.Add(uint64(len(a.f.recs)))
	return a.charged
}

// refresh says whether the fetch may refresh the stale records it covers.
func (a *admission) refresh() bool { return a.admit && a.fs.refresh }

// set gives r, one the fetch read, its state from the store.
func (a *admission) set(r *record, kind Kind, val []byte, base adapters.Expect) {
	a.charged += r.set(kind, val) + r.setBase(base)
	a.confirmed = append(a.confirmed, r)
}

// put admits one record (r, if not nil, is it already built); fetched says
// it is one the store returned (a fence is only absent if nothing is
// there: it refreshes nothing).
func (a *admission) put(key, val []byte, kind Kind, r *record, base adapters.Expect, fetched bool) {
	pred := a.s.floor(key)
	if bytes.Equal(pred.key(), key) {
		switch {
		case pred.kind() == Sentinel && !pred.dirty():
			a.set(pred, kind, val, base)
		case fetched && a.refresh() && a.b.refreshable(pred, a.fs.t, a.fs.e):
			a.set(pred, kind, val, base)
			a.b.stats.refreshed.Add(1)
		}
		return
	}
	if !a.admit {
		return
	}
	if r == nil {
		r = newRecord(key, val, kind)
		r.setBase(base)
	}
	r.setGap(pred.gap())
	a.b.insert(a.s, r, pred)
	a.confirmed = append(a.confirmed, r)
	a.charged += a.b.size(r)
}

// putFetched puts the fetched records, then the fences at the scan's
// bounds where the store has nothing.
func (a *admission) putFetched() {
	// Descending: google/btree splits a full node by moving its upper half
	// to a new, tightly sized slice and keeping the lower half in the old,
	// twice-as-large one. Ascending inserts keep appending to the new
	// nodes and leave every old one half empty (about 19 bytes of tree per
	// record instead of 9); descending inserts freeze the tight halves.
	// Each record still inherits the gap bit and gap locks of the nearest
	// buffered record before it, as in ascending order.
	fetched := a.f.recs
	for i := len(fetched) - 1; i >= 0; i-- {
		var r *record
		if a.pre != nil {
			r = a.pre[i]
		}
		a.put(fetched[i].Key, fetched[i].Value, Regular, r, fetchedBase(fetched[i]), true)
	}
	p := a.p
	if a.admit && p.fence != nil && (len(fetched) == 0 || !bytes.Equal(fetched[0].Key, p.fence)) {
		a.put(p.fence, nil, Tombstone, nil, absentBase, false)
	}
	if a.admit && p.fenceHi != nil && !a.f.more {
		a.put(p.fenceHi, nil, Tombstone, nil, absentBase, false)
	}
}

// resolveAbsent makes absent what the fetch covered and did not return:
// the sentinels there, and the stale records it may refresh. The record
// policy keeps no negative results.
func (a *admission) resolveAbsent() {
	sentinels, gone := a.unreturned()
	if a.b.opts.Policy != PolicyNemo {
		return
	}
	for _, r := range sentinels {
		a.set(r, Tombstone, nil, absentBase)
	}
	for _, r := range gone {
		if r.kind() == Regular {
			a.charged += r.set(Tombstone, nil)
		}
		a.charged += r.setBase(absentBase)
		a.confirmed = append(a.confirmed, r)
		a.b.stats.refreshed.Add(1)
	}
}

// unreturned lists what the coverage holds that the fetch did not return:
// the sentinels nobody wrote, and the stale records it may refresh.
func (a *admission) unreturned() (sentinels, gone []*record) {
	fetched := a.f.recs
	refresh := a.refresh()
	fi := 0
	iterCov(a.s, a.p.covLo, a.f.knownHi, func(r *record) {
		if r.kind() == Sentinel && !r.dirty() {
			sentinels = append(sentinels, r)
			return
		}
		if !refresh {
			return
		}
		for fi < len(fetched) && bytes.Compare(fetched[fi].Key, r.key()) < 0 {
			fi++
		}
		if (fi == len(fetched) || !bytes.Equal(fetched[fi].Key, r.key())) && a.b.refreshable(r, a.fs.t, a.fs.e) {
			gone = append(gone, r)
		}
	})
	return sentinels, gone
}

// checkFetchedBuffered asserts that whatever was admitted, a fetched key
// is never hidden: it is buffered, or nothing is (admission off) and no
// gap is sealed.
func (a *admission) checkFetchedBuffered() {
	for _, f := range a.f.recs {
		if r := a.s.floor(f.Key); a.admit && !bytes.Equal(r.key(), f.Key) {
			panic(invariants.Errorf("keyspace %q: fetched key %q not buffered after admitRange", a.s.name, f.Key))
		} else if bytes.Equal(r.key(), f.Key) && r.kind() == Sentinel && !r.dirty() {
			panic(invariants.Errorf("keyspace %q: fetched key %q left a sentinel", a.s.name, f.Key))
		}
	}
}

// sealHi is the last record the fetch can vouch for the gap before: the
// gaps of every record from sealLo up to it, not included, are sealed
// (nil: to the end of the keyspace).
func (a *admission) sealHi() []byte {
	var sealHi []byte
	switch {
	case a.f.more:
		sealHi = a.f.recs[len(a.f.recs)-1].Key
	case a.p.fenceHi != nil:
		sealHi = a.p.fenceHi
	default:
		sealHi = a.p.covHi // nil: everything to the end of the keyspace
		if sealHi != nil {
			if _, ok := a.s.tree.Get(a.s.probe(sealHi)); !ok {
				// The record that ended the coverage was evicted since
				// the plan: the gap before it now runs past what was
				// fetched, so leave that last gap unknown.
				sealHi = a.s.lower(sealHi).key()
			}
		}
	}
	if invariants.Enabled && sealHi != nil && !a.s.has(sealHi) {
		// The last sealed gap runs to the next buffered record: ending
		// anywhere else, it would claim keys the fetch never covered.
		panic(invariants.Errorf("keyspace %q: sealing up to %q, which is not buffered", a.s.name, sealHi))
	}
	return sealHi
}

// stamp dates what the fetch set, before sealing (confirm looks at the gap
// bit as it was): as old as the fetch, with its gap too if the fetch
// seals it; otherwise confirm weighs the older gap.
func (a *admission) stamp(sealHi []byte) {
	if !a.b.staleOn() {
		return
	}
	for _, r := range a.confirmed {
		k := r.key()
		if bytes.Compare(k, a.p.sealLo) >= 0 && inRange(k, sealHi) {
			r.seen = a.fs.t
		} else {
			a.b.confirm(r, a.fs.t)
		}
	}
}

// seal clears the gap bit of every record from sealLo up to sealHi.
func (a *admission) seal(sealHi []byte) {
	iterCov(a.s, a.p.sealLo, sealHi, func(r *record) {
		r.setGap(false)
		if r.dirty() || r.head() {
			r.seen = a.fs.t // the stamp speaks only for the gap
		}
	})
}

// checkResolved asserts that no sentinel is left inside the fetched range.
func (a *admission) checkResolved() {
	iterCov(a.s, a.p.covLo, a.f.knownHi, func(r *record) {
		if r.kind() == Sentinel && !r.dirty() {
			panic(invariants.Errorf("keyspace %q: sentinel %q left inside a fetched range", a.s.name, r.key()))
		}
	})
}

// iterCov calls fn for every record in [lo, hi) (hi nil = unbounded).
func iterCov(s *keyspace, lo, hi []byte, fn func(*record)) {
	ascend(s, lo, hi, func(r *record) bool { fn(r); return true })
}

// ascend calls fn for the records in [lo, hi) (hi nil = unbounded) in key
// order until fn returns false.
func ascend(s *keyspace, lo, hi []byte, fn func(*record) bool) {
	if hi == nil {
		s.tree.AscendGreaterOrEqual(s.probe(lo), fn)
	} else {
		s.tree.AscendRange(s.probe(lo), s.probe(hi), fn)
	}
}

// merge builds the answer (shared latch): the plan's snapshot outside the
// coverage, and inside it the buffer as it is now (it may hold writes newer
// than the fetch) over the fetched records.
func (b *Buffer) merge(s *keyspace, p *scanPlan, f *rangeFetch, end []byte) []adapters.Record {
	out := make([]adapters.Record, 0, len(p.recs)+len(f.recs))
	i := p.before()
	out = append(out, p.recs[:i]...)
	out = b.mergeCoverage(s, p, f.recs, coverTop(p, f.knownHi, end), out)
	if f.more {
		return out
	}
	// Beyond the coverage: the snapshot again.
	for _, r := range p.recs[i:] {
		if p.covHi != nil && bytes.Compare(r.Key, p.covHi) >= 0 {
			out = append(out, r)
		}
	}
	return out
}

// coverTop is how far into the coverage the answer goes: up to what the
// fetch vouches for, within the coverage and the scan's end.
func coverTop(p *scanPlan, knownHi, end []byte) []byte {
	top := knownHi
	if top == nil || (p.covHi != nil && p.fenceHi == nil && bytes.Compare(p.covHi, top) < 0) {
		top = p.covHi
	}
	if top != nil && end != nil && bytes.Compare(end, top) < 0 {
		top = end
	}
	return top
}

// mergeCoverage appends to out the answer inside the coverage up to top:
// the buffered records over the fetched ones.
func (b *Buffer) mergeCoverage(s *keyspace, p *scanPlan, fetched []adapters.Record, top []byte, out []adapters.Record) []adapters.Record {
	var buffered []*record
	iterCov(s, p.covLo, top, func(r *record) { buffered = append(buffered, r) })
	stale := p.staleSet()
	fi := 0
	for _, r := range buffered {
		k := r.key()
		for fi < len(fetched) && bytes.Compare(fetched[fi].Key, k) < 0 {
			if inRange(fetched[fi].Key, top) {
				out = append(out, fetched[fi])
			}
			fi++
		}
		same := fi < len(fetched) && bytes.Equal(fetched[fi].Key, k)
		switch answerKind(r, stale) {
		case Regular:
			if !r.head() {
				out = append(out, b.scanned(r))
			}
		case Sentinel:
			if same {
				out = append(out, fetched[fi])
			}
		}
		if same {
			fi++
		}
	}
	for ; fi < len(fetched); fi++ {
		if inRange(fetched[fi].Key, top) {
			out = append(out, fetched[fi])
		}
	}
	return out
}

// staleSet indexes the records the plan found stale.
func (p *scanPlan) staleSet() map[*record]staleRec {
	if len(p.stale) == 0 {
		return nil
	}
	stale := make(map[*record]staleRec, len(p.stale))
	for _, sr := range p.stale {
		stale[sr.r] = sr
	}
	return stale
}

// answerKind is what r answers as: records the plan found stale and
// nothing changed since (the fetch could not refresh them: locked, or no
// room) answer like sentinels, the fetch being the newer knowledge.
func answerKind(r *record, stale map[*record]staleRec) Kind {
	if sr, ok := stale[r]; ok && sr.ver == r.ver && sr.seen == r.seen && !r.dirty() {
		return Sentinel
	}
	return r.kind()
}
