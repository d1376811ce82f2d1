package txn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/deadline"
	"github.com/nemocache/nemo/internal/invariants"
	"github.com/nemocache/nemo/txn/logrec"
	"github.com/nemocache/nemo/wal"
)

// The commit pipeline: every read-write commit runs the same stages, in
// this order, each written once below (the diagram is in doc.go):
//
//	admit     the lease is held for every keyspace written; the changes
//	          are listed in commit order (a commit that writes nothing
//	          checks its reads instead, coherence shared)
//	sequence  each write's base is read from the buffer and the changes go
//	          to the commit log: durable when Append returns, or, released
//	          early, sequenced (an LSN, the fsync still to come) and their
//	          keys marked pending
//	install   in the buffer as dirty records (write-back), or in the store
//	          first and then the buffer as clean ones (write-through);
//	          replay installs through the same function
//	release   the locks go
//	durable   early release waits here for its fsync; every mode waits for
//	          the commits it read from
//	ack       counted, and Commit returns nil
//
// The modes only configure the stages (commitPlan): early release moves
// the fsync from sequence to durable, write-through moves the store write
// into install. sequence and install run under Engine.applyMu shared, so
// a checkpoint's LSN has every commit below it installed. A failure before
// release aborts the transaction; a failure at durable leaves the commit
// unacknowledged.
//
// Write-back, later, is not a commit stage: the engine's write-back
// driver (writeback.go) runs it, with the lease, the durable barrier
// (early release) and the write-back log as its own steps.

// commitPlan is how the engine's modes configure the stages for one
// commit.
type commitPlan struct {
	writes  bool // the commit writes (or creates or drops keyspaces)
	logged  bool // a commit log takes it (Options.Log)
	early   bool // its locks go before its fsync (Options.EarlyRelease; no keyspace operations)
	through bool // written to the store before it is acknowledged (WriteThrough)
}

// commitStage is how far a commit has come; stages only advance.
type commitStage uint8

const (
	stageAdmitted     commitStage = iota + 1 // lease held, changes listed (or reads checked)
	stageSequenced                           // in the log: durable, or sequenced under early release
	stageInstalled                           // in the buffer (and, writing through, the store)
	stageReleased                            // locks released
	stageDurable                             // the log holds it and every commit it read from
	stageAcknowledged                        // Commit returns nil
)

// commit is one commit going through the stages (t.mu held throughout).
type commit struct {
	t       *Txn
	plan    commitPlan
	start   time.Time
	stage   commitStage
	changes []Change
	seq     uint64       // its place in install order (snapshots)
	lsn     uint64       // early release: its commit LSN
	durable <-chan error // early release: the outcome of its fsync
	synced  bool         // the log (or the store, writing through) has it
	dep     uint64       // the highest LSN it read from (Txn.dep)
	pre     preImages    // its before-images, read before applyMu (snapshots)
}

// Commit makes the transaction's writes durable (commit log), applies them
// to the buffer as dirty records and releases every lock: the commit
// pipeline above. If the log append fails nothing is applied and the
// transaction is aborted.
func (t *Txn) Commit(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.begin(false); err != nil {
		return err
	}
	if t.remote != nil {
		return t.commitRemote(ctx)
	}
	e := t.e
	c := &commit{t: t, start: time.Now(), plan: commitPlan{
		writes:  len(t.writes) > 0 || len(t.ksOps) > 0,
		logged:  e.opts.Log != nil,
		early:   e.elog != nil && len(t.writes) > 0 && len(t.ksOps) == 0,
		through: e.opts.Mode == WriteThrough,
	}}
	if err := c.admit(ctx); err != nil {
		return c.abort(err)
	}
	if c.plan.writes {
		if err := c.sequenceAndInstall(ctx); err != nil {
			return c.abort(err)
		}
	}
	c.release()
	if err := c.waitDurable(ctx); err != nil {
		return err
	}
	c.acknowledge(ctx)
	return nil
}

// advance moves c to stage to, asserting (internal/invariants) the order
// of the stages and what each may assume: the locks are held until
// release, and nothing is acknowledged before the log has it.
func (c *commit) advance(to commitStage) {
	if invariants.Enabled {
		c.assertStage(to)
	}
	c.stage = to
}

func (c *commit) assertStage(to commitStage) {
	t := c.t
	if to <= c.stage {
		panic(invariants.Errorf("txn %d: commit stage %d after stage %d", t.id, to, c.stage))
	}
	if to <= stageInstalled && (t.state != active || t.owner.Released()) {
		panic(invariants.Errorf("txn %d: commit stage %d without its locks", t.id, to))
	}
	switch to {
	case stageReleased:
		if c.plan.writes && c.stage != stageInstalled {
			panic(invariants.Errorf("txn %d: locks released at stage %d, before the install", t.id, c.stage))
		}
		if c.plan.writes && c.plan.logged && !c.plan.early && !c.synced {
			panic(invariants.Errorf("txn %d: locks released before the log has the commit", t.id))
		}
	case stageAcknowledged:
		if c.stage != stageDurable || c.plan.writes && c.plan.logged && !c.synced {
			panic(invariants.Errorf("txn %d: acknowledged at stage %d, durable %v", t.id, c.stage, c.synced))
		}
		if w := t.e.wal; w != nil && max(c.lsn, c.dep) > 0 && max(c.lsn, c.dep) >= w.NextLSN() {
			panic(invariants.Errorf("txn %d: acknowledged with LSN %d (read from %d) not durable (next durable LSN %d)",
				t.id, c.lsn, c.dep, w.NextLSN()))
		}
	}
}

// admit: the lease is checked again just before the commit is logged, so
// a lease that lapsed while the transaction ran acknowledges nothing
// (Leaser.Hold keeps a margin for the log's fsync); the changes are
// listed. A commit that writes nothing checks its reads here (coherence
// shared: checkReads, below; shared.go says why).
func (c *commit) admit(ctx context.Context) error {
	t := c.t
	if !c.plan.writes {
		if err := t.checkReads(ctx); err != nil {
			return err
		}
		c.advance(stageAdmitted)
		return nil
	}
	for ks := range t.writes {
		if err := t.holdLease(ctx, ks); err != nil {
			return err
		}
	}
	c.changes = t.changes()
	c.advance(stageAdmitted)
	return nil
}

// checkReads is Commit for a transaction that writes nothing, under
// coherence shared: it checks that the store still holds what the
// transaction read (a read-write transaction's locking reads; a read-only
// one's reads when not all came from the store's snapshot), each keyspace
// in one atomic store call that writes nothing. A change since fails it
// with ErrConflict (cache.ErrChanged). Elsewhere it does nothing: the
// transaction's locks, or its snapshot, kept what it read.
func (t *Txn) checkReads(ctx context.Context) error {
	if t.e.opts.Coherence != Shared || t.readOnly && !t.recheck {
		return nil
	}
	changes := t.changes()
	if len(changes) == 0 {
		return nil
	}
	return t.e.install(ctx, changes, installThrough)
}

// sequenceAndInstall runs sequence and install under applyMu shared: no
// checkpoint reads its LSN between a commit's log append and its install.
func (c *commit) sequenceAndInstall(ctx context.Context) error {
	e := c.t.e
	// Before the lock: reading before-images may call the store.
	c.pre = e.snaps.preread(ctx, e, c.changes)
	e.applyMu.RLock()
	defer e.applyMu.RUnlock()
	if err := c.sequence(ctx); err != nil {
		return err
	}
	return c.install(ctx)
}

// sequence logs the commit. Each write's base is read under applyMu, as
// the install is, and logged with it, so that replay conditions its
// write-back as this commit's would be. Under early release the append
// returns once the commit has its LSN, and its keys become pending (with
// that LSN) before they are installed, so a reader that sees them finds
// them pending (early.go).
func (c *commit) sequence(ctx context.Context) error {
	e := c.t.e
	if !c.plan.logged {
		c.advance(stageSequenced)
		return nil
	}
	if !c.plan.through {
		e.fillBases(c.changes)
	}
	var err error
	if !deadline.Sending(ctx) {
		// The frontend answered at its own deadline already. Past this
		// mark it waits for the append's outcome instead: once in the
		// log, the commit is written whatever ctx says.
		err = context.DeadlineExceeded
	} else if c.plan.early {
		c.lsn, c.durable, err = e.elog.AppendEarly(ctx, c.t.id, c.changes)
	} else {
		err = e.opts.Log.Append(ctx, c.t.id, c.changes)
		c.synced = err == nil
	}
	e.logged(err)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCommitLog, err)
	}
	if c.plan.early {
		e.pend.add(c.changes, c.lsn)
	}
	c.advance(stageSequenced)
	return nil
}

// logged is the commit path's word to the checkpointer after an append:
// err is the append's outcome.
func (e *Engine) logged(err error) {
	if e.wal == nil {
		return
	}
	if errors.Is(err, wal.ErrNoSpace) {
		e.ckpt.noSpace.Store(true)
		e.ckpt.poke()
		return
	}
	if err == nil {
		u := e.wal.Usage()
		if u.Bytes-e.ckpt.markBytes.Load() >= e.checkpointThreshold(u) {
			e.ckpt.poke()
		}
	}
}

// install puts the logged changes into the buffer (and, writing through,
// the store first), after snapshots have kept what they overwrite.
// Nothing is installed unless the log or the store took it. Catalog
// entries the commit changes lose their resident handles (handles.go),
// whatever the install's outcome.
func (c *commit) install(ctx context.Context) error {
	e := c.t.e
	defer e.handles.drop(c.changes)
	how := installCommit
	switch {
	case c.plan.through && c.t.parts:
		how = installThroughParts
	case c.plan.through:
		how = installThrough
	}
	seq, installed := e.snaps.keep(ctx, e, c.t.owner, c.changes, c.pre)
	err := e.install(ctx, c.changes, how)
	installed()
	if err != nil {
		return err
	}
	c.seq = seq
	c.advance(stageInstalled)
	return nil
}

// abort ends a commit that failed before release. Under early release a
// commit that was sequenced but not installed (a dropped keyspace) fails
// once its fsync returned, as it would without early release; its keys
// stop being pending if the fsync succeeded.
func (c *commit) abort(err error) error {
	if c.plan.early && c.stage >= stageSequenced && <-c.durable == nil {
		c.t.e.pend.done(c.changes, c.lsn)
	}
	c.t.abortLocked(err)
	return err
}

// release records what the commit installed and lets go of its locks:
// under early release before its fsync (nothing that depends on it is
// acknowledged before that fsync, early.go), otherwise after it.
func (c *commit) release() {
	t := c.t
	if c.plan.writes {
		t.committed, t.seq = c.changes, c.seq
	}
	c.dep = t.dep
	c.advance(stageReleased)
	t.finish(committed, nil)
}

// finish ends the transaction, committed or aborted: its locks and pins
// go (cache.Buffer.Release), with its snapshot and partition locks, and
// the engine forgets it.
func (t *Txn) finish(st txnState, cause error) {
	t.state, t.cause = st, cause
	if t.remote != nil {
		t.remote.Close()
		t.remote = nil
	}
	t.forgetForwarded()
	t.unuse()
	t.writes, t.ksOps, t.seen, t.ranges, t.catalogs, t.xread = nil, nil, nil, nil, nil, nil
	t.e.buf.Release(t.owner)
	if t.snapshot && t.e.snaps != nil {
		t.e.snaps.end(t.id)
	}
	if t.snap != nil {
		t.snap.Close()
		t.snap = nil
	}
	if t.e.pcl != nil {
		t.e.pcl.release(t)
	}
	if !t.locked.IsZero() {
		t.e.stats.lockHold.Since(t.locked)
	}
	t.e.forget(t)
}

// Abort discards the writes and releases every lock. Aborting a finished
// transaction does nothing.
func (t *Txn) Abort() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.abortLocked(errors.New("aborted by the client"))
}

func (t *Txn) abortLocked(cause error) {
	if t.state != active {
		return
	}
	t.e.stats.aborts.Add(1)
	t.finish(aborted, cause)
}

// Committed returns the changes a committed transaction installed, in
// commit order, each value as the store holds it when the store stamps
// values (see cache.Buffer.WriteThrough): how a frontend learns the ETag
// the store gave a write. Nil before Commit has succeeded.
func (t *Txn) Committed() []Change {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state != committed {
		return nil
	}
	return t.committed
}

// waitDurable waits, under early release, for the commit's fsync (whatever
// ctx says: the commit is in a batch being written, and its outcome
// decides what Commit answers), and then, in every mode, for the commits
// it read from. On success an early-released commit's keys stop being
// pending; on failure they stay, so that every read of them fails too:
// the writes are in the buffer but will never be in the log, and the
// engine must be restarted (its log is never reset). Such a commit is no
// longer reported committed; one without early release whose own log
// record is durable stays committed, unacknowledged.
func (c *commit) waitDurable(ctx context.Context) error {
	t, e := c.t, c.t.e
	fail := func(err error) error {
		if c.plan.early {
			t.state, t.cause, t.committed = aborted, err, nil
		}
		return err
	}
	if c.plan.early {
		if err := <-c.durable; err != nil {
			e.opts.Logger.Error("txn: an early-released commit failed to become durable; reads of its writes fail and the engine must be restarted",
				"lsn", c.lsn, "err", err)
			return fail(fmt.Errorf("%w: %w", ErrCommitLog, err))
		}
		c.synced = true
		e.pend.done(c.changes, c.lsn)
	}
	if c.dep > c.lsn {
		if err := e.awaitDurable(ctx, c.dep); err != nil {
			return fail(err)
		}
	}
	c.advance(stageDurable)
	return nil
}

// awaitDurable waits until the log is durable up to lsn (0: nothing to wait
// for). A log that failed first means the commit at lsn is lost (the
// engine never resets a log under early release): ErrCommitLog.
func (e *Engine) awaitDurable(ctx context.Context, lsn uint64) error {
	if lsn == 0 {
		return nil
	}
	if err := e.elog.WaitDurable(ctx, lsn); err != nil {
		return fmt.Errorf("%w: a commit this depends on is not durable: %w", ErrCommitLog, err)
	}
	return nil
}

// acknowledge counts the commit. A keyspace drop is durable by now and
// the buffer has forgotten the keyspace; its store side is tried now,
// after the locks are gone. If the store is unreachable it stays queued
// and runs before any later store call (and before the next checkpoint).
func (c *commit) acknowledge(ctx context.Context) {
	e := c.t.e
	c.advance(stageAcknowledged)
	if c.plan.writes {
		e.stats.commit.Since(c.start)
	}
	e.stats.commits.Add(1)
	for _, ch := range c.changes {
		if ch.Op == ChangeDropKeyspace {
			if err := e.buf.SettleKeyspaces(ctx); err != nil {
				e.opts.Logger.Warn("keyspace drop committed; the store side is queued until the store answers", "err", err)
			}
			return
		}
	}
}

// holdLease checks, under coherence exclusive with leases, that this node
// may write ks (t.mu held).
func (t *Txn) holdLease(ctx context.Context, ks adapters.Keyspace) error {
	return t.e.holdLease(ctx, ks)
}

// changes lists the transaction's changes in commit order: keyspace
// creates, then writes by keyspace and key, then keyspace drops.
func (t *Txn) changes() []Change {
	var out []Change
	for _, c := range t.ksOps {
		if c.Op == ChangeCreateKeyspace {
			out = append(out, c)
		}
	}
	n := len(out)
	for ks, m := range t.writes {
		for _, w := range m {
			op := ChangePut
			if w.Delete {
				op = ChangeDelete
			}
			out = append(out, Change{Op: op, Keyspace: ks, Key: w.Key, Value: w.Value, Expect: w.Expect})
		}
		out = append(out, t.checks(ks, m)...)
	}
	ws := out[n:]
	sortChanges(ws)
	// Keyspaces the transaction read but does not write are checked first,
	// each in a call of its own, before anything is written: not atomic
	// with the writes (a change landing between the two is missed), but
	// every change made before the commit began is caught.
	readOnly := map[adapters.Keyspace]bool{}
	for ks := range t.seen {
		readOnly[ks] = true
	}
	for _, rr := range t.ranges {
		readOnly[rr.ks] = true
	}
	var pre []Change
	for ks := range readOnly {
		if _, w := t.writes[ks]; !w && !t.catalogs[ks] {
			pre = append(pre, t.checks(ks, nil)...)
		}
	}
	if len(pre) > 0 {
		sortChanges(pre)
		out = append(out[:n], append(pre, ws...)...)
	}
	for _, c := range t.ksOps {
		if c.Op == ChangeDropKeyspace {
			out = append(out, c)
		}
	}
	return out
}

// checks lists, writing through, what the transaction read of ks and does
// not write (written: its writes of ks): the keys with what it found
// there, and the ranges with their keys and versions. Written through in
// one atomic store call with the writes, they make the commit fail if
// another writer changed any of it since (no write skew, no phantom).
func (t *Txn) checks(ks adapters.Keyspace, written map[string]cache.Write) []Change {
	var out []Change
	for key, e := range t.seen[ks] {
		if _, w := written[key]; !w && e.Kind != adapters.ExpectAny {
			out = append(out, Change{Op: ChangeCheck, Keyspace: ks, Key: []byte(key), Expect: e})
		}
	}
	for _, rr := range t.ranges {
		if rr.ks == ks {
			out = append(out, Change{Op: ChangeCheck, Keyspace: ks, Key: rr.start, Range: &rr.check})
		}
	}
	return out
}

// sortChanges orders changes by keyspace, then key.
func sortChanges(cs []Change) {
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].Keyspace != cs[j].Keyspace {
			return cs[i].Keyspace < cs[j].Keyspace
		}
		return bytes.Compare(cs[i].Key, cs[j].Key) < 0
	})
}

// fillBases sets the Expect of each put and delete that has none (a
// caller may have set it) to the base the buffer's record of the key has
// now (cache.Buffer.Bases), one buffer call per run of one keyspace.
func (e *Engine) fillBases(changes []Change) {
	for i := 0; i < len(changes); {
		ks := changes[i].Keyspace
		j := i
		var keys [][]byte
		var at []int
		for ; j < len(changes) && changes[j].Keyspace == ks; j++ {
			c := &changes[j]
			if (c.Op == ChangePut || c.Op == ChangeDelete) && c.Expect.Kind == adapters.ExpectAny {
				keys, at = append(keys, c.Key), append(at, j)
			}
		}
		if len(keys) > 0 {
			bases, priors := e.buf.Bases(ks, keys)
			for n, x := range bases {
				changes[at[n]].Expect, changes[at[n]].Prior = x, priors[n]
			}
		}
		i = j
	}
}

// installMode says who installs changes.
type installMode uint8

const (
	installCommit       installMode = iota // a commit, writing back
	installThrough                         // a commit, writing through, each keyspace's writes atomically
	installThroughParts                    // a commit, writing through, a keyspace's writes in parts if the store takes no more at once (Txn.AcceptParts)
	installReplay                          // WAL replay
)

// install puts committed changes into the buffer, in order: a keyspace
// create or drop queues its store side in the buffer's keyspace gate (which
// runs it before any later store call), and each run of writes to one
// keyspace is applied as dirty records, or writing through sent to the
// store first. Replay uses it too, so recovery rebuilds exactly what the
// commits built. A commit's creates only open the keyspace: the store side
// ran before the commit (Txn.CreateKeyspace), under the catalog entry's X
// lock, so no drop can have come between.
func (e *Engine) install(ctx context.Context, changes []Change, how installMode) error {
	through := how == installThrough || how == installThroughParts
	var errs []error
	for i := 0; i < len(changes); {
		c := changes[i]
		switch c.Op {
		case ChangeCreateKeyspace:
			if how == installReplay {
				e.buf.CreateKeyspace(c.Keyspace)
			} else {
				e.buf.OpenKeyspace(c.Keyspace)
			}
			i++
			continue
		case ChangeDropKeyspace:
			e.buf.DropKeyspace(c.Keyspace)
			i++
			continue
		}
		j := i
		var ws []cache.Write
		for ; j < len(changes) && changes[j].Keyspace == c.Keyspace && changes[j].Op.keyed(); j++ {
			ws = append(ws, cache.Write{Key: changes[j].Key, Value: changes[j].Value, Delete: changes[j].Op == ChangeDelete,
				Check: changes[j].Op == ChangeCheck, Range: changes[j].Range, Expect: changes[j].Expect, Prior: changes[j].Prior})
		}
		e.buf.OpenKeyspace(c.Keyspace)
		var err error
		switch how {
		case installThrough, installThroughParts:
			err = e.buf.WriteThrough(ctx, c.Keyspace, ws, how == installThroughParts)
			for k := range ws {
				changes[i+k].Value = ws[k].Value // as the store holds it
			}
		case installReplay:
			// Replayed writes restore their logged bases and count as
			// writes the store may already hold.
			err = e.buf.ApplyReplayed(ctx, c.Keyspace, ws)
		default:
			err = e.buf.Apply(ctx, c.Keyspace, ws)
		}
		if err != nil {
			if through {
				// Writing through, a failure stops the commit: the
				// keyspaces after it (written after the checks) are
				// not written.
				return err
			}
			// Logged but not applied cannot happen otherwise (a
			// replay or an apply fails only on a dropped keyspace).
			errs = append(errs, err)
		}
		i = j
	}
	if through {
		// Writing through, the store has every commit before it is
		// acknowledged: creates and drops too.
		if err := e.buf.SettleKeyspaces(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// walLog adapts the WAL to CommitLog and earlyLog.
type walLog struct{ l *wal.Log }

// earlyLog is a CommitLog that can sequence a commit before it is durable:
// the WAL (walLog).
type earlyLog interface {
	CommitLog
	// AppendEarly returns once the commit has its LSN, with a channel
	// that receives the outcome of its fsync (wal.Log.AppendEarly).
	AppendEarly(ctx context.Context, txnID uint64, changes []Change) (uint64, <-chan error, error)
	// SequencedLSN is the last LSN handed out.
	SequencedLSN() uint64
	// WaitDurable waits until the log is durable up to lsn, or failed.
	WaitDurable(ctx context.Context, lsn uint64) error
}

var _ earlyLog = walLog{}

func (w walLog) Append(ctx context.Context, txnID uint64, changes []Change) error {
	recs := logRecords(changes)
	if err := logrec.Validate(recs); err != nil {
		return err
	}
	_, err := w.l.Append(ctx, txnID, walData(recs))
	return err
}

func (w walLog) AppendEarly(ctx context.Context, txnID uint64, changes []Change) (uint64, <-chan error, error) {
	recs := logRecords(changes)
	if err := logrec.Validate(recs); err != nil {
		return 0, nil, err
	}
	return w.l.AppendEarly(ctx, txnID, walData(recs))
}

func (w walLog) SequencedLSN() uint64 { return w.l.SequencedLSN() }

func (w walLog) WaitDurable(ctx context.Context, lsn uint64) error { return w.l.WaitDurable(ctx, lsn) }

// logExpect maps an expectation to the log's form (changeExpect maps it
// back; the logrec package knows nothing of adapters; the kinds' values
// are the same). A version too long for the log, or a kind the log does not
// know, is logged as ExpectAny: replay then knows nothing of the key,
// which is what the log held before expectations existed.
func logExpect(e adapters.Expect) (logrec.ExpectKind, string) {
	switch {
	case e.Kind == adapters.ExpectAbsent:
		return logrec.ExpectAbsent, ""
	case e.Kind == adapters.ExpectVersion && e.Version != "" && len(e.Version) <= maxLoggedVersion:
		return logrec.ExpectVersion, string(e.Version)
	}
	return logrec.ExpectAny, ""
}

// logRecords turns changes into the log's records (checks are not logged).
func logRecords(changes []Change) []logrec.Record {
	recs := make([]logrec.Record, 0, len(changes))
	for _, c := range changes {
		if c.Op == ChangeCheck {
			continue // a commit-time validation, nothing to redo
		}
		r := logrec.Record{Type: recordTypes[c.Op], Keyspace: string(c.Keyspace), Key: c.Key, Value: c.Value}
		if c.Op == ChangePut || c.Op == ChangeDelete {
			r.ExpectKind, r.ExpectVersion = logExpect(c.Expect)
			if r.ExpectKind != logrec.ExpectAny {
				r.Prior = c.Prior // without an expectation replay writes unconditionally: no refusal to explain
			}
		}
		recs = append(recs, r)
	}
	return recs
}
