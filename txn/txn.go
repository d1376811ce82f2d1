package txn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/obs"
)

type txnState uint8

const (
	active txnState = iota
	committed
	aborted
)

// Txn is one transaction. Its methods serialize on the transaction; use it
// from one goroutine at a time.
type Txn struct {
	e        *Engine
	id       uint64
	owner    *cache.Owner
	readOnly bool
	snapshot bool // read-only: no locks, reads a snapshot (snapshot.go)
	parts    bool // AcceptParts
	// seq is, reading a snapshot, the last commit it sees; once committed,
	// the commit's place in install order (snapshot.go).
	seq    uint64
	locked time.Time // first lock taken (for lock-hold time)

	mu     sync.Mutex
	state  txnState
	cause  error // why it aborted
	writes map[adapters.Keyspace]map[string]cache.Write
	ksOps  []Change // keyspace creates and drops, in order
	// seen is, writing through, what the transaction's locking reads
	// found each key to hold in the store: its writes of those keys are
	// conditioned on it (blind writes of keys it never read are not).
	seen map[adapters.Keyspace]map[string]adapters.Expect
	// ranges are, writing through, the ranges the transaction read and
	// what it found there: checked in its atomic commit (no phantoms).
	ranges []rangeRead
	// catalogs are the catalog keyspaces the transaction looked keyspaces
	// up in: their reads are not checked at commit when it does not write
	// them (a lookup only finds the table it writes; Azure's catalog,
	// the account's table list, cannot be checked in a transaction).
	catalogs map[adapters.Keyspace]bool
	// xread is whether each key the transaction read under an X lock
	// (GetForUpdate) existed: nobody else can change it while the lock
	// is held, so a write of it after the read need not read it again
	// (where the buffer keeps nothing, policy none, that would be a
	// second remote call).
	xread map[adapters.Keyspace]map[string]bool
	// committed is what Commit installed (values as the store holds
	// them, writing through to a store that stamps them).
	committed []Change
	pcl       []pclHeld
	// dep is, under early lock release, the highest LSN of a commit not
	// yet durable whose writes the transaction read (early.go): Commit
	// returns only once the log is durable up to it.
	dep uint64
	// snap is, read-only under coherence shared, the store's snapshot
	// the transaction reads (shared.go); nil until its first read.
	snap *cache.Snapshot
	// noSnap: the store reads no snapshots. recheck: a read was not
	// made in the snapshot, so Commit checks every read (shared.go).
	noSnap, recheck bool
	lastUse         atomic.Int64
	// Coherence partitioned (forward.go): served, the transaction was
	// forwarded here and never forwards; local, it ran an operation on a
	// leased keyspace here; remote, it is bound to the owner at remoteAt,
	// which has run no operation of it yet while remoteFresh.
	// forwarded are the keys its forwarded operations named
	// (forgetForwarded).
	served, local, remoteFresh bool
	remote                     Remote
	remoteAt                   string
	forwarded                  map[adapters.Keyspace][][]byte
	// uses are the keyspaces it touched here, counted for Handover.
	uses []adapters.Keyspace
}

// ID is the transaction's id (also its WAL transaction id).
func (t *Txn) ID() uint64 { return t.id }

// AcceptParts says the caller does not need the transaction's writes of
// one keyspace applied together: writing through (coherence shared, write
// mode through), a group the store cannot take in one atomic call (more
// entity groups than legacy Datastore allows in one transaction) is then
// written in parts rather than refused, as a non-transactional Datastore
// commit is applied. Its reads are still checked, and its writes still
// conditioned on them.
func (t *Txn) AcceptParts() { t.parts = true }

func (t *Txn) touch() { t.lastUse.Store(time.Now().UnixNano()) }

// end closes an operation begun with t.mu.Lock: the idle clock restarts
// when it returns, so an operation slower than the idle timeout (a slow
// store) is not mistaken for idleness right after it.
func (t *Txn) end() {
	t.touch()
	t.mu.Unlock()
}

// begin checks the transaction can run an operation; t.mu is held.
func (t *Txn) begin(write bool) error {
	t.touch()
	switch t.state {
	case committed:
		return ErrDone
	case aborted:
		return fmt.Errorf("%w: %w", ErrAborted, t.cause)
	}
	if write && t.readOnly {
		return ErrReadOnly
	}
	if t.locked.IsZero() {
		t.locked = time.Now()
	}
	return nil
}

// fail aborts on a lock conflict (one not worth waiting for, or waited
// for in vain: see acquire) and passes other errors through.
func (t *Txn) fail(err error) error {
	if errors.Is(err, ErrConflict) {
		t.e.stats.conflicts.Add(1)
		t.abortLocked(err)
	}
	return err
}

func (t *Txn) pending(ks adapters.Keyspace, key []byte) (cache.Write, bool) {
	w, ok := t.writes[ks][string(key)]
	return w, ok
}

// Get reads key, S-locking it (and so its absence) until the end; a
// read-only transaction under coherence exclusive reads its snapshot
// instead, without locks.
func (t *Txn) Get(ctx context.Context, ks adapters.Keyspace, key []byte) ([]byte, bool, error) {
	return t.read(ctx, ks, key, cache.ModeS)
}

// GetForUpdate reads key under an X lock, for read-modify-write (an ETag
// check, a counter) without a lock upgrade later.
func (t *Txn) GetForUpdate(ctx context.Context, ks adapters.Keyspace, key []byte) ([]byte, bool, error) {
	return t.read(ctx, ks, key, cache.ModeX)
}

func (t *Txn) read(ctx context.Context, ks adapters.Keyspace, key []byte, m cache.Mode) ([]byte, bool, error) {
	t.mu.Lock()
	defer t.end()
	if err := t.begin(m == cache.ModeX); err != nil {
		return nil, false, err
	}
	kind := OpGet
	if m == cache.ModeX {
		kind = OpGetForUpdate
	}
	if r, done, err := t.remoteFirst(ctx, Op{Kind: kind, Keyspace: ks, Key: key}); done || err != nil {
		return r.Value, r.Exists, err
	}
	if err := t.ready(ctx, ks); err != nil {
		return nil, false, err
	}
	return t.readLocked(ctx, ks, key, m)
}

// GetMany reads keys of ks as Get reads each (vals[i] nil: keys[i] is
// absent), with one remote call where each would make one: the keys its
// locks must fetch are fetched together once all are locked
// (cache.Buffer.LockKeys), and a read-only transaction under coherence
// shared reads them all in one read of the store's snapshot.
func (t *Txn) GetMany(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([][]byte, error) {
	t.mu.Lock()
	defer t.end()
	if err := t.begin(false); err != nil {
		return nil, err
	}
	if r, done, err := t.remoteFirst(ctx, Op{Kind: OpGetMany, Keyspace: ks, Keys: keys}); done || err != nil {
		return r.Values, err
	}
	if err := t.ready(ctx, ks); err != nil {
		return nil, err
	}
	if t.snapshot && t.e.snaps == nil {
		t.e.buf.OpenKeyspace(ks)
		return t.sharedGet(ctx, ks, keys)
	}
	vals := make([][]byte, len(keys))
	if t.snapshot || t.e.pcl != nil {
		for i, key := range keys {
			v, ok, err := t.readLocked(ctx, ks, key, cache.ModeS)
			if err != nil {
				return nil, err
			}
			vals[i] = present(v, ok)
		}
		return vals, nil
	}
	var fetch [][]byte
	var at []int
	for i, key := range keys {
		if w, ok := t.pending(ks, key); ok {
			if !w.Delete {
				vals[i] = present(bytes.Clone(w.Value), true)
			}
			continue
		}
		fetch, at = append(fetch, key), append(at, i)
	}
	if len(fetch) == 0 {
		return vals, nil
	}
	t.e.buf.OpenKeyspace(ks)
	var reads []cache.KeyRead
	err := t.acquire(ctx, func() (err error) {
		reads, err = t.e.buf.LockKeys(ctx, ks, fetch, t.owner, cache.ModeS)
		return err
	})
	if err != nil {
		return nil, t.fail(err)
	}
	for j, r := range reads {
		t.saw(ks, fetch[j], r.Base)
		t.depend(t.e.dependKey(ks, fetch[j]))
		vals[at[j]] = present(r.Value, r.Exists)
	}
	return vals, nil
}

// present is a read's value as GetMany returns it: nil when absent, and
// never nil when present.
func present(v []byte, ok bool) []byte {
	if ok && v == nil {
		return []byte{}
	}
	if !ok {
		return nil
	}
	return v
}

// readLocked is read with t.mu held and the transaction begun.
func (t *Txn) readLocked(ctx context.Context, ks adapters.Keyspace, key []byte, m cache.Mode) ([]byte, bool, error) {
	if w, ok := t.pending(ks, key); ok {
		if w.Delete {
			return nil, false, nil
		}
		return bytes.Clone(w.Value), true, nil
	}
	if t.snapshot {
		return t.snapGet(ctx, ks, key)
	}
	t.e.buf.OpenKeyspace(ks)
	var v []byte
	var ok bool
	var base adapters.Expect
	err := t.acquire(ctx, func() (err error) {
		v, ok, base, err = t.e.buf.LockKey(ctx, ks, key, t.owner, m)
		return err
	})
	if err != nil {
		return nil, false, t.fail(err)
	}
	t.saw(ks, key, base)
	t.depend(t.e.dependKey(ks, key))
	if m == cache.ModeX {
		if t.xread == nil {
			t.xread = map[adapters.Keyspace]map[string]bool{}
		}
		if t.xread[ks] == nil {
			t.xread[ks] = map[string]bool{}
		}
		t.xread[ks][string(key)] = ok
	}
	return v, ok, nil
}

// depend notes that the transaction read the writes of the commit at lsn,
// released early and maybe not yet durable (0: none).
func (t *Txn) depend(lsn uint64) { t.dep = max(t.dep, lsn) }

// saw records, writing through, the store state a locking read found.
func (t *Txn) saw(ks adapters.Keyspace, key []byte, base adapters.Expect) {
	if t.e.opts.Mode != WriteThrough {
		return
	}
	if t.seen == nil {
		t.seen = map[adapters.Keyspace]map[string]adapters.Expect{}
	}
	m := t.seen[ks]
	if m == nil {
		m = map[string]adapters.Expect{}
		t.seen[ks] = m
	}
	if _, ok := m[string(key)]; !ok {
		m[string(key)] = base // the first read is what the store held
	}
}

// Scan reads the live records in [start, end) (end nil: unbounded), at most
// limit when limit > 0, with the transaction's own writes overlaid. The
// whole range is protected against phantoms until the end. next, when non
// nil, is where to continue.
func (t *Txn) Scan(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, []byte, error) {
	t.mu.Lock()
	defer t.end()
	if err := t.begin(false); err != nil {
		return nil, nil, err
	}
	if r, done, err := t.remoteFirst(ctx, Op{Kind: OpScan, Keyspace: ks, Key: start, End: end, Limit: limit}); done || err != nil {
		return r.Records, r.Next, err
	}
	if err := t.ready(ctx, ks); err != nil {
		return nil, nil, err
	}
	if t.snapshot {
		return t.snapScan(ctx, ks, start, end, limit)
	}
	var recs []adapters.Record
	var next []byte
	var err error
	t.e.buf.OpenKeyspace(ks)
	if t.e.pcl != nil {
		if err = t.acquire(ctx, func() error { return t.e.pcl.lockRange(t, ks, start, end) }); err == nil {
			recs, next, err = t.e.buf.Scan(ctx, ks, start, end, limit)
		}
	} else {
		err = t.acquire(ctx, func() (err error) {
			recs, next, err = t.e.buf.LockRange(ctx, ks, start, end, limit, t.owner)
			return err
		})
	}
	if err != nil {
		return nil, nil, t.fail(err)
	}
	if t.e.pcl == nil && t.e.opts.Mode == WriteThrough {
		t.sawRange(ks, start, end, next, recs)
	}
	t.depend(t.e.dependSpan(ks, start, stopAt(end, next)))
	return t.overlay(ks, recs, start, end, next, limit)
}

// rangeRead is a range a transaction read, up to where its scan stopped,
// and the keys and versions it found there.
type rangeRead struct {
	ks    adapters.Keyspace
	start []byte
	check adapters.RangeCheck
}

// sawRange records, writing through, what a range read found in [start,
// next) (next nil: up to end), for the commit to check.
func (t *Txn) sawRange(ks adapters.Keyspace, start, end, next []byte, recs []adapters.Record) {
	stop := end
	if next != nil {
		stop = next
	}
	rr := rangeRead{ks: ks, start: append([]byte{}, start...), check: adapters.RangeCheck{End: bytes.Clone(stop)}}
	for _, r := range recs {
		rr.check.Records = append(rr.check.Records, adapters.Record{Key: bytes.Clone(r.Key), Version: r.Version})
	}
	t.ranges = append(t.ranges, rr)
}

// overlay merges the transaction's pending writes in range over recs. Only
// writes before next (the part of the range the scan examined) are merged.
func (t *Txn) overlay(ks adapters.Keyspace, recs []adapters.Record, start, end, next []byte, limit int) ([]adapters.Record, []byte, error) {
	ws := t.writes[ks]
	if len(ws) == 0 {
		return recs, next, nil
	}
	top := next
	if top == nil {
		top = end
	}
	var mine []cache.Write
	for _, w := range ws {
		if bytes.Compare(w.Key, start) >= 0 && (top == nil || bytes.Compare(w.Key, top) < 0) {
			mine = append(mine, w)
		}
	}
	if len(mine) == 0 {
		return recs, next, nil
	}
	sort.Slice(mine, func(i, j int) bool { return bytes.Compare(mine[i].Key, mine[j].Key) < 0 })
	out, next := mergeWrites(recs, mine, next, limit)
	return out, next, nil
}

// mergeWrites lays ws, sorted by key, over recs (a scan's result, sorted):
// a write replaces or adds its key, a delete removes it. When the result
// runs past limit (> 0) it is cut there, and next moves to just after the
// last record kept.
func mergeWrites(recs []adapters.Record, ws []cache.Write, next []byte, limit int) ([]adapters.Record, []byte) {
	out := make([]adapters.Record, 0, len(recs)+len(ws))
	i := 0
	for _, w := range ws {
		for i < len(recs) && bytes.Compare(recs[i].Key, w.Key) < 0 {
			out = append(out, recs[i])
			i++
		}
		if i < len(recs) && bytes.Equal(recs[i].Key, w.Key) {
			i++
		}
		if !w.Delete {
			out = append(out, adapters.Record{Key: bytes.Clone(w.Key), Value: bytes.Clone(w.Value)})
		}
	}
	out = append(out, recs[i:]...)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
		next = adapters.Successor(out[limit-1].Key)
	}
	return out, next
}

// writeLock X-locks key and returns whether it exists in the transaction's
// view.
func (t *Txn) writeLock(ctx context.Context, ks adapters.Keyspace, key []byte) (bool, error) {
	if w, ok := t.pending(ks, key); ok {
		return !w.Delete, nil // already X-locked
	}
	if t.e.pcl != nil {
		if err := t.acquire(ctx, func() error { return t.e.pcl.lockKey(t, ks, key) }); err != nil {
			return false, t.fail(err)
		}
	}
	if exists, ok := t.xread[ks][string(key)]; ok {
		return exists, nil // read under X, which is still held
	}
	var ok bool
	var base adapters.Expect
	err := t.acquire(ctx, func() (err error) {
		_, ok, base, err = t.e.buf.LockKey(ctx, ks, key, t.owner, cache.ModeX)
		return err
	})
	if err != nil {
		return false, t.fail(err)
	}
	t.saw(ks, key, base)
	return ok, nil
}

// blindLock X-locks key without reading it (pcl: and its partition).
func (t *Txn) blindLock(ctx context.Context, ks adapters.Keyspace, key []byte) error {
	if t.e.pcl != nil {
		if err := t.acquire(ctx, func() error { return t.e.pcl.lockKey(t, ks, key) }); err != nil {
			return t.fail(err)
		}
	}
	if err := t.acquire(ctx, func() error { return t.e.buf.LockKeyBlind(ks, key, t.owner) }); err != nil {
		return t.fail(err)
	}
	return nil
}

// LockKnown X-locks key as a blind write does (Upsert), without a remote
// read, and returns what is known of it for free: the transaction's own
// write, or the state the buffer holds. known false says neither knows
// the key; nothing is fetched. A write whose value would keep something
// of the old one (a Datastore upsert keeps the entity's create time) uses
// it instead of GetForUpdate when the old value is only nice to have.
func (t *Txn) LockKnown(ctx context.Context, ks adapters.Keyspace, key []byte) (val []byte, exists, known bool, err error) {
	t.mu.Lock()
	defer t.end()
	if err := t.begin(true); err != nil {
		return nil, false, false, err
	}
	if r, done, err := t.remoteFirst(ctx, Op{Kind: OpLockKnown, Keyspace: ks, Key: key}); done || err != nil {
		return r.Value, r.Exists, r.Known, err
	}
	if err := t.ready(ctx, ks); err != nil {
		return nil, false, false, err
	}
	if w, ok := t.pending(ks, key); ok {
		if w.Delete {
			return nil, false, true, nil
		}
		return bytes.Clone(w.Value), true, true, nil
	}
	t.e.buf.OpenKeyspace(ks)
	if t.e.pcl != nil {
		if err := t.acquire(ctx, func() error { return t.e.pcl.lockKey(t, ks, key) }); err != nil {
			return nil, false, false, t.fail(err)
		}
	}
	err = t.acquire(ctx, func() (err error) {
		val, exists, known, err = t.e.buf.LockKeyKnown(ks, key, t.owner)
		return err
	})
	if err != nil {
		return nil, false, false, t.fail(err)
	}
	t.depend(t.e.dependKey(ks, key))
	return val, exists, known, nil
}

func (t *Txn) put(ks adapters.Keyspace, w cache.Write) {
	if t.writes == nil {
		t.writes = map[adapters.Keyspace]map[string]cache.Write{}
	}
	m := t.writes[ks]
	if m == nil {
		m = map[string]cache.Write{}
		t.writes[ks] = m
	}
	w.Key = bytes.Clone(w.Key)
	w.Value = bytes.Clone(w.Value)
	w.Expect = t.seen[ks][string(w.Key)] // ExpectAny for a key never read
	m[string(w.Key)] = w
}

func (t *Txn) write(ctx context.Context, ks adapters.Keyspace, key, val []byte, del bool, cond cache.Cond) (bool, error) {
	t.mu.Lock()
	defer t.end()
	if err := t.begin(true); err != nil {
		return false, err
	}
	if r, done, err := t.remoteFirst(ctx, Op{Kind: writeOp(del, cond), Keyspace: ks, Key: key, Value: val}); done || err != nil {
		return r.Exists, err
	}
	if err := t.ready(ctx, ks); err != nil {
		return false, err
	}
	t.e.buf.OpenKeyspace(ks)
	obs.Touch(ctx, string(ks))
	if err := t.e.buf.ValidateWrite(ks, key, val); err != nil {
		return false, err
	}
	if t.e.wal != nil {
		if err := t.e.wal.Err(); err != nil {
			// The log cannot make a commit durable: refuse writes
			// now rather than at commit; reads go on.
			return false, fmt.Errorf("%w: %w", ErrCommitLog, err)
		}
	}
	if len(t.writes) == 0 {
		// The first write waits for write-back to keep up, so dirty data
		// stays bounded (and with it the flush a shutdown owes).
		if err := t.e.buf.Throttle(ctx, t.e.opts.DirtyWait); err != nil {
			return false, err
		}
	}
	if err := t.holdLease(ctx, ks); err != nil {
		return false, err
	}
	if cond == cache.Always && !del {
		// An upsert needs no knowledge of the key: lock it blind.
		if _, ok := t.pending(ks, key); !ok {
			if err := t.blindLock(ctx, ks, key); err != nil {
				return false, err
			}
		}
		t.put(ks, cache.Write{Key: key, Value: val})
		return false, nil
	}
	exists, err := t.writeLock(ctx, ks, key)
	if err != nil {
		return false, err
	}
	if dep := t.e.dependKey(ks, key); dep != 0 {
		t.depend(dep)
		if (cond == cache.MustNotExist) == exists {
			// The refusal below is a result read from a commit not
			// yet durable: it waits for that commit.
			if err := t.e.awaitDurable(ctx, dep); err != nil {
				return exists, err
			}
		}
	}
	switch {
	case cond == cache.MustNotExist && exists:
		return exists, fmt.Errorf("%w: %q", ErrExists, key)
	case cond == cache.MustExist && !exists:
		return exists, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	t.put(ks, cache.Write{Key: key, Value: val, Delete: del})
	return exists, nil
}

// writeOp is the remote operation of a write.
func writeOp(del bool, cond cache.Cond) OpKind {
	switch {
	case del:
		return OpDelete
	case cond == cache.MustNotExist:
		return OpInsert
	case cond == cache.MustExist:
		return OpUpdate
	}
	return OpUpsert
}

// Insert writes key; ErrExists if it exists.
func (t *Txn) Insert(ctx context.Context, ks adapters.Keyspace, key, val []byte) error {
	_, err := t.write(ctx, ks, key, val, false, cache.MustNotExist)
	return err
}

// Update writes key; ErrNotFound if it does not exist.
func (t *Txn) Update(ctx context.Context, ks adapters.Keyspace, key, val []byte) error {
	_, err := t.write(ctx, ks, key, val, false, cache.MustExist)
	return err
}

// Upsert writes key whatever its state.
func (t *Txn) Upsert(ctx context.Context, ks adapters.Keyspace, key, val []byte) error {
	_, err := t.write(ctx, ks, key, val, false, cache.Always)
	return err
}

// Delete removes key and reports whether it existed.
func (t *Txn) Delete(ctx context.Context, ks adapters.Keyspace, key []byte) (bool, error) {
	return t.write(ctx, ks, key, nil, true, cache.Always)
}
