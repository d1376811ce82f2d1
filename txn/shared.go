package txn

import (
	"context"
	"errors"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
)

// Consistent reads under coherence shared. Other writers change the store
// behind the buffer, and locks held here cannot keep them out, so what a
// transaction read is made consistent by the store:
//
//   - A read-write transaction's locking reads ask the store and record
//     what they found (Txn.seen, Txn.ranges); its commit is one atomic
//     store call that applies only if the store still holds all of it
//     (checks, see Txn.checks). One that writes nothing commits the checks
//     alone (checkReads), so it too commits only if everything it read was
//     current at one moment: no read skew across replicas.
//   - A read-only transaction reads the store's own snapshot
//     (cache.Snapshot: a Datastore read-only transaction), past the
//     buffer, so every read sees the store as of one moment, and commits
//     with no store call. Where the store has no snapshots (Azure Table)
//     or cannot read a range in one (the legacy Datastore emulator), its
//     reads ask the store under locks let go at once, are recorded as a
//     read-write transaction's are, and its commit checks them all
//     (checkReads); a change since fails the commit with ErrConflict, and
//     the client retries. Reads before that commit may then have been
//     inconsistent: the commit says whether they were.

// sharedGet reads keys in a read-only transaction under coherence shared
// (t.mu held): vals[i] nil means keys[i] is absent.
func (t *Txn) sharedGet(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([][]byte, error) {
	if s := t.storeSnapshot(); s != nil {
		vals, bases, err := s.Get(ctx, ks, keys)
		if err != nil {
			return nil, t.fail(err)
		}
		for i, key := range keys {
			t.saw(ks, key, bases[i])
		}
		return vals, nil
	}
	vals := make([][]byte, len(keys))
	for i, key := range keys {
		var base adapters.Expect
		var ok bool
		err := t.briefly(ctx, func(o *cache.Owner) (err error) {
			vals[i], ok, base, err = t.e.buf.LockKey(ctx, ks, key, o, cache.ModeS)
			return err
		})
		if err != nil {
			return nil, err
		}
		vals[i] = present(vals[i], ok)
		t.saw(ks, key, base)
	}
	t.recheck = true
	return vals, nil
}

// sharedScan reads [start, end) in a read-only transaction under
// coherence shared (t.mu held).
func (t *Txn) sharedScan(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, []byte, error) {
	if s := t.storeSnapshot(); s != nil {
		recs, next, err := s.Scan(ctx, ks, start, end, limit)
		if !errors.Is(err, errors.ErrUnsupported) {
			if err == nil {
				t.sawRange(ks, start, end, next, recs)
			}
			return recs, next, err
		}
	}
	var recs []adapters.Record
	var next []byte
	err := t.briefly(ctx, func(o *cache.Owner) (err error) {
		recs, next, err = t.e.buf.LockRange(ctx, ks, start, end, limit, o)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	t.sawRange(ks, start, end, next, recs)
	t.recheck = true
	return recs, next, nil
}

// storeSnapshot returns the transaction's snapshot of the store, opening
// it on first use; nil when the store reads none.
func (t *Txn) storeSnapshot() *cache.Snapshot {
	if t.snap == nil && !t.noSnap {
		s, err := t.e.buf.Snapshot()
		if err != nil {
			t.noSnap = true
			return nil
		}
		t.snap = s
	}
	return t.snap
}

// briefly runs read, a locking read, under an owner of its own that lets go
// of its locks as soon as the read returns (t.mu held).
func (t *Txn) briefly(ctx context.Context, read func(o *cache.Owner) error) error {
	o := &cache.Owner{ID: t.id}
	defer t.e.buf.Release(o)
	if err := t.acquire(ctx, func() error { return read(o) }); err != nil {
		return t.fail(err)
	}
	return nil
}
