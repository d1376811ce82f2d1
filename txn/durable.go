package txn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/invariants"
	"github.com/nemocache/nemo/txn/logrec"
	"github.com/nemocache/nemo/wal"
)

// recordTypes maps each ChangeOp to its log record type, and changeOps
// back.
var (
	recordTypes = [...]logrec.RecordType{
		ChangePut:            logrec.RecordPut,
		ChangeDelete:         logrec.RecordDelete,
		ChangeCreateKeyspace: logrec.RecordCreateKeyspace,
		ChangeDropKeyspace:   logrec.RecordDropKeyspace,
	}
	changeOps = map[logrec.RecordType]ChangeOp{
		logrec.RecordPut:            ChangePut,
		logrec.RecordDelete:         ChangeDelete,
		logrec.RecordCreateKeyspace: ChangeCreateKeyspace,
		logrec.RecordDropKeyspace:   ChangeDropKeyspace,
	}
)

// changeExpect maps a logged expectation back (logExpect, commit.go).
func changeExpect(r logrec.Record) adapters.Expect {
	switch r.ExpectKind {
	case logrec.ExpectAbsent:
		return adapters.Expect{Kind: adapters.ExpectAbsent}
	case logrec.ExpectVersion:
		return adapters.Expect{Kind: adapters.ExpectVersion, Version: adapters.Version(r.ExpectVersion)}
	}
	return adapters.Expect{}
}

// maxLoggedVersion is the longest expected version the log takes (its
// format bounds it at 1 KiB; the buffer keeps bases of 255 bytes at most).
const maxLoggedVersion = 255

// openWAL opens the log and replays it into the buffer: every committed
// transaction since the last checkpoint becomes dirty records again.
// Replay is idempotent (applying a write twice leaves the same state), so a
// crash during recovery only means replaying again.
func (e *Engine) openWAL() error {
	opts := *e.opts.WAL
	if opts.Logger == nil {
		opts.Logger = e.opts.Logger
	}
	l, err := wal.Open(opts)
	if err != nil {
		return fmt.Errorf("txn: open wal: %w", err)
	}
	start := time.Now()
	var txns, writes, sends int // sends: confirmed write-backs
	var maxID uint64
	err = l.Replay(0, func(txnID uint64, data []wal.Data) error {
		recs, err := walRecords(txnID, data)
		if err != nil {
			return err
		}
		if isWriteBack(recs) {
			sends += len(recs)
			return e.replayWritten(recs)
		}
		txns++
		maxID = max(maxID, txnID)
		changes := make([]Change, len(recs))
		for i, r := range recs {
			op, ok := changeOps[r.Type]
			if !ok {
				return fmt.Errorf("txn: replay txn %d: unexpected %s record", txnID, r.Type)
			}
			changes[i] = Change{Op: op, Keyspace: adapters.Keyspace(r.Keyspace), Key: r.Key, Value: r.Value, Expect: changeExpect(r), Prior: r.Prior}
		}
		// Replay installs exactly as the commit did; a drop discards the
		// keyspace's earlier records, so a dropped table stays dropped.
		if err := e.install(context.Background(), changes, installReplay); err != nil {
			return fmt.Errorf("txn: replay txn %d: %w", txnID, err)
		}
		writes += len(changes)
		return nil
	})
	if err != nil {
		l.Close()
		return err
	}
	e.wal = l
	e.opts.Log = walLog{l}
	e.ckpt.init(txns > 0)
	e.nextID.Store(max(maxID, uint64(time.Now().UnixNano())))
	e.opts.Logger.Info("wal replayed", "dir", opts.Dir, "transactions", txns, "writes", writes, "write_backs", sends,
		"checkpoint_lsn", l.LastCheckpoint(), "took", time.Since(start))
	return nil
}

// walRecords decodes a replayed transaction's records (txn/logrec). The
// log checked their frames; a record the format refuses all the same (a
// log written by a newer nemo, or damage its checksum missed) stops the
// replay with wal.ErrCorrupt, as damage the log finds does: skipping it
// could drop an acknowledged write.
func walRecords(txnID uint64, data []wal.Data) ([]logrec.Record, error) {
	recs := make([]logrec.Record, len(data))
	for i, d := range data {
		r, err := logrec.Decode(d.Type, d.Body)
		if err != nil {
			return nil, fmt.Errorf("txn: replay: %w: transaction %d, record %d: %w", wal.ErrCorrupt, txnID, i, err)
		}
		recs[i] = r
	}
	return recs, nil
}

// walData encodes recs, which must be valid, as the WAL's data records:
// each one's wire type and body (txn/logrec), the bodies in one
// allocation.
func walData(recs []logrec.Record) []wal.Data {
	n := 0
	for i := range recs {
		n += recs[i].BodySize()
	}
	buf := make([]byte, 0, n)
	data := make([]wal.Data, len(recs))
	for i := range recs {
		start := len(buf)
		buf = recs[i].AppendBody(buf)
		data[i] = wal.Data{Type: recs[i].WireType(), Body: buf[start:len(buf):len(buf)]}
	}
	return data
}

// isWriteBack reports whether recs are a write-back's log of what the
// store confirmed (logWriteBack), not a transaction.
func isWriteBack(recs []logrec.Record) bool {
	return len(recs) > 0 && recs[0].Type == logrec.RecordWriteBack
}

// replayWritten hands a logged write-back to the buffer, one run of a
// keyspace at a time (cache.Buffer.ReplayWritten).
func (e *Engine) replayWritten(recs []logrec.Record) error {
	for i := 0; i < len(recs); {
		ks := adapters.Keyspace(recs[i].Keyspace)
		var written []cache.WrittenBack
		j := i
		for ; j < len(recs) && recs[j].Keyspace == recs[i].Keyspace; j++ {
			if recs[j].Type != logrec.RecordWriteBack {
				return fmt.Errorf("txn: replay: a %s record among write-back records", recs[j].Type)
			}
			written = append(written, cache.WrittenBack{Key: recs[j].Key, Base: changeExpect(recs[j]), Digest: recs[j].Digest})
		}
		e.buf.OpenKeyspace(ks)
		if err := e.buf.ReplayWritten(context.Background(), ks, written); err != nil {
			return fmt.Errorf("txn: replay write-back of %q: %w", ks, err)
		}
		i = j
	}
	return nil
}

// checkpointer decides when checkpoints run. A checkpoint bounds what the
// next start replays (everything committed since the last one) and what
// the log holds on disk, so it runs not only every CheckpointInterval but
// as soon as one is due (checkpointDue): right after a replay, so that a
// process that restarts often does not replay its whole history at every
// start; once CheckpointBytes have been logged since the last one; when
// commits are waiting for one and nothing is dirty, so it costs no store
// write; and when the log has found no space, which a checkpoint frees.
type checkpointer struct {
	sem  chan struct{} // held by the running checkpoint
	kick chan struct{} // a commit found one due
	// The WAL's byte and commit counters as they stood when the last
	// successful checkpoint read its LSN: everything counted is covered.
	markBytes, markCommits atomic.Uint64
	replayed               atomic.Bool // replayed transactions await their first checkpoint
	noSpace                atomic.Bool // an append found no space since the last checkpoint
}

func (c *checkpointer) init(replayed bool) {
	c.sem, c.kick = make(chan struct{}, 1), make(chan struct{}, 1)
	c.replayed.Store(replayed)
}

func (c *checkpointer) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// checkpointThreshold is the log volume after which a checkpoint is due:
// CheckpointBytes, or half a segment when the volume is so short of space
// that the WAL preallocates smaller segments (a checkpoint then frees
// them before the volume fills).
func (e *Engine) checkpointThreshold(u wal.Usage) uint64 {
	t := e.opts.CheckpointBytes
	if u.SpaceLow && u.SegmentBytes > 0 {
		t = min(t, max(u.SegmentBytes/2, 1))
	}
	return uint64(t)
}

// checkpointDue says why a checkpoint should run now, or "".
func (e *Engine) checkpointDue() string {
	if e.klogs != nil {
		return e.klogCheckpointDue()
	}
	u := e.wal.Usage()
	switch {
	case e.ckpt.replayed.Load():
		return "replayed"
	case e.ckpt.noSpace.Load():
		return "no space"
	case u.Bytes-e.ckpt.markBytes.Load() >= e.checkpointThreshold(u):
		return "log size"
	case u.Commits > e.ckpt.markCommits.Load() && e.buf.Stats().DirtyBytes == 0:
		return "clean"
	}
	return ""
}

// checkpointLoop runs checkpoints when they are due (checkpointer) and at
// least every CheckpointInterval, and while the log is failed tries to
// make it writable again. After a failed checkpoint the due ones wait
// (1s, doubling up to CheckpointInterval), so a store outage is not
// hammered by one flush per commit; after one for lack of space they wait
// a second.
func (e *Engine) checkpointLoop() {
	defer e.wg.Done()
	ctx, cancel := context.WithCancel(e.bg)
	defer cancel()
	go func() {
		select {
		case <-e.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	tick := time.NewTicker(e.opts.CheckpointInterval)
	defer tick.Stop()
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	var backoff time.Duration
	var notBefore time.Time
	e.ckpt.poke() // a replay's checkpoint is due at once
	for {
		var why string
		select {
		case <-e.stop:
			return
		case <-tick.C:
			why = "interval"
		case <-e.ckpt.kick:
			why = e.checkpointDue()
		case <-poll.C:
			if e.wal == nil {
				why = e.checkpointDue()
				break
			}
			if err := e.wal.Err(); err != nil && !e.early() {
				if rerr := e.wal.Reset(); rerr == nil {
					e.opts.Logger.Warn("wal writable again", "after", err)
				}
			}
			why = e.checkpointDue()
		}
		if why == "" || why != "interval" && time.Now().Before(notBefore) {
			continue
		}
		cctx, ccancel := context.WithTimeout(ctx, max(e.opts.CheckpointInterval, 30*time.Second))
		start := time.Now()
		err := e.checkpoint(cctx, why == "clean")
		ccancel()
		if err != nil {
			if ctx.Err() != nil {
				return // stopping
			}
			backoff = min(max(2*backoff, time.Second), e.opts.CheckpointInterval)
			notBefore = time.Now().Add(backoff)
			e.opts.Logger.Warn("checkpoint failed", "reason", why, "err", err, "retry_in", backoff)
			continue
		}
		backoff = 0
		if why == "no space" {
			// It made what room it could; if appends still find none
			// (another tenant took it), do not run one per refusal.
			notBefore = time.Now().Add(time.Second)
		}
		level := slog.LevelDebug
		if why == "replayed" || why == "no space" {
			level = slog.LevelInfo
		}
		if e.wal == nil {
			e.opts.Logger.Log(ctx, level, "checkpoint", "reason", why, "took", time.Since(start))
			continue
		}
		e.opts.Logger.Log(ctx, level, "checkpoint", "reason", why, "took", time.Since(start),
			"checkpoint_lsn", e.wal.LastCheckpoint())
	}
}

// Checkpoint takes a fuzzy checkpoint: it reads the LSN X below which every
// commit is already applied to the buffer, flushes every dirty record to
// the store, then tells the WAL that everything below X is in the store, so
// the segments wholly below X can go. Commits continue meanwhile. One
// checkpoint runs at a time; the next waits for it (or for ctx). A failed
// log is reset first: with nothing dirty a checkpoint needs nothing but
// the log, and on a full volume it needs no new space (package wal,
// "Space").
func (e *Engine) Checkpoint(ctx context.Context) error { return e.checkpoint(ctx, false) }

// checkpoint is Checkpoint; with ifClean it writes nothing back: when
// records are dirty by the time it looks (a commit came after the
// checkpointer saw the buffer clean), it does nothing, so a "clean"
// checkpoint never turns into a flush.
func (e *Engine) checkpoint(ctx context.Context, ifClean bool) error {
	if e.klogs != nil {
		return e.checkpointKlogs(ctx, ifClean)
	}
	if e.wal == nil {
		if ifClean {
			return nil
		}
		return e.Flush(ctx)
	}
	select {
	case e.ckpt.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("txn: checkpoint: waiting for the running one: %w", ctx.Err())
	}
	defer func() { <-e.ckpt.sem }()
	// Under early release a failed log is never reset: commits whose
	// locks are gone may have failed with it, and their LSNs would be
	// handed out again (see finishEarly).
	if err := e.wal.Err(); err != nil && !e.early() {
		if rerr := e.wal.Reset(); rerr == nil {
			e.opts.Logger.Warn("wal writable again", "after", err)
		}
	}
	// Commits hold applyMu shared across append+apply: with it held
	// exclusively, every LSN below NextLSN is in the buffer, and the
	// WAL's counters count exactly those commits. If nothing is dirty
	// and no keyspace create or drop is queued then, the store has every
	// one of them, and the flush (a walk over every record) is skipped.
	e.applyMu.Lock()
	x := e.wal.NextLSN()
	st := e.wal.Stats()
	bst := e.buf.Stats()
	var mark cache.DirtyMark
	if invariants.Enabled {
		// Every commit below x is one of these records, or in the store.
		mark = e.buf.MarkDirty()
	}
	e.applyMu.Unlock()
	if bst.DirtyBytes != 0 || bst.PendingKeyspaceOps != 0 {
		if ifClean {
			return nil
		}
		if err := e.Flush(ctx); err != nil {
			return fmt.Errorf("txn: checkpoint flush: %w", err)
		}
		// Clean now, the store has every commit so far: the checkpoint
		// covers the flush's own write-back records too (appended, not
		// waited for: wait now) and what committed meanwhile, so a
		// drained log replays nothing.
		if err := e.wal.WaitDurable(ctx, e.wal.SequencedLSN()); err != nil {
			return fmt.Errorf("txn: checkpoint: %w", err)
		}
		e.applyMu.Lock()
		if bst := e.buf.Stats(); bst.DirtyBytes == 0 && bst.PendingKeyspaceOps == 0 {
			if invariants.Enabled {
				if u := e.buf.Unflushed(); u.Records != 0 {
					panic(invariants.Errorf("checkpoint covers the whole log with %d records dirty", u.Records))
				}
			}
			x, st = e.wal.NextLSN(), e.wal.Stats()
		}
		e.applyMu.Unlock()
	}
	if invariants.Enabled {
		// The one durability rule (package wal): nothing below x leaves
		// the log unless the store confirmed it.
		if err := e.buf.FlushedSince(mark); err != nil {
			panic(invariants.Errorf("checkpoint at LSN %d: %v", x, err))
		}
	}
	if x > e.wal.LastCheckpoint() {
		if err := e.wal.Checkpoint(x); err != nil {
			return fmt.Errorf("txn: checkpoint: %w", err)
		}
	}
	e.ckpt.markBytes.Store(st.Bytes)
	e.ckpt.markCommits.Store(st.Commits)
	e.ckpt.replayed.Store(false)
	e.ckpt.noSpace.Store(false)
	return nil
}

// Drain is the engine's half of a graceful shutdown: it stops admitting
// transactions, lets live ones finish until ctx ends (then aborts them),
// stops the background work (a checkpoint; the background write-back,
// whose write-back in flight may finish until half of what is left of ctx
// is spent, and then has its store calls cancelled, so a hung store holds
// nothing up; the buffer's evictor), writes every dirty record back
// (retrying store failures with backoff until ctx ends: every store call
// ends with ctx), checkpoints and closes the WAL.
// After a successful drain the store alone holds every committed write; a
// drain that runs out of ctx fails with ErrUnflushed, saying what stayed
// unflushed, and the WAL keeps it for the next start. Drain is idempotent;
// after it the engine refuses new transactions.
func (e *Engine) Drain(ctx context.Context) error {
	e.drainOnce.Do(func() {
		e.draining.Store(true)
		e.StopAdmitting(ctx)
		recovered := e.waitRecovered(ctx) // before the workers stop: they run the recoveries
		e.stopWorkers()
		e.wb.stopWorkers(ctx)
		e.buf.StopWorkers()
		backoff := 50 * time.Millisecond
		for {
			err := e.Checkpoint(ctx)
			if err == nil {
				// Nothing commits any more: every record must be clean
				// now. One that is not (a write-back that failed to
				// say so) keeps the drain from reporting success.
				if u := e.buf.Unflushed(); u.Records > 0 {
					err = fmt.Errorf("%w: %d records (%d bytes) still dirty after the checkpoint", ErrUnflushed, u.Records, u.Bytes)
				}
			}
			if err == nil {
				break
			}
			e.opts.Logger.Warn("drain: flush failed, retrying", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				u := e.buf.Unflushed()
				e.drainErr = fmt.Errorf("%w: %d records (%d bytes) in %d keyspaces %v; the WAL keeps them: %w",
					ErrUnflushed, u.Records, u.Bytes, len(u.Keyspaces), u.Keyspaces, errors.Join(err, ctx.Err()))
				e.opts.Logger.Error("drain: out of time; unflushed writes stay in the WAL for the next start",
					"records", u.Records, "bytes", u.Bytes, "keyspaces", u.Keyspaces)
			case <-time.After(backoff):
				backoff = min(2*backoff, 2*time.Second)
				continue
			}
			break
		}
		if e.wal != nil {
			if err := e.wal.Close(); err != nil && e.drainErr == nil {
				e.drainErr = fmt.Errorf("txn: drain: close wal: %w", err)
			}
		}
		if recovered != nil && e.drainErr == nil {
			// Their logs keep them, in the store: the next start
			// recovers them.
			e.drainErr = fmt.Errorf("%w: %w", ErrUnflushed, recovered)
		}
	})
	return e.drainErr
}

// Draining reports whether Drain has started.
func (e *Engine) Draining() bool { return e.draining.Load() }

// WritesThrough reports whether commits go to the store before they are
// acknowledged: only then can a commit install values other than those
// written (the store's stamps, see Txn.Committed).
func (e *Engine) WritesThrough() bool { return e.opts.Mode == WriteThrough }

// WALRefusing says why the WAL cannot take commits now, or returns nil
// when it can or the engine keeps none: the log has failed (wal.ErrSync: a
// write or fsync failed; the checkpointer resets it within a second,
// except under early release, which keeps it failed until a restart), or
// an append found no space and no checkpoint has made room since
// (wal.ErrNoSpace: one that must write dirty records back first cannot
// while the store is down).
func (e *Engine) WALRefusing() error {
	if e.wal == nil {
		return nil
	}
	if err := e.wal.Err(); err != nil {
		return err
	}
	if e.ckpt.noSpace.Load() {
		return wal.ErrNoSpace
	}
	return nil
}

// WALStats returns the WAL's counters, if the engine has a WAL.
func (e *Engine) WALStats() (wal.Stats, bool) {
	if e.wal == nil {
		return wal.Stats{}, false
	}
	return e.wal.Stats(), true
}
