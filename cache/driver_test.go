package cache

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nemocache/nemo/adapters"
)

// The buffer writes nothing back by itself: the engine (package txn)
// drives write-back through WriteBack. These are the buffer tests' driver,
// the engine's without its own steps (no lease, no durable barrier, no
// write-back log): what the buffer's Flush, FlushKeyspace, EvictStep,
// EvictUntil and background flusher did before write-back moved to txn.

// runWriteBack runs w: its passes, then Confirm, then Close.
func runWriteBack(ctx context.Context, w *WriteBack) error {
	defer w.Close()
	if err := w.Lock(ctx); err != nil {
		return err
	}
	var errs []error
	for w.Next() {
		_, err := w.Store(ctx)
		errs = append(errs, err)
		w.Settle()
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return w.Confirm(ctx)
}

// flushAll writes back every record of every keyspace dirty when it
// starts (txn.Engine.Flush).
func flushAll(ctx context.Context, b *Buffer) error {
	if err := b.SettleKeyspaces(ctx); err != nil {
		return err
	}
	var errs []error
	for _, ks := range b.Keyspaces() {
		if err := flushSpace(ctx, b, ks); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// flushKeyspace is flushAll for one keyspace (txn.Engine.FlushKeyspace).
func flushKeyspace(ctx context.Context, b *Buffer, ks adapters.Keyspace) error {
	if err := b.SettleKeyspaces(ctx); err != nil {
		return err
	}
	return flushSpace(ctx, b, ks)
}

func flushSpace(ctx context.Context, b *Buffer, ks adapters.Keyspace) error {
	ws := b.TakeDirty(ks, 10*b.Options().WriteBatch)
	for i, w := range ws {
		if err := runWriteBack(ctx, w); err != nil {
			for _, rest := range ws[i+1:] {
				rest.Close()
			}
			return err
		}
	}
	return nil
}

// flushAged writes back the aged records of ks, batch after batch, as
// the engine's background write-back does.
func flushAged(ctx context.Context, b *Buffer, ks adapters.Keyspace) error {
	o := b.Options()
	for {
		cutoff := time.Now()
		if b.DirtyBytes() <= o.MaxDirtyBytes {
			cutoff = cutoff.Add(-o.MaxDirtyAge)
		}
		w := b.TakeAged(ks, cutoff, 10*o.WriteBatch)
		if w == nil {
			return nil
		}
		if err := runWriteBack(ctx, w); err != nil {
			return err
		}
	}
}

// evictStep is EvictStep with its dirty victims written back (evicted if
// unchanged), returning the bytes freed by both.
func evictStep(ctx context.Context, b *Buffer, ks adapters.Keyspace) (int64, error) {
	before := b.used.Load()
	_, w, err := b.EvictStep(ks)
	if err != nil {
		return 0, err
	}
	if w != nil {
		err = runWriteBack(ctx, w)
	}
	return before - b.used.Load(), err
}

// evictUntil is an Eviction whose dirty victims are written back as it
// goes (txn.Engine.EvictUntil).
func evictUntil(ctx context.Context, b *Buffer, target int64) int64 {
	return evictWith(ctx, b.Evict(target))
}

// evictWith runs ev, writing back the dirty victims of each step.
func evictWith(ctx context.Context, ev *Eviction) int64 {
	for w, ok := ev.Next(); ok; w, ok = ev.Next() {
		if w != nil {
			_ = runWriteBack(ctx, w)
		}
	}
	return ev.Freed()
}

// startWriteBack runs the engine's background write-back loop over b,
// without its backoff, until the returned stop is called (and then
// waits for it): a round every FlushInterval or when b wants one.
func startWriteBack(b *Buffer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(b.Options().FlushInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-b.WriteBackWanted():
			case <-tick.C:
			}
			_ = b.SettleKeyspaces(ctx)
			for _, ks := range b.Keyspaces() {
				if w := b.TakeEvictions(ks); w != nil {
					_ = runWriteBack(ctx, w)
				}
				_ = flushAged(ctx, b, ks)
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait() }) }
}
