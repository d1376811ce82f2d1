package cache

import (
	"bytes"
	"context"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/invariants"
)

// lookup is the outcome of searching the buffer for one key.
type lookup uint8

const (
	miss    lookup = iota
	hit            // a regular record
	negHit         // a tombstone, or a sealed gap (gap bit 0)
	unknown        // a sentinel: the key's state is being fetched
)

// search is Algorithm 1 (shared latch held). On a hit it returns the value
// (aliasing the buffer: copy before releasing the latch).
func (b *Buffer) search(s *keyspace, key []byte) (lookup, *record) {
	r := s.floor(key)
	if bytes.Equal(r.key(), key) {
		switch r.kind() {
		case Regular:
			b.touch(r)
			return hit, r
		case Tombstone:
			b.touch(r)
			return negHit, r
		default:
			return unknown, r
		}
	}
	if b.opts.Policy == PolicyNemo && !r.gap() {
		// A negative hit on a sealed gap: both framing records were
		// useful, so both get a second chance (paper §5.3).
		b.touch(r)
		if n := s.after(key); n != nil {
			b.touch(n)
		}
		return negHit, nil
	}
	return miss, nil
}

// Get returns the value of key and whether it exists.
func (b *Buffer) Get(ctx context.Context, ks adapters.Keyspace, key []byte) ([]byte, bool, error) {
	if err := b.checkKey(key); err != nil {
		return nil, false, err
	}
	s, err := b.space(ks)
	if err != nil {
		return nil, false, err
	}
	if b.opts.Policy == PolicyNone {
		v, ok, _, err := b.fetchOne(ctx, ks, key)
		return v, ok, err
	}
	s.mu.RLock()
	st, r := b.search(s, key)
	var val []byte
	if st == hit {
		val = cloneBytes(r.value())
	}
	s.mu.RUnlock()
	switch st {
	case hit:
		b.stats.hits.Add(1)
		return val, true, nil
	case negHit:
		b.stats.negHits.Add(1)
		return nil, false, nil
	}
	b.stats.misses.Add(1)
	// The key was not buffered and its gap unknown, so no dirty version
	// exists and the store is authoritative for it.
	e := s.beginFetch()
	defer s.endFetch(e)
	v, ok, ver, err := b.fetchOne(ctx, ks, key)
	if err != nil {
		return nil, false, err
	}
	b.admit(ctx, s, key, v, ok, ver)
	return v, ok, nil
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
// never overwritten: it is as new or newer. A sentinel is resolved in place.
func (b *Buffer) admit(ctx context.Context, s *keyspace, key, val []byte, exists bool, base adapters.Expect) {
	if !exists && b.opts.Policy != PolicyNemo {
		return // positive-only cache
	}
	kind := Tombstone
	if exists {
		kind = Regular
	} else {
		val = nil
	}
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
		if pred.kind() == Sentinel && !pred.dirty() {
			charged = pred.set(kind, val) + pred.setBase(base)
		}
		return
	}
	r := newRecord(key, val, kind)
	r.setBase(base)
	r.setGap(pred.gap())
	b.insert(s, r, pred)
	charged = b.size(r)
	b.stats.admitted.Add(1)
}
