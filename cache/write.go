package cache

import (
	"bytes"
	"context"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/invariants"
)

// Write is one committed change: a new value, or a delete.
type Write struct {
	Key    []byte
	Value  []byte
	Delete bool
	// Expect is what the committing transaction knew the store to hold
	// before this write (the key's base): ExpectAny for a blind write of
	// a key whose state it did not know. Written through, it is the
	// store's precondition; replayed from the log, it becomes the
	// record's base, so write-back stays conditional after a restart.
	Expect adapters.Expect
}

// Cond is the precondition of a single-key write (the txn package checks
// it against what LockKey returns).
type Cond uint8

const (
	// Always writes whatever the key's state (upsert, or delete of a
	// possibly absent key).
	Always Cond = iota
	// MustNotExist fails with ErrExists if the key exists (insert).
	MustNotExist
	// MustExist fails with ErrNotFound if the key is absent (update).
	MustExist
)

// Apply installs committed writes as dirty records (Table 3): an existing
// record is changed in place and keeps its gap bit; a new record inherits
// its predecessor's gap bit (and the locks on that gap). Writes are never
// refused for budget: eviction and write-back make room afterwards. Under
// policy none the writes go straight to the store.
func (b *Buffer) Apply(ctx context.Context, ks adapters.Keyspace, writes []Write) error {
	for _, w := range writes {
		if err := b.checkKey(w.Key); err != nil {
			return err
		}
		if err := b.checkValue(w.Value); err != nil {
			return err
		}
	}
	s, err := b.space(ks)
	if err != nil {
		return err
	}
	if b.opts.Policy == PolicyNone {
		return b.writeThrough(ctx, ks, writes)
	}
	s.mu.Lock()
	for _, w := range writes {
		b.applyOne(s, w)
	}
	s.mu.Unlock()
	b.maybeEvict()
	return nil
}

// applyOne is Table 3 for one write (exclusive latch).
func (b *Buffer) applyOne(s *keyspace, w Write) {
	kind, val := Regular, w.Value
	if w.Delete {
		kind, val = Tombstone, nil
	}
	pred := s.floor(w.Key)
	if bytes.Equal(pred.key(), w.Key) {
		if w.Delete && pred.kind() == Tombstone {
			return // already known absent: dirtying it would only cost a Delete
		}
		was := pred.dirty()
		delta := pred.set(kind, val)
		b.used.Add(delta)
		b.markDirty(s, pred, was, delta)
		return
	}
	if w.Delete && b.opts.Policy == PolicyNemo && !pred.gap() {
		return // known absent: nothing to delete
	}
	r := newRecord(w.Key, val, kind)
	if b.opts.Policy == PolicyNemo && !pred.gap() {
		// Written into a sealed gap: the store had no such key, and
		// write-back checks it still has none (an insert elsewhere
		// meanwhile is a conflict, not an overwrite).
		r.setBase(adapters.Expect{Kind: adapters.ExpectAbsent})
	}
	r.setGap(pred.gap())
	b.insert(s, r, pred)
	b.used.Add(b.size(r))
	b.markDirty(s, r, false, 0)
}

func (b *Buffer) writeThrough(ctx context.Context, ks adapters.Keyspace, writes []Write) error {
	// Upserts and deletes go out in two calls, so a key written twice must
	// keep only its last write: a delete followed by a re-insert would
	// otherwise end deleted.
	last := make(map[string]int, len(writes))
	for i, w := range writes {
		last[string(w.Key)] = i
	}
	var ups []adapters.Record
	var dels [][]byte
	for i, w := range writes {
		if last[string(w.Key)] != i {
			continue
		}
		if w.Delete {
			dels = append(dels, w.Key)
		} else {
			ups = append(ups, adapters.Record{Key: w.Key, Value: w.Value})
		}
	}
	if len(ups) > 0 {
		if _, err := b.store.Upsert(ctx, ks, adapters.Puts(ups)); err != nil {
			return storeErr("upsert", err)
		}
	}
	if len(dels) > 0 {
		if err := b.store.Delete(ctx, ks, adapters.Deletes(dels)); err != nil {
			return storeErr("delete", err)
		}
	}
	return nil
}

// ValidateWrite checks a write's key and value against the limits and the
// keyspace against those open, so a transaction fails the write at once
// rather than at commit.
func (b *Buffer) ValidateWrite(ks adapters.Keyspace, key, val []byte) error {
	if err := b.checkKey(key); err != nil {
		return err
	}
	if err := b.checkValue(val); err != nil {
		return err
	}
	_, err := b.space(ks)
	return err
}

// WriteThrough writes committed changes to the store synchronously and
// then installs them as clean records (write mode "through"). The caller
// holds X locks on every key, so no other writer can interleave. On a store
// error nothing is installed (the store itself may hold a prefix: it is
// not atomic across records).
func (b *Buffer) WriteThrough(ctx context.Context, ks adapters.Keyspace, writes []Write) error {
	s, err := b.space(ks)
	if err != nil {
		return err
	}
	if b.opts.Policy == PolicyNone {
		return b.writeThrough(ctx, ks, writes)
	}
	s.wbMu.Lock()
	defer s.wbMu.Unlock()
	t := b.tick() // the written state is at least this fresh
	err = b.writeThrough(ctx, ks, writes)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		// The store may hold any prefix of the writes: what the buffer
		// knows of those keys is no longer known to be true. Turn their
		// records into sentinels (unknown, still locked) so the next
		// read fetches.
		for _, w := range writes {
			if r := s.floor(w.Key); bytes.Equal(r.key(), w.Key) && !r.dirty() && !r.head() {
				s.wrote(r)
				b.used.Add(r.set(Sentinel, nil))
			}
		}
		return err
	}
	for _, w := range writes {
		b.applyOne(s, w)
		r := s.floor(w.Key)
		if !bytes.Equal(r.key(), w.Key) {
			continue // a delete of a key known absent
		}
		s.wrote(r)
		if r.dirty() {
			r.setDirty(false)
			b.confirm(r, t)
			if d := b.dirty.Add(-b.size(r)); invariants.Enabled && d < 0 {
				panic(invariants.Errorf("dirty bytes %d after writing %q through", d, r.key()))
			}
			if r.kind() == Tombstone && b.opts.Policy != PolicyNemo && !r.locked() && s.removable(r) {
				b.remove(s, r)
			}
		}
	}
	b.maybeEvict()
	return nil
}

// AnyDirty reports whether ks holds a dirty record whose key satisfies
// match: whether the store lacks some write to the keys match selects (the
// Datastore frontend asks before passing a GQL query to the backend).
func (b *Buffer) AnyDirty(ks adapters.Keyspace, match func(key []byte) bool) (bool, error) {
	s, err := b.space(ks)
	if err != nil {
		return false, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	found := false
	s.tree.Ascend(func(r *record) bool {
		if r.dirty() && match(r.key()) {
			found = true
		}
		return !found
	})
	return found, nil
}
