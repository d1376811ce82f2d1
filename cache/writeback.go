package cache

import (
	"context"
	"errors"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/invariants"
)

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
			if _, err := b.store.Upsert(ctx, s.name, adapters.Puts(ups)); err != nil {
				upOK = false
				errs = append(errs, storeErr("upsert", err))
			}
		}
		if len(dels) > 0 {
			if err := b.store.Delete(ctx, s.name, adapters.Deletes(dels)); err != nil {
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
		if invariants.Enabled && (!ok[i] || r.ver != sn.ver) {
			panic(invariants.Errorf("keyspace %q: write-back cleaning %q, changed since its snapshot (version %d, was %d)", s.name, r.key(), r.ver, sn.ver))
		}
		r.setDirty(false)
		if d := b.dirty.Add(-b.size(r)); invariants.Enabled && d < 0 {
			panic(invariants.Errorf("dirty bytes %d after writing back %q", d, r.key()))
		}
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
