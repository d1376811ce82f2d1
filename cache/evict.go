package cache

import (
	"context"
	"errors"
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
	ctx := context.Background()
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
	s.tree.AscendGreaterOrEqual(probe(s.hand), collect)
	if len(batch) < b.opts.EvictBatch {
		s.tree.AscendLessThan(probe(s.hand), collect) // wrap around
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

type snap struct {
	r   *record
	ver uint32
	key []byte
	val []byte
	del bool
}

// writeBack writes dirty records to the store outside the tree latch
// (Upsert for regular records, Delete for tombstones), then marks each one
// clean if it did not change meanwhile; with evict it also removes those
// that stayed unreferenced and unlocked. One write-back per keyspace runs at
// a time so that versions reach the store in order.
func (b *Buffer) writeBack(ctx context.Context, s *keyspace, recs []*record, evict bool) error {
	s.wbMu.Lock()
	defer s.wbMu.Unlock()
	var snaps []snap
	seen := make(map[*record]bool, len(recs))
	s.mu.RLock()
	for _, r := range recs {
		if seen[r] || !r.dirty() || !s.present(r) {
			continue
		}
		seen[r] = true
		snaps = append(snaps, snap{r: r, ver: r.ver, key: cloneBytes(r.key()), val: cloneBytes(r.value()), del: r.kind() == Tombstone})
	}
	s.mu.RUnlock()
	if len(snaps) == 0 {
		return nil
	}
	ok := make([]bool, len(snaps))
	var errs []error
	for lo := 0; lo < len(snaps); lo += b.opts.WriteBatch {
		hi := min(lo+b.opts.WriteBatch, len(snaps))
		var ups []adapters.Record
		var dels [][]byte
		for _, sn := range snaps[lo:hi] {
			if sn.del {
				dels = append(dels, sn.key)
			} else {
				ups = append(ups, adapters.Record{Key: sn.key, Value: sn.val})
			}
		}
		upOK, delOK := true, true
		if len(ups) > 0 {
			if err := b.store.Upsert(ctx, s.name, ups); err != nil {
				upOK = false
				errs = append(errs, storeErr("upsert", err))
			}
		}
		if len(dels) > 0 {
			if err := b.store.Delete(ctx, s.name, dels); err != nil {
				delOK = false
				errs = append(errs, storeErr("delete", err))
			}
		}
		for i := lo; i < hi; i++ {
			ok[i] = (snaps[i].del && delOK) || (!snaps[i].del && upOK)
		}
	}
	if len(errs) > 0 {
		b.stats.writebackErrors.Add(uint64(len(errs)))
	}
	s.mu.Lock()
	now := time.Now()
	for i, sn := range snaps {
		r := sn.r
		if !s.present(r) {
			continue
		}
		s.wrote(r) // even a failed call may have reached the store
		if !r.dirty() {
			continue
		}
		if !ok[i] || r.ver != sn.ver {
			// Still dirty (failed, or a newer version arrived): keep it
			// queued so the flusher retries it.
			s.dirtyQ = append(s.dirtyQ, dirtyEntry{r: r, at: now.Add(-b.opts.MaxDirtyAge)})
			continue
		}
		r.setDirty(false)
		b.dirty.Add(-b.size(r))
		b.stats.writebacks.Add(1)
		switch {
		case !s.removable(r):
			b.stats.evictDeferred.Add(1) // a fetch in flight may hold the older value
		case r.kind() == Tombstone && b.opts.Policy != PolicyNemo && !r.locked():
			b.remove(s, r) // positive-only cache: nothing to keep (once unlocked: see release)
		case evict && !r.ref() && !r.locked():
			b.remove(s, r)
			b.stats.evictions.Add(1)
		}
	}
	s.mu.Unlock()
	return errors.Join(errs...)
}

func (b *Buffer) flushLoop() {
	defer b.wg.Done()
	tick := time.NewTicker(b.opts.FlushInterval)
	defer tick.Stop()
	ctx := context.Background()
	backoff := time.Duration(0)
	for {
		select {
		case <-b.stop:
			return
		case <-b.flushKick:
		case <-tick.C:
		}
		if backoff > 0 {
			select {
			case <-b.stop:
				return
			case <-time.After(backoff):
			}
		}
		err := b.SettleKeyspaces(ctx)
		for _, s := range b.spacesSnapshot() {
			if e := b.flushAged(ctx, s); e != nil {
				err = e
			}
		}
		if err != nil {
			backoff = min(max(2*backoff, 50*time.Millisecond), 5*time.Second)
			b.opts.Logger.Warn("write-back failed; dirty records kept", "err", err, "retry_in", backoff)
		} else {
			backoff = 0
		}
	}
}

// flushAged writes back the records that have been dirty longer than
// MaxDirtyAge, or all queued ones while dirty bytes exceed MaxDirtyBytes.
func (b *Buffer) flushAged(ctx context.Context, s *keyspace) error {
	for {
		force := b.dirty.Load() > b.opts.MaxDirtyBytes
		cutoff := time.Now().Add(-b.opts.MaxDirtyAge)
		limit := 10 * b.opts.WriteBatch
		var recs []*record
		s.mu.Lock()
		n := 0
		for n < len(s.dirtyQ) && len(recs) < limit && (force || !s.dirtyQ[n].at.After(cutoff)) {
			if r := s.dirtyQ[n].r; r.dirty() {
				recs = append(recs, r)
			}
			n++
		}
		clear(s.dirtyQ[:n]) // drop references so removed records can be collected
		s.dirtyQ = s.dirtyQ[n:]
		s.mu.Unlock()
		if len(recs) == 0 {
			return nil
		}
		if err := b.writeBack(ctx, s, recs, false); err != nil {
			return err
		}
	}
}

// Flush writes back every record that is dirty when it starts, in every
// keyspace, and returns the first store error (the records stay dirty).
func (b *Buffer) Flush(ctx context.Context) error {
	if err := b.SettleKeyspaces(ctx); err != nil {
		return err
	}
	if b.opts.Policy == PolicyNone {
		return nil
	}
	var errs []error
	for _, s := range b.spacesSnapshot() {
		var recs []*record
		s.mu.RLock()
		s.tree.Ascend(func(r *record) bool {
			if r.dirty() {
				recs = append(recs, r)
			}
			return true
		})
		s.mu.RUnlock()
		for lo := 0; lo < len(recs); lo += 10 * b.opts.WriteBatch {
			hi := min(lo+10*b.opts.WriteBatch, len(recs))
			if err := b.writeBack(ctx, s, recs[lo:hi], false); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	return errors.Join(errs...)
}
