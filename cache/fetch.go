package cache

import (
	"bytes"
	"context"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/invariants"
	"github.com/nemocache/nemo/internal/obs"
)

// The miss path of a point read: the store is asked, and what it answers
// enters the buffer clean (admit), or, for a positive-only cache, a stale
// record it proves wrong goes (forgetStale).

// getMiss answers a point read the buffer could not: the key was not
// buffered and its gap unknown (or what the buffer knew was clean and too
// old), so no dirty version exists and the store is authoritative for it.
// A miss that finds a fetch of the same key in flight that it may use
// (see takeoff) waits for that fetch's answer instead of asking the store
// again; a fetch that fails leaves each waiter to ask for itself. Policy
// none only fetches (and counts no miss: nothing is buffered).
func (b *Buffer) getMiss(ctx context.Context, s *keyspace, key []byte) ([]byte, bool, error) {
	if b.opts.Policy == PolicyNone {
		obs.Note(ctx, string(s.name), obs.Miss)
		v, ok, _, err := b.fetchOne(ctx, s.name, key)
		return v, ok, err
	}
	b.stats.misses.Add(1)
	obs.Note(ctx, string(s.name), obs.Miss)
	t := b.tick() // before the read: what it returns is at least this fresh
	f, lead := b.takeoff(s, key, t)
	if !lead {
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
		if f.err == nil {
			b.stats.coalesced.Add(1)
			if !f.exists {
				return nil, false, nil // not cloneBytes(nil): that is present and empty
			}
			return cloneBytes(f.val), true, nil
		}
		f = nil // it failed: ask the store ourselves, alone
	}
	e := s.beginFetch()
	defer s.endFetch(e)
	v, ok, ver, err := b.fetchOne(ctx, s.name, key)
	if f != nil {
		f.land(v, ok, err)
		defer s.landed(key, f)
	}
	if err != nil {
		return nil, false, err
	}
	b.admit(ctx, s, key, v, ok, ver, t, e)
	return v, ok, nil
}

// flight is a point fetch in progress (getMiss). Its fields after done
// are written once, before done is closed.
type flight struct {
	done   chan struct{}
	t      uint32 // the tick the fetch began at
	writes uint64 // keyspace.writes when it began
	val    []byte
	exists bool
	err    error
}

func (f *flight) land(val []byte, exists bool, err error) {
	f.val, f.exists, f.err = val, exists, err
	close(f.done)
}

// takeoff returns the fetch of key in flight that a miss at tick now may
// wait for (lead false), or a new one the caller makes (lead true). A
// miss may use a fetch that began no longer ago than the staleness bound
// (so its answer is as fresh as the bound promises this read) and with no
// write applied to the keyspace since (a read after a write through this
// node sees that write; Forget counts as one). Otherwise the caller makes
// a fetch of its own, which later misses use instead.
func (b *Buffer) takeoff(s *keyspace, key []byte, now uint32) (f *flight, lead bool) {
	w := s.writes.Load()
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	if f := s.flights[string(key)]; f != nil && f.writes == w && b.fresh(f.t, now) {
		return f, false
	}
	if s.flights == nil {
		s.flights = map[string]*flight{}
	}
	f = &flight{done: make(chan struct{}), t: now, writes: w}
	s.flights[string(key)] = f
	return f, true
}

// landed unregisters f once its answer is in the buffer, unless a later
// fetch of the key took its place.
func (s *keyspace) landed(key []byte, f *flight) {
	s.fetchMu.Lock()
	if s.flights[string(key)] == f {
		delete(s.flights, string(key))
	}
	s.fetchMu.Unlock()
}

// fetchOne reads key from the store: its value, whether it exists, and
// the base a record of it starts from (its version, or absent).
func (b *Buffer) fetchOne(ctx context.Context, ks adapters.Keyspace, key []byte) ([]byte, bool, adapters.Expect, error) {
	recs, err := b.store.Get(ctx, ks, [][]byte{key})
	if err != nil {
		return nil, false, adapters.Expect{}, storeErr("get", err)
	}
	if len(recs) != 1 {
		return nil, false, adapters.Expect{}, storeErr("get", errShortReply)
	}
	return recs[0].Value, recs[0].Value != nil, fetchedBase(recs[0]), nil
}

// fetchedBase is the base of a record read from the store: its version
// (unknown if the store reported none), or absent.
func fetchedBase(r adapters.Record) adapters.Expect {
	switch {
	case r.Value == nil:
		return adapters.Expect{Kind: adapters.ExpectAbsent}
	case r.Version != "":
		return adapters.Expect{Kind: adapters.ExpectVersion, Version: r.Version}
	}
	return adapters.Expect{}
}

// admit is Admit(k) (Algorithm 2's point case): the fetched record, or a
// tombstone if absent, enters clean with its gap inherited (1 in practice:
// the gap was unknown or we would not have missed). An existing record is
// not overwritten (it is as new or newer), except a stale one the fetch
// may refresh (see refreshable); a sentinel is resolved in place. t and e
// are the tick and fetch epoch taken before the fetch.
func (b *Buffer) admit(ctx context.Context, s *keyspace, key, val []byte, exists bool, base adapters.Expect, t, e uint32) {
	if !exists && b.opts.Policy != PolicyNemo {
		// Positive-only cache: no negative result to keep, but a stale
		// record of the key is now known wrong.
		if b.staleOn() {
			b.forgetStale(s, key, t, e)
		}
		return
	}
	kind, val := fetchedKind(val, exists)
	n := int64(len(key)+len(val)+len(base.Version)) + b.opts.RecordOverhead
	if !b.reserve(ctx, n, true) {
		return
	}
	charged := int64(0)
	defer func() {
		if u := b.used.Add(charged - n); invariants.Enabled && u < 0 {
			panic(invariants.Errorf("resident bytes %d after admitting %q", u, key))
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropped {
		return
	}
	pred := s.floor(key)
	if bytes.Equal(pred.key(), key) {
		resolve := pred.kind() == Sentinel && !pred.dirty()
		if resolve || b.refreshable(pred, t, e) {
			charged = pred.set(kind, val) + pred.setBase(base)
			b.confirm(pred, t)
			if !resolve {
				b.stats.refreshed.Add(1)
			}
		}
		return
	}
	r := newRecord(key, val, kind)
	r.setBase(base)
	r.setGap(pred.gap())
	b.insert(s, r, pred)
	b.confirm(r, t)
	charged = b.size(r)
	b.stats.admitted.Add(1)
}

// fetchedKind is the record a fetch makes of a key: its value, or a
// tombstone (no value) when the key is absent.
func fetchedKind(val []byte, exists bool) (Kind, []byte) {
	if exists {
		return Regular, val
	}
	return Tombstone, nil
}

// forgetStale drops what a positive-only cache held for key, a fetch
// begun at tick t and epoch e having found it absent, if the record is
// stale and refreshable: it becomes a tombstone, and leaves at once
// unless a fetch in flight may still hold an older value (the evictor
// removes it then).
func (b *Buffer) forgetStale(s *keyspace, key []byte, t, e uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropped {
		return
	}
	r := s.floor(key)
	if !bytes.Equal(r.key(), key) || r.kind() != Regular || !b.refreshable(r, t, e) {
		return
	}
	b.used.Add(r.set(Tombstone, nil) + r.setBase(adapters.Expect{Kind: adapters.ExpectAbsent}))
	b.confirm(r, t)
	b.stats.refreshed.Add(1)
	if s.removable(r) {
		b.remove(s, r)
	}
}
