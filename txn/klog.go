package txn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/deadline"
	"github.com/nemocache/nemo/txn/logrec"
)

// Commit logs kept in the backend (Options.Logs, config wal.location
// backend): in coherence exclusive, each keyspace's commits go to a log of
// its own in the store itself, next to its lease and fenced by the lease's
// epoch (package txn/blog), instead of to the local WAL. A node whose disk
// is gone (an emptyDir, a new pod with a new node id) loses no
// acknowledged write: the next holder of the lease replays the log before
// it answers anything of the keyspace.
//
// The rules:
//   - Every operation on a keyspace first makes it ready (ksReady): the
//     lease held (acquired on first use), the log opened at the lease's
//     epoch (which fences out every earlier holder's appends) and what it
//     holds replayed into the buffer as dirty records, once per epoch.
//     Until then the keyspace answers nothing, reads included: the store
//     may lack what the last holder acknowledged. A node whose lease
//     passed to another node and came back at a new epoch forgets what it
//     knew of the keyspace (cache.Buffer.ForgetKeyspace) and replays again.
//   - A commit is durable when its keyspace's log has it (KeyspaceLog.Append,
//     group-committed by the log). A transaction writes one keyspace with a
//     log (the log of one keyspace cannot take another's commit
//     atomically); keyspaces without one (a catalog, whose store side runs
//     before the commit) are not logged.
//   - A checkpoint of a keyspace reads, under applyMu exclusive, the last
//     seq appended (every commit up to it is installed), flushes the
//     keyspace and truncates its log below the next seq. A keyspace whose
//     lease another node has taken meanwhile is forgotten first
//     (forgetTaken): its log, which that node replays, has what this node
//     did not write back.

// KeyspaceLogs opens the commit log of a keyspace kept in the backend. The
// node wires it from txn/blog and the lease manager.
type KeyspaceLogs interface {
	// Open fences ks's log for this node, which holds ks's lease at
	// epoch, and returns it with the entries it holds, in seq order, to
	// replay. A nil log says ks has none (its writes need no log).
	Open(ctx context.Context, ks adapters.Keyspace, epoch uint64) (KeyspaceLog, []LogEntry, error)
	// Epoch is the epoch of the lease this node holds on ks (valid or
	// lapsed), 0 when it holds none.
	Epoch(ks adapters.Keyspace) uint64
}

// KeyspaceLog is one keyspace's log, as its holder writes it.
type KeyspaceLog interface {
	// Append makes data durable as the log's next entry and returns its
	// seq.
	Append(ctx context.Context, data []byte) (uint64, error)
	// Truncate deletes the entries below seq.
	Truncate(ctx context.Context, below uint64) error
	// SetPending tells the log how many appends to expect soon, so that
	// a group commit waits briefly for them (blog.Log.SetPending): the
	// engine counts the transactions that touched the keyspace.
	SetPending(pending func() int)
	// Err is the log's lasting failure, if any: a write left unsettled
	// (or refused by a later owner's fence). The log is opened again
	// before the keyspace's next operation.
	Err() error
}

// LogEntry is one entry of a keyspace's log.
type LogEntry struct {
	Seq  uint64
	Data []byte
}

// ErrOneKeyspace: a transaction wrote several keyspaces whose commit logs
// are kept in the backend, one each, where no single one can take the
// commit atomically.
var ErrOneKeyspace = errors.New("txn: with commit logs kept in the backend (wal.location backend) a transaction writes one table or namespace")

// openTimeout bounds the opening of a keyspace's log and its replay.
const openTimeout = 2 * time.Minute

// klogs are the engine's keyspace logs.
type klogs struct {
	src KeyspaceLogs
	mu  sync.Mutex // guards m, handing and users; a leaf
	m   map[adapters.Keyspace]*klog
	// handing are the keyspaces being handed over; users counts the live
	// transactions that touched each keyspace (handover.go).
	handing map[adapters.Keyspace]bool
	users   map[adapters.Keyspace]int
}

// klog is one keyspace's log at one epoch of this node's lease.
type klog struct {
	ks    adapters.Keyspace
	epoch uint64
	ready chan struct{} // closed once opened and replayed, or failed
	// Set before ready is closed, read after.
	log KeyspaceLog // nil: the keyspace has no log
	err error

	last     atomic.Uint64 // the last seq appended or replayed
	appended atomic.Int64  // bytes appended since the last truncate
	// truncated is the seq the log was last truncated below (guarded by
	// the engine's checkpoint semaphore).
	truncated uint64
}

// ksReady makes ks ready for an operation (see the rules above) and
// returns its log state; nil without keyspace logs.
func (e *Engine) ksReady(ctx context.Context, ks adapters.Keyspace) (*klog, error) {
	if e.klogs == nil {
		return nil, nil
	}
	if err := e.holdLease(ctx, ks); err != nil {
		return nil, err
	}
	epoch := e.klogs.src.Epoch(ks)
	e.klogs.mu.Lock()
	k := e.klogs.m[ks]
	open := k == nil || k.epoch != epoch || k.failed() || k.broken()
	var stale, first bool
	var after uint64 // entries the buffer holds already
	if open {
		// Under coherence partitioned what the buffer knew of a keyspace
		// it did not hold was another owner's state, read under the
		// staleness bound (forward.go): forgotten too.
		first = k == nil && e.opts.Router != nil
		stale = k != nil && k.epoch != epoch || first
		if k != nil && !stale && k.err == nil {
			after = k.last.Load() // a broken log, opened again
		}
		k = &klog{ks: ks, epoch: epoch, ready: make(chan struct{})}
		k.last.Store(after)
		e.klogs.m[ks] = k
	}
	e.klogs.mu.Unlock()
	if open {
		e.openLog(ctx, k, stale, first, after)
	}
	select {
	case <-k.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("txn: waiting for the commit log of %q to be replayed: %w", ks, ctx.Err())
	}
	if k.err != nil {
		return nil, k.err
	}
	return k, nil
}

// broken reports whether k's log, opened, has failed for good (Err): the
// next operation opens it again, at the same epoch, and replays only the
// entries past the last one the buffer holds (a commit whose append was
// left unknown), without forgetting the keyspace.
func (k *klog) broken() bool {
	select {
	case <-k.ready:
		return k.err == nil && k.log != nil && k.log.Err() != nil
	default:
		return false
	}
}

// failed reports whether k's open failed (its ready closed with an error):
// the next operation opens it again.
func (k *klog) failed() bool {
	select {
	case <-k.ready:
		return k.err != nil
	default:
		return false
	}
}

// ready makes ks ready for one of t's operations (ksReady); t.mu is held.
func (t *Txn) ready(ctx context.Context, ks adapters.Keyspace) error {
	if t.e.opts.Router != nil {
		if err := t.use(ks); err != nil {
			return err
		}
	}
	_, err := t.e.ksReady(ctx, ks)
	return err
}

// holdLease checks that this node may act for ks (coherence exclusive
// with leases): writes, and with keyspace logs every operation.
func (e *Engine) holdLease(ctx context.Context, ks adapters.Keyspace) error {
	if e.opts.Leases == nil {
		return nil
	}
	err := e.opts.Leases.Hold(ctx, ks)
	if err != nil && !errors.Is(err, ErrNotLeaseHolder) {
		return fmt.Errorf("%w: %w", ErrLeaseUnavailable, err)
	}
	return err
}

// openLog opens k's log and replays into the buffer the entries past
// after, forgetting first what the buffer knew of the keyspace from an
// earlier epoch (stale), or, under coherence partitioned, read under the
// staleness bound before this node first held it (first); it closes
// k.ready. The caller's context bounds it
// only as far as openTimeout does: other operations wait on the same open.
func (e *Engine) openLog(ctx context.Context, k *klog, stale, first bool, after uint64) {
	defer close(k.ready)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), openTimeout)
	defer cancel()
	switch {
	case first:
		e.opts.Logger.Debug("taking a keyspace over: forgetting what this node read of it under the staleness bound", "keyspace", k.ks, "epoch", k.epoch)
		e.buf.ForgetKeyspace(k.ks)
	case stale:
		e.opts.Logger.Warn("keyspace held by another node since this node last held it: forgetting what this node knew of it and replaying its commit log",
			"keyspace", k.ks, "epoch", k.epoch)
		e.buf.ForgetKeyspace(k.ks)
	}
	began := time.Now()
	log, entries, err := e.klogs.src.Open(ctx, k.ks, k.epoch)
	if err != nil {
		k.err = fmt.Errorf("%w: open the commit log of %q: %w", ErrCommitLog, k.ks, err)
		return
	}
	for len(entries) > 0 && entries[0].Seq <= after {
		entries = entries[1:]
	}
	if err := e.replayLog(ctx, k, entries); err != nil {
		k.err = fmt.Errorf("%w: replay the commit log of %q: %w", ErrCommitLog, k.ks, err)
		return
	}
	k.log = log
	if log != nil {
		kl, ks := e.klogs, k.ks
		log.SetPending(func() int {
			kl.mu.Lock()
			defer kl.mu.Unlock()
			return kl.users[ks]
		})
	}
	if e.opts.Router != nil {
		// This node owns ks now, its only writer: what its buffer
		// knows of it holds without a bound.
		e.buf.SetExact(k.ks, true)
	}
	if len(entries) > 0 {
		e.opts.Logger.Info("commit log replayed", "keyspace", k.ks, "epoch", k.epoch, "entries", len(entries),
			"last_seq", k.last.Load(), "took", time.Since(began))
		e.ckpt.poke() // write the replayed records back and truncate
	}
}

// replayLog installs entries, as their commits did (installReplay), under
// applyMu shared, so that a checkpoint reading k.last sees them
// installed.
func (e *Engine) replayLog(ctx context.Context, k *klog, entries []LogEntry) error {
	e.applyMu.RLock()
	defer e.applyMu.RUnlock()
	for _, en := range entries {
		txnID, recs, err := logrec.DecodeEntry(en.Data)
		if err != nil {
			return fmt.Errorf("entry %d: %w", en.Seq, err)
		}
		changes, err := recordChanges(txnID, recs)
		if err != nil {
			return err
		}
		if err := e.install(ctx, changes, installReplay); err != nil {
			return fmt.Errorf("entry %d (txn %d): %w", en.Seq, txnID, err)
		}
		k.last.Store(max(k.last.Load(), en.Seq))
		k.appended.Add(int64(len(en.Data)))
	}
	return nil
}

// recordChanges are a logged commit's records as changes.
func recordChanges(txnID uint64, recs []logrec.Record) ([]Change, error) {
	changes := make([]Change, len(recs))
	for i, r := range recs {
		op, ok := changeOps[r.Type]
		if !ok {
			return nil, fmt.Errorf("txn %d: unexpected %s record", txnID, r.Type)
		}
		changes[i] = Change{Op: op, Keyspace: adapters.Keyspace(r.Keyspace), Key: r.Key, Value: r.Value, Expect: changeExpect(r), Prior: r.Prior}
	}
	return changes, nil
}

// klogCommitLog is the CommitLog over keyspace logs: a commit goes to the
// log of the one keyspace it writes.
type klogCommitLog struct{ e *Engine }

func (l klogCommitLog) Append(ctx context.Context, txnID uint64, changes []Change) error {
	e := l.e
	var k *klog
	var mine []Change
	for _, c := range changes {
		ck := e.klogOf(c.Keyspace)
		switch {
		case ck == nil:
			return fmt.Errorf("%w: keyspace %q has no open commit log", ErrLeaseUnavailable, c.Keyspace)
		case ck.log == nil:
			continue // no log: a catalog
		case k != nil && ck != k:
			return fmt.Errorf("%w: %q and %q", ErrOneKeyspace, k.ks, c.Keyspace)
		}
		k = ck
		mine = append(mine, c)
	}
	if k == nil {
		return nil
	}
	if e.klogs.src.Epoch(k.ks) != k.epoch {
		// The lease passed to another node and back since the
		// transaction read: what it read may be stale.
		return fmt.Errorf("%w: the lease of %q changed hands during the transaction", ErrConflict, k.ks)
	}
	data, err := logrec.EncodeEntry(txnID, logRecords(mine))
	if err != nil {
		return err
	}
	// Once sent, the append runs on past the frontend's own deadline:
	// cut off there, its outcome would be unknown (internal/deadline).
	ctx, sent := deadline.Write(ctx)
	defer sent()
	seq, err := k.log.Append(ctx, data)
	if err != nil {
		return err
	}
	for {
		last := k.last.Load()
		if seq <= last || k.last.CompareAndSwap(last, seq) {
			break
		}
	}
	if k.appended.Add(int64(len(data))) >= e.opts.CheckpointBytes {
		e.ckpt.poke()
	}
	return nil
}

// klogOf is ks's current log state, nil when none is open and ready.
func (e *Engine) klogOf(ks adapters.Keyspace) *klog {
	e.klogs.mu.Lock()
	k := e.klogs.m[ks]
	e.klogs.mu.Unlock()
	if k == nil {
		return nil
	}
	select {
	case <-k.ready:
		if k.err != nil {
			return nil
		}
		return k
	default:
		return nil
	}
}

// checkpointLogs is a checkpoint with keyspace logs: the last seq
// appended to each log is read under applyMu exclusive (every commit up to
// it installed), every dirty record is flushed, and each log is truncated
// below the next seq. The caller holds the checkpoint semaphore.
func (e *Engine) checkpointLogs(ctx context.Context) error {
	type mark struct {
		k           *klog
		last, bytes uint64
	}
	var marks []mark
	e.klogs.mu.Lock()
	ks := make([]*klog, 0, len(e.klogs.m))
	for _, k := range e.klogs.m {
		ks = append(ks, k)
	}
	e.klogs.mu.Unlock()
	e.forgetTaken(ctx, ks)
	e.applyMu.Lock()
	for _, k := range ks {
		if e.klogOf(k.ks) != k || k.log == nil {
			continue
		}
		if last := k.last.Load(); last != 0 && last >= k.truncated {
			marks = append(marks, mark{k, last, uint64(k.appended.Load())})
		}
	}
	e.applyMu.Unlock()
	if err := e.Flush(ctx); err != nil {
		return fmt.Errorf("txn: checkpoint flush: %w", err)
	}
	var errs []error
	for _, m := range marks {
		if err := m.k.log.Truncate(ctx, m.last+1); err != nil {
			errs = append(errs, fmt.Errorf("txn: truncate the commit log of %q below %d: %w", m.k.ks, m.last+1, err))
			continue
		}
		m.k.truncated = m.last + 1
		m.k.appended.Add(-int64(m.bytes))
	}
	return errors.Join(errs...)
}

// forgetTaken forgets each of ks whose lease another node has taken since
// this node opened its log (Hold: ErrNotLeaseHolder), as a hand-over
// would, but without writing back or truncating: this node may do
// neither any more (the lease gates both), and need not. Its log holds
// every commit this node acknowledged and did not write back, and the
// new holder replays it before it answers anything of the keyspace (its
// fence shuts this node's log out). Kept dirty, those records would wait
// for a write-back that never comes: a checkpoint, and so a drain, would
// fail on them until its time ran out and report them unflushed (exit 3)
// although nothing is lost.
func (e *Engine) forgetTaken(ctx context.Context, ks []*klog) {
	for _, k := range ks {
		if e.klogOf(k.ks) != k || k.log == nil {
			continue
		}
		err := e.opts.Leases.Hold(ctx, k.ks)
		if !errors.Is(err, ErrNotLeaseHolder) {
			continue
		}
		// Under applyMu exclusive (commits hold it shared from their
		// append to their install): a commit appended before the new
		// holder's fence has installed before the keyspace is
		// forgotten; a later one finds no log and fails.
		e.applyMu.Lock()
		e.klogs.mu.Lock()
		mine := e.klogs.m[k.ks] == k
		if mine {
			delete(e.klogs.m, k.ks)
		}
		e.klogs.mu.Unlock()
		e.applyMu.Unlock()
		if !mine {
			continue
		}
		u := e.buf.Unflushed().Keyspaces[k.ks]
		e.buf.ForgetKeyspace(k.ks)
		if e.opts.Router != nil {
			e.buf.SetExact(k.ks, false)
			e.opts.Router.Invalidate(k.ks)
		}
		e.opts.Logger.Warn("keyspace taken over by another node: its commit log, which the new holder replays, keeps what this node did not write back; forgetting it",
			"keyspace", k.ks, "epoch", k.epoch, "dirty_records", u, "holder", err)
	}
}

// klogCheckpointDue says why a checkpoint of the keyspace logs should run
// now, or "": one log holds CheckpointBytes since its last truncate, or
// replayed entries wait for their first.
func (e *Engine) klogCheckpointDue() string {
	e.klogs.mu.Lock()
	defer e.klogs.mu.Unlock()
	for _, k := range e.klogs.m {
		if k.appended.Load() >= e.opts.CheckpointBytes {
			return "log size"
		}
	}
	return ""
}

// checkpointKlogs is Checkpoint with keyspace logs (checkpointLogs under
// the checkpoint semaphore); with ifClean it does nothing.
func (e *Engine) checkpointKlogs(ctx context.Context, ifClean bool) error {
	if ifClean {
		return nil
	}
	select {
	case e.ckpt.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("txn: checkpoint: waiting for the running one: %w", ctx.Err())
	}
	defer func() { <-e.ckpt.sem }()
	if err := e.buf.SettleKeyspaces(ctx); err != nil {
		return err
	}
	return e.checkpointLogs(ctx)
}

// recoverRetry bounds the wait between two attempts of a recovery: the
// lease of a dead holder passes once it has stayed unrenewed for its TTL.
const recoverRetry = time.Second

// Recover makes each of kss ready in the background (its lease taken, its
// log replayed), retrying until it is or the engine stops: the keyspaces
// whose logs hold commits their last owners acknowledged and never wrote
// back (txn/blog Pending), perhaps owners that are gone, are recovered
// and written back without waiting for a client to touch them. A keyspace
// whose lease another node has held for heldFor since the first attempt
// is left to it: a dead holder's lease passes within its TTL, so a
// holder that keeps it longer is alive and writes its log back itself
// (the caller passes more than a TTL). A drain waits for the recoveries
// still running, within its time. Without keyspace logs it does nothing.
func (e *Engine) Recover(kss []adapters.Keyspace, heldFor time.Duration) {
	if e.klogs == nil {
		return
	}
	for _, ks := range kss {
		e.recovering.Add(1)
		go e.recoverKeyspace(ks, heldFor)
	}
}

// recoverKeyspace is Recover for one keyspace.
func (e *Engine) recoverKeyspace(ks adapters.Keyspace, heldFor time.Duration) {
	defer e.recovering.Done()
	var held time.Time // the first attempt that found another holder
	for {
		_, err := e.ksReady(e.bg, ks)
		switch {
		case err == nil:
			e.opts.Logger.Info("recovered the commit log a last holder left", "keyspace", ks)
			e.ckpt.poke()
			return
		case !errors.Is(err, ErrNotLeaseHolder):
		case held.IsZero():
			held = time.Now()
			e.opts.Logger.Info("recovering the commit log a last holder left: waiting for its lease", "keyspace", ks, "err", err)
		case time.Since(held) > heldFor:
			e.opts.Logger.Info("not recovering the commit log of a keyspace whose holder is alive (it keeps renewing its lease): that node writes it back", "keyspace", ks, "held_for", time.Since(held).Round(time.Millisecond), "err", err)
			return
		}
		select {
		case <-e.stop:
			return
		case <-e.bg.Done():
			return
		case <-time.After(recoverRetry):
		}
	}
}

// waitRecovered waits for the recoveries Recover started, until ctx ends.
func (e *Engine) waitRecovered(ctx context.Context) error {
	done := make(chan struct{})
	go func() { e.recovering.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("txn: the commit logs left by other holders are not all recovered: %w", ctx.Err())
	}
}
