package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/deadline"
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
	// Check writes nothing: written through, the group applies only if
	// Expect still holds for Key (a transaction's read of a key it did not
	// write, validated at commit where the store applies groups
	// atomically). Apply and the buffer ignore it.
	Check bool
	// Range, with Check, checks the range [Key, Range.End) instead of one
	// key (a transaction's range read: see adapters.RangeCheck).
	Range *adapters.RangeCheck
	// Prior (replay only; 0: none) is a hash of the value the key's record
	// held unwritten when this write committed (see Bases): replay counts
	// a store holding it as the buffer's own write.
	Prior uint64
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
	if err := b.checkWrites(writes); err != nil {
		return err
	}
	s, err := b.space(ks)
	if err != nil {
		return err
	}
	if b.opts.Policy == PolicyNone {
		_, err := b.writeThrough(ctx, ks, writes, true)
		return err
	}
	s.mu.Lock()
	for _, w := range writes {
		if !w.Check {
			b.applyOne(s, w)
		}
	}
	s.mu.Unlock()
	b.maybeEvict()
	return nil
}

// checkWrites checks every write's key and value against the limits.
func (b *Buffer) checkWrites(writes []Write) error {
	for _, w := range writes {
		if err := b.checkKey(w.Key); err != nil {
			return err
		}
		if err := b.checkValue(w.Value); err != nil {
			return err
		}
	}
	return nil
}

// applyOne is Table 3 for one write (exclusive latch).
func (b *Buffer) applyOne(s *keyspace, w Write) {
	s.writes.Add(1)
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

// writeThrough sends writes to the store, each conditioned on its
// Expect, and returns each one's new version ("" for a delete, or one the
// store did not report). A key written twice keeps only its last write.
// The group goes out as one atomic call when the store can take it
// (adapters.AtomicWriter). When the store says the group is too wide for
// that, the checks among it (what the transaction read) are read back
// first, which catches every change made since the transaction read,
// though not one landing between that read and the writes, and the writes
// alone go out atomically. If they are still too wide, the store's
// refusal is the answer (a client transaction the service itself would
// refuse: more entity groups than legacy Datastore takes in one), unless
// parts allows them in parts: upserts and deletes in two calls that are
// not atomic together (a non-transactional Datastore commit; policy none).
// A store with no atomic writes at all takes them in parts. A refused
// precondition is ErrChanged. Once sent, the writes run on past the
// frontend's own request deadline, to the client's (internal/deadline):
// cut off there, their outcome would be unknown.
func (b *Buffer) writeThrough(ctx context.Context, ks adapters.Keyspace, writes []Write, parts bool) ([]adapters.Version, error) {
	ctx, sent := deadline.Write(ctx)
	defer sent()
	vers := make([]adapters.Version, len(writes))
	ms, at, checks := throughMutations(writes)
	_, atomic := b.rawStore.(adapters.AtomicWriter)
	var wide error // the store's refusal of the group as too wide for one atomic call
	if atomic && (len(ms) > 1 || checks) {
		var err error
		if wide, err = b.writeAtomic(ctx, ks, ms, at, vers); err != nil {
			return nil, err
		} else if wide == nil {
			return vers, nil
		}
	}
	if checks {
		if err := b.checkByReads(ctx, ks, ms); err != nil {
			return nil, err
		}
		ms, at = withoutChecks(ms, at)
		if wide != nil && len(ms) > 1 {
			var err error
			if wide, err = b.writeAtomic(ctx, ks, ms, at, vers); err != nil {
				return nil, err
			} else if wide == nil {
				return vers, nil
			}
		}
	}
	if wide != nil && !parts && len(ms) > 1 && !errors.Is(wide, errors.ErrUnsupported) {
		return nil, throughErr("write", wide)
	}
	if err := b.writeInParts(ctx, ks, ms, at, vers); err != nil {
		return nil, err
	}
	return vers, nil
}

// writeAtomic sends ms as one atomic call and fills vers. When the store
// refuses the group as too wide for one call (adapters.ErrInvalid, or
// errors.ErrUnsupported where it has no atomic writes) it returns that
// refusal as wide, and no error.
func (b *Buffer) writeAtomic(ctx context.Context, ks adapters.Keyspace, ms []adapters.Mutation, at []int, vers []adapters.Version) (wide, err error) {
	vs, err := b.store.(adapters.AtomicWriter).WriteAtomic(ctx, ks, ms)
	switch {
	case err == nil:
		placeVersions(vers, at, vs)
		return nil, nil
	case !errors.Is(err, adapters.ErrConflict) && (errors.Is(err, adapters.ErrInvalid) || errors.Is(err, errors.ErrUnsupported)):
		return err, nil
	}
	return nil, throughErr("write", err)
}

// withoutChecks is ms and at without the checks.
func withoutChecks(ms []adapters.Mutation, at []int) ([]adapters.Mutation, []int) {
	var out []adapters.Mutation
	var outAt []int
	for j, m := range ms {
		if !m.Check {
			out, outAt = append(out, m), append(outAt, at[j])
		}
	}
	return out, outAt
}

// throughMutations turns writes into the store's mutations, keeping only
// the last write of a key (checks all stay), with the index in writes of
// each and whether any is a check.
func throughMutations(writes []Write) (ms []adapters.Mutation, at []int, checks bool) {
	last := make(map[string]int, len(writes))
	for i, w := range writes {
		if !w.Check {
			last[string(w.Key)] = i
		}
	}
	for i, w := range writes {
		if !w.Check && last[string(w.Key)] != i {
			continue
		}
		m := adapters.Mutation{Write: adapters.Write{Key: w.Key, Value: w.Value, Expect: w.Expect}, Delete: w.Delete, Check: w.Check, Range: w.Range}
		if w.Delete || w.Check {
			m.Value = nil
		}
		ms, at = append(ms, m), append(at, i)
		checks = checks || w.Check
	}
	return ms, at, checks
}

// placeVersions sets vers[at[j]] to vs[j] for each version the store
// reported.
func placeVersions(vers []adapters.Version, at []int, vs []adapters.Version) {
	for j, i := range at {
		if j < len(vs) {
			vers[i] = vs[j]
		}
	}
}

// writeInParts writes the upserts among ms in one call and then the
// deletes in another (not atomic together), skipping checks, and sets
// the upserts' new versions in vers (at maps ms to vers).
func (b *Buffer) writeInParts(ctx context.Context, ks adapters.Keyspace, ms []adapters.Mutation, at []int, vers []adapters.Version) error {
	var ups, dels []adapters.Write
	var upAt []int
	for j, m := range ms {
		switch {
		case m.Check:
		case m.Delete:
			dels = append(dels, m.Write)
		default:
			ups, upAt = append(ups, m.Write), append(upAt, at[j])
		}
	}
	if len(ups) > 0 {
		vs, err := b.store.Upsert(ctx, ks, ups)
		if err != nil {
			return throughErr("upsert", err)
		}
		placeVersions(vers, upAt, vs)
	}
	if len(dels) > 0 {
		if err := b.store.Delete(ctx, ks, dels); err != nil {
			return throughErr("delete", err)
		}
	}
	return nil
}

// checkByReads reads back what the checks among ms cover and fails with
// ErrChanged when the store no longer holds what the transaction read
// there: the keys with one Get, each range with a GetRange. Checks alone
// (what a transaction that writes nothing read) are validated exactly so
// when the reads found versioned records: each was then current from its
// first read to its check, so all at once at the last first read. A key
// that was absent both times, or a range that held the same records,
// might have held something else in between unseen.
func (b *Buffer) checkByReads(ctx context.Context, ks adapters.Keyspace, ms []adapters.Mutation) error {
	var keys [][]byte
	var at []int
	var conflicts []adapters.Conflict
	for i, m := range ms {
		switch {
		case !m.Check:
		case m.Range != nil:
			got, _, err := b.store.GetRange(ctx, ks, m.Key, m.Range.End, 0)
			if err != nil {
				return storeErr("check", err)
			}
			if !adapters.SameRange(got, m.Range.Records) {
				conflicts = append(conflicts, adapters.Conflict{Index: i, Key: m.Key, Exists: len(got) > 0})
			}
		case m.Expect.Kind != adapters.ExpectAny:
			keys, at = append(keys, m.Key), append(at, i)
		}
	}
	if len(keys) > 0 {
		recs, err := b.store.Get(ctx, ks, keys)
		if err == nil && len(recs) != len(keys) {
			err = errShortReply
		}
		if err != nil {
			return storeErr("check", err)
		}
		for j, r := range recs {
			m := ms[at[j]]
			holds := r.Value == nil
			if m.Expect.Kind == adapters.ExpectVersion {
				holds = r.Value != nil && r.Version == m.Expect.Version
			}
			if !holds {
				conflicts = append(conflicts, adapters.Conflict{Index: at[j], Key: m.Key, Exists: r.Value != nil, Current: r.Version})
			}
		}
	}
	if len(conflicts) > 0 {
		return throughErr("check", &adapters.ConflictError{Conflicts: conflicts})
	}
	return nil
}

// throughErr is a failed write-through call's error: a refused precondition
// is ErrChanged (another writer changed the key), a transaction the store
// aborted for contention ErrStoreAborted, anything else a store failure.
func throughErr(op string, err error) error {
	switch {
	case errors.Is(err, adapters.ErrConflict):
		return fmt.Errorf("%w: %w", ErrChanged, err)
	case errors.Is(err, adapters.ErrAborted):
		return fmt.Errorf("%w: %w", ErrStoreAborted, err)
	}
	return storeErr(op, err)
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

// WriteThrough writes committed changes to the store synchronously, each
// conditioned on its Expect, and then installs them as clean records whose
// base is the store's new version (write mode "through", and coherence
// mode shared). The caller holds X locks on every key, so no other local
// writer can interleave. When the store keeps its own metadata in values
// (adapters.Stamper: Azure's ETag and Timestamp), each upsert's Value is
// replaced, in writes too, by the value as the store now holds it. A
// refused precondition is ErrChanged; on any error nothing is installed
// (without an atomic store call the store may hold a prefix of the writes).
func (b *Buffer) WriteThrough(ctx context.Context, ks adapters.Keyspace, writes []Write, parts bool) error {
	s, err := b.space(ks)
	if err != nil {
		return err
	}
	if b.opts.Policy == PolicyNone {
		vers, err := b.writeThrough(ctx, ks, writes, parts)
		if err == nil {
			b.stamp(writes, vers)
		}
		return err
	}
	// The write-back lock, shared: write-throughs of one keyspace run
	// together (the caller's X locks keep writers of one key apart), while
	// a write-back, a replay or a drop of the keyspace, which take it
	// exclusively, never overlaps one, so no dirty record's write-back
	// races a write-through of its key.
	if err := s.wbMu.RLock(ctx); err != nil {
		return fmt.Errorf("%w: waiting for a write-back in flight: %w", ErrStore, err)
	}
	defer s.wbMu.RUnlock()
	t := b.tick() // the written state is at least this fresh
	vers, err := b.writeThrough(ctx, ks, writes, parts)
	if err == nil {
		b.stamp(writes, vers)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		// The store may hold any prefix of the writes (or all of them:
		// adapters.ErrUnknownOutcome), or another writer's change: what
		// the buffer knows of those keys is no longer known to be true.
		// Turn their records into sentinels (unknown, still locked) so
		// the next read fetches; a key with no record (never so under
		// the transaction's locks) unseals the gap it would be in.
		for _, w := range writes {
			r := s.floor(w.Key)
			switch {
			case !bytes.Equal(r.key(), w.Key):
				r.setGap(true)
			case !r.dirty() && !r.head():
				s.wrote(r)
				b.used.Add(r.set(Sentinel, nil) + r.setBase(adapters.Expect{}))
			}
		}
		return err
	}
	for i, w := range writes {
		if w.Check {
			continue
		}
		b.applyOne(s, w)
		r := s.floor(w.Key)
		if !bytes.Equal(r.key(), w.Key) {
			continue // a delete of a key known absent
		}
		s.wrote(r)
		base := adapters.Expect{Kind: adapters.ExpectAbsent}
		if !w.Delete {
			base = adapters.Expect{}
			if vers[i] != "" {
				base = adapters.Expect{Kind: adapters.ExpectVersion, Version: vers[i]}
			}
		}
		delta := r.setBase(base)
		b.used.Add(delta)
		if r.dirty() {
			b.dirty.Add(delta)
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

// stamp replaces each written value by the value as the store holds it
// (adapters.Stamper), where the store reported the new version. A value
// that cannot be stamped stays as written: reads fetch the store's.
func (b *Buffer) stamp(writes []Write, vers []adapters.Version) {
	st, ok := b.rawStore.(adapters.Stamper)
	if !ok {
		return
	}
	for i := range writes {
		if writes[i].Delete || writes[i].Check || vers[i] == "" {
			continue
		}
		if v, err := st.Stamped(writes[i].Value, vers[i]); err == nil {
			writes[i].Value = v
		}
	}
}

// AnyDirty reports whether ks holds a dirty record whose key satisfies
// match: whether the store lacks some write to the keys match selects (the
// Datastore frontend asks before passing a metadata query to the backend).
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
			return false
		}
		return true
	})
	return found, nil
}
