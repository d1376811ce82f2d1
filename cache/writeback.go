package cache

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/invariants"
)

type snap struct {
	r   *record
	ver uint32
	key []byte
	val []byte
	del bool
	exp adapters.Expect // the record's base when the snapshot was taken
}

// outcome is what the store did with one snapshot.
type outcome struct {
	state    uint8             // written, failed, refused, rebased or rejected
	base     adapters.Expect   // written: what the store now holds
	conflict adapters.Conflict // refused
	cause    error             // rejected: the store's refusal
}

const (
	failed   uint8 = iota
	written        // the store holds the snapshot now
	refused        // the precondition failed: another writer's change
	rebased        // refused, but the store holds an earlier write of the buffer's own
	rejected       // refused as invalid: a record the store will never take
)

// writeBack writes dirty records to the store outside the tree latch
// (Upsert for regular records, Delete for tombstones), each conditioned on
// the record's base (the version the buffer last saw, or absence), then
// marks each one clean if it did not change meanwhile; with evict it also
// removes those that stayed unreferenced and unlocked. A write the store
// refuses because the key changed behind nemo's back is a conflict (see
// resolve). One write-back per keyspace runs at a time so that versions
// reach the store in order.
func (b *Buffer) writeBack(ctx context.Context, s *keyspace, recs []*record, evict bool) error {
	if b.opts.WriteGate != nil {
		if err := b.opts.WriteGate(ctx, s.name); err != nil {
			b.requeue(s, recs)
			return fmt.Errorf("cache: write-back of %q held back: %w", s.name, err)
		}
	}
	if err := s.wbMu.Lock(ctx); err != nil {
		b.requeue(s, recs)
		return fmt.Errorf("cache: write-back of %q: waiting for the one in flight: %w", s.name, err)
	}
	defer s.wbMu.Unlock()
	var errs []error
	// A rebased record (refused, but the store held an earlier attempt of
	// its own) is written again at once, on its new base, so a Flush
	// leaves nothing of it dirty; a few rounds bound a store that keeps
	// failing that way.
	for round := 0; len(recs) > 0 && round < 3; round++ {
		var err error
		recs, err = b.writeBackOnce(ctx, s, recs, evict)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// SetDurableBarrier makes every write-back call wait(ctx) after it has
// read the dirty values it is about to write and before it writes them: a
// commit log that applies commits to the buffer before they are durable
// (txn's early lock release) passes a wait that returns once every commit
// applied so far is durable, so the store never holds a write a crash could
// take back from the log. An error holds the write-back back: the records
// stay dirty and are retried. Set it before the buffer holds dirty records
// of such commits; nil removes it.
func (b *Buffer) SetDurableBarrier(wait func(ctx context.Context) error) {
	if wait == nil {
		b.durable.Store(nil)
		return
	}
	b.durable.Store(&wait)
}

// requeue puts recs that are still dirty back on the flusher's queue, due
// at once: a write-back that did not run must not forget them.
func (b *Buffer) requeue(s *keyspace, recs []*record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	due := time.Now().Add(-b.opts.MaxDirtyAge)
	for _, r := range recs {
		if r.dirty() && s.present(r) {
			s.dirtyQ = append(s.dirtyQ, dirtyEntry{r: r, at: due, retry: true})
		}
	}
}

// writeBackOnce is one pass of writeBack (s.wbMu held); it returns the
// records that were rebased and should be written again.
func (b *Buffer) writeBackOnce(ctx context.Context, s *keyspace, recs []*record, evict bool) ([]*record, error) {
	var snaps []snap
	seen := make(map[*record]bool, len(recs))
	s.mu.RLock()
	for _, r := range recs {
		if seen[r] || !r.dirty() || !s.present(r) {
			continue
		}
		seen[r] = true
		snaps = append(snaps, snap{r: r, ver: r.ver, key: cloneBytes(r.key()), val: cloneBytes(r.value()),
			del: r.kind() == Tombstone, exp: r.baseExpect()})
	}
	s.mu.RUnlock()
	if len(snaps) == 0 {
		return nil, nil
	}
	if wait := b.durable.Load(); wait != nil {
		// Everything these values come from was committed before they
		// were read just now; the barrier returns once that is durable.
		if err := (*wait)(ctx); err != nil {
			b.requeue(s, recs)
			return nil, fmt.Errorf("cache: write-back of %q waits for the commit log: %w", s.name, err)
		}
	}
	out := make([]outcome, len(snaps))
	var errs []error
	t := b.tick() // what the store holds after these calls is at least this fresh
	for lo := 0; lo < len(snaps); lo += b.opts.WriteBatch {
		hi := min(lo+b.opts.WriteBatch, len(snaps))
		began := time.Now()
		if err := b.storeIsolating(ctx, s.name, snaps[lo:hi], out[lo:hi]); err != nil {
			errs = append(errs, err)
		}
		b.stats.writebackBatch.Since(began)
	}
	if len(errs) > 0 {
		b.stats.writebackErrors.Add(uint64(len(errs)))
	}
	b.ownWrites(ctx, s, snaps, out)
	var lost []Conflict
	var again []*record
	s.mu.Lock()
	now := time.Now()
	for i, sn := range snaps {
		r := sn.r
		if !s.present(r) {
			continue
		}
		s.wrote(r) // even a failed call may have reached the store
		if out[i].state == written || out[i].state == rebased {
			// The store holds this write (or an earlier one of ours)
			// now, whatever happened to the record since: later
			// write-backs are conditioned on it.
			delta := r.setBase(out[i].base)
			b.used.Add(delta)
			if r.dirty() {
				b.dirty.Add(delta)
			}
		}
		if !r.dirty() {
			continue
		}
		if out[i].state == refused || out[i].state == rejected {
			if c, ok := b.resolve(s, r, sn, out[i].conflict, out[i].cause); ok {
				lost = append(lost, c)
				continue
			}
		}
		if out[i].state == rebased {
			again = append(again, r)
		}
		if out[i].state != written || r.ver != sn.ver {
			// Still dirty (failed, refused while locked or changed, or a
			// newer version arrived): keep it queued so the flusher
			// retries it.
			s.dirtyQ = append(s.dirtyQ, dirtyEntry{r: r, at: now.Add(-b.opts.MaxDirtyAge), retry: true})
			continue
		}
		r.setDirty(false)
		if at, ok := s.taken[r]; ok {
			b.stats.writebackDelay.ObserveDuration(now.Sub(at))
		}
		if d := b.dirty.Add(-b.size(r)); invariants.Enabled && d < 0 {
			panic(invariants.Errorf("dirty bytes %d after writing back %q", d, r.key()))
		}
		b.confirm(r, t)
		b.stats.writebacks.Add(1)
		switch {
		case !s.removable(r):
			b.stats.evictDeferred.Add(1) // a fetch in flight may hold the older value
		case r.kind() == Tombstone && b.opts.Policy != PolicyNemo && !r.locked():
			b.remove(s, r) // positive-only cache: nothing to keep (once unlocked: see release)
		case evict && !r.ref() && !r.locked():
			b.remove(s, r)
			b.stats.evictions.Add(1)
		}
	}
	s.mu.Unlock()
	for _, c := range lost {
		b.reportConflict(c)
	}
	return again, errors.Join(errs...)
}

// storeIsolating is storeBatch that isolates the writes the store refuses
// as invalid (adapters.ErrInvalid: a value or key it will never take). A
// store refuses a whole batch for one bad record, which would keep every
// other record of the batch from ever being written: the writes that did
// not land are sent again in halves until each invalid one stands alone,
// and that one is marked rejected (quarantined by the caller).
func (b *Buffer) storeIsolating(ctx context.Context, ks adapters.Keyspace, snaps []snap, out []outcome) error {
	err := b.storeBatch(ctx, ks, snaps, out)
	if err == nil || !errors.Is(err, adapters.ErrInvalid) {
		return err
	}
	var left []int
	for i := range snaps {
		if out[i].state == failed {
			left = append(left, i)
		}
	}
	if len(left) == 1 {
		out[left[0]] = outcome{state: rejected, cause: err}
		return nil
	}
	var errs []error
	for _, half := range [][]int{left[:len(left)/2], left[len(left)/2:]} {
		sub := make([]snap, len(half))
		subOut := make([]outcome, len(half))
		for j, i := range half {
			sub[j] = snaps[i]
		}
		errs = append(errs, b.storeIsolating(ctx, ks, sub, subOut))
		for j, i := range half {
			out[i] = subOut[j]
		}
	}
	return errors.Join(errs...)
}

// storeBatch sends one batch's upserts and deletes, conditioned on their
// bases, and fills out. A refused write is not an error.
func (b *Buffer) storeBatch(ctx context.Context, ks adapters.Keyspace, snaps []snap, out []outcome) error {
	ctx, cancel := context.WithTimeout(ctx, b.opts.StoreTimeout)
	defer cancel()
	var ups, dels []adapters.Write
	var upAt, delAt []int
	for i, sn := range snaps {
		w := adapters.Write{Key: sn.key, Value: sn.val, Expect: sn.exp}
		if sn.del {
			w.Value = nil
			dels, delAt = append(dels, w), append(delAt, i)
		} else {
			ups, upAt = append(ups, w), append(upAt, i)
		}
	}
	var errs []error
	if len(ups) > 0 {
		vers, err := b.store.Upsert(ctx, ks, ups)
		if err := b.outcomes(err, upAt, out, func(j int) adapters.Expect {
			if j < len(vers) && vers[j] != "" {
				return adapters.Expect{Kind: adapters.ExpectVersion, Version: vers[j]}
			}
			return adapters.Expect{} // written, at a version the store did not say
		}); err != nil {
			errs = append(errs, storeErr("upsert", err))
		}
	}
	if len(dels) > 0 {
		err := b.store.Delete(ctx, ks, dels)
		if err := b.outcomes(err, delAt, out, func(int) adapters.Expect {
			return adapters.Expect{Kind: adapters.ExpectAbsent}
		}); err != nil {
			errs = append(errs, storeErr("delete", err))
		}
	}
	return errors.Join(errs...)
}

// outcomes turns one store call's result into outcomes for the snapshots
// at, and returns the call's error unless it was only refusals.
func (b *Buffer) outcomes(err error, at []int, out []outcome, base func(j int) adapters.Expect) error {
	var ce *adapters.ConflictError
	if err != nil && !errors.As(err, &ce) {
		return err // nothing known to be written
	}
	refusedAt := map[int]adapters.Conflict{}
	if ce != nil {
		for _, c := range ce.Conflicts {
			refusedAt[c.Index] = c
		}
	}
	for j, i := range at {
		if c, ok := refusedAt[j]; ok {
			out[i] = outcome{state: refused, conflict: c}
		} else {
			out[i] = outcome{state: written, base: base(j)}
		}
	}
	return nil
}

// maxAttempts bounds the distinct failed attempts remembered per key.
const maxAttempts = 16

// attemptHash identifies a write's content: a value without the store's
// stamps (Options.Unstamped), or a delete (nil), so that the value the
// buffer wrote and the same one read back from the store hash alike.
func (b *Buffer) attemptHash(val []byte, del bool) uint64 {
	h := fnv.New64a()
	if del {
		h.Write([]byte{1})
	} else {
		h.Write([]byte{0})
		h.Write(b.opts.Unstamped(val))
	}
	return h.Sum64()
}

// ownWrites (s.wbMu held) tells the buffer's own writes from other
// writers' among the refusals. A write-back whose call failed without an
// answer may still have reached the store, and a retry conditioned on the
// version before it is then refused although no one else wrote. One Get of
// the refused keys tells: if the store holds the snapshot's value (or, for
// a delete, nothing) the write is done at the store's version; if it holds
// an earlier attempt that failed that way, the record is rebased on the
// store's version and retried; otherwise the refusal stands, with the
// store's state filled in.
func (b *Buffer) ownWrites(ctx context.Context, s *keyspace, snaps []snap, out []outcome) {
	var keys [][]byte
	var idx []int
	for i, o := range out {
		switch o.state {
		case refused:
			keys, idx = append(keys, snaps[i].key), append(idx, i)
		case written:
			delete(s.attempts, string(snaps[i].key))
		case failed:
			s.noteAttempt(string(snaps[i].key), b.attemptHash(snaps[i].val, snaps[i].del))
		}
	}
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, b.opts.StoreTimeout)
	defer cancel()
	recs, err := b.store.Get(ctx, s.name, keys)
	if err != nil || len(recs) != len(keys) {
		for _, i := range idx {
			out[i] = outcome{state: failed} // unresolved: the next write-back asks again
		}
		return
	}
	for j, i := range idx {
		sn, cur := snaps[i], recs[j]
		k := string(sn.key)
		switch {
		case sn.del && cur.Value == nil:
			out[i] = outcome{state: written, base: adapters.Expect{Kind: adapters.ExpectAbsent}}
			delete(s.attempts, k)
		case !sn.del && cur.Value != nil && b.opts.SameValue(cur.Value, sn.val):
			out[i] = outcome{state: written, base: fetchedBase(cur)}
			delete(s.attempts, k)
		case slices.Contains(s.attempts[k], b.attemptHash(cur.Value, cur.Value == nil)):
			out[i] = outcome{state: rebased, base: fetchedBase(cur)}
			delete(s.attempts, k)
		default:
			out[i].conflict.Exists, out[i].conflict.Current = cur.Value != nil, cur.Version
		}
	}
}
