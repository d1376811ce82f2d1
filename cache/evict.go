package cache

import (
	"bytes"
	"time"

	"github.com/nemocache/nemo/adapters"
)

// The evictor starts above high and stops at low (fractions of MaxBytes),
// leaving headroom so admissions rarely wait.
func (b *Buffer) high() int64 { return b.opts.MaxBytes - b.opts.MaxBytes/16 }
func (b *Buffer) low() int64  { return b.opts.MaxBytes - b.opts.MaxBytes/8 }

func (b *Buffer) maybeEvict() {
	if b.used.Load() > b.high() {
		kick(b.evictKick)
	}
}

func (b *Buffer) spacesSnapshot() []*keyspace {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]*keyspace, 0, len(b.spaces))
	for _, s := range b.spaces {
		out = append(out, s)
	}
	return out
}

// evictLoop is the background evictor: above the high mark it turns each
// keyspace's hand once per round towards the low mark. It removes clean
// records only; the dirty ones it chooses it leaves for write-back
// (TakeEvictions), which removes them once written if nothing read them
// meanwhile.
func (b *Buffer) evictLoop() {
	defer b.wg.Done()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-b.evictKick:
		case <-tick.C:
		}
		if b.used.Load() <= b.high() {
			continue
		}
		ev := b.newEviction(b.low(), true)
		for w, ok := ev.Next(); ok; w, ok = ev.Next() {
			if w != nil {
				b.leaveForWriteBack(w)
			}
		}
	}
}

// Eviction runs clock steps over every keyspace until resident bytes are
// at most its target or two full turns of the hand free nothing
// (everything is locked, hot or dirty and failing to write back). Its
// caller drives it one step at a time, and writes back the dirty records
// a step chooses before it asks for the next step, so that what they free
// counts:
//
//	ev := b.Evict(target)
//	for w, ok := ev.Next(); ok; w, ok = ev.Next() {
//		if w != nil {
//			// write w back (the engine's write-back), then w.Close()
//		}
//	}
//	freed := ev.Freed()
type Eviction struct {
	b       *Buffer
	target  int64
	oneTurn bool
	seen    map[*keyspace]int // records examined, per keyspace
	idle    int
	// patience is how many rounds may free nothing: the first turn of a
	// hand may only clear ref bits, the second evicts, and steps per turn
	// grow with the tree.
	patience int
	total    int64
	done     bool
	// The round: the keyspaces it steps, the next one, what it freed and
	// whether it stepped any.
	spaces     []*keyspace
	i          int
	roundFreed int64
	stepped    bool
	// The step handed out last: its keyspace, resident bytes before it,
	// the records it examined and the tree's size.
	cur      *keyspace
	before   int64
	examined int
	n        int
}

// Evict starts an eviction towards target resident bytes (see Eviction).
func (b *Buffer) Evict(target int64) *Eviction { return b.newEviction(target, false) }

// newEviction is Evict; with oneTurn (the background evictor) each
// keyspace's hand makes at most one turn, and what it leaves above target
// waits for the next round (the evictor's next tick or kick). Chances
// then last until the hand comes round in a later round, while readers
// run, not for a few more turns in the same burst: a burst that turned the
// hand four times spent every run's banked chances at once and evicted
// whichever hot runs came first (8 of 9 bursts on the paper's scan
// workload turned it more than once).
func (b *Buffer) newEviction(target int64, oneTurn bool) *Eviction {
	return &Eviction{b: b, target: target, oneTurn: oneTurn, seen: map[*keyspace]int{}, patience: 4}
}

// Next takes the next step: it advances one keyspace's hand over one
// batch (see EvictStep), evicting what is clean, and returns the
// write-back of the dirty records the step chose (nil if none), which the
// caller runs and closes before it calls Next again. ok is false when the
// eviction is over.
func (ev *Eviction) Next() (w *WriteBack, ok bool) {
	ev.endStep()
	for !ev.done {
		if ev.spaces == nil {
			if ev.b.used.Load() <= ev.target || ev.idle >= ev.patience || ev.b.closed.Load() {
				// As EvictStep: a closed buffer evicts nothing.
				ev.done = true
				break
			}
			ev.spaces, ev.i, ev.roundFreed, ev.stepped = ev.b.spacesSnapshot(), 0, 0, false
		}
		if ev.i == len(ev.spaces) {
			ev.total += ev.roundFreed
			switch {
			case !ev.stepped:
				ev.done = true
			case ev.roundFreed == 0:
				ev.idle++
			default:
				ev.idle = 0
			}
			ev.spaces = nil
			continue
		}
		s := ev.spaces[ev.i]
		ev.i++
		s.mu.RLock()
		n := s.tree.Len()
		s.mu.RUnlock()
		if ev.oneTurn && ev.seen[s] >= n {
			continue
		}
		ev.cur, ev.n, ev.before = s, n, ev.b.used.Load()
		_, ev.examined, w = ev.b.evictStep(s)
		return w, true
	}
	return nil, false
}

// endStep counts what the last step freed, its write-back's included.
func (ev *Eviction) endStep() {
	s := ev.cur
	if s == nil {
		return
	}
	ev.cur = nil
	ev.roundFreed += ev.before - ev.b.used.Load()
	ev.seen[s] += ev.examined
	ev.stepped = true
	turn := (ev.n + ev.b.opts.EvictBatch - 1) / ev.b.opts.EvictBatch
	ev.patience = max(ev.patience, 2*turn)
	if ev.b.stopping() {
		ev.total += ev.roundFreed
		ev.done = true
	}
}

// Freed is the bytes the eviction freed so far.
func (ev *Eviction) Freed() int64 { return ev.total }

// EvictStep advances ks's clock hand over one batch of records, taking
// them run by run (see sweep): a run is records linked by sealed gaps, at
// most EvictRun of them, and a record with an unknown gap after it ends
// one. A run of one is plain second-chance CLOCK: a record with its ref bit
// set gets a second chance (the bit is cleared), or one of its credits is
// spent; an unreferenced clean record is removed; an unreferenced dirty one
// is chosen for write-back: w, to be run by the caller (the engine's
// write-back, then Close), removes it if unchanged since. A longer run is
// kept or taken as a unit (see evictRun). Locked, pinned and fence records
// are skipped; sentinels nobody holds are removed. It returns the bytes
// freed (w's not included).
func (b *Buffer) EvictStep(ks adapters.Keyspace) (freed int64, w *WriteBack, err error) {
	s, err := b.space(ks)
	if err != nil {
		return 0, nil, err
	}
	freed, _, w = b.evictStep(s)
	return freed, w, nil
}

// evictStep is EvictStep; it also returns how many records the hand
// passed.
func (b *Buffer) evictStep(s *keyspace) (int64, int, *WriteBack) {
	before := b.used.Load()
	s.mu.Lock()
	batch := s.sweep(b.opts.EvictBatch, b.opts.EvictRun)
	examined := len(batch)
	var victims []*record
	for len(batch) > 0 {
		n := runLen(batch, b.opts.EvictRun)
		victims = b.evictRun(s, batch[:n], victims)
		batch = batch[n:]
	}
	s.mu.Unlock()
	freed := before - b.used.Load()
	if freed > 0 {
		b.freed()
	}
	if len(victims) == 0 {
		return freed, examined, nil
	}
	return freed, examined, b.newWriteBack(s, victims, true, false)
}

// sweep collects at least n records from the clock hand on in key order
// (wrapping around once), then the rest of the last one's run up to maxRun
// records, so that a run is never split by the end of a batch unless it is
// longer than maxRun; it moves the hand past them (exclusive latch).
func (s *keyspace) sweep(n, maxRun int) []*record {
	batch := make([]*record, 0, n+maxRun)
	run := 0
	more := true
	collect := func(r *record) bool {
		if len(batch) > 0 && !batch[len(batch)-1].gap() {
			run++
		} else {
			run = 1
		}
		batch = append(batch, r)
		more = len(batch) < n || (!r.gap() && run < maxRun)
		return more
	}
	s.tree.AscendGreaterOrEqual(s.probe(s.hand), collect)
	if more {
		run = 0 // the wrap breaks the run: the first key follows the last
		s.tree.AscendLessThan(s.probe(s.hand), collect)
	}
	if len(batch) > 0 {
		s.hand = adapters.Successor(batch[len(batch)-1].key())
	}
	return batch
}

// runLen is the length of the run batch starts with: records each of
// which seals the gap to the next, at most maxRun. Key order breaks it
// where the batch wrapped around.
func runLen(batch []*record, maxRun int) int {
	n := 1
	for n < len(batch) && n < maxRun && !batch[n-1].gap() && bytes.Compare(batch[n-1].key(), batch[n].key()) < 0 {
		n++
	}
	return n
}

// maxBank is the most chances a run banks: a run read in every pass of the
// hand survives this many passes without a read.
const maxBank = 3

// evictRun decides for one run (exclusive latch) and returns victims with
// its dirty records to write back appended. Sentinels nobody holds go at
// once. A run of two or more records then counts as one: if any of its
// records was read since the hand last passed, the run stays and each
// record banks a chance (up to maxBank, see bank) in place of its ref
// bit; if none was read but some still has a chance, each spends one;
// otherwise the whole run is evicted, leaving one hole. Reading a run
// touches its records in order, so ref bits within a run tell little
// apart; what matters is whether the run is still read, and a hole
// anywhere in it makes every scan over it fetch.
func (b *Buffer) evictRun(s *keyspace, run []*record, victims []*record) []*record {
	if len(run) > 1 && b.keepRun(s, run) {
		return victims
	}
	for _, r := range run {
		victims = b.evictRecord(s, r, victims)
	}
	return victims
}

// keepRun keeps a run of two or more records if any of them was read or
// still has a chance: each banks a chance (if read) or spends one, and
// sentinels nobody holds go. It reports whether the run stays.
func (b *Buffer) keepRun(s *keyspace, run []*record) bool {
	ref, credit := false, false
	for _, r := range run {
		if r.head() || r.locked() || r.kind() == Sentinel {
			continue
		}
		ref = ref || r.ref()
		credit = credit || r.credit() > 0
	}
	if !ref && !credit {
		return false
	}
	for _, r := range run {
		switch {
		case r.head() || r.locked():
		case r.kind() == Sentinel:
			if !s.removable(r) {
				b.stats.evictDeferred.Add(1)
			} else {
				b.remove(s, r)
			}
		case ref:
			r.setRef(false)
			r.bank(maxBank)
		case r.credit() > 0:
			r.spendCredit()
		}
	}
	return true
}

// evictRecord decides for one record of a run the hand evicts: it goes,
// spends its ref bit or a chance, or, dirty, joins the victims to write
// back.
func (b *Buffer) evictRecord(s *keyspace, r *record, victims []*record) []*record {
	if r.head() || r.locked() {
		return victims
	}
	switch {
	case !r.dirty() && !s.removable(r):
		b.stats.evictDeferred.Add(1) // a fetch in flight may hold an older value
	case r.kind() == Sentinel:
		b.remove(s, r)
	case r.kind() == Tombstone && !r.dirty() && b.opts.Policy != PolicyNemo:
		// A positive-only cache keeps no negative results: one left
		// behind by a deferred removal goes without a second chance.
		b.remove(s, r)
		b.stats.evictions.Add(1)
	case r.ref():
		r.setRef(false)
	case r.credit() > 0:
		r.spendCredit()
	case r.dirty():
		victims = append(victims, r)
	default:
		b.remove(s, r)
		b.stats.evictions.Add(1)
	}
	return victims
}

// bank adds one clock chance to r's credit, up to most (exclusive latch):
// a run read in a pass of the hand earns a pass without reads. Credit
// above most (a small record's size-aware credit) is left alone.
func (r *record) bank(most uint32) {
	if c := r.credit(); c < most {
		f := r.flags.Load()
		r.flags.Store(f&^creditMask | (c+1)<<creditShift)
	}
}
