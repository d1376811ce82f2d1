package cache

import (
	"cmp"
	"context"
	"errors"
	"fmt"
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
	state    uint8             // failed, written, unconfirmed, unsure, refused, rebased or rejected
	base     adapters.Expect   // written: what the store now holds
	read     bool              // written: confirmed by reading the key back (ownWrites)
	conflict adapters.Conflict // refused
	cause    error             // rejected: the store's refusal; unsure: the call's error
}

const (
	failed      uint8 = iota
	written           // the store holds the snapshot now, at base (a version it confirmed, or absence)
	unconfirmed       // the call succeeded but said no version: ownWrites reads the key to confirm
	unsure            // the call failed without an answer (adapters.ErrUnknownOutcome): ownWrites reads the key to see whether it landed
	refused           // the precondition failed: another writer's change
	rebased           // refused, but the store holds an earlier write of the buffer's own
	rejected          // refused as invalid: a record the store will never take
)

// writeBack writes dirty records to the store outside the tree latch
// (Upsert for regular records, Delete for tombstones), each conditioned on
// the record's base (the version the buffer last saw, or absence), then
// marks each one clean if it did not change meanwhile; with evict it also
// removes those that stayed unreferenced and unlocked. A write the store
// refuses because the key changed behind nemo's back is a conflict (see
// resolve). One write-back per keyspace runs at a time so that versions
// reach the store in order.
//
// It returns an error unless every record of recs that was dirty is now
// clean (the store confirmed its version), changed since (a newer write,
// which its own write-back covers), or resolved as a conflict: a record
// left as it was (a store failure, or a refusal while a transaction holds
// it) fails the call, so that Flush and a checkpoint never count it as
// written.
func (b *Buffer) writeBack(ctx context.Context, s *keyspace, recs []*record, evict bool) error {
	if err := b.waitHold(ctx); err != nil {
		b.requeue(s, recs)
		return fmt.Errorf("cache: write-back of %q held while the log replays: %w", s.name, err)
	}
	if gate := b.up.Load().Gate; gate != nil {
		if err := gate.Hold(ctx, s.name); err != nil {
			b.requeue(s, recs)
			return fmt.Errorf("cache: write-back of %q held back: %w", s.name, err)
		}
	}
	if err := s.wbMu.Lock(ctx); err != nil {
		b.requeue(s, recs)
		return fmt.Errorf("cache: write-back of %q: waiting for the one in flight: %w", s.name, err)
	}
	defer s.wbMu.Unlock()
	vers := make(map[*record]uint32, len(recs))
	s.mu.RLock()
	for _, r := range recs {
		if r.dirty() {
			vers[r] = r.ver
		}
	}
	s.mu.RUnlock()
	var errs []error
	// A rebased record (refused, but the store held an earlier attempt of
	// its own) is written again at once, on its new base, and so is one
	// whose conflict was resolved by overwriting, so a Flush leaves
	// nothing of them dirty; a few rounds bound a store that keeps
	// failing that way.
	again := recs
	for round := 0; len(again) > 0 && round < 3; round++ {
		var err error
		again, err = b.writeBackOnce(ctx, s, again, evict)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	left := 0
	for r, ver := range vers {
		if r.dirty() && r.ver == ver && s.present(r) {
			left++
		}
	}
	if left > 0 {
		err := fmt.Errorf("cache: write-back of %q: %w: %d records not written yet (the store's answer unknown, or refused while a transaction holds them): %w",
			s.name, ErrStore, left, adapters.ErrUnavailable)
		if ctx.Err() != nil { // settling them was cut short
			err = fmt.Errorf("%w: %w", err, ctx.Err())
		}
		return err
	}
	return nil
}

// WrittenBack is one write the store confirmed to a write-back: the key,
// the base the store now holds for it (the version it returned, or
// absence), and the digest of the value (or delete) written.
type WrittenBack struct {
	Key    []byte
	Base   adapters.Expect
	Digest uint64
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
	snaps := s.snapshotDirty(recs)
	if len(snaps) == 0 {
		return nil, nil
	}
	if barrier := b.up.Load().Durable; barrier != nil {
		// Everything these values come from was committed before they
		// were read just now; the barrier returns once that is durable.
		if err := barrier.WaitDurable(ctx); err != nil {
			b.requeue(s, recs)
			return nil, fmt.Errorf("cache: write-back of %q waits for the commit log: %w", s.name, err)
		}
	}
	digests := make([]uint64, len(snaps))
	for i, sn := range snaps {
		// From here the store may hold it, whatever the call answers.
		digests[i] = b.digest(sn.val, sn.del)
		s.noteSent(string(sn.key), digests[i])
	}
	t := b.tick() // what the store holds after these calls is at least this fresh
	out, err := b.storeAll(ctx, s.name, snaps)
	err = errors.Join(err, b.ownWrites(ctx, s, snaps, out))
	b.logWritten(s.name, snaps, out, digests)
	s.mu.Lock()
	again, lost := b.settle(s, snaps, out, t, evict)
	s.mu.Unlock()
	for _, c := range lost {
		b.reportConflict(c)
	}
	return again, err
}

// snapshotDirty copies the records of recs that are dirty and present,
// each once, as a write-back sends them.
func (s *keyspace) snapshotDirty(recs []*record) []snap {
	var snaps []snap
	seen := make(map[*record]bool, len(recs))
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, r := range recs {
		if seen[r] || !r.dirty() || !s.present(r) {
			continue
		}
		seen[r] = true
		snaps = append(snaps, snap{r: r, ver: r.ver, key: cloneBytes(r.key()), val: cloneBytes(r.value()),
			del: r.kind() == Tombstone, exp: r.baseExpect()})
	}
	return snaps
}

// present reports whether r is still the tree's record for its key.
func (s *keyspace) present(r *record) bool {
	got, ok := s.tree.Get(r)
	return ok && got == r
}

// storeAll sends snaps to the store in WriteBatch-sized calls and says
// what became of each.
func (b *Buffer) storeAll(ctx context.Context, ks adapters.Keyspace, snaps []snap) ([]outcome, error) {
	out := make([]outcome, len(snaps))
	var errs []error
	for lo := 0; lo < len(snaps); lo += b.opts.WriteBatch {
		hi := min(lo+b.opts.WriteBatch, len(snaps))
		began := time.Now()
		if err := b.storeIsolating(ctx, ks, snaps[lo:hi], out[lo:hi]); err != nil {
			errs = append(errs, err)
		}
		b.stats.writebackBatch.Since(began)
	}
	if len(errs) > 0 {
		b.stats.writebackErrors.Add(uint64(len(errs)))
	}
	return out, errors.Join(errs...)
}

// logWritten hands the writes the store confirmed to the write-back log
// (the WriteBackLog upcall), if there is one.
func (b *Buffer) logWritten(ks adapters.Keyspace, snaps []snap, out []outcome, digests []uint64) {
	log := b.up.Load().Log
	if log == nil {
		return
	}
	var done []WrittenBack
	for i, sn := range snaps {
		if out[i].state == written {
			done = append(done, WrittenBack{Key: sn.key, Base: out[i].base, Digest: digests[i]})
		}
	}
	if len(done) > 0 {
		log.LogWriteBack(ks, done)
	}
}

// settle applies a pass's outcomes to the records (s.mu held): the base
// the store now holds; then, for each record still dirty, a refusal
// resolved as a conflict, a retry, or the record marked clean. It returns
// the records to write again at once and the conflicts to report.
func (b *Buffer) settle(s *keyspace, snaps []snap, out []outcome, t uint32, evict bool) (again []*record, lost []Conflict) {
	now := time.Now()
	for i, sn := range snaps {
		r, o := sn.r, out[i]
		if !s.present(r) {
			continue
		}
		s.wrote(r) // even a failed call may have reached the store
		if o.state == written || o.state == rebased {
			// The store holds this write (or an earlier one of ours)
			// now, whatever happened to the record since: later
			// write-backs are conditioned on it.
			delta := r.setBase(o.base)
			b.used.Add(delta)
			if r.dirty() {
				b.dirty.Add(delta)
			}
		}
		if !r.dirty() {
			continue
		}
		if o.state == refused || o.state == rejected {
			if c, ok := b.resolve(s, r, sn, o.conflict, o.cause); ok {
				lost = append(lost, c)
				if r.dirty() {
					again = append(again, r) // overwrite: written again at once
				}
				continue
			}
		}
		if o.state == rebased {
			again = append(again, r)
		}
		if o.state != written || r.ver != sn.ver {
			// Still dirty (failed, refused while locked or changed, or a
			// newer version arrived): keep it queued so the flusher
			// retries it.
			s.dirtyQ = append(s.dirtyQ, dirtyEntry{r: r, at: now.Add(-b.opts.MaxDirtyAge), retry: true})
			continue
		}
		b.markWritten(s, r, sn, o, now, t, evict)
	}
	return again, lost
}

// markWritten marks r clean once the store confirmed sn, its snapshot,
// and r did not change since (s.mu held); with evict, or in a
// positive-only cache for a tombstone, it removes r if nothing holds it.
func (b *Buffer) markWritten(s *keyspace, r *record, sn snap, o outcome, now time.Time, t uint32, evict bool) {
	if invariants.Enabled && !confirmed(sn, o) {
		panic(invariants.Errorf("write-back marks %q clean without a version the store confirmed for it: %+v", r.key(), o.base))
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

// storeIsolating is storeBatch that isolates the writes the store refuses
// as invalid (adapters.ErrInvalid: a value or key it will never take), and
// quarantines a batch whose keyspace is gone from the store
// (adapters.ErrKeyspaceGone). A
// store refuses a whole batch for one bad record, which would keep every
// other record of the batch from ever being written: the writes that did
// not land are sent again in halves until each invalid one stands alone,
// and that one is marked rejected (quarantined by the caller).
func (b *Buffer) storeIsolating(ctx context.Context, ks adapters.Keyspace, snaps []snap, out []outcome) error {
	err := b.storeBatch(ctx, ks, snaps, out)
	if errors.Is(err, adapters.ErrKeyspaceGone) {
		// The table was deleted behind the buffer (nemo drops its own
		// keyspaces' records first): the writes acknowledged before are
		// deleted with it, as the service deletes a table's entities.
		// Quarantined, not retried forever (which would keep every
		// drain from ending).
		for i := range out {
			if out[i].state == failed {
				out[i] = outcome{state: rejected, cause: err}
			}
		}
		return nil
	}
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
		if err := b.outcomes(err, upAt, out, func(j int) outcome {
			if j < len(vers) && vers[j] != "" {
				return outcome{state: written, base: adapters.Expect{Kind: adapters.ExpectVersion, Version: vers[j]}}
			}
			return outcome{state: unconfirmed} // the store did not say which version it holds
		}); err != nil {
			errs = append(errs, storeErr("upsert", err))
		}
	}
	if len(dels) > 0 {
		err := b.store.Delete(ctx, ks, dels)
		if err := b.outcomes(err, delAt, out, func(int) outcome {
			return outcome{state: written, base: adapters.Expect{Kind: adapters.ExpectAbsent}}
		}); err != nil {
			errs = append(errs, storeErr("delete", err))
		}
	}
	return errors.Join(errs...)
}

// confirmed reports whether o, a write-back's outcome, is the store's
// confirmation of sn: absence after a delete; after an upsert, the version
// the store returned, or the value read back (in a keyspace the store
// keeps no versions for, such as Azure's table list, without one).
func confirmed(sn snap, o outcome) bool {
	switch {
	case sn.del:
		return o.base.Kind == adapters.ExpectAbsent
	case o.read:
		return true
	}
	return o.base.Kind == adapters.ExpectVersion && o.base.Version != ""
}

// outcomes turns one store call's result into outcomes for the snapshots
// at (applied(j) for those the call applied), and returns the call's
// error unless it was only refusals, or failed without an answer: then
// every write may have landed, and ownWrites reads them back (what it
// cannot settle stays dirty, and writeBack fails for it).
func (b *Buffer) outcomes(err error, at []int, out []outcome, applied func(j int) outcome) error {
	var ce *adapters.ConflictError
	if err != nil && !errors.As(err, &ce) {
		if !errors.Is(err, adapters.ErrUnknownOutcome) {
			return err // nothing known to be written
		}
		b.stats.writebackErrors.Add(1)
		for _, i := range at {
			out[i] = outcome{state: unsure, cause: err}
		}
		return nil // ownWrites reports it if reading back does not settle it
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
			out[i] = applied(j)
		}
	}
	return nil
}

// Digests of a delete, and the value digests never used (0 is "none" in
// Write.Prior and the WAL).
const (
	noDigest     uint64 = 0
	deleteDigest uint64 = 1
)

// digest identifies what a write leaves in the store: a hash of the value
// without the store's stamps (Options.Unstamped, adapters.Digest), or
// deleteDigest. The same value gets the same digest in every process, and
// as the store gives it back.
func (b *Buffer) digest(val []byte, del bool) uint64 {
	if del {
		return deleteDigest
	}
	if d := adapters.Digest(b.opts.Unstamped(val)); d > deleteDigest {
		return d
	}
	return deleteDigest + 1 // a value hashing to a reserved digest (2^-63)
}

// storedDigest is digest for a record as the store returned it.
func (b *Buffer) storedDigest(cur adapters.Record) uint64 {
	return b.digest(cur.Value, cur.Value == nil)
}

// ownWrites (s.wbMu held) tells the buffer's own writes from other
// writers' among the refusals, and confirms what the store did not say.
// A write-back whose call failed without an answer may still have reached
// the store, and so may one sent before a crash (see ApplyReplayed): a
// retry conditioned on the version before it is then refused although no
// one else wrote. One Get of the refused, unconfirmed and unsure keys
// tells: if the store holds the snapshot's value (or, for a delete,
// nothing) the write is done at the store's version; if it holds another
// write the buffer sent (s.sent), the record is rebased on the store's
// version and retried; otherwise a refusal stands, with the store's state
// filled in, and an unconfirmed or unsure write failed (it is written
// again). Settling an unanswered batch this way costs one read, where
// retrying it would be refused one record at a time (an Azure batch
// reports only its first refused operation). It returns the error of an
// unanswered call that the read did not settle (not applied, or the read
// failed).
func (b *Buffer) ownWrites(ctx context.Context, s *keyspace, snaps []snap, out []outcome) error {
	var keys [][]byte
	var idx []int
	for i, o := range out {
		switch o.state {
		case refused, unconfirmed, unsure:
			keys, idx = append(keys, snaps[i].key), append(idx, i)
		case written:
			delete(s.sent, string(snaps[i].key))
		}
	}
	if len(keys) == 0 {
		return nil
	}
	unsettled := func(i int) error {
		if out[i].state == unsure {
			return out[i].cause
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, b.opts.StoreTimeout)
	defer cancel()
	recs, err := b.store.Get(ctx, s.name, keys)
	if err != nil || len(recs) != len(keys) {
		var first error
		for _, i := range idx {
			first = cmp.Or(first, unsettled(i))
			out[i] = outcome{state: failed} // unresolved: the next write-back asks again
		}
		if first == nil {
			return nil
		}
		return fmt.Errorf("%w: a write-back call failed without an answer: %w; reading its keys back to settle it: %w",
			ErrStore, first, cmp.Or(err, errors.New("wrong number of records")))
	}
	var first error
	for j, i := range idx {
		sn, cur := snaps[i], recs[j]
		k := string(sn.key)
		base := fetchedBase(cur)
		switch d := b.storedDigest(cur); {
		case d == b.digest(sn.val, sn.del):
			out[i] = outcome{state: written, base: base, read: true}
			delete(s.sent, k)
		case out[i].state == unconfirmed:
			out[i] = outcome{state: failed} // applied, it said, yet not there: written again
		case slices.Contains(s.sent[k], d):
			// Refused or unanswered, and the store holds an earlier
			// write of ours.
			out[i] = outcome{state: rebased, base: base}
			delete(s.sent, k)
		case out[i].state == unsure:
			first = cmp.Or(first, out[i].cause)
			out[i] = outcome{state: failed} // not applied: written again (refused then if another wrote)
		default:
			out[i].conflict.Exists, out[i].conflict.Current = cur.Value != nil, cur.Version
		}
	}
	if first != nil {
		return fmt.Errorf("%w: a write-back call failed without an answer, and was not applied: %w", ErrStore, first)
	}
	return nil
}

// noteSent remembers d as a write of key that the store may hold (s.wbMu
// held). Entries go when the store confirms a write of the key; until then
// they are the writes sent since the last confirmation, or logged so by
// the log a restart replayed, and no count bounds them: one dropped could
// be the one the store holds.
func (s *keyspace) noteSent(key string, d uint64) {
	if s.sent == nil {
		s.sent = map[string][]uint64{}
	}
	if ds := s.sent[key]; !slices.Contains(ds, d) {
		s.sent[key] = append(ds, d)
	}
}
