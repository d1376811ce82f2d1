package cache

import (
	"bytes"
	"context"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/obs"
)

// lookup is the outcome of searching the buffer for one key.
type lookup uint8

const (
	miss    lookup = iota
	hit            // a regular record
	negHit         // a tombstone, or a sealed gap (gap bit 0)
	unknown        // a sentinel: the key's state is being fetched
)

// found is what a point read found in the buffer at a tick, and what it
// decided to do with it (see freshness).
type found struct {
	what lookup
	d    decision
	val  []byte // a hit's value, copied
}

// search is Algorithm 1 (shared latch held): the record at key, or the
// sealed gap around it, answers if freshness says it may (it is then
// touched; a negative hit on a gap touches both framing records, which
// were both useful, paper §5.3); what it may not answer is a miss.
func (b *Buffer) search(s *keyspace, key []byte, now uint32) found {
	r := s.floor(key)
	at := bytes.Equal(r.key(), key)
	var f found
	switch {
	case at && r.kind() == Sentinel:
		return found{what: unknown}
	case at && r.kind() == Regular:
		f = found{what: hit, d: b.freshness(r, itsState, now)}
	case at:
		f = found{what: negHit, d: b.freshness(r, itsState, now)}
	case b.opts.Policy == PolicyNemo && !r.gap():
		f = found{what: negHit, d: b.freshness(r, theGapAfter, now)}
	default:
		return found{what: miss}
	}
	if f.d == refetch {
		return found{what: miss, d: refetch}
	}
	if f.what == hit {
		f.val = cloneBytes(r.value())
	}
	b.touch(r)
	if !at {
		if n := s.after(key); n != nil {
			b.touch(n)
		}
	}
	return f
}

// Get returns the value of key and whether it exists (the value is nil
// when it does not): from the buffer when what it holds may answer
// (fromBuffer), else from the store (getMiss, fetch.go).
func (b *Buffer) Get(ctx context.Context, ks adapters.Keyspace, key []byte) ([]byte, bool, error) {
	if err := b.checkKey(key); err != nil {
		return nil, false, err
	}
	s, err := b.space(ks)
	if err != nil {
		return nil, false, err
	}
	if b.opts.Policy != PolicyNone {
		if v, ok, answered := b.fromBuffer(ctx, s, key); answered {
			return v, ok, nil
		}
	}
	return b.getMiss(ctx, s, key)
}

// fromBuffer is a point read's hit path: search, and answer a hit or a
// negative hit (counted), starting a refresh ahead when freshness says
// so. answered is false for a miss.
func (b *Buffer) fromBuffer(ctx context.Context, s *keyspace, key []byte) (val []byte, exists, answered bool) {
	now := b.readTick(s)
	s.mu.RLock()
	f := b.search(s, key, now)
	s.mu.RUnlock()
	switch f.d {
	case answerAhead:
		b.refreshSoon(s, key, now)
	case answerCold:
		b.stats.refreshCold.Add(1)
	case refetch:
		b.stats.staleReads.Add(1)
	}
	switch f.what {
	case hit:
		b.stats.hits.Add(1)
		obs.Note(ctx, string(s.name), obs.Hit)
		return f.val, true, true
	case negHit:
		b.stats.negHits.Add(1)
		obs.Note(ctx, string(s.name), obs.NegativeHit)
		return nil, false, true
	}
	return nil, false, false
}
