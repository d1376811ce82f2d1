package cache

import (
	"context"
	"fmt"
	"time"
)

// Throttle holds a writer back while dirty bytes exceed MaxDirtyBytes: it
// wakes whoever drives write-back (WriteBackWanted) and waits for it to
// catch up, up to wait (or ctx). If the bound still does not hold it
// returns ErrBackpressure, so the dirty data (what a shutdown must flush)
// stays bounded even when the store is slow or down. Reads are never
// throttled.
func (b *Buffer) Throttle(ctx context.Context, wait time.Duration) error {
	if b.opts.Policy == PolicyNone || b.dirty.Load() <= b.opts.MaxDirtyBytes {
		return nil
	}
	kick(b.wbWanted)
	deadline := time.Now().Add(wait)
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for b.dirty.Load() > b.opts.MaxDirtyBytes {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d dirty bytes, limit %d", ErrBackpressure, b.dirty.Load(), b.opts.MaxDirtyBytes)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
