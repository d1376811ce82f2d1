package cache

import (
	"context"
	"errors"
	"time"
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
		err := b.SettleKeyspaces(ctx) // queued keyspace creates and drops
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
