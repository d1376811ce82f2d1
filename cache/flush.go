package cache

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nemocache/nemo/adapters"
)

func (b *Buffer) flushLoop() {
	defer b.wg.Done()
	tick := time.NewTicker(b.opts.FlushInterval)
	defer tick.Stop()
	ctx := b.bg
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
		errs := b.flushRound(ctx)
		switch {
		case len(errs) == 0:
			backoff = 0
		case stoppedBy(ctx, errs):
			// StopWorkers cancelled the round: a drain, which writes
			// these records back itself and reports its own failures,
			// or Close. Not a failure of the store, and the last round.
			b.opts.Logger.Debug("write-back cut short: the background workers stop; dirty records kept", "err", errors.Join(errs...))
			return
		default:
			backoff = min(max(2*backoff, 50*time.Millisecond), 5*time.Second)
			b.opts.Logger.Warn("write-back failed; dirty records kept", "err", errors.Join(errs...), "retry_in", backoff)
		}
	}
}

// flushRound is one round of the background flusher: the queued keyspace
// creates and drops, then the aged dirty records of every keyspace. It
// returns each keyspace's failure.
func (b *Buffer) flushRound(ctx context.Context) []error {
	var errs []error
	if err := b.SettleKeyspaces(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, s := range b.spacesSnapshot() {
		if err := b.flushAged(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// stoppedBy reports whether the failures errs of a round run under ctx,
// the workers' context, are all that context's cancellation: StopWorkers
// cut the round short, and no store refused or failed anything on its
// own.
func stoppedBy(ctx context.Context, errs []error) bool {
	if ctx.Err() == nil {
		return false
	}
	for _, err := range errs {
		if !errors.Is(err, context.Canceled) {
			return false
		}
	}
	return true
}

// flushAged writes back the records that have been dirty longer than
// MaxDirtyAge, or all queued ones while dirty bytes exceed MaxDirtyBytes.
func (b *Buffer) flushAged(ctx context.Context, s *keyspace) error {
	for !b.stopping() { // stopped: the drain's own flush takes the rest
		force := b.dirty.Load() > b.opts.MaxDirtyBytes
		cutoff := time.Now().Add(-b.opts.MaxDirtyAge)
		limit := 10 * b.opts.WriteBatch
		var recs []*record
		s.mu.Lock()
		n := 0
		for n < len(s.dirtyQ) && len(recs) < limit && (force || !s.dirtyQ[n].at.After(cutoff)) {
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
		err := b.writeBack(ctx, s, recs, false)
		s.mu.Lock()
		s.untake(recs)
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// take notes that the flusher took e off dirtyQ (s.mu held): the age of
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
		if err := b.flushSpace(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// FlushKeyspace is Flush for one keyspace: it writes back every record of
// ks dirty when it starts. An unknown keyspace has nothing to flush.
func (b *Buffer) FlushKeyspace(ctx context.Context, ks adapters.Keyspace) error {
	if err := b.SettleKeyspaces(ctx); err != nil {
		return err
	}
	b.mu.RLock()
	s, ok := b.spaces[ks]
	b.mu.RUnlock()
	if !ok || b.opts.Policy == PolicyNone {
		return nil
	}
	return b.flushSpace(ctx, s)
}

// flushSpace writes back the records of s dirty now.
func (b *Buffer) flushSpace(ctx context.Context, s *keyspace) error {
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
			return err
		}
	}
	return nil
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
