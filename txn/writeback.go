package txn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/txn/logrec"
	"github.com/nemocache/nemo/wal"
)

// writeBacker is the engine's write-back driver, the one owner of
// write-back: it decides when and what the buffer writes back (its loop:
// the aged records every FlushInterval, sooner when the buffer asks,
// cache.Buffer.WriteBackWanted; Flush and FlushKeyspace; the dirty
// records eviction chose), and runs each write-back (run), taking the
// engine's steps between the buffer's (cache.WriteBack). The buffer never
// calls back up.
type writeBacker struct {
	e   *Engine
	buf *cache.Buffer
	// hold, when set (holdAll), is closed when write-back may run.
	hold atomic.Pointer[chan struct{}]

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	// bg is the context of the loop's store calls, cancelled when it
	// stops (stopWorkers), so a hung store call ends then.
	bg       context.Context
	bgCancel context.CancelFunc
}

func newWriteBacker(e *Engine) *writeBacker {
	d := &writeBacker{e: e, buf: e.buf, stop: make(chan struct{})}
	d.bg, d.bgCancel = context.WithCancel(context.Background())
	return d
}

// start starts the background loop, unless the buffer's workers are off
// (cache.Options.DisableWorkers: tests drive write-back by hand) or it
// keeps nothing (PolicyNone).
func (d *writeBacker) start() {
	if o := d.buf.Options(); o.DisableWorkers || o.Policy == cache.PolicyNone {
		return
	}
	d.wg.Add(1)
	go d.loop()
}

// holdAll holds every write-back (the loop's, eviction's, Flush's) before
// it starts until release is called: New holds them while it replays the
// log, so that nothing is written back from a half-replayed buffer, or
// sent before the log can record it.
func (d *writeBacker) holdAll() (release func()) {
	ch := make(chan struct{})
	d.hold.Store(&ch)
	var once sync.Once
	return func() {
		once.Do(func() {
			d.hold.Store(nil)
			close(ch)
		})
	}
}

// waitHold waits for a holdAll to be released, or ctx.
func (d *writeBacker) waitHold(ctx context.Context) error {
	h := d.hold.Load()
	if h == nil {
		return nil
	}
	select {
	case <-*h:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run runs one write-back, in this order:
//
//	the replay's hold (holdAll)
//	-> the lease (Options.Leases, the gate: a node that does not hold a
//	   keyspace's lease never writes its records, buffered or replayed)
//	-> the keyspace's write-back lock (cache.WriteBack.Lock: wbMu)
//	-> per pass: read the dirty values (Next, under the latch)
//	   -> the durable barrier (early release: wait until the log is
//	      durable up to the last LSN handed out, so the store never holds
//	      a write the log could still lose)
//	   -> the lease again (the waits above may have outlasted it)
//	   -> the store calls (Store) -> the write-back log (a WAL: what the
//	      store confirmed, appended, not waited for) -> mark clean (Settle)
//	-> Confirm; Close lets go of wbMu
//
// The barrier's wait, the store calls and the log's append hold the
// keyspace's wbMu, never its tree latch. A hold, lease or barrier that
// refuses puts the records back, due at once (cache.WriteBack.Requeue).
func (d *writeBacker) run(ctx context.Context, w *cache.WriteBack) error {
	defer w.Close()
	ks := w.Keyspace()
	if err := d.waitHold(ctx); err != nil {
		w.Requeue()
		return fmt.Errorf("txn: write-back of %q held while the log replays: %w", ks, err)
	}
	if err := d.gate(ctx, ks); err != nil {
		w.Requeue()
		return err
	}
	if err := w.Lock(ctx); err != nil {
		return err
	}
	var errs []error
	for w.Next() {
		if err := d.e.waitApplied(ctx); err != nil {
			w.Requeue()
			errs = append(errs, fmt.Errorf("txn: write-back of %q waits for the commit log: %w", ks, err))
			break
		}
		// The lease again, just before the store calls: waiting for wbMu
		// (a write-back in flight) and for the barrier may have outlasted
		// it, and a write-back sent after it lapsed could land after
		// another node took the keyspace over. A valid lease is answered
		// from memory.
		if err := d.gate(ctx, ks); err != nil {
			w.Requeue()
			errs = append(errs, err)
			break
		}
		written, err := w.Store(ctx)
		errs = append(errs, err)
		d.e.logWriteBack(ks, written)
		w.Settle()
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return w.Confirm(ctx)
}

// gate asks the lease (Options.Leases) whether this node may write ks.
func (d *writeBacker) gate(ctx context.Context, ks adapters.Keyspace) error {
	if g := d.e.opts.Leases; g != nil {
		if err := g.Hold(ctx, ks); err != nil {
			return fmt.Errorf("txn: write-back of %q held back: %w", ks, err)
		}
	}
	return nil
}

// waitApplied is the durable barrier of write-back under early release:
// every commit installed in the buffer so far has been sequenced, so
// waiting until the log is durable up to the last LSN handed out covers
// every value a write-back has read. Without early release a commit is
// durable before it is installed, and there is nothing to wait for.
func (e *Engine) waitApplied(ctx context.Context) error {
	if e.elog == nil {
		return nil
	}
	return e.elog.WaitDurable(ctx, e.elog.SequencedLSN())
}

// logWriteBack appends what the store confirmed to a write-back to the
// WAL, if there is one: one logrec.RecordWriteBack per key, not waited for
// (the group commit writer makes it durable with the next batch), so
// that replay conditions each record on the version the store returned
// last (cache.Buffer.ReplayWritten) instead of an older base logged with
// its write: fewer refusals to sort out after a restart. It costs the
// write-back no fsync; a record lost in a crash only means a refusal the
// next write-back sorts out (cache.Buffer.ApplyReplayed). A log that
// refuses it (no space, a failed fsync) is said once, at WARN.
func (e *Engine) logWriteBack(ks adapters.Keyspace, written []cache.WrittenBack) {
	if e.wal == nil || len(written) == 0 {
		return
	}
	recs := make([]logrec.Record, len(written))
	for i, w := range written {
		k, v := logExpect(w.Base)
		recs[i] = logrec.Record{Type: logrec.RecordWriteBack, Keyspace: string(ks), Key: w.Key, ExpectKind: k, ExpectVersion: v, Digest: w.Digest}
	}
	err := logrec.Validate(recs)
	if err == nil {
		_, _, err = e.wal.AppendEarly(context.Background(), 0, walData(recs))
	}
	e.logged(err)
	if errors.Is(err, wal.ErrClosed) {
		return // the engine is closing: the log would take nothing more
	}
	if e.writeBacksUnlogged.Swap(err != nil) != (err != nil) {
		if err != nil {
			e.opts.Logger.Warn("write-backs are not logged until the WAL takes them again; a restart may then refuse a few and rewrite them", "err", err)
		} else {
			e.opts.Logger.Info("write-backs are logged again")
		}
	}
}

// loop is the background write-back: a round every FlushInterval, or as
// soon as the buffer wants one (dirty bytes over MaxDirtyBytes, dirty
// records eviction chose), with backoff after a failed round.
func (d *writeBacker) loop() {
	defer d.wg.Done()
	opts := d.buf.Options()
	log := opts.Logger // the buffer's: these lines are about its records
	tick := time.NewTicker(opts.FlushInterval)
	defer tick.Stop()
	ctx := d.bg
	backoff := time.Duration(0)
	for {
		select {
		case <-d.stop:
			return
		case <-d.buf.WriteBackWanted():
		case <-tick.C:
		}
		if backoff > 0 {
			select {
			case <-d.stop:
				return
			case <-time.After(backoff):
			}
		}
		errs := d.round(ctx)
		switch {
		case len(errs) == 0:
			backoff = 0
		case stoppedBy(ctx, errs):
			// stopWorkers cancelled the round: a drain, which writes
			// these records back itself and reports its own failures,
			// or Close. Not a failure of the store, and the last round.
			log.Debug("write-back cut short: the background workers stop; dirty records kept", "err", errors.Join(errs...))
			return
		default:
			backoff = min(max(2*backoff, 50*time.Millisecond), 5*time.Second)
			log.Warn("write-back failed; dirty records kept", "err", errors.Join(errs...), "retry_in", backoff)
		}
	}
}

// round is one round of the loop: the queued keyspace creates and drops,
// then, keyspace by keyspace, the dirty records eviction chose and the
// aged ones. It returns each keyspace's failure to write its aged
// records; eviction's write-backs that fail keep their records dirty and
// queued, and are not reported (eviction tries again).
func (d *writeBacker) round(ctx context.Context) []error {
	var errs []error
	if err := d.buf.SettleKeyspaces(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, ks := range d.buf.Keyspaces() {
		if w := d.buf.TakeEvictions(ks); w != nil {
			_ = d.run(ctx, w)
		}
		if err := d.flushAged(ctx, ks); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// stoppedBy reports whether the failures errs of a round run under ctx,
// the loop's context, are all that context's cancellation: stopWorkers
// cut the round short, and no store refused or failed anything on its
// own.
func stoppedBy(ctx context.Context, errs []error) bool {
	if ctx.Err() == nil {
		return false
	}
	for _, err := range errs {
		if !errors.Is(err, context.Canceled) {
			return false
		}
	}
	return true
}

// flushAged writes back the records of ks that have been dirty longer
// than half of MaxDirtyAge less FlushInterval, or all queued ones while
// dirty bytes exceed the buffer's DirtyLimit (cache.Buffer.TakeAged),
// batch after batch, until none is due or the loop stops (a drain's own
// flush takes the rest). MaxDirtyAge is the bound a record's write-back
// must end within: a record waits at most half of it until a look of the
// loop (one every FlushInterval) takes it, and the other half is for the
// store calls, at a cloud's distance and behind other write-backs; the
// dirty limit steers by the oldest record's age within that half.
func (d *writeBacker) flushAged(ctx context.Context, ks adapters.Keyspace) error {
	o := d.buf.Options()
	for !d.stopping() {
		cutoff := time.Now()
		if d.buf.DirtyBytes() <= d.buf.DirtyLimit() {
			cutoff = cutoff.Add(-max(o.MaxDirtyAge/2-o.FlushInterval, 0))
		}
		w := d.buf.TakeAged(ks, cutoff, batchRecords(o))
		if w == nil {
			return nil
		}
		if err := d.run(ctx, w); err != nil {
			return err
		}
	}
	return nil
}

// stopping reports whether stopWorkers was called.
func (d *writeBacker) stopping() bool {
	select {
	case <-d.stop:
		return true
	default:
		return false
	}
}

// stopWorkers stops the loop: it starts no other write-back, the one in
// flight may finish until half of what is left of ctx is spent (none
// without a deadline), and then its store calls are cancelled; it waits
// until the loop is gone. A drain calls it before its own flush: a
// write-back that finishes settles its records itself, while one cut off
// in flight leaves the store's answer unknown, which costs the drain
// reads and refusals; and one stuck on a hung store lets go of its
// keyspace in time for the flush. Flush and everything else still work
// after it. It is idempotent.
func (d *writeBacker) stopWorkers(ctx context.Context) {
	d.stopOnce.Do(func() {
		close(d.stop)
		done := make(chan struct{})
		go func() { d.wg.Wait(); close(done) }()
		if dl, ok := ctx.Deadline(); ok {
			t := time.NewTimer(time.Until(dl) / 2)
			select {
			case <-done:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
		d.bgCancel()
		<-done
	})
}

// flush writes back every record dirty when it starts, in every keyspace,
// after running the queued keyspace creates and drops; it returns the
// store's errors (the records stay dirty).
func (d *writeBacker) flush(ctx context.Context) error {
	if err := d.buf.SettleKeyspaces(ctx); err != nil {
		return err
	}
	var errs []error
	for _, ks := range d.buf.Keyspaces() {
		if err := d.flushSpace(ctx, ks); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// batchRecords is the most records one write-back takes: ten store calls'
// worth (cache.Options.WriteBatch each), or as many calls as it may have
// in flight at once (cache.Options.WriteBackParallelism) if that is more.
func batchRecords(o cache.Options) int { return max(10, o.WriteBackParallelism) * o.WriteBatch }

// flushSpace writes back the records of ks dirty now, batch after batch,
// and stops at the first batch that fails.
func (d *writeBacker) flushSpace(ctx context.Context, ks adapters.Keyspace) error {
	ws := d.buf.TakeDirty(ks, batchRecords(d.buf.Options()))
	for i, w := range ws {
		if err := d.run(ctx, w); err != nil {
			for _, rest := range ws[i+1:] {
				rest.Close()
			}
			return err
		}
	}
	return nil
}

// Flush writes back every record dirty when it starts, in every keyspace,
// and runs the queued keyspace creates and drops first, so that a
// checkpoint never covers a drop the store has not seen. It returns the
// store's errors; the records it could not write stay dirty.
func (e *Engine) Flush(ctx context.Context) error { return e.wb.flush(ctx) }

// FlushKeyspace is Flush for one keyspace: it writes back every record of
// ks dirty when it starts. An unknown keyspace has nothing to flush.
func (e *Engine) FlushKeyspace(ctx context.Context, ks adapters.Keyspace) error {
	if err := e.buf.SettleKeyspaces(ctx); err != nil {
		return err
	}
	return e.wb.flushSpace(ctx, ks)
}

// EvictUntil runs clock steps over every keyspace until resident bytes are
// at most target or two full turns of the hand free nothing (everything
// is locked, hot, or dirty and failing to write back), writing back the
// dirty records the hand chooses as it goes (cache.Eviction). It returns
// the bytes freed.
func (e *Engine) EvictUntil(ctx context.Context, target int64) int64 {
	ev := e.buf.Evict(target)
	for w, ok := ev.Next(); ok; w, ok = ev.Next() {
		if w != nil {
			_ = e.wb.run(ctx, w) // what it could not write stays dirty, and resident
		}
	}
	return ev.Freed()
}
