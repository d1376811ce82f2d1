package txn

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/obs"
	"github.com/nemocache/nemo/wal"
)

// ChangeOp says what a Change does.
type ChangeOp uint8

// The change operations. A transaction's changes are ordered: keyspace
// creates, then puts and deletes (by keyspace, then key), then keyspace
// drops.
const (
	// ChangePut writes Value under Key.
	ChangePut ChangeOp = iota
	// ChangeDelete deletes Key.
	ChangeDelete
	// ChangeCreateKeyspace creates Keyspace in the store (no key).
	ChangeCreateKeyspace
	// ChangeDropKeyspace deletes Keyspace and every record of it, in the
	// buffer and in the store (no key).
	ChangeDropKeyspace
	// ChangeCheck writes nothing: writing through, the commit applies
	// only if the store still holds, for Key, what the transaction read
	// there (Expect). It is never logged.
	ChangeCheck
)

// keyed reports whether op is a change of one key (put, delete, check).
func (op ChangeOp) keyed() bool {
	return op == ChangePut || op == ChangeDelete || op == ChangeCheck
}

// Change is one write of a committed transaction, as the commit log sees it.
type Change struct {
	Op       ChangeOp
	Keyspace adapters.Keyspace
	Key      []byte
	Value    []byte
	// Expect (puts and deletes) is what the transaction knew the store to
	// hold before the write: see cache.Write.Expect. Writing back with a
	// commit log, Commit fills it, when the caller left it ExpectAny, with
	// the base of the key's buffered record (cache.Buffer.Bases) before
	// the log append, so that replay restores the base.
	Expect adapters.Expect
	// Range (checks) makes a check cover [Key, Range.End): a range the
	// transaction read, and the keys and versions it found there.
	Range *adapters.RangeCheck
	// Prior (logged puts and deletes; 0: none) is a hash of the value the
	// key's record still held unwritten at commit (cache.Buffer.Bases).
	Prior uint64
}

// CommitLog makes a commit durable before it is applied: Append returns
// only once the changes would survive a crash. The WAL implements it.
type CommitLog interface {
	Append(ctx context.Context, txnID uint64, changes []Change) error
}

// Engine runs transactions over a buffer.
type Engine struct {
	buf  *cache.Buffer
	opts Options
	pcl  *pclTable

	nextID atomic.Uint64
	mu     sync.Mutex
	live   map[uint64]*Txn
	closed bool
	idle   sync.Cond // signalled when live shrinks

	// applyMu is held shared by a commit from its log append until its
	// writes are in the buffer, and exclusively by a checkpoint to read an
	// LSN below which everything is applied.
	applyMu sync.RWMutex
	wal     *wal.Log
	klogs   *klogs // Options.Logs (klog.go)
	// recovering counts the recoveries of keyspace logs running
	// (Recover).
	recovering sync.WaitGroup
	ckpt       checkpointer // when checkpoints run (durable.go)
	draining   atomic.Bool
	drainOnce  sync.Once
	drainErr   error

	waits   waitGraph
	handles handles
	resetMu sync.Mutex // one Reset at a time (reset.go)
	// elog is the commit log under early lock release (Options.
	// EarlyRelease with a WAL), nil otherwise; pend tracks the writes of
	// commits not yet durable (early.go).
	elog  earlyLog
	pend  pendingWrites
	snaps *snapshots // read-only transactions' snapshots; nil under coherence shared

	// wb drives write-back (writeback.go).
	wb *writeBacker

	stats engineStats
	// writeBacksUnlogged says the WAL refused the last write-back log
	// (logWriteBack).
	writeBacksUnlogged atomic.Bool
	stop               chan struct{}
	// bg is the context of the engine's own store calls (checkpoints),
	// cancelled when a drain or Close stops them.
	bg       context.Context
	bgCancel context.CancelFunc
	wg       sync.WaitGroup
}

type engineStats struct {
	commits, aborts, conflicts, idleAborts atomic.Uint64
	lockWaits, deadlocks, lockTimeouts     atomic.Uint64
	// lockHold: a read-write transaction's first lock to release;
	// lockWait: one lock request's wait for conflicting holders; commit:
	// a read-write transaction's commit.
	lockHold, lockWait, commit *obs.Histogram
	lateImageFetches           atomic.Uint64
}

// Stats is a snapshot of engine counters.
type Stats struct {
	Live, Commits, Aborts, Conflicts, IdleAborts uint64
	// LockWaits counts waits for a conflicting lock; Deadlocks the
	// requests refused because waiting would have closed a cycle;
	// LockTimeouts the waits that ran out of Options.LockWait.
	LockWaits, Deadlocks, LockTimeouts uint64
	// LockHold is the total time read-write transactions held locks, from
	// their first lock to release; LockWait the total time spent waiting
	// for locks; CommitTime the total commit latency.
	LockHold, LockWait, CommitTime time.Duration
	// LockHolds, LockWaitTimes and Commits are those times' histograms:
	// per read-write transaction, per lock request that waited, per
	// commit of a read-write transaction.
	LockHolds, LockWaitTimes, CommitTimes obs.HistogramSnapshot
	// Snapshots is the number of read-only transactions reading from a
	// snapshot now, SnapshotBytes what the versions kept for them hold,
	// and SnapshotsExpired the snapshots given up to bound those bytes.
	Snapshots, SnapshotBytes, SnapshotsExpired uint64
	// LateImageFetches counts the before-images read from the store under
	// the apply lock: a key a commit wrote blind, not in the buffer, when
	// a snapshot opened while the commit was being logged (snapshot.go).
	LateImageFetches uint64
}

// New returns an engine over buf.
func New(buf *cache.Buffer, opts Options) (*Engine, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{buf: buf, opts: opts, live: map[uint64]*Txn{}, stop: make(chan struct{})}
	e.stats.lockHold, e.stats.lockWait, e.stats.commit = obs.NewDurationHistogram(), obs.NewDurationHistogram(), obs.NewDurationHistogram()
	e.bg, e.bgCancel = context.WithCancel(context.Background())
	e.wb = newWriteBacker(e)
	e.handles.ttl = buf.Options().MaxStaleness
	e.idle.L = &e.mu
	if opts.Coherence == Exclusive {
		e.snaps = newSnapshots(uint64(opts.SnapshotBytes))
	}
	if opts.Phantom == PCL {
		e.pcl = newPCL(opts.PCLPartitionSize)
	}
	if opts.WAL != nil && opts.Mode == WriteBack {
		// Nothing is written back from a half-replayed buffer (its log
		// of what the store confirmed would wait for the replay).
		release := e.wb.holdAll()
		defer release()
		if err := e.openWAL(); err != nil {
			return nil, err
		}
		e.wg.Add(1)
		go e.checkpointLoop()
	}
	if opts.Logs != nil {
		e.klogs = &klogs{src: opts.Logs, m: map[adapters.Keyspace]*klog{}, handing: map[adapters.Keyspace]bool{}, users: map[adapters.Keyspace]int{}}
		e.opts.Log = klogCommitLog{e}
		e.ckpt.init(false)
		e.wg.Add(1)
		go e.checkpointLoop()
	}
	if el, ok := e.opts.Log.(earlyLog); ok && opts.EarlyRelease && opts.Mode == WriteBack {
		e.elog = el
	}
	// The lease, the barrier (elog) and the log are set: write-back may
	// start (it waits for the replay's hold).
	e.wb.start()
	e.wg.Add(1)
	go e.reaper()
	return e, nil
}

// Stats returns a snapshot.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	n := len(e.live)
	e.mu.Unlock()
	st := Stats{
		Live: uint64(n), Commits: e.stats.commits.Load(), Aborts: e.stats.aborts.Load(),
		Conflicts: e.stats.conflicts.Load(), IdleAborts: e.stats.idleAborts.Load(),
		LockWaits: e.stats.lockWaits.Load(), Deadlocks: e.stats.deadlocks.Load(), LockTimeouts: e.stats.lockTimeouts.Load(),
		LockHolds: e.stats.lockHold.Snapshot(), LockWaitTimes: e.stats.lockWait.Snapshot(), CommitTimes: e.stats.commit.Snapshot(),
	}
	st.LockHold, st.LockWait, st.CommitTime = time.Duration(st.LockHolds.Raw), time.Duration(st.LockWaitTimes.Raw), time.Duration(st.CommitTimes.Raw)
	if e.snaps != nil {
		st.Snapshots, st.SnapshotBytes, st.SnapshotsExpired = e.snaps.stats()
		st.LateImageFetches = e.stats.lateImageFetches.Load()
	}
	return st
}

// Begin starts a transaction. A read-only one commits without touching the
// log and takes no locks: under coherence exclusive it reads a snapshot of
// the committed state as of its start, under coherence shared each read is
// the latest state (snapshot.go).
func (e *Engine) Begin(readOnly bool) (*Txn, error) {
	id := e.nextID.Add(1)
	t := &Txn{e: e, id: id, owner: &cache.Owner{ID: id}, readOnly: readOnly, snapshot: readOnly}
	t.touch()
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	e.live[id] = t
	e.mu.Unlock()
	if t.snapshot && e.snaps != nil {
		t.seq = e.snaps.begin(id)
	}
	return t, nil
}

// BeginAt begins a read-only transaction whose reads see the store as it
// was at at (Datastore's read_time). Under coherence shared they are made
// in the store's own snapshot of that moment (cache.Buffer.SnapshotAt),
// past the buffer, which holds only the latest state, and nothing they
// read enters it. A store that keeps no past (the embedded store, Azure
// Table) is read as Begin(true) reads it: its latest state, as the legacy
// Datastore emulator answers such a read. Under coherence exclusive in
// front of a store that keeps its past it fails with ErrPastRead.
func (e *Engine) BeginAt(at time.Time) (*Txn, error) {
	snap, err := e.buf.SnapshotAt(at)
	if errors.Is(err, errors.ErrUnsupported) {
		return e.Begin(true)
	}
	if err != nil {
		return nil, err
	}
	if e.opts.Coherence != Shared {
		snap.Close()
		return nil, ErrPastRead
	}
	t, err := e.Begin(true)
	if err != nil {
		snap.Close()
		return nil, err
	}
	t.snap = snap
	return t, nil
}

func (e *Engine) forget(t *Txn) {
	e.mu.Lock()
	delete(e.live, t.id)
	e.idle.Broadcast()
	e.mu.Unlock()
}

// reaper aborts transactions idle past the idle timeout.
func (e *Engine) reaper() {
	defer e.wg.Done()
	tick := time.NewTicker(max(e.opts.IdleTimeout/4, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-tick.C:
		}
		cutoff := time.Now().Add(-e.opts.IdleTimeout).UnixNano()
		e.mu.Lock()
		var stale []*Txn
		for _, t := range e.live {
			if t.lastUse.Load() < cutoff {
				stale = append(stale, t)
			}
		}
		e.mu.Unlock()
		for _, t := range stale {
			if t.mu.TryLock() { // busy transactions are not idle
				if t.lastUse.Load() < cutoff && t.state == active {
					e.stats.idleAborts.Add(1)
					t.abortLocked(ErrIdleTimeout)
				}
				t.mu.Unlock()
			}
		}
	}
}

// Close stops admitting transactions, aborts the live ones and stops the
// engine's goroutines. The buffer is not closed.
func (e *Engine) Close() error {
	// No early return when already closed: StopAdmitting also sets closed,
	// and Close after it must still stop the goroutines (drainOnce makes a
	// second Close a no-op).
	e.mu.Lock()
	e.closed = true
	live := make([]*Txn, 0, len(e.live))
	for _, t := range e.live {
		live = append(live, t)
	}
	e.mu.Unlock()
	for _, t := range live {
		t.Abort()
	}
	e.drainOnce.Do(func() {
		e.stopWorkers()
		e.wb.stopWorkers(context.Background())
		if e.wal != nil {
			e.drainErr = e.wal.Close()
		}
	})
	return nil
}

// stopWorkers stops the reaper and the checkpoint loop, cancelling a
// checkpoint in flight (drainOnce runs it once).
func (e *Engine) stopWorkers() {
	e.bgCancel()
	close(e.stop)
	e.wg.Wait()
}

// StopAdmitting refuses new transactions and waits until the live ones
// finish or ctx ends, then aborts whatever is left. It is the first step of
// a drain.
func (e *Engine) StopAdmitting(ctx context.Context) {
	e.mu.Lock()
	e.closed = true
	done := make(chan struct{})
	go func() {
		e.mu.Lock()
		for len(e.live) > 0 && ctx.Err() == nil {
			e.idle.Wait()
		}
		e.mu.Unlock()
		close(done)
	}()
	e.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		e.mu.Lock()
		live := make([]*Txn, 0, len(e.live))
		for _, t := range e.live {
			live = append(live, t)
		}
		e.idle.Broadcast()
		e.mu.Unlock()
		for _, t := range live {
			t.Abort()
		}
		<-done
	}
}

// --- single-operation API: one-operation transactions ---

// ReadMode says how a read outside a transaction is isolated.
type ReadMode uint8

const (
	// ReadLatest reads the latest committed state without locks: it never
	// waits for or conflicts with a transaction, is linearizable per key
	// (a read sees every write acknowledged before it began), and one call
	// sees a commit's writes to a keyspace all or not at all. Two calls
	// may see different commits. Both frontends use it for reads outside
	// a transaction, as the services' own non-transactional reads behave.
	ReadLatest ReadMode = iota
	// ReadSerializable reads in a one-operation read-only transaction: S
	// locks on the key or on the whole range and its gaps (no phantoms).
	// It fails with ErrConflict (after retries) while a writer holds a
	// conflicting lock.
	ReadSerializable
)

// Get reads one key in mode m.
func (e *Engine) Get(ctx context.Context, ks adapters.Keyspace, key []byte, m ReadMode) (val []byte, ok bool, err error) {
	if m == ReadSerializable {
		err = e.run(ctx, true, func(t *Txn) error {
			val, ok, err = t.Get(ctx, ks, key)
			return err
		})
		return val, ok, err
	}
	if err := e.readyToRead(ctx, ks); err != nil {
		return nil, false, err
	}
	e.buf.OpenKeyspace(ks)
	val, ok, err = e.buf.Get(ctx, ks, key)
	if err == nil {
		err = e.awaitDurable(ctx, e.dependKey(ks, key))
	}
	if err != nil {
		return nil, false, err
	}
	return val, ok, nil
}

// Scan reads [start, end) (end nil: unbounded) in mode m, at most limit
// records when limit > 0; next, when non-nil, is where to continue.
func (e *Engine) Scan(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int, m ReadMode) (recs []adapters.Record, next []byte, err error) {
	if m == ReadSerializable {
		err = e.run(ctx, true, func(t *Txn) error {
			recs, next, err = t.Scan(ctx, ks, start, end, limit)
			return err
		})
		return recs, next, err
	}
	if err := e.readyToRead(ctx, ks); err != nil {
		return nil, nil, err
	}
	e.buf.OpenKeyspace(ks)
	recs, next, err = e.buf.Scan(ctx, ks, start, end, limit)
	if err == nil {
		err = e.awaitDurable(ctx, e.dependSpan(ks, start, stopAt(end, next)))
	}
	if err != nil {
		return nil, nil, err
	}
	return recs, next, nil
}

// readyToRead makes ks ready for a read outside a transaction: as for any
// operation (ksReady), except under coherence partitioned for a keyspace
// another node owns or none holds (forward.go), which the buffer answers
// under its staleness bound without taking the lease.
func (e *Engine) readyToRead(ctx context.Context, ks adapters.Keyspace) error {
	if rt := e.opts.Router; rt != nil {
		r, err := rt.Route(ctx, ks)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrLeaseUnavailable, err)
		}
		if r.Leased && !r.Held && !r.Orphaned {
			// Another node's (or nobody's): the bound applies.
			e.buf.SetExact(ks, false)
			return nil
		}
		if e.handingOver(ks) {
			return nil
		}
	}
	_, err := e.ksReady(ctx, ks)
	return err
}

// stopAt is where a scan of a range ending at end stopped looking: next
// when it stopped early, else end (nil: unbounded).
func stopAt(end, next []byte) []byte {
	if next != nil {
		return next
	}
	return end
}

// Insert writes key only if it does not exist (ErrExists).
func (e *Engine) Insert(ctx context.Context, ks adapters.Keyspace, key, val []byte) error {
	return e.run(ctx, false, func(t *Txn) error { return t.Insert(ctx, ks, key, val) })
}

// Update writes key only if it exists (ErrNotFound).
func (e *Engine) Update(ctx context.Context, ks adapters.Keyspace, key, val []byte) error {
	return e.run(ctx, false, func(t *Txn) error { return t.Update(ctx, ks, key, val) })
}

// Upsert writes key whatever its state.
func (e *Engine) Upsert(ctx context.Context, ks adapters.Keyspace, key, val []byte) error {
	return e.run(ctx, false, func(t *Txn) error { return t.Upsert(ctx, ks, key, val) })
}

// Delete removes key and reports whether it existed.
func (e *Engine) Delete(ctx context.Context, ks adapters.Keyspace, key []byte) (existed bool, err error) {
	err = e.run(ctx, false, func(t *Txn) error {
		existed, err = t.Delete(ctx, ks, key)
		return err
	})
	return existed, err
}

// Run executes fn in a transaction and commits it, retrying the whole
// transaction on conflicts (Options.Retries times, and then on until
// Options.RetryWait has passed, with jittered backoff), except a lock wait
// that ran out of Options.LockWait, which has waited long enough. fn's
// other errors abort and are returned as they are.
func (e *Engine) Run(ctx context.Context, readOnly bool, fn func(*Txn) error) error {
	return e.run(ctx, readOnly, fn)
}

func (e *Engine) run(ctx context.Context, readOnly bool, fn func(*Txn) error) error {
	backoff := 100 * time.Microsecond
	start := time.Now()
	for attempt := 0; ; attempt++ {
		t, err := e.Begin(readOnly)
		if err != nil {
			return err
		}
		err = fn(t)
		if err == nil {
			err = t.Commit(ctx)
		} else {
			t.Abort()
		}
		if err == nil || !errors.Is(err, ErrConflict) || errors.Is(err, errLockTimeout) {
			return err
		}
		if attempt >= e.opts.Retries && time.Since(start) >= e.opts.RetryWait {
			return err
		}
		d := backoff/2 + rand.N(backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
		backoff = min(2*backoff, 20*time.Millisecond)
	}
}
