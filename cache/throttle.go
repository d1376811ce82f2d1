package cache

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// dirtyLimit is the dirty bytes writers may leave before Throttle holds
// them back. It is MaxDirtyBytes while write-back keeps up. While the store
// answers write-back more slowly than writers dirty records, the oldest
// dirty record ages past MaxDirtyAge however many calls are in flight, so
// the limit comes down, and writers are slowed to the store's pace, as a
// kernel's dirty throttling slows writers to a disk's write bandwidth. Two
// rules move it, every limitEvery:
//
//   - The measured rate: while write-back's passes by age come back full
//     (more records were due than a pass takes), the limit is at most the
//     bytes they drain in ageTarget at the rate they drained. This rule
//     acts as soon as write-back falls behind.
//   - The oldest dirty record's age: above seven tenths of MaxDirtyAge
//     the limit falls 10 % a step below the dirty bytes (or itself, if
//     lower), down to limitFloor; below half of it it grows back 2 % a
//     step (a fifth a second) towards MaxDirtyBytes. The engine takes a
//     record for write-back at most half of MaxDirtyAge after it became
//     dirty, so a write-back that keeps up stays under seven tenths (a
//     pass's time is the margin), and the rest of MaxDirtyAge is margin
//     for the age, which is seen late, a pass after it grew. This rule
//     keeps the limit down once passes are small again, rather than
//     letting writers fill MaxDirtyBytes and fall behind once more.
//
// While no write-back call succeeds (the store down) it is MaxDirtyBytes:
// nemo goes on acknowledging writes out of its log up to that many bytes,
// and in an outage the age bound cannot hold anyway.
type dirtyLimit struct {
	bytes   atomic.Int64  // the limit now
	checked atomic.Int64  // UnixNano of the last adjustment
	rate    atomic.Uint64 // float64 bits: bytes per second full passes drained, smoothed
	pass    atomic.Uint64 // float64 bits: seconds a full pass took, smoothed
	full    atomic.Int64  // UnixNano of the last full pass that succeeded
	wbOK    atomic.Int64  // UnixNano of the last write-back call that succeeded
}

const (
	// limitEvery: the limit is adjusted at most this often.
	limitEvery = 100 * time.Millisecond
	// limitFloor: the limit never goes below this (or MaxDirtyBytes, if
	// smaller), so that a slow pass does not stop writers altogether.
	limitFloor = 64 << 10
)

// ageTarget is the wait behind other dirty bytes the rate rule steers a
// newly dirtied record to: MaxDirtyAge less a tenth for the flusher's
// look and two passes (the one in flight when the record's turn comes,
// and its own), at least a quarter of MaxDirtyAge.
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
	l, max0 := &b.limit, b.opts.MaxDirtyBytes
	now := time.Now().UnixNano()
	last := l.checked.Load()
	if now-last < int64(limitEvery) || !l.checked.CompareAndSwap(last, now) {
		return l.bytes.Load()
	}
	age := b.opts.MaxDirtyAge
	if age <= 0 || now-l.wbOK.Load() > int64(max(age, time.Second)) {
		l.bytes.Store(max0)
		return max0
	}
	floor := min(max0, limitFloor)
	v := float64(l.bytes.Load())
	switch lag := b.flushLag(); {
	case lag > age*7/10:
		v = min(v, float64(b.dirty.Load())) * 0.9
	case lag < age*5/10:
		v *= 1.02
	}
	if target := b.ageTarget(); now-l.full.Load() < int64(max(2*target, 2*time.Second)) {
		v = min(v, math.Float64frombits(l.rate.Load())*target.Seconds())
	}
	limit := min(max(int64(v), floor), max0)
	l.bytes.Store(limit)
	return limit
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
