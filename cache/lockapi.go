package cache

import (
	"bytes"
	"context"
	"fmt"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/invariants"
	"github.com/nemocache/nemo/internal/obs"
)

// This file is the buffer's side of the txn package: locks live on the
// records, so acquiring one may first have to put a record there.

// lockOf returns r's lock state with its mutex held, allocating it on first
// use. The caller holds the tree latch (shared is enough).
func lockOf(r *record) *lockState {
	for {
		l := r.lk.Load()
		if l == nil {
			nl := &lockState{}
			if !r.lk.CompareAndSwap(nil, nl) {
				continue
			}
			l = nl
		}
		l.mu.Lock()
		if !l.dead {
			return l
		}
		l.mu.Unlock()
	}
}

// rowHeld reports whether o holds a row lock on r (latch held, shared is
// enough).
func rowHeld(r *record, o *Owner) bool {
	l := r.lk.Load()
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.dead && l.row.mode(o) != 0
}

// grant acquires r's row lock (or, gap, its next-key lock) for o in mode
// m, or returns a *LockConflict at once: the buffer never waits.
func grant(s *keyspace, r *record, o *Owner, m Mode, gap bool) error {
	l := lockOf(r)
	defer l.mu.Unlock()
	set := &l.row
	if gap {
		set = &l.gap
	}
	had := l.has(o)
	if err := l.grantSet(s, r, set, o, m); err != nil {
		return err
	}
	if !had {
		o.adopt(s, r)
	}
	return nil
}

// grantRowGap is grant of r's row lock and then its next-key lock, both in
// mode m, under one acquisition of the lock state: a range read's step
// per record. As with two grants, a conflict on the gap leaves the row
// granted.
func grantRowGap(s *keyspace, r *record, o *Owner, m Mode) error {
	l := lockOf(r)
	defer l.mu.Unlock()
	had := l.has(o)
	err := l.grantSet(s, r, &l.row, o, m)
	if err == nil {
		err = l.grantSet(s, r, &l.gap, o, m)
	}
	if !had && l.has(o) {
		o.adopt(s, r)
	}
	return err
}

// grantSet grants set (l's row or gap) to o in mode m, or returns the
// conflict (l.mu held).
func (l *lockState) grantSet(s *keyspace, r *record, set *lockSet, o *Owner, m Mode) error {
	if in := set.conflicts(o, m); len(in) > 0 {
		return &LockConflict{Lock: fmt.Sprintf("%s lock on %q", m, r.key()), Holders: in, Wake: l.waker()}
	}
	set.grant(o, m)
	if invariants.Enabled && set.x != nil && len(set.s) > 0 {
		panic(invariants.Errorf("keyspace %q: %q held X and S at once", s.name, r.key()))
	}
	return nil
}

func pin(s *keyspace, r *record, o *Owner) {
	l := lockOf(r)
	defer l.mu.Unlock()
	if l.has(o) {
		for _, p := range l.pins {
			if p == o {
				return
			}
		}
	} else {
		o.adopt(s, r)
	}
	l.pins = append(l.pins, o)
}

// anchor returns the record at key, inserting one if there is none
// (exclusive latch): a tombstone when the buffer knows the key is absent,
// else a sentinel. Either inherits the locks on the gap it lands in.
func (b *Buffer) anchor(s *keyspace, key []byte) *record {
	pred := s.floor(key)
	if bytes.Equal(pred.key(), key) {
		return pred
	}
	kind := Sentinel
	if b.opts.Policy == PolicyNemo && !pred.gap() {
		kind = Tombstone
	}
	r := newRecord(key, nil, kind)
	if kind == Tombstone {
		r.setBase(adapters.Expect{Kind: adapters.ExpectAbsent}) // a sealed gap: known absent
	}
	r.setGap(pred.gap())
	b.insert(s, r, pred)
	b.used.Add(b.size(r))
	return r
}

// LockKey takes a row lock in mode m on key for o (or fails at once with a
// *LockConflict) and returns the key's committed state and its base (what the store
// holds: a version, absence, or unknown). A key the buffer does not hold
// gets a record first: a tombstone if it is known absent, else a sentinel
// that is then resolved with one fetch while locked, so nothing can change
// the key in between. Landing in a gap another transaction has locked, the
// new record inherits that lock, which is how an insert conflicts with a
// range reader's next-key lock. With Options.FreshLocks a clean record is
// fetched again too.
func (b *Buffer) LockKey(ctx context.Context, ks adapters.Keyspace, key []byte, o *Owner, m Mode) ([]byte, bool, adapters.Expect, error) {
	reads, err := b.LockKeys(ctx, ks, [][]byte{key}, o, m)
	if err != nil {
		return nil, false, adapters.Expect{}, err
	}
	return reads[0].Value, reads[0].Exists, reads[0].Base, nil
}

// KeyRead is what a locking read found for one key: its committed value
// (nil when absent), and its base.
type KeyRead struct {
	Value  []byte
	Exists bool
	Base   adapters.Expect
}

// LockKeys is LockKey for several keys of ks, locked in order: the keys
// the store must be asked about are fetched with one Get once all are
// locked. On a lock conflict it returns the *LockConflict, holding the
// locks taken before it, whose keys it has resolved (so that the call made
// again answers them from the buffer).
func (b *Buffer) LockKeys(ctx context.Context, ks adapters.Keyspace, keys [][]byte, o *Owner, m Mode) ([]KeyRead, error) {
	for _, key := range keys {
		if err := b.checkKey(key); err != nil {
			return nil, err
		}
	}
	s, err := b.space(ks)
	if err != nil {
		return nil, err
	}
	out := make([]KeyRead, len(keys))
	pending := make([]lockRead, 0, len(keys))
	var conflict error
	for i, key := range keys {
		lr, err := b.lockForRead(ctx, s, key, o, m)
		if err != nil {
			conflict = err
			break
		}
		if !lr.refetch {
			out[i] = lr.read
			continue
		}
		lr.at = i
		pending = append(pending, lr)
	}
	if len(pending) > 0 {
		// The records to fetch are locked and not dirty: nobody can
		// write their keys until we let go, so the store is
		// authoritative.
		b.stats.misses.Add(uint64(len(pending)))
		for range pending {
			obs.Note(ctx, string(ks), obs.Miss)
		}
		t := b.tick()
		fetch := make([][]byte, len(pending))
		for j, lr := range pending {
			fetch[j] = keys[lr.at]
		}
		recs, err := b.store.Get(ctx, ks, fetch)
		if err == nil && len(recs) != len(fetch) {
			err = errShortReply
		}
		if err != nil {
			return nil, storeErr("get", err)
		}
		s.mu.Lock()
		for j, lr := range pending {
			out[lr.at] = b.resolveRead(lr, recs[j], t)
		}
		s.mu.Unlock()
	}
	if conflict != nil {
		return nil, conflict
	}
	return out, nil
}

// lockRead is one key's locking read between its lock and its answer.
type lockRead struct {
	r     *record
	fresh bool // the owner held no lock on the key before
	// refetch: the store must be asked; else read is the answer.
	refetch bool
	read    KeyRead
	at      int // the key's position in LockKeys' call
}

// lockForRead takes o's row lock in mode m on key (anchoring a record if
// the buffer holds none) and says whether the store must be asked: for a
// sentinel, and with FreshLocks for any clean record the owner did not
// hold already (one it holds answers from the buffer: the transaction read
// it from the store then, and must keep seeing what it read).
func (b *Buffer) lockForRead(ctx context.Context, s *keyspace, key []byte, o *Owner, m Mode) (lockRead, error) {
	s.mu.RLock()
	r := s.floor(key)
	fresh := true
	if !bytes.Equal(r.key(), key) {
		s.mu.RUnlock()
		s.mu.Lock()
		r = b.anchor(s, key)
		err := grant(s, r, o, m, false)
		s.mu.Unlock()
		if err != nil {
			return lockRead{}, err
		}
		s.mu.RLock()
	} else {
		held := b.opts.FreshLocks && rowHeld(r, o)
		if err := grant(s, r, o, m, false); err != nil {
			s.mu.RUnlock()
			return lockRead{}, err
		}
		fresh = !held
	}
	defer s.mu.RUnlock()
	lr := lockRead{r: r, fresh: fresh, read: KeyRead{Base: r.baseExpect()}}
	kind := r.kind()
	lr.refetch = kind == Sentinel || fresh && b.opts.FreshLocks && !r.dirty() && !r.head()
	switch {
	case lr.refetch:
	case kind == Regular:
		lr.read.Value, lr.read.Exists = cloneBytes(r.value()), true
		b.touch(r)
		b.stats.hits.Add(1)
		obs.Note(ctx, string(s.name), obs.Hit)
	default:
		b.stats.negHits.Add(1)
		obs.Note(ctx, string(s.name), obs.NegativeHit)
	}
	return lr, nil
}

// resolveRead installs in lr's record what the store answered for it
// (rec, fetched at tick t) and returns the key's state (s.mu held
// exclusively).
func (b *Buffer) resolveRead(lr lockRead, rec adapters.Record, t uint32) KeyRead {
	r := lr.r
	v, ok, base := rec.Value, rec.Value != nil, fetchedBase(rec)
	if r.dirty() {
		// Our own earlier write in this transaction? It cannot be: the
		// transaction would not lock it again. A replayed record is
		// the buffer's newer state: it answers.
		if r.kind() == Regular {
			return KeyRead{cloneBytes(r.value()), true, r.baseExpect()}
		}
		return KeyRead{nil, false, r.baseExpect()}
	}
	if r.kind() == Sentinel || lr.fresh && b.opts.FreshLocks {
		switch {
		case b.opts.Policy != PolicyNone && ok:
			b.used.Add(r.set(Regular, v) + r.setBase(base))
		case b.opts.Policy == PolicyNemo:
			b.used.Add(r.set(Tombstone, nil) + r.setBase(base))
		case r.kind() != Sentinel:
			b.used.Add(r.set(Sentinel, nil) + r.setBase(adapters.Expect{}))
		}
		b.confirm(r, t)
		return KeyRead{v, ok, base}
	}
	// Resolved meanwhile (by a range fetch, or our own earlier write).
	if r.kind() == Regular {
		return KeyRead{cloneBytes(r.value()), true, r.baseExpect()}
	}
	return KeyRead{nil, false, r.baseExpect()}
}

// LockKeyBlind X-locks key for a write that does not depend on the key's
// state (an upsert), without fetching it: a key the buffer does not hold
// gets an anchor (a sentinel, or a tombstone if known absent) that inherits
// its gap's locks, so the write still conflicts with every range reader
// covering it; the commit then turns the anchor into the new value. A blind
// write thus costs no remote call.
func (b *Buffer) LockKeyBlind(ks adapters.Keyspace, key []byte, o *Owner) error {
	_, _, _, err := b.lockBlind(ks, key, o, ModeX, false)
	return err
}

// LockKeySharedBlind S-locks key without fetching it, anchoring it as
// LockKeyBlind does: for a reader that knows the key's state from
// elsewhere (the engine's resident keyspace handles) and needs only that
// no writer changes it until it lets go.
func (b *Buffer) LockKeySharedBlind(ks adapters.Keyspace, key []byte, o *Owner) error {
	_, _, _, err := b.lockBlind(ks, key, o, ModeS, false)
	return err
}

// LockKeyKnown is LockKeyBlind that also reports what the buffer knows of
// key, still without a remote call: known says the buffer holds its state
// (a record, or a tombstone, fresh enough to answer a read from), and then
// val and exists are that state. A write whose value depends on the old
// one only when the buffer has it (a Datastore upsert keeps the entity's
// create time) takes this lock instead of reading.
func (b *Buffer) LockKeyKnown(ks adapters.Keyspace, key []byte, o *Owner) (val []byte, exists, known bool, err error) {
	return b.lockBlind(ks, key, o, ModeX, true)
}

func (b *Buffer) lockBlind(ks adapters.Keyspace, key []byte, o *Owner, m Mode, peek bool) ([]byte, bool, bool, error) {
	if err := b.checkKey(key); err != nil {
		return nil, false, false, err
	}
	s, err := b.space(ks)
	if err != nil {
		return nil, false, false, err
	}
	now := b.readTick(s)
	// state reads r's state once the lock is granted (latch held).
	state := func(r *record) ([]byte, bool, bool, error) {
		if !peek || b.freshness(r, itsState, now) == refetch {
			return nil, false, false, nil
		}
		switch r.kind() {
		case Regular:
			return cloneBytes(r.value()), true, true, nil
		case Tombstone:
			return nil, false, true, nil
		}
		return nil, false, false, nil
	}
	s.mu.RLock()
	if r := s.floor(key); bytes.Equal(r.key(), key) {
		defer s.mu.RUnlock()
		if err := grant(s, r, o, m, false); err != nil {
			return nil, false, false, err
		}
		return state(r)
	}
	s.mu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := b.anchor(s, key)
	if err := grant(s, r, o, m, false); err != nil {
		return nil, false, false, err
	}
	return state(r)
}

// LockRange is the next-key locking range read of [start, end): it anchors
// both bounds (sentinels where the buffer knows nothing), S-locks the row
// and the next-key gap of every record from start up to the last record
// before end, or up to the limit-th live record if that comes first (the
// scan examines no further), pins the end anchor, and then scans, the
// fetch resolving the sentinels. Records admitted into the locked gaps
// inherit the locks. When the scan stops early (next != nil), the locks
// this call took at or beyond next are given back at once: the
// transaction read nothing there, so two-phase locking does not need them,
// and keeping them would block every insert up to end. On a *LockConflict
// the locks taken before it stay held: the caller either Releases o (the
// transaction aborts) or waits and calls again, which takes them anew.
func (b *Buffer) LockRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int, o *Owner) ([]adapters.Record, []byte, error) {
	if len(start) > b.opts.MaxKeyBytes || len(end) > b.opts.MaxKeyBytes+1 {
		return nil, nil, ErrKeyTooLarge
	}
	if start == nil {
		start = []byte{}
	}
	if end != nil && bytes.Compare(start, end) >= 0 {
		return nil, nil, nil
	}
	s, err := b.space(ks)
	if err != nil {
		return nil, nil, err
	}
	mark := o.mark()
	// With the start anchor in place, locking changes nothing in the tree:
	// the shared latch is enough (lock state has its own mutex per record).
	s.mu.RLock()
	anchored := s.has(start)
	var whole bool
	if anchored {
		whole, err = b.lockSpan(s, start, end, limit, o)
		if err == nil && whole && end != nil && s.has(end) {
			pin(s, s.floor(end), o)
			whole = false // pinned already
		}
	}
	s.mu.RUnlock()
	if !anchored {
		// Only the start anchor needs the exclusive latch, which holds up
		// every reader of the keyspace: it is inserted and locked there
		// (a locked record stays), and the rest of the span is locked
		// under the shared latch, as when the anchor was there already.
		s.mu.Lock()
		err = grantRowGap(s, b.anchor(s, start), o, ModeS)
		s.mu.Unlock()
		if err == nil {
			s.mu.RLock()
			whole, err = b.lockSpan(s, start, end, limit, o)
			s.mu.RUnlock()
		}
	}
	// The end anchor bounds the last gap lock at end. It is needed only
	// when the locks reached end: a scan its limit cuts short never looks
	// there, and a sentinel it left unresolved would only cost the gap bit
	// before it when released. Inserted now, it lands in a gap we hold and
	// inherits the lock.
	if err == nil && whole && end != nil {
		s.mu.Lock()
		existed := s.has(end)
		r := b.anchor(s, end)
		if !existed {
			// It inherited our gap lock, row and gap; the range ends
			// before end, so it needs neither (others keep theirs).
			if l := r.lk.Load(); l != nil {
				l.mu.Lock()
				l.row.release(o)
				l.gap.release(o)
				l.wakeAll()
				l.mu.Unlock()
			}
		}
		pin(s, r, o)
		s.mu.Unlock()
	}
	if err != nil {
		return nil, nil, err
	}
	if b.opts.FreshLocks {
		s.mu.Lock()
		b.forgetLocked(s, start, end, o)
		s.mu.Unlock()
	}
	recs, next, err := b.scan(ctx, ks, start, end, limit, true)
	if err == nil && next != nil {
		s.mu.RLock() // takeFrom reads record keys, which record.set reallocates
		hs := o.takeFrom(mark, s, next)
		s.mu.RUnlock()
		b.release(o, hs)
	}
	return recs, next, err
}

// forgetLocked (exclusive latch; FreshLocks) makes the scan that follows a
// LockRange read [start, end) from the store: what o has just locked there
// stops being known (clean records become sentinels, which the fetch
// resolves; sealed gaps are unsealed), so a transaction's range read sees
// what the store holds now, not what the buffer learnt up to
// MaxStaleness ago. Records o does not hold (beyond where a limit stopped
// its locks) are left alone.
func (b *Buffer) forgetLocked(s *keyspace, start, end []byte, o *Owner) {
	ascend(s, start, end, func(r *record) bool {
		l := r.lk.Load()
		if l == nil {
			return true
		}
		l.mu.Lock()
		row, gap := l.row.mode(o) != 0, l.gap.mode(o) != 0
		l.mu.Unlock()
		if row && !r.dirty() && !r.head() && r.kind() != Sentinel {
			b.used.Add(r.set(Sentinel, nil) + r.setBase(adapters.Expect{}))
		}
		if gap && !r.gap() {
			r.setGap(true)
		}
		return true
	})
}

// has reports whether a record with exactly key is buffered (latch held).
func (s *keyspace) has(key []byte) bool { return bytes.Equal(s.floor(key).key(), key) }

// lockSpan S-locks row and gap of the records from start (whose anchor
// exists) to end, stopping after the limit-th regular record; whole says
// it went all the way to end. The caller holds the latch (shared is
// enough).
func (b *Buffer) lockSpan(s *keyspace, start, end []byte, limit int, o *Owner) (whole bool, err error) {
	regular := 0
	whole = true
	ascend(s, start, end, func(r *record) bool {
		err = grantRowGap(s, r, o, ModeS)
		if r.kind() == Regular && !r.head() {
			regular++
		}
		if err == nil && limit > 0 && regular >= limit {
			whole = false
			return false
		}
		return err == nil
	})
	return whole, err
}

// Release drops every lock and pin o holds, and removes the records that
// only lockers needed (see disposable) once nobody holds them any more.
func (b *Buffer) Release(o *Owner) {
	o.mu.Lock()
	hs := o.held
	o.held = nil
	o.released = true
	o.mu.Unlock()
	b.release(o, hs)
}

// release drops o's locks and pins on hs.
func (b *Buffer) release(o *Owner, hs []held) {
	if len(hs) == 0 {
		return
	}
	for len(hs) > 0 {
		// One keyspace at a time (a transaction mostly holds one): the
		// holdings of hs[0]'s keyspace, the rest kept for the next round.
		s := hs[0].s
		recs := make([]*record, 0, len(hs))
		rest := hs[:0]
		for _, h := range hs {
			if h.s == s {
				recs = append(recs, h.r)
			} else {
				rest = append(rest, h)
			}
		}
		hs = rest
		var orphans []*record
		s.mu.RLock()
		for _, r := range recs {
			l := r.lk.Load()
			if l == nil {
				continue
			}
			l.mu.Lock()
			l.row.release(o)
			l.gap.release(o)
			l.wakeAll()
			for i, p := range l.pins {
				if p == o {
					l.pins = append(l.pins[:i], l.pins[i+1:]...)
					break
				}
			}
			if l.idle() && !l.dead {
				l.dead = true
				r.lk.CompareAndSwap(l, nil)
				if b.disposable(r) {
					orphans = append(orphans, r)
				}
			}
			l.mu.Unlock()
		}
		s.mu.RUnlock()
		if len(orphans) == 0 {
			continue
		}
		s.mu.Lock()
		for _, r := range orphans {
			switch {
			case s.dropped || !s.present(r) || !b.disposable(r) || r.locked():
			case r.kind() == Tombstone && !s.removable(r):
				// Written back while locked, with a fetch in flight that
				// may hold the value from before the delete: the
				// tombstone answers over it until it is done (the
				// evictor removes it then).
				b.stats.evictDeferred.Add(1)
			default:
				b.remove(s, r)
			}
		}
		s.mu.Unlock()
	}
}

// disposable reports whether r is in the tree only for its lockers, to go
// when the last of them lets go: a sentinel; or, in a positive-only cache
// (no negative entries), a clean tombstone, which write-back must leave in
// place while it is locked so the lock on the key's absence survives (and
// release leaves until no fetch in flight may hold the deleted value).
func (b *Buffer) disposable(r *record) bool {
	switch r.kind() {
	case Sentinel:
		return true
	case Tombstone:
		return b.opts.Policy != PolicyNemo && !r.dirty() && !r.head()
	}
	return false
}
