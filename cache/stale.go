package cache

import (
	"bytes"
	"context"
	"math"
	"sync"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/invariants"
)

// This file is the read staleness bound (Options.MaxStaleness): every
// record carries the tick at which the store last vouched for it (seen),
// and reads outside transactions treat knowledge older than the bound as
// unknown. See doc.go for the rule.
//
// A record's stamp covers its own state (value or absence) and, when its
// gap bit is sealed, the gap after it: it is the older of the two
// confirmation times. A dirty record's own state is never stale (the
// store has not seen it yet), so its stamp speaks only for its gap; the
// head fence has no state of its own either.

// Tick lengths: MaxStaleness/staleTicks, clamped. With 1/16s a uint32 of
// ticks lasts 8.5 years; with 1ms 49 days. Once the tick count saturates
// nothing is fresh any more (every read fetches): safe, only slow.
const (
	staleTicks   = 32
	minTickLen   = time.Millisecond
	maxTickLen   = time.Second / 16
	saturatedTck = math.MaxUint32
)

// staleClock is the buffer's time base for confirmation stamps.
type staleClock struct {
	now     func() time.Time
	t0      time.Time
	tickLen time.Duration
	maxAge  uint32 // knowledge at most this many ticks old (exclusive) may answer
}

func newStaleClock(o Options) staleClock {
	c := staleClock{now: o.now}
	if c.now == nil {
		c.now = time.Now
	}
	if o.MaxStaleness <= 0 {
		return c
	}
	c.t0 = c.now()
	c.tickLen = min(max(o.MaxStaleness/staleTicks, minTickLen), maxTickLen)
	c.maxAge = uint32(min(int64(o.MaxStaleness/c.tickLen), math.MaxUint32))
	return c
}

// staleOn reports whether the buffer applies a staleness bound.
func (b *Buffer) staleOn() bool { return b.opts.MaxStaleness > 0 }

// tick is the current tick (0 with the bound off).
func (b *Buffer) tick() uint32 {
	if !b.staleOn() {
		return 0
	}
	d := b.clock.now().Sub(b.clock.t0)
	if d < 0 {
		return 0
	}
	if n := int64(d / b.clock.tickLen); n < saturatedTck {
		return uint32(n)
	}
	return saturatedTck
}

// fresh reports whether knowledge stamped seen may answer a read at tick
// now. Stamps are taken before the store call that confirms them and
// ticks are floored, so knowledge fresh here is younger than
// (now-seen+1) ticks <= MaxStaleness.
func (b *Buffer) fresh(seen, now uint32) bool {
	switch {
	case !b.staleOn():
		return true
	case now == saturatedTck:
		return false
	case seen >= now:
		return b.clock.maxAge > 0
	}
	return now-seen < b.clock.maxAge
}

// decision is what a read outside a transaction does with what the
// buffer knows, at a tick: answer from it (and perhaps refresh it ahead),
// or fetch the key again.
type decision uint8

const (
	answer      decision = iota // fresh: answer from the buffer
	answerCold                  // fresh and aging, but read once since the store vouched (RefreshCold)
	answerAhead                 // fresh and aging: answer, and refresh ahead in the background
	refetch                     // too old to answer from: fetch in the request path
)

// about is what part of a record's knowledge a read relies on.
type about uint8

const (
	itsState    about = iota // the record's own state: its value, or its absence
	theGapAfter              // the sealed gap after it (any record: the stamp speaks for the gap)
)

// freshness is the read rule of Options.MaxStaleness and refresh ahead,
// for a point read, a range read and a peek alike: may what r says about
// a (its own state, or the sealed gap after it) answer a read at tick
// now, and should r be refreshed ahead? Latch held (shared is enough).
// The read being decided is not among r's reads yet (a point read touches
// r once it has decided): a record read once before since the store
// vouched for it is, with this read, read twice.
//
// Dirty records, sentinels and the head fence have no state the store
// vouched for: always answered, never refreshed. A gap is answered while
// its stamp is fresh, and never refreshed ahead; neither is a record
// whose stamp also speaks for a sealed gap after it (see confirm), a
// locked one, or any with RefreshAheadShare < 0.
func (b *Buffer) freshness(r *record, a about, now uint32) decision {
	switch {
	case !b.staleOn():
		return answer
	case a == theGapAfter && b.fresh(r.seen, now):
		return answer
	case a == theGapAfter:
		return refetch
	case r.dirty() || r.head() || r.kind() == Sentinel:
		return answer
	case !b.fresh(r.seen, now):
		return refetch
	case b.opts.RefreshAheadShare < 0 || r.locked() || (b.opts.Policy == PolicyNemo && !r.gap()):
		return answer
	case now <= r.seen || now-r.seen < max(b.clock.maxAge*3/4, 1):
		return answer // not aging: less than three quarters of the bound used
	case r.reads() < 1:
		return answerCold
	}
	return answerAhead
}

// refreshable reports whether a fetch begun at tick t and fetch epoch e
// may replace r's state with what it read: r is stale at t (so the fetch
// is strictly newer knowledge), clean, unlocked (a transaction's view is
// not changed under it), and not written to the store since the fetch
// began (the fetch may hold the value from before that write; see
// keyspace.removable: the fetch is registered, so r.wb is not reset).
// Exclusive latch held.
func (b *Buffer) refreshable(r *record, t, e uint32) bool {
	return b.freshness(r, itsState, t) == refetch && !r.locked() && (r.wb == 0 || int32(r.wb-e) < 0)
}

// confirm stamps r (exclusive latch, or r not yet published): the store
// vouched for r's own state at tick t. A sealed gap after r is older
// knowledge the stamp must not outlive: while it is fresh r keeps the
// older stamp; once stale the gap is given up (unknown), unless a
// transaction holds r (its view is not changed under it; r then stays
// stale for reads outside transactions, which fetch).
func (b *Buffer) confirm(r *record, t uint32) {
	if !b.staleOn() {
		return
	}
	r.flags.And(^uint32(readsMask)) // reads count from the store's word on
	if r.gap() || b.opts.Policy != PolicyNemo {
		r.seen = t
		return
	}
	if b.fresh(r.seen, t) || r.locked() {
		r.seen = min(r.seen, t)
		return
	}
	r.setGap(true)
	r.seen = t
}

// Refresh ahead. A hot record read again and again would otherwise be
// fetched in the request path each time its knowledge reaches the bound,
// and that read waits for the store. Instead, a hit on a record whose own
// state has used three quarters of MaxStaleness starts one background
// fetch of it (at most one per key and maxAhead per buffer) and answers
// from the buffer at once: still within the bound. The fetch replaces the
// record's state with the store's if nothing newer happened to it
// meanwhile (the record is clean, unlocked, and not written to the store
// since the fetch began), as a stale read's fetch does. Records whose
// stamp also speaks for a sealed gap after them are not refreshed ahead:
// the stamp cannot move past the gap's own confirmation (see confirm), so
// they are fetched when stale, in the request path.
//
// Refresh ahead is spent where it saves a wait. A record is refreshed
// only if it was read at least twice since the store last vouched for it
// (this hit and another): one read at a time is the long tail, whose next
// read tends to come after the refreshed copy is stale too, so the fetch
// would be a call that saves nothing (those hits are counted as
// RefreshCold). And refreshes ahead are held to Options.RefreshAheadShare
// of the buffer's store calls over the last two windows of MaxStaleness
// (refreshBudget); what the budget declines is counted (RefreshSkipped)
// and left to the first read that finds the record stale.

// maxAhead bounds the background refreshes in flight per buffer. Few, so
// that refreshes of keys fetched together (as after a warm-up, or a burst
// of misses) are spread out rather than sent in one burst that queues the
// reads behind them at the store: with 64, a long tail at a 10 ms round
// trip gave nemo's store calls a mean of 17.7 ms against 13.3 ms for the
// same reads sent directly, and a p99 of 38-40 ms against 26-34 ms; with 4,
// 15.1 ms and 27 ms (against 13.4 and 30 ms), refreshes per read unchanged
// (docs/benchmarks.md). A hit that finds them all busy leaves the record
// to the next hit. At a 10 ms round trip 4 refresh about 400 records a
// second.
const maxAhead = 4

// refreshAhead tracks the background refreshes, so Close can wait for
// them, and their budget.
type refreshAhead struct {
	mu     sync.Mutex
	n      int
	closed bool
	wg     sync.WaitGroup
	budget refreshBudget
}

func (a *refreshAhead) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.wg.Wait()
}

// refreshBudget holds refreshes ahead to a share of the store calls: over
// the current window (of MaxStaleness) and the one before it, refreshes
// started may be at most share of every store call made since the
// previous window began, refreshes included.
type refreshBudget struct {
	win   uint32    // the current window
	start [2]uint64 // store calls made before the previous and the current window
	spent [2]uint64 // refreshes started in them
}

// allow reports whether a refresh may start in window win, calls store
// calls having been made so far, and if so counts it.
func (g *refreshBudget) allow(share float64, win uint32, calls uint64) bool {
	switch {
	case win == g.win:
	case win == g.win+1:
		g.start[0], g.spent[0] = g.start[1], g.spent[1]
		g.start[1], g.spent[1] = calls, 0
	default:
		g.start, g.spent = [2]uint64{calls, calls}, [2]uint64{}
	}
	g.win = win
	if share < 1 && float64(g.spent[0]+g.spent[1]+1) > share*float64(calls-g.start[0]+1) {
		return false
	}
	g.spent[1]++
	return true
}

// refreshSoon starts a background refresh of key unless one is running,
// too many are, or the budget declines it.
func (b *Buffer) refreshSoon(s *keyspace, key []byte, now uint32) {
	k := string(key)
	a := &b.ahead
	a.mu.Lock()
	if a.closed || a.n >= maxAhead || s.refreshing[k] {
		a.mu.Unlock()
		return
	}
	if !a.budget.allow(b.opts.RefreshAheadShare, now/max(b.clock.maxAge, 1), b.gate.calls.Load()) {
		a.mu.Unlock()
		b.stats.refreshSkipped.Add(1)
		return
	}
	if s.refreshing == nil {
		s.refreshing = map[string]bool{}
	}
	s.refreshing[k] = true
	a.n++
	a.wg.Add(1)
	a.mu.Unlock()
	go func() {
		defer func() {
			a.mu.Lock()
			delete(s.refreshing, k)
			a.n--
			a.mu.Unlock()
			a.wg.Done()
		}()
		ctx, cancel := context.WithTimeout(b.bg, b.opts.StoreTimeout)
		defer cancel()
		t := b.tick()
		e := s.beginFetch()
		defer s.endFetch(e)
		v, ok, base, err := b.fetchOne(ctx, s.name, []byte(k))
		if err != nil {
			return // the read that finds it stale fetches in the request path
		}
		b.stats.refreshedAhead.Add(1)
		b.installAhead(s, []byte(k), v, ok, base, t, e)
	}()
}

// installAhead puts a refresh-ahead fetch begun at tick t and fetch epoch e
// into the buffer, if the record is still as the fetch found it: clean,
// unlocked, not written to the store since the fetch began, and stamped
// before t. A key the store no longer has becomes a tombstone (policy
// nemo) or is left to the next stale read (the others keep no negative
// knowledge).
func (b *Buffer) installAhead(s *keyspace, key, val []byte, exists bool, base adapters.Expect, t, e uint32) {
	if !exists && b.opts.Policy != PolicyNemo {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropped {
		return
	}
	r := s.floor(key)
	if !bytes.Equal(r.key(), key) || r.dirty() || r.locked() || r.head() || r.kind() == Sentinel ||
		r.seen >= t || (r.wb != 0 && int32(r.wb-e) >= 0) {
		return
	}
	kind, val := fetchedKind(val, exists)
	b.used.Add(r.set(kind, val) + r.setBase(base))
	b.confirm(r, t)
	b.stats.refreshed.Add(1)
}

// Forget gives up what the buffer knows of keys of ks, so that the next
// read of each fetches it: a clean, unlocked record of the key is removed
// (and with it the sealed gap after it), and a sealed gap the key falls in
// is given up. Dirty and locked records, and sentinels, are kept. Under
// coherence partitioned a node forgets the keys a transaction it forwarded
// touched, so that its next read of them asks their owner (read your
// writes, and a refused ETag read again at once) instead of answering from
// knowledge the staleness bound still allows.
func (b *Buffer) Forget(ks adapters.Keyspace, keys [][]byte) {
	b.mu.RLock()
	s, ok := b.spaces[ks]
	b.mu.RUnlock()
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropped {
		return
	}
	s.writes.Add(1) // a fetch in flight may hold what the forwarded commit changed (takeoff)
	for _, k := range keys {
		r := s.floor(k)
		if !bytes.Equal(r.key(), k) || r.head() {
			if !r.locked() {
				r.setGap(true) // the gap k falls in
			}
			continue
		}
		if r.dirty() || r.locked() || r.kind() == Sentinel || !s.removable(r) {
			continue
		}
		b.remove(s, r)
		if p := s.floor(k); !p.locked() {
			p.setGap(true)
		}
	}
	if invariants.Enabled {
		b.assertCounters()
	}
}

// SetExact says whether the staleness bound (Options.MaxStaleness) applies
// to reads outside transactions of ks: on, they answer from whatever the
// buffer knows, however old, as without a bound; off (the default), the
// bound applies. Coherence partitioned sets it for the keyspaces this node
// owns, whose only writer it is, and clears it when it stops owning one.
// Confirmation stamps are kept either way, so turning it off makes old
// knowledge count as stale at once.
func (b *Buffer) SetExact(ks adapters.Keyspace, on bool) {
	b.mu.RLock()
	s, ok := b.spaces[ks]
	b.mu.RUnlock()
	if ok && s.exact.Load() == on {
		return
	}
	if !ok {
		b.OpenKeyspace(ks)
		b.mu.RLock()
		s, ok = b.spaces[ks]
		b.mu.RUnlock()
		if !ok {
			return
		}
	}
	s.exact.Store(on)
}

// readTick is the tick a read outside a transaction of s decides
// freshness at: 0, before which nothing is stale, for an exact keyspace.
func (b *Buffer) readTick(s *keyspace) uint32 {
	if s.exact.Load() {
		return 0
	}
	return b.tick()
}
