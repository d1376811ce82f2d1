package cache

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// dirtyLimit is the dirty bytes writers may leave before Throttle holds
// them back. It is MaxDirtyBytes while write-back keeps up. While it does
// not (its passes taken by age come back full: more records were due than
// a pass takes), the dirty bytes a newly dirtied record waits behind grow
// faster than write-back drains them, and the oldest dirty record would
// age past MaxDirtyAge however many calls are in flight; the limit then
// falls to the bytes write-back drains in ageTarget (MaxDirtyAge less
// what a pass takes), at the rate its full passes measured, so writers
// are slowed to the store's pace, as a kernel's dirty throttling slows
// writers to a disk's write bandwidth. That estimate leaves out what the
// rate does not see (the other keyspaces, a pass's settling), so a
// correction steers by the oldest dirty record's age itself: it shrinks
// the limit 3 % a step while that age exceeds nine tenths of
// MaxDirtyAge, and lets it grow back 1 % a step below seven tenths.
// While no full pass succeeds (the store down, or write-back keeping up)
// it is MaxDirtyBytes: nemo goes on acknowledging writes out of its log up
// to that many bytes, and in an outage the age bound cannot hold anyway.
// Several keyspaces written back at once each measure their own rate: the
// limit then follows the latest, which errs towards pausing writers.
type dirtyLimit struct {
	bytes   atomic.Int64  // the limit now
	checked atomic.Int64  // UnixNano of the last adjustment
	rate    atomic.Uint64 // float64 bits: bytes per second full passes drained, smoothed
	pass    atomic.Uint64 // float64 bits: seconds a full pass took, smoothed
	full    atomic.Int64  // UnixNano of the last full pass that succeeded
	corr    atomic.Uint64 // float64 bits: the correction, in (0, 1]; 0 reads as 1
}

const (
	// limitEvery: the limit is adjusted at most this often.
	limitEvery = 100 * time.Millisecond
	// limitFloor: the age limit never goes below this (or MaxDirtyBytes,
	// if smaller), so that a slow pass does not stop writers altogether.
	limitFloor = 64 << 10
)

// ageTarget is the wait behind other dirty bytes the limit steers a newly
// dirtied record to: MaxDirtyAge less a tenth for the flusher's look and
// two passes (the one in flight when the record's turn comes, and its
// own), at least a quarter of MaxDirtyAge.
func (b *Buffer) ageTarget() time.Duration {
	age := b.opts.MaxDirtyAge
	pass := time.Duration(math.Float64frombits(b.limit.pass.Load()) * float64(time.Second))
	return max(age*9/10-2*pass, age/4)
}

// drained notes a pass taken by age that came back full and succeeded:
// bytes written back in took.
func (l *dirtyLimit) drained(bytes int, took time.Duration) {
	if took <= 0 {
		return
	}
	rate, pass := float64(bytes)/took.Seconds(), took.Seconds()
	if old := math.Float64frombits(l.rate.Load()); old > 0 && time.Now().UnixNano()-l.full.Load() < int64(time.Minute) {
		rate = 0.7*old + 0.3*rate
		pass = 0.7*math.Float64frombits(l.pass.Load()) + 0.3*pass
	}
	l.rate.Store(math.Float64bits(rate))
	l.pass.Store(math.Float64bits(pass))
	l.full.Store(time.Now().UnixNano())
}

// DirtyLimit is the dirty bytes writers may leave now (see dirtyLimit):
// MaxDirtyBytes, or less while write-back falls behind MaxDirtyAge. Write-
// back takes every dirty record, however young, while dirty bytes exceed
// it.
func (b *Buffer) DirtyLimit() int64 {
	l := &b.limit
	now := time.Now().UnixNano()
	last := l.checked.Load()
	if now-last < int64(limitEvery) || !l.checked.CompareAndSwap(last, now) {
		return l.bytes.Load()
	}
	v := b.opts.MaxDirtyBytes
	if target := b.ageTarget(); target > 0 && now-l.full.Load() < int64(max(2*target, 2*time.Second)) {
		corr := b.correct()
		drain := math.Float64frombits(l.rate.Load()) * target.Seconds() * corr
		v = min(v, max(int64(drain), limitFloor))
	} else {
		l.corr.Store(0)
	}
	l.bytes.Store(v)
	return v
}

// correct moves the dirty limit's correction one step by the oldest dirty
// record's age (see dirtyLimit) and returns it.
func (b *Buffer) correct() float64 {
	l, age := &b.limit, b.opts.MaxDirtyAge
	corr := math.Float64frombits(l.corr.Load())
	if corr == 0 {
		corr = 1
	}
	switch lag := b.flushLag(); {
	case lag > age*9/10:
		corr = max(corr*0.97, 0.05)
	case lag < age*7/10:
		corr = min(corr*1.01, 1)
	}
	l.corr.Store(math.Float64bits(corr))
	return corr
}

// maxPause is the longest Throttle holds a writer back for the dirty
// limit alone (dirty bytes within MaxDirtyBytes): a pause, not a refusal,
// so that writers go at the store's pace, as a kernel's dirty throttling
// pauses writers for at most a fraction of a second at a time.
const maxPause = 250 * time.Millisecond

// Throttle holds a writer back while dirty bytes exceed DirtyLimit: it
// wakes whoever drives write-back (WriteBackWanted) and waits for it to
// catch up. Over the dirty limit but within MaxDirtyBytes it pauses the
// writer for up to maxPause and lets it go on. Over MaxDirtyBytes it
// waits up to wait (or ctx), and if the bound still does not hold it
// returns ErrBackpressure, so the dirty data (what a shutdown must flush)
// stays bounded even when the store is slow or down. Reads are never
// throttled.
func (b *Buffer) Throttle(ctx context.Context, wait time.Duration) error {
	if b.opts.Policy == PolicyNone || b.dirty.Load() <= b.DirtyLimit() {
		return nil
	}
	b.stats.throttled.Add(1)
	kick(b.wbWanted)
	began := time.Now()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		dirty, waited := b.dirty.Load(), time.Since(began)
		switch {
		case dirty <= b.DirtyLimit():
			return nil
		case dirty <= b.opts.MaxDirtyBytes && waited >= maxPause:
			return nil
		case dirty > b.opts.MaxDirtyBytes && waited >= wait:
			return fmt.Errorf("%w: %d dirty bytes, limit %d", ErrBackpressure, dirty, b.opts.MaxDirtyBytes)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
