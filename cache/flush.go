package cache

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/nemocache/nemo/adapters"
)

// DirtyBytes is the bytes of the dirty records.
func (b *Buffer) DirtyBytes() int64 { return b.dirty.Load() }

// WriteBackWanted receives when write-back is wanted before its time:
// dirty bytes went over MaxDirtyBytes (a write, a writer held back by
// Throttle), or eviction left dirty records for write-back
// (TakeEvictions). The buffer writes nothing back itself: whoever drives
// write-back (the engine, package txn) waits on it, as well as on its own
// timer for the aged records (TakeAged).
func (b *Buffer) WriteBackWanted() <-chan struct{} { return b.wbWanted }

// TakeAged takes off ks's write-back queue, oldest first, at most limit of
// the records that became dirty at or before cutoff (a record a write-back
// left dirty is queued again as due MaxDirtyAge before it was put back:
// at once, for a cutoff MaxDirtyAge ago). It returns nil when none is due
// (or ks is not open). Their ages count in FlushLag until the write-back
// makes them clean (Close forgets them then).
func (b *Buffer) TakeAged(ks adapters.Keyspace, cutoff time.Time, limit int) *WriteBack {
	s := b.spaceOf(ks)
	if s == nil {
		return nil
	}
	var recs []*record
	s.mu.Lock()
	n := 0
	for n < len(s.dirtyQ) && len(recs) < limit && !s.dirtyQ[n].at.After(cutoff) {
		if e := s.dirtyQ[n]; e.r.dirty() {
			recs = append(recs, e.r)
			s.take(e)
		}
		n++
	}
	clear(s.dirtyQ[:n]) // drop references so removed records can be collected
	s.dirtyQ = s.dirtyQ[n:]
	s.mu.Unlock()
	if len(recs) == 0 {
		return nil
	}
	w := b.newWriteBack(s, recs, false, true)
	w.full = len(recs) == limit
	return w
}

// TakeDirty takes every record of ks dirty now, in key order, for a
// flush: write-backs of at most limit records each, to be run in order.
// An unknown keyspace, or a buffer that keeps nothing (PolicyNone), has
// none.
func (b *Buffer) TakeDirty(ks adapters.Keyspace, limit int) []*WriteBack {
	s := b.spaceOf(ks)
	if s == nil || b.opts.Policy == PolicyNone {
		return nil
	}
	var recs []*record
	s.mu.RLock()
	s.tree.Ascend(func(r *record) bool {
		if r.dirty() {
			recs = append(recs, r)
		}
		return true
	})
	s.mu.RUnlock()
	var out []*WriteBack
	for lo := 0; lo < len(recs); lo += limit {
		hi := min(lo+limit, len(recs))
		out = append(out, b.newWriteBack(s, recs[lo:hi:hi], false, false))
	}
	return out
}

// TakeEvictions takes the dirty records of ks that the evictor chose and
// left for write-back, in key order: a write-back that also removes each
// record it writes back if nothing read or locked it meanwhile. It
// returns nil when there are none.
func (b *Buffer) TakeEvictions(ks adapters.Keyspace) *WriteBack {
	s := b.spaceOf(ks)
	if s == nil {
		return nil
	}
	s.mu.Lock()
	var recs []*record
	for r := range s.evictQ {
		if r.dirty() && s.present(r) {
			recs = append(recs, r)
		}
	}
	s.evictQ = nil
	// A record's key is read under the latch (its buffer changes with
	// its value and base).
	slices.SortFunc(recs, func(x, y *record) int { return bytes.Compare(x.key(), y.key()) })
	s.mu.Unlock()
	if len(recs) == 0 {
		return nil
	}
	return b.newWriteBack(s, recs, true, false)
}

// leaveForWriteBack queues w's records, dirty victims of the background
// evictor, for the write-back driver (TakeEvictions) and wakes it.
func (b *Buffer) leaveForWriteBack(w *WriteBack) {
	s := w.s
	s.mu.Lock()
	if s.evictQ == nil {
		s.evictQ = map[*record]struct{}{}
	}
	for _, r := range w.recs {
		s.evictQ[r] = struct{}{}
	}
	s.mu.Unlock()
	kick(b.wbWanted)
}

// spaceOf returns the open keyspace ks, or nil.
func (b *Buffer) spaceOf(ks adapters.Keyspace) *keyspace {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.spaces[ks]
}

// take notes that a write-back took e off dirtyQ (s.mu held): the age of
// e.r now lives in taken until e.r is clean. A retry entry tells no age;
// the record's own entry is then still queued or already taken.
func (s *keyspace) take(e dirtyEntry) {
	if e.retry {
		return
	}
	if _, ok := s.taken[e.r]; ok {
		return // taken before in this dirty period, at an earlier age
	}
	if s.taken == nil {
		s.taken = map[*record]time.Time{}
	}
	s.taken[e.r] = e.at
}

// untake forgets the ages of recs that are clean or gone after a
// write-back (s.mu held); those still dirty were put back as retries and
// keep theirs.
func (s *keyspace) untake(recs []*record) {
	for _, r := range recs {
		if !r.dirty() || !s.present(r) {
			delete(s.taken, r)
		}
	}
}

// DirtyMark is the set of records dirty at one moment, for FlushedSince:
// the invariant a checkpoint asserts (under the invariants tag) before it
// lets the log go below the LSN it read with the mark.
type DirtyMark struct {
	recs []markedRecord
}

type markedRecord struct {
	s   *keyspace
	r   *record
	ver uint32
}

// MarkDirty returns the records dirty now. It walks every keyspace: a
// check, not for production paths.
func (b *Buffer) MarkDirty() DirtyMark {
	var m DirtyMark
	for _, s := range b.spacesSnapshot() {
		s.mu.RLock()
		s.tree.Ascend(func(r *record) bool {
			if r.dirty() {
				m.recs = append(m.recs, markedRecord{s, r, r.ver})
			}
			return true
		})
		s.mu.RUnlock()
	}
	return m
}

// FlushedSince reports an error naming a record of m still dirty as it was
// then: neither written back (the store confirming its version), nor
// changed since (a newer write, logged later), nor resolved as a conflict,
// nor dropped with its keyspace.
func (b *Buffer) FlushedSince(m DirtyMark) error {
	for _, mr := range m.recs {
		mr.s.mu.RLock()
		left := !mr.s.dropped && mr.s.present(mr.r) && mr.r.dirty() && mr.r.ver == mr.ver
		mr.s.mu.RUnlock()
		if left {
			return fmt.Errorf("%w: %q in %q is still dirty, unchanged, after a flush that reported success", ErrInvariant, mr.r.key(), mr.s.name)
		}
	}
	return nil
}
