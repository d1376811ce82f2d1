package txn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/obs"
)

// Lock waits. The buffer never waits for a lock: a request another owner
// stands in the way of fails with a *cache.LockConflict naming the holders
// and a channel closed when a lock on that record is next released. The
// transaction then waits for it, up to Options.LockWait, and asks again,
// as the services make a conflicting writer wait rather than fail. A wait
// that would close a cycle in the waits-for graph (a deadlock) is refused
// instead: the request fails with ErrConflict at once and the transaction
// aborts, which is the one place where two-phase locking must give up and
// where the services return ABORTED or 409 too. Every wait is entered in
// the graph under one mutex after checking that none of the holders waits,
// directly or through others, for the waiter, so the graph stays acyclic
// and no set of waiting transactions can block each other forever.

// errLockTimeout: a lock wait ran out of Options.LockWait. The request
// fails with ErrConflict, which Run does not retry: it has waited already.
var errLockTimeout = errors.New("gave up waiting for the lock")

// waitGraph is the engine's waits-for graph: for each waiting transaction,
// the transactions holding what it waits for.
type waitGraph struct {
	mu  sync.Mutex
	out map[uint64][]uint64
}

// enter records that id waits for holders, unless one of them already
// waits, transitively, for id: then it reports false and records nothing.
func (g *waitGraph) enter(id uint64, holders []uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[uint64]bool{}
	stack := append([]uint64(nil), holders...)
	for len(stack) > 0 {
		h := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if h == id {
			return false
		}
		if seen[h] {
			continue
		}
		seen[h] = true
		stack = append(stack, g.out[h]...)
	}
	if g.out == nil {
		g.out = map[uint64][]uint64{}
	}
	g.out[id] = holders
	return true
}

func (g *waitGraph) leave(id uint64) {
	g.mu.Lock()
	delete(g.out, id)
	g.mu.Unlock()
}

// lockWaitMargin is how long before its request's deadline a lock wait
// gives up (less when the request has less left): long enough for the
// request to abort its transaction and answer.
const lockWaitMargin = 250 * time.Millisecond

// waitDeadline is when a lock wait that starts at start gives up: after
// lockWait, or earlier, just before ctx's deadline. A request's deadline
// (the client's, or the frontend's, which may be shorter than the lock
// wait) would otherwise end the wait first, and the
// client would get DEADLINE_EXCEEDED or a 500 timeout, which leaves it
// unsure whether anything was applied and which clients do not retry as a
// transaction, where nothing was and a lock timeout (ErrConflict: ABORTED,
// 503 ServerBusy) tells it so while there is time to answer.
func waitDeadline(ctx context.Context, start time.Time, lockWait time.Duration) time.Time {
	deadline := start.Add(lockWait)
	if d, ok := ctx.Deadline(); ok {
		if early := d.Add(-min(lockWaitMargin, d.Sub(start)/4)); early.Before(deadline) {
			deadline = early
		}
	}
	return deadline
}

// acquire runs lock, one of the buffer's lock requests for t, and while it
// fails with a lock conflict waits for the holders to let go and runs it
// again, for up to Options.LockWait in all. It gives up at once, with the
// conflict, when waiting could deadlock (see waitGraph) or waiting is off
// (LockWait < 0). t.mu is held.
func (t *Txn) acquire(ctx context.Context, lock func() error) error {
	err := lock()
	var lc *cache.LockConflict
	if err == nil || t.e.opts.LockWait <= 0 || !errors.As(err, &lc) {
		return err
	}
	start := time.Now()
	deadline := waitDeadline(ctx, start, t.e.opts.LockWait)
	defer func() {
		d := time.Since(start)
		t.e.stats.lockWait.ObserveDuration(d)
		obs.NoteLockWait(ctx, d)
	}()
	for {
		if !t.e.waits.enter(t.id, lc.Holders) {
			t.e.stats.deadlocks.Add(1)
			return fmt.Errorf("%w (waiting would deadlock)", err)
		}
		t.e.stats.lockWaits.Add(1)
		timer := time.NewTimer(time.Until(deadline))
		stopped := false
		select {
		case <-lc.Wake:
		case <-timer.C:
		case <-ctx.Done():
		case <-t.e.stop:
			stopped = true
		}
		timer.Stop()
		t.e.waits.leave(t.id)
		if ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
		if stopped {
			return fmt.Errorf("%w: %w", err, ErrClosed)
		}
		if !time.Now().Before(deadline) {
			t.e.stats.lockTimeouts.Add(1)
			return fmt.Errorf("%w: %w after %v", err, errLockTimeout, time.Since(start).Round(time.Millisecond))
		}
		if err = lock(); err == nil || !errors.As(err, &lc) {
			return err
		}
	}
}
