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
	var p scanPlan
	trust := b.opts.Policy == PolicyNemo
	gapKnown := func(r *record) bool { return trust && !r.gap() && !(checkStale && b.gapStale(r, now)) }
	inHole := false
	var holeLo []byte
	open := func(lo, seal []byte, fence []byte) {
		inHole = true
		holeLo = lo
		if p.covLo == nil {
			p.covLo, p.sealLo, p.fence = lo, seal, fence
		}
	}
	closeAt := func(hi []byte) {
		inHole = false
		p.holes++
		p.covHi = hi
		_ = holeLo
	}
	regular := 0
	visit := func(r *record) bool {
		b.touch(r)
		k := r.key()
		if r.kind() == Sentinel || (checkStale && b.valStale(r, now)) {
			if r.kind() != Sentinel {
				p.stale = append(p.stale, staleRec{r: r, ver: r.ver, seen: r.seen})
			}
			if !inHole {
				open(k, k, nil)
			}
			if gapKnown(r) {
				closeAt(adapters.Successor(k))
			}
			return true
		}
		if inHole {
			closeAt(k)
		}
		if p.covLo != nil && r.kind() == Tombstone {
			p.inCov++
		}
		if r.kind() == Regular && !r.head() {
			p.recs = append(p.recs, b.scanned(r))
			regular++
			if limit > 0 && regular >= limit {
				p.cut = adapters.Successor(k)
				return false
			}
		}
		if !gapKnown(r) {
			open(adapters.Successor(k), k, nil)
		}
		return true
	}
	first := s.floor(start)
	cont := true
	if bytes.Equal(first.key(), start) {
		cont = visit(first)
	} else if !gapKnown(first) {
		open(start, start, start)
	}
	if cont {
		iter := func(r *record) bool {
			if bytes.Equal(r.key(), first.key()) {
				return true
			}
			return visit(r)
		}
		if end == nil {
			s.tree.AscendGreaterOrEqual(first, iter)
		} else {
			s.tree.AscendRange(first, s.probe(end), iter)
		}
	}
	if p.cut != nil && inHole {
		// The hole starts after the limit-th record: it cannot change
		// the first limit results.
		inHole = false
		if p.covHi == nil && p.holes == 0 {
			p.covLo = nil
		}
	}
	if inHole {
		p.holes++
		p.covHi = end
		if end != nil {
			p.fenceHi = end
			p.fetchHi = adapters.Successor(end)
		}
		// inCov counted records after covLo; all of them are inside.
	} else {
		p.fetchHi = p.covHi
	}
	return p
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

// scanOnce is one plan-fetch-merge pass (Algorithm 3). locked says the
// caller holds S locks over the range (LockRange), so it owns the
// sentinels there and must see them resolved.
func (b *Buffer) scanOnce(ctx context.Context, s *keyspace, start, end []byte, limit int, locked bool) ([]adapters.Record, []byte, error) {
	ks := s.name
	checkStale := b.staleOn() && !locked // transactions read what they lock as buffered
	now := b.tick()
	s.mu.RLock()
	p := b.plan(s, start, end, limit, now, checkStale)
	s.mu.RUnlock()
	if len(p.stale) > 0 {
		b.stats.staleReads.Add(1)
	}
	if p.holes == 0 {
		b.stats.rangeHits.Add(1)
		obs.Note(ctx, string(ks), obs.RangeHit)
		return p.recs, clampNext(p.cut, end), nil
	}
	b.stats.rangeHoles.Add(uint64(p.holes))
	b.stats.rangeFetches.Add(1)
	obs.Note(ctx, string(ks), obs.RangeFetch)
	flimit := 0
	if limit > 0 {
		// The buffered records before the coverage are answers already;
		// each tombstone inside it may hide one fetched record. When the
		// fetch returns flimit records with more, the answer holds
		// limit; when it returns fewer, more is false (the store is done).
		flimit = max(limit-p.before(), 1) + p.inCov
	}
	// Registered from before the read until the answer is built: no
	// record written back meanwhile can leave the buffer (see removable).
	t := b.tick() // before the read: what it returns is at least this fresh
	e := s.beginFetch()
	defer s.endFetch(e)
	fctx := ctx
	var report *adapters.RangeReport
	if invariants.Enabled {
		fctx, report = adapters.WithRangeReport(ctx)
	}
	fetched, more, err := b.store.GetRange(fctx, ks, p.covLo, p.fetchHi, flimit)
	if err != nil {
		return nil, nil, storeErr("get_range", err)
	}
	if more && len(fetched) == 0 {
		// "More" after nothing says nothing: no gap can be sealed from
		// it, and no answer built.
		return nil, nil, storeErr("get_range", errMoreWithoutRecords)
	}
	var knownHi []byte // exclusive top of what the fetch covered; nil = unbounded
	if more {
		knownHi = adapters.Successor(fetched[len(fetched)-1].Key)
	} else {
		knownHi = p.fetchHi
	}
	if invariants.Enabled {
		// Everything below knownHi is about to be taken as complete
		// (gaps sealed, the range cached empty, tombstones fenced): the
		// backend itself must have said so, not a short or empty batch
		// that it marked unfinished.
		if covers, ok := report.Covers(knownHi); ok && !covers {
			panic(invariants.Errorf("keyspace %q: range [%q, %q) taken as complete up to %q from batches the backend did not mark final", ks, p.covLo, p.fetchHi, knownHi))
		}
	}
	// A full buffer admits a range on its second fetch (rangeadmit.go),
	// unless the fetch refreshes stale records it holds already.
	admit := b.opts.Policy == PolicyNemo && (len(p.stale) > 0 || b.rangeAdmissible(s, fetched))
	var reserved int64
	if admit {
		for _, f := range fetched {
			reserved += int64(len(f.Key)+len(f.Value)+len(f.Version)) + b.opts.RecordOverhead
		}
		reserved += 2 * (int64(len(start)+len(end)) + b.opts.RecordOverhead)
		if !b.reserve(ctx, reserved, true) {
			admit, reserved = false, 0
		}
	}
	// Build the records to admit before taking the latch: allocation and
	// copying stay out of the exclusive section.
	var pre []*record
	if admit {
		pre = make([]*record, len(fetched))
		for i, f := range fetched {
			pre[i] = newRecord(f.Key, f.Value, Regular)
			pre[i].setBase(fetchedBase(f))
		}
	}
	// Admission needs the exclusive latch; without anything to admit and
	// no sentinels of ours to resolve (they exist only under locks), skip it.
	if admit || locked {
		s.mu.Lock()
		if s.dropped {
			admit = false
		}
		charged := b.admitRange(s, &p, fetched, pre, more, knownHi, admit, fetchStamp{t: t, e: e, refresh: checkStale})
		s.mu.Unlock()
		if u := b.used.Add(charged - reserved); invariants.Enabled && u < 0 {
			panic(invariants.Errorf("resident bytes %d after admitting a range", u))
		}
	}
	// The answer is built under the shared latch: what changed since the
	// admission is newer than the fetch (the buffer wins), or a clean
	// record evicted, which the fetch also holds.
	s.mu.RLock()
	out := b.merge(s, &p, fetched, more, knownHi, end)
	s.mu.RUnlock()

	var next []byte
	if limit > 0 && len(out) >= limit {
		out = out[:limit]
		next = adapters.Successor(out[limit-1].Key)
	} else if more {
		next = knownHi
	} else if p.cut != nil {
		next = p.cut
	}
	return out, clampNext(next, end), nil
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

// admitRange is AdmitRange (exclusive latch): fetched records enter clean,
// never over an existing record except a stale one the fetch may refresh
// (see refreshable); the coverage is fenced with tombstones at the scan's
// bounds; sentinels inside it are resolved, and stale records it did not
// return become tombstones; every gap bit the fetch proved empty is sealed
// (all but the last), and what the fetch vouched for is stamped with its
// tick. It returns the bytes it charged. With admit false (budget full or
// data possibly stale) it only resolves sentinels, which locks need.
func (b *Buffer) admitRange(s *keyspace, p *scanPlan, fetched []adapters.Record, pre []*record, more bool, knownHi []byte, admit bool, fs fetchStamp) int64 {
	var charged int64
	// Everything put here was read from the store just now: a fetched
	// record's base is its version; a fence or resolved sentinel is absent.
	absent := adapters.Expect{Kind: adapters.ExpectAbsent}
	var confirmed []*record // records whose own state the fetch set
	refresh := admit && fs.refresh
	// put admits one record; fetched says it is one the store returned
	// (a fence is only absent if nothing is there: it refreshes nothing).
	put := func(key, val []byte, kind Kind, r *record, base adapters.Expect, fetched bool) *record {
		pred := s.floor(key)
		if bytes.Equal(pred.key(), key) {
			switch {
			case pred.kind() == Sentinel && !pred.dirty():
				charged += pred.set(kind, val) + pred.setBase(base)
				confirmed = append(confirmed, pred)
			case fetched && refresh && b.refreshable(pred, fs.t, fs.e):
				charged += pred.set(kind, val) + pred.setBase(base)
				confirmed = append(confirmed, pred)
				b.stats.refreshed.Add(1)
			}
			return pred
		}
		if !admit {
			return nil
		}
		if r == nil {
			r = newRecord(key, val, kind)
			r.setBase(base)
		}
		r.setGap(pred.gap())
		b.insert(s, r, pred)
		confirmed = append(confirmed, r)
		charged += b.size(r)
		return r
	}
	// Descending: google/btree splits a full node by moving its upper half
	// to a new, tightly sized slice and keeping the lower half in the old,
	// twice-as-large one. Ascending inserts keep appending to the new
	// nodes and leave every old one half empty (about 19 bytes of tree per
	// record instead of 9); descending inserts freeze the tight halves.
	// Each record still inherits the gap bit and gap locks of the nearest
	// buffered record before it, as in ascending order.
	for i := len(fetched) - 1; i >= 0; i-- {
		var r *record
		if pre != nil {
			r = pre[i]
		}
		put(fetched[i].Key, fetched[i].Value, Regular, r, fetchedBase(fetched[i]), true)
	}
	if admit && p.fence != nil && (len(fetched) == 0 || !bytes.Equal(fetched[0].Key, p.fence)) {
		put(p.fence, nil, Tombstone, nil, absent, false)
	}
	if admit && p.fenceHi != nil && !more {
		put(p.fenceHi, nil, Tombstone, nil, absent, false)
	}
	// Sentinels the fetch covered and did not find are absent; so are
	// the keys of stale records it may refresh and did not return.
	var sentinels, gone []*record
	fi := 0
	iterCov(s, p.covLo, knownHi, func(r *record) {
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
		if (fi == len(fetched) || !bytes.Equal(fetched[fi].Key, r.key())) && b.refreshable(r, fs.t, fs.e) {
			gone = append(gone, r)
		}
	})
	if b.opts.Policy == PolicyNemo { // the record policy keeps no negative results
		for _, r := range sentinels {
			charged += r.set(Tombstone, nil) + r.setBase(absent)
			confirmed = append(confirmed, r)
		}
		for _, r := range gone {
			if r.kind() == Regular {
				charged += r.set(Tombstone, nil)
			}
			charged += r.setBase(absent)
			confirmed = append(confirmed, r)
			b.stats.refreshed.Add(1)
		}
	}
	if invariants.Enabled {
		// Whatever was admitted, a fetched key is never hidden: it is
		// buffered, or nothing is (admission off) and no gap is sealed.
		for _, f := range fetched {
			if r := s.floor(f.Key); admit && !bytes.Equal(r.key(), f.Key) {
				panic(invariants.Errorf("keyspace %q: fetched key %q not buffered after admitRange", s.name, f.Key))
			} else if bytes.Equal(r.key(), f.Key) && r.kind() == Sentinel && !r.dirty() {
				panic(invariants.Errorf("keyspace %q: fetched key %q left a sentinel", s.name, f.Key))
			}
		}
	}
	if !admit {
		for _, r := range confirmed {
			b.confirm(r, fs.t)
		}
		return charged
	}
	// Seal: every record from sealLo up to, but not including, the last
	// one the fetch can vouch for the gap after.
	var sealHi []byte
	switch {
	case more:
		sealHi = fetched[len(fetched)-1].Key
	case p.fenceHi != nil:
		sealHi = p.fenceHi
	default:
		sealHi = p.covHi // nil: everything to the end of the keyspace
		if sealHi != nil {
			if _, ok := s.tree.Get(s.probe(sealHi)); !ok {
				// The record that ended the coverage was evicted since
				// the plan: the gap before it now runs past what was
				// fetched, so leave that last gap unknown.
				sealHi = s.lower(sealHi).key()
			}
		}
	}
	if invariants.Enabled && sealHi != nil && !s.has(sealHi) {
		// The last sealed gap runs to the next buffered record: ending
		// anywhere else, it would claim keys the fetch never covered.
		panic(invariants.Errorf("keyspace %q: sealing up to %q, which is not buffered", s.name, sealHi))
	}
	sealedHere := func(k []byte) bool {
		return bytes.Compare(k, p.sealLo) >= 0 && (sealHi == nil || bytes.Compare(k, sealHi) < 0)
	}
	// Stamps, before sealing (confirm looks at the gap bit as it was):
	// what the fetch set is as old as the fetch, with its gap too if
	// the fetch sealed it; otherwise confirm weighs the older gap.
	if b.staleOn() {
		for _, r := range confirmed {
			if sealedHere(r.key()) {
				r.seen = fs.t
			} else {
				b.confirm(r, fs.t)
			}
		}
	}
	iterCov(s, p.sealLo, sealHi, func(r *record) {
		r.setGap(false)
		if r.dirty() || r.head() {
			r.seen = fs.t // the stamp speaks only for the gap
		}
	})
	if invariants.Enabled && b.opts.Policy == PolicyNemo {
		iterCov(s, p.covLo, knownHi, func(r *record) {
			if r.kind() == Sentinel && !r.dirty() {
				panic(invariants.Errorf("keyspace %q: sentinel %q left inside a fetched range", s.name, r.key()))
			}
		})
	}
	b.stats.admitted.Add(uint64(len(fetched)))
	return charged
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

// merge builds the answer (exclusive latch): the plan's snapshot outside the
// coverage, and inside it the buffer as it is now (it may hold writes newer
// than the fetch) over the fetched records.
func (b *Buffer) merge(s *keyspace, p *scanPlan, fetched []adapters.Record, more bool, knownHi, end []byte) []adapters.Record {
	out := make([]adapters.Record, 0, len(p.recs)+len(fetched))
	i := 0
	for ; i < len(p.recs) && bytes.Compare(p.recs[i].Key, p.covLo) < 0; i++ {
		out = append(out, p.recs[i])
	}
	// Inside the coverage, up to what the fetch vouches for.
	top := knownHi
	if top == nil || (p.covHi != nil && p.fenceHi == nil && bytes.Compare(p.covHi, top) < 0) {
		top = p.covHi
	}
	if top != nil && end != nil && bytes.Compare(end, top) < 0 {
		top = end
	}
	var buffered []*record
	iterCov(s, p.covLo, top, func(r *record) { buffered = append(buffered, r) })
	// Records the plan found stale and nothing changed since (the fetch
	// could not refresh them: locked, or no room) answer like sentinels:
	// the fetch is the newer knowledge.
	var stale map[*record]staleRec
	if len(p.stale) > 0 {
		stale = make(map[*record]staleRec, len(p.stale))
		for _, sr := range p.stale {
			stale[sr.r] = sr
		}
	}
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
		kind := r.kind()
		if sr, ok := stale[r]; ok && sr.ver == r.ver && sr.seen == r.seen && !r.dirty() {
			kind = Sentinel
		}
		switch kind {
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
	if more {
		return out
	}
	// Beyond the coverage: the snapshot again.
	for ; i < len(p.recs); i++ {
		if p.covHi != nil && bytes.Compare(p.recs[i].Key, p.covHi) >= 0 {
			out = append(out, p.recs[i])
		}
	}
	return out
}
