package txn

import (
	"context"
	"errors"
	"fmt"
)

// Reset empties the engine and, through wipe, its store: a local
// emulator's reset between the tests of a suite (nemo's POST /reset over
// the in-memory embedded store). It refuses new transactions (ErrClosed)
// while it runs, aborts the live ones, settles the keyspace creates and
// drops queued for the store, forgets every keyspace of the buffer, dirty
// records included (waiting out their write-backs in flight), and the
// resident catalog handles, calls wipe, forgets again what reads outside
// transactions admitted meanwhile, and admits transactions again.
// Afterwards nothing committed before it can be read. It keeps no record
// of itself in a commit log: with a WAL or keyspace logs a restart would
// replay what it forgot, so it refuses to run with either. Not during a
// drain (ErrClosed). Reads outside transactions that race it may answer
// from before it.
func (e *Engine) Reset(ctx context.Context, wipe func(context.Context) error) error {
	if e.wal != nil || e.klogs != nil || e.opts.Log != nil {
		return errors.New("txn: reset: the engine has a commit log, which a restart would replay")
	}
	e.resetMu.Lock()
	defer e.resetMu.Unlock()
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.closed = true
	live := make([]*Txn, 0, len(e.live))
	for _, t := range e.live {
		live = append(live, t)
	}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.closed = e.draining.Load() // a drain that began meanwhile keeps it closed
		e.mu.Unlock()
	}()
	for _, t := range live {
		t.Abort() // waits for a commit in progress (Txn.mu)
	}
	e.mu.Lock()
	for len(e.live) > 0 {
		e.idle.Wait()
	}
	e.mu.Unlock()
	if err := e.buf.SettleKeyspaces(ctx); err != nil {
		return fmt.Errorf("txn: reset: %w", err)
	}
	e.forgetAll()
	if err := wipe(ctx); err != nil {
		return fmt.Errorf("txn: reset: %w", err)
	}
	e.forgetAll()
	e.opts.Logger.Info("reset: the buffer and the store are empty", "aborted_transactions", len(live))
	return nil
}

// forgetAll forgets every keyspace of the buffer and every catalog handle.
func (e *Engine) forgetAll() {
	for _, ks := range e.buf.Keyspaces() {
		e.buf.ForgetKeyspace(ks)
	}
	e.handles.clear()
}
