package cache

import (
	"context"
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

func (b *Buffer) evictLoop() {
	defer b.wg.Done()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	ctx := b.bg
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
		b.EvictUntil(ctx, b.low())
	}
}

// EvictUntil runs clock steps over every keyspace until resident bytes are
// at most target or two full turns of the hand free nothing (everything is
// locked, hot or dirty and failing to write back). It returns the bytes
// freed.
func (b *Buffer) EvictUntil(ctx context.Context, target int64) int64 {
	var total int64
	for idle, patience := 0, 4; b.used.Load() > target && idle < patience; {
		spaces := b.spacesSnapshot()
		if len(spaces) == 0 {
			return total
		}
		var freed int64
		for _, s := range spaces {
			f, _ := b.EvictStep(ctx, s.name)
			freed += f
			// The first turn of the hand may only clear ref bits; the
			// second evicts. Steps per turn grow with the tree.
			s.mu.RLock()
			turn := (s.tree.Len() + b.opts.EvictBatch - 1) / b.opts.EvictBatch
			s.mu.RUnlock()
			patience = max(patience, 2*turn)
			select {
			case <-b.stop:
				return total + freed
			default:
			}
		}
		total += freed
		if freed == 0 {
			idle++
		} else {
			idle = 0
		}
	}
	return total
}

// EvictStep advances ks's clock hand over one batch of records: a record
// with its ref bit set gets a second chance (the bit is cleared); an
// unreferenced clean record is removed; an unreferenced dirty one is written
// back outside the latch and removed if unchanged since. Locked, pinned and
// fence records are skipped; sentinels nobody holds are removed. It returns
// the bytes freed.
func (b *Buffer) EvictStep(ctx context.Context, ks adapters.Keyspace) (int64, error) {
	s, err := b.space(ks)
	if err != nil {
		return 0, err
	}
	before := b.used.Load()
	s.mu.Lock()
	batch := make([]*record, 0, b.opts.EvictBatch)
	collect := func(r *record) bool {
		batch = append(batch, r)
		return len(batch) < b.opts.EvictBatch
	}
	s.tree.AscendGreaterOrEqual(s.probe(s.hand), collect)
	if len(batch) < b.opts.EvictBatch {
		s.tree.AscendLessThan(s.probe(s.hand), collect) // wrap around
	}
	if len(batch) > 0 {
		s.hand = adapters.Successor(batch[len(batch)-1].key())
	}
	var victims []*record
	for _, r := range batch {
		if r.head() || r.locked() {
			continue
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
	}
	s.mu.Unlock()
	var werr error
	if len(victims) > 0 {
		werr = b.writeBack(ctx, s, victims, true)
	}
	freed := before - b.used.Load()
	if freed > 0 {
		b.freed()
	}
	return freed, werr
}
