package cache

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
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

// WriteBack is one write-back of dirty records of one keyspace: the
// buffer's half of it, driven step by step by its caller (the engine's
// write-back driver, package txn), which takes its own steps (the lease,
// the durable barrier, the write-back log) between them:
//
//	Lock        keyspace.wbMu, exclusively (held until Close)
//	Next        the dirty values of the next pass, read under the latch
//	Store       the store calls, and ownWrites sorting out refusals and
//	            unanswered calls; it returns what the store confirmed
//	Settle      the outcomes, under the latch: bases renewed, records
//	            marked clean, conflicts resolved and reported, rebased
//	            and overwritten records kept for another pass (Next)
//	Confirm     an error unless every record dirty at Lock is clean,
//	            changed since, or resolved
//	Close       lets go of wbMu; a flush of aged records forgets their
//	            ages; an eviction's wakes admissions waiting for room
//
// Each record is written conditioned on its base (the version the buffer
// last saw, or absence); a write the store refuses because the key
// changed behind nemo's back is a conflict (see resolve). One write-back
// per keyspace runs at a time (wbMu) so that versions reach the store in
// order; its store calls run side by side, at most
// Options.WriteBackParallelism at once (storeAll), each key in one of
// them. A write-back that does not run (Lock failed, or its caller held
// it back) puts its records back on the queue, due at once (Requeue).
//
// A WriteBack is used by one goroutine. TakeAged, TakeDirty, TakeEvictions
// and an Eviction's Next hand them out; Close must follow.
type WriteBack struct {
	b     *Buffer
	s     *keyspace
	recs  []*record // the records taken
	cur   []*record // the records of the current pass
	evict bool      // remove what was written back, unreferenced and unlocked
	aged  bool      // taken off dirtyQ: their ages are forgotten at Close
	full  bool      // taken by age, as many as asked: more were due (DirtyLimit)
	taken time.Time // when the records were taken
	// vers holds the version of each record of recs dirty at Lock.
	vers   map[*record]uint32
	locked bool
	rounds int
	// The pass in flight: its snapshots, outcomes, digests and the tick
	// its store calls began at; then the records it leaves to write again.
	snaps   []snap
	out     []outcome
	digests []uint64
	t       uint32
	again   []*record
}

// maxWriteBackRounds bounds the passes of one write-back. A rebased record
// (refused, but the store held an earlier attempt of its own) is written
// again at once, on its new base, and so is one whose conflict was
// resolved by overwriting, so a flush leaves nothing of them dirty; a few
// passes bound a store that keeps failing that way.
const maxWriteBackRounds = 3

func (b *Buffer) newWriteBack(s *keyspace, recs []*record, evict, aged bool) *WriteBack {
	return &WriteBack{b: b, s: s, recs: recs, cur: recs, evict: evict, aged: aged, taken: time.Now()}
}

// Keyspace is the keyspace w writes back.
func (w *WriteBack) Keyspace() adapters.Keyspace { return w.s.name }

// Lock takes the keyspace's write-back lock exclusively, waiting for the
// write-back or write-throughs in flight, or ctx; Close lets go of it. On
// failure w's records are requeued.
func (w *WriteBack) Lock(ctx context.Context) error {
	if err := w.s.wbMu.Lock(ctx); err != nil {
		w.Requeue()
		return fmt.Errorf("cache: write-back of %q: waiting for the one in flight: %w", w.s.name, err)
	}
	w.locked = true
	w.vers = make(map[*record]uint32, len(w.recs))
	w.s.mu.RLock()
	for _, r := range w.recs {
		if r.dirty() {
			w.vers[r] = r.ver
		}
	}
	w.s.mu.RUnlock()
	return nil
}

// Requeue puts the records of w's current pass that are still dirty back
// on the queue, due at once: a write-back that did not run (held back, or
// its wait for the commit log failed) must not forget them. It ends the
// write-back: Next returns false after it.
func (w *WriteBack) Requeue() {
	w.b.requeue(w.s, w.cur)
	w.cur, w.again, w.snaps = nil, nil, nil
	w.rounds = maxWriteBackRounds
}

// Next reads the dirty values of the next pass (under the latch, wbMu
// held): first the records taken, then those the last pass rebased or
// overwrote. It returns false when there is nothing (left) to write.
func (w *WriteBack) Next() bool {
	if invariants.Enabled && !w.locked {
		panic(invariants.Errorf("write-back of %q reads its values without its write-back lock", w.s.name))
	}
	if w.rounds > 0 {
		w.cur = w.again
	}
	w.again, w.snaps = nil, nil
	if len(w.cur) == 0 || w.rounds >= maxWriteBackRounds {
		return false
	}
	w.rounds++
	w.snaps = w.s.snapshotDirty(w.cur)
	return len(w.snaps) > 0
}

// Store sends the pass's values to the store and sorts out what it
// refused or left unanswered (ownWrites). It returns the writes the store
// confirmed, for a write-back log, and the store's error. From here the
// store may hold any of the values, whatever the calls answer.
func (w *WriteBack) Store(ctx context.Context) ([]WrittenBack, error) {
	b, s := w.b, w.s
	w.digests = make([]uint64, len(w.snaps))
	for i, sn := range w.snaps {
		w.digests[i] = b.digest(sn.val, sn.del)
		s.noteSent(string(sn.key), w.digests[i])
	}
	w.t = b.tick() // what the store holds after these calls is at least this fresh
	out, err := b.storeAll(ctx, s.name, w.snaps)
	if err == nil && w.full && w.rounds == 1 {
		n := 0 // as the dirty bytes count them (Buffer.size)
		for _, sn := range w.snaps {
			n += len(sn.key) + len(sn.val) + int(b.opts.RecordOverhead)
		}
		b.limit.drained(n, time.Since(w.taken)) // from its take: its wait for the lock and its snapshot too
	}
	err = errors.Join(err, b.ownWrites(ctx, s, w.snaps, out))
	w.out = out
	var done []WrittenBack
	for i, sn := range w.snaps {
		if out[i].state == written {
			done = append(done, WrittenBack{Key: sn.key, Base: out[i].base, Digest: w.digests[i]})
		}
	}
	return done, err
}

// Settle applies the pass's outcomes to the records under the latch (see
// settle) and reports the conflicts they resolved.
func (w *WriteBack) Settle() {
	w.s.mu.Lock()
	again, lost := w.b.settle(w.s, w.snaps, w.out, w.t, w.evict)
	w.s.mu.Unlock()
	w.again = again
	w.snaps, w.out, w.digests = nil, nil, nil
	for _, c := range lost {
		w.b.reportConflict(c)
	}
}

// Confirm returns an error unless every record of w that was dirty at
// Lock is now clean (the store confirmed its version), changed since (a
// newer write, which its own write-back covers), or resolved as a
// conflict: a record left as it was (a store failure, or a refusal while a
// transaction holds it) fails it, so that a flush and a checkpoint never
// count it as written.
func (w *WriteBack) Confirm(ctx context.Context) error {
	s := w.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	left := 0
	for r, ver := range w.vers {
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

// Close ends the write-back: it lets go of the write-back lock; the
// records a flush of aged ones took that are clean or gone lose their
// ages (those still dirty were put back as retries and keep theirs); an
// eviction's write-back wakes the admissions waiting for room.
func (w *WriteBack) Close() {
	if w.locked {
		w.locked = false
		w.s.wbMu.Unlock()
	}
	if w.aged {
		w.s.mu.Lock()
		w.s.untake(w.recs)
		w.s.mu.Unlock()
	}
	if w.evict {
		w.b.freed()
	}
}

// WrittenBack is one write the store confirmed to a write-back: the key,
// the base the store now holds for it (the version it returned, or
// absence), and the digest of the value (or delete) written.
type WrittenBack struct {
	Key    []byte
	Base   adapters.Expect
	Digest uint64
}

// requeue puts recs that are still dirty back on the write-back queue, due
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

// snapshotDirty copies the records of recs that are dirty and present,
// each once, in key order, as a write-back sends them (storeAll).
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
	slices.SortFunc(snaps, func(a, b snap) int { return bytes.Compare(a.key, b.key) })
	return snaps
}

// present reports whether r is still the tree's record for its key.
func (s *keyspace) present(r *record) bool {
	got, ok := s.tree.Get(r)
	return ok && got == r
}

// storeAll sends snaps to the store in calls of at most WriteBatch
// records, at most Options.WriteBackParallelism of them in flight at
// once, and says what became of each. snaps are in key order (snapshotDirty), and both
// backends' keys begin with what groups them (an Azure entity's
// PartitionKey, a Datastore entity's root key), so a call holds few
// partitions or entity groups and the backend takes each in one
// transaction. The calls may run side by side because each key appears
// once in a pass and the caller holds the keyspace's write-back lock:
// no two writes of one key are ever in flight together, and what the
// calls answer is settled only once all of them have (Settle).
func (b *Buffer) storeAll(ctx context.Context, ks adapters.Keyspace, snaps []snap) ([]outcome, error) {
	out := make([]outcome, len(snaps))
	par := max(b.opts.WriteBackParallelism, 1)
	// Full calls only: cutting a pass into more, smaller calls would cost
	// Datastore a Commit each (one Commit takes many entity groups), and
	// the Azure adapter already sends one call's partitions side by side.
	size := max(b.opts.WriteBatch, 1)
	errs := make([]error, (len(snaps)+size-1)/size)
	slots := make(chan struct{}, par)
	var wg sync.WaitGroup
	for c := range errs {
		lo, hi := c*size, min((c+1)*size, len(snaps))
		if len(errs) == 1 {
			errs[c] = b.storeCall(ctx, ks, snaps[lo:hi], out[lo:hi]) // no goroutine for one call
			break
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			errs[c] = b.storeCall(ctx, ks, snaps[lo:hi], out[lo:hi])
		})
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	b.stats.writebackErrors.Add(uint64(failed))
	return out, errors.Join(errs...)
}

// storeCall is one write-back store call (storeIsolating), counted and
// timed.
func (b *Buffer) storeCall(ctx context.Context, ks adapters.Keyspace, snaps []snap, out []outcome) error {
	b.stats.writebackCalls.Add(1)
	b.stats.writebackInFlight.Add(1)
	defer b.stats.writebackInFlight.Add(-1)
	began := time.Now()
	err := b.storeIsolating(ctx, ks, snaps, out)
	b.stats.writebackBatch.Since(began)
	if err == nil {
		b.limit.wbOK.Store(time.Now().UnixNano())
	}
	return err
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
			// newer version arrived): keep it queued so that the next
			// write-back of aged records (TakeAged) retries it.
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
