package cache

import (
	"sync/atomic"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/obs"
)

type counters struct {
	hits, negHits, misses atomic.Uint64
	rangeHits, rangeHoles atomic.Uint64
	rangeFetches          atomic.Uint64
	rangeRetries          atomic.Uint64
	admitted, admitBypass atomic.Uint64
	rangeFiltered         atomic.Uint64
	evictDeferred         atomic.Uint64
	evictions, writebacks atomic.Uint64
	writebackErrors       atomic.Uint64
	writebackConflicts    atomic.Uint64
	writebackRejected     atomic.Uint64
	staleReads, refreshed atomic.Uint64
	refreshedAhead        atomic.Uint64
	refreshSkipped        atomic.Uint64
	refreshCold           atomic.Uint64
	coalesced             atomic.Uint64
	// writebackCalls counts write-back store calls; writebackInFlight is
	// how many are in flight now.
	writebackCalls    atomic.Uint64
	writebackInFlight atomic.Int64
	// throttled counts writers Throttle held back.
	throttled atomic.Uint64
	// writebackBatch times each write-back store call (a batch of up to
	// Options.WriteBatch records); writebackDelay is, for each record
	// taken for write-back by age (TakeAged) and written back, how long it
	// had been dirty.
	writebackBatch, writebackDelay *obs.Histogram
}

// Stats is a snapshot of the buffer's counters and gauges.
type Stats struct {
	Hits         uint64 // point lookups answered with a value
	NegativeHits uint64 // point lookups answered "absent" from a tombstone or sealed gap
	Misses       uint64 // point lookups that went to the store
	// Coalesced counts the misses (among Misses) answered by another
	// read's fetch of the same key already in flight, without a store
	// call of their own (fetch.go).
	Coalesced     uint64
	RangeHits     uint64 // scans answered entirely from the buffer
	RangeHoles    uint64 // holes found by scans that were not
	RangeFetches  uint64 // GetRange calls made by scans (one per scan pass with holes)
	RangeRetries  uint64 // scan passes run again because writes landed between their plan and their merge
	Admitted      uint64 // records admitted from fetches
	AdmitBypass   uint64 // admissions skipped because the budget was full
	EvictDeferred uint64 // evictions put off because a fetch in flight might hold an older value
	Evictions     uint64 // records removed by the clock
	Writebacks    uint64 // dirty records written to the store
	WritebackErr  uint64 // failed write-back store calls
	// WritebackCalls counts write-back store calls (one per batch of up
	// to Options.WriteBatch records); WritebackInFlight is how many are
	// in flight now (at most Options.WriteBackParallelism per keyspace).
	WritebackCalls    uint64
	WritebackInFlight int64
	// Throttled counts writers held back because dirty bytes exceeded
	// DirtyLimit; DirtyLimit is that limit now (Buffer.DirtyLimit).
	Throttled  uint64
	DirtyLimit int64
	// WritebackConflicts counts buffered writes the store refused because
	// the key changed since the buffer last saw it (see Conflict).
	WritebackConflicts uint64
	// WritebackRejected counts buffered writes the store refused as
	// invalid (a record it will never take): isolated from the rest of
	// their batch, quarantined in the conflicts file and dropped.
	WritebackRejected uint64
	// StaleReads counts point lookups and scans outside transactions
	// that found buffered knowledge older than Options.MaxStaleness and
	// fetched again; Refreshed counts buffered records such a fetch
	// replaced with the store's current state.
	StaleReads uint64
	Refreshed  uint64
	// RefreshedAhead counts background fetches of hot records whose
	// knowledge had used three quarters of MaxStaleness (see stale.go).
	RefreshedAhead uint64
	// RefreshSkipped counts refreshes ahead the budget declined (see
	// Options.RefreshAheadShare), RefreshCold the hits on an aging record
	// not refreshed because it was read only once since the store last
	// vouched for it (stale.go): either way the record is fetched by the
	// first read that finds it stale, if one comes.
	RefreshSkipped, RefreshCold uint64
	// RangeFiltered counts range fetches the range admission filter kept
	// out of a full buffer (a range's first fetch: see
	// Options.RangeAdmitSlots).
	RangeFiltered uint64

	// PendingKeyspaceOps is how many keyspaces have a create or drop that
	// has not reached the store yet (it waits for the store to answer).
	PendingKeyspaceOps int

	UsedBytes  int64
	DirtyBytes int64
	MaxBytes   int64
	Records    int // resident records, fences included
	// FlushLag is how long the oldest dirty record has waited for its
	// write-back (0 when nothing is dirty), including records under a
	// write-back attempt and records whose write-back failed.
	FlushLag time.Duration
	// WritebackBatch is the latency of write-back store calls, one per
	// batch of up to Options.WriteBatch records.
	WritebackBatch obs.HistogramSnapshot
	// WritebackDelay is, for each record taken for write-back by age
	// (TakeAged) and written back, how long it had been dirty: from its
	// commit to the store's confirmation.
	WritebackDelay obs.HistogramSnapshot
}

// Stats returns a snapshot.
func (b *Buffer) Stats() Stats {
	c := &b.stats
	st := Stats{
		Hits: c.hits.Load(), NegativeHits: c.negHits.Load(), Misses: c.misses.Load(), Coalesced: c.coalesced.Load(),
		RangeHits: c.rangeHits.Load(), RangeHoles: c.rangeHoles.Load(), RangeFetches: c.rangeFetches.Load(),
		RangeRetries: c.rangeRetries.Load(), Admitted: c.admitted.Load(), AdmitBypass: c.admitBypass.Load(), EvictDeferred: c.evictDeferred.Load(),
		Evictions: c.evictions.Load(), Writebacks: c.writebacks.Load(), WritebackErr: c.writebackErrors.Load(),
		WritebackCalls: c.writebackCalls.Load(), WritebackInFlight: c.writebackInFlight.Load(),
		Throttled: c.throttled.Load(), DirtyLimit: b.DirtyLimit(),
		WritebackConflicts: c.writebackConflicts.Load(), WritebackRejected: c.writebackRejected.Load(),
		StaleReads: c.staleReads.Load(), Refreshed: c.refreshed.Load(), RefreshedAhead: c.refreshedAhead.Load(), RefreshSkipped: c.refreshSkipped.Load(), RefreshCold: c.refreshCold.Load(),
		RangeFiltered: c.rangeFiltered.Load(), UsedBytes: b.used.Load(), DirtyBytes: b.dirty.Load(), MaxBytes: b.opts.MaxBytes,
		PendingKeyspaceOps: int(b.gate.pending.Load()),
		WritebackBatch:     c.writebackBatch.Snapshot(), WritebackDelay: c.writebackDelay.Snapshot(),
	}
	b.mu.RLock()
	for _, s := range b.spaces {
		// The one latch taken under Buffer.mu (doc.go), one at a time.
		s.mu.RLock()
		st.Records += s.tree.Len()
		s.mu.RUnlock()
	}
	b.mu.RUnlock()
	st.FlushLag = b.flushLag()
	return st
}

// flushLag is how long the oldest dirty record has waited for write-back
// (0 when nothing is dirty), counting records under a write-back attempt
// and records put back after a failed one: during an outage it keeps
// growing.
func (b *Buffer) flushLag() time.Duration {
	var oldest time.Time
	older := func(at time.Time) {
		if oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	for _, s := range b.spacesSnapshot() {
		s.mu.RLock()
		// Entries that are no retries are in the order their records
		// became dirty: the first one still dirty is the oldest.
		for _, e := range s.dirtyQ {
			if !e.retry && e.r.dirty() && s.present(e.r) {
				older(e.at)
				break
			}
		}
		for r, at := range s.taken {
			if r.dirty() && s.present(r) {
				older(at)
			}
		}
		s.mu.RUnlock()
	}
	if oldest.IsZero() {
		return 0
	}
	return time.Since(oldest)
}

// Unflushed describes what the buffer holds that the store has not been
// sent: the dirty records, their bytes (as the budget counts them) and
// how many of them each keyspace holds.
type Unflushed struct {
	Records   int
	Bytes     int64
	Keyspaces map[adapters.Keyspace]int
}

// Unflushed counts the dirty records now (a walk over every tree: for a
// shutdown's last report, not for a hot path).
func (b *Buffer) Unflushed() Unflushed {
	u := Unflushed{Keyspaces: map[adapters.Keyspace]int{}}
	for _, s := range b.spacesSnapshot() {
		s.mu.RLock()
		s.tree.Ascend(func(r *record) bool {
			if r.dirty() {
				u.Records++
				u.Bytes += b.size(r)
				u.Keyspaces[s.name]++
			}
			return true
		})
		s.mu.RUnlock()
	}
	return u
}
