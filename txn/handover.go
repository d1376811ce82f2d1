package txn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nemocache/nemo/adapters"
)

// Handing a keyspace over (coherence partitioned): its owner stops taking
// new operations of it, waits for the transactions that touched it to
// end, writes its dirty records back, truncates its commit log (nothing
// is left to replay) and releases its lease; the next replica that writes
// it takes the lease at once (no TTL to wait out) and reads the store,
// which holds everything. Operations that arrive meanwhile are refused
// with errHandingOver: a forwarded one makes its sender route again, a
// local one is retried by the client (503 ServerBusy, UNAVAILABLE). Reads
// outside transactions go on from the buffer, which is exact until the
// lease is gone.

// Releaser lets go of one keyspace's lease (the lease manager).
type Releaser interface {
	Release(ctx context.Context, ks adapters.Keyspace) error
}

// errHandingOver refuses an operation on a keyspace being handed over.
var errHandingOver = fmt.Errorf("%w: %w: the keyspace is being handed over to another replica", ErrLeaseUnavailable, ErrNotOwner)

// ErrNoHandover: Handover outside coherence partitioned.
var ErrNoHandover = errors.New("txn: keyspaces are handed over only in coherence partitioned")

// handoverPoll is how often Handover looks whether the transactions that
// touched the keyspace have ended.
const handoverPoll = 5 * time.Millisecond

// Handover hands ks over (see above). If ctx ends first, the handover is
// abandoned and ks stays this node's.
func (e *Engine) Handover(ctx context.Context, ks adapters.Keyspace) error {
	rel, ok := e.opts.Leases.(Releaser)
	if e.opts.Router == nil || e.klogs == nil || !ok {
		return ErrNoHandover
	}
	r, err := e.opts.Router.Route(ctx, ks)
	if err != nil {
		return err
	}
	if !r.Leased || !r.Held {
		return fmt.Errorf("%w: %q", ErrNotOwner, ks)
	}
	kl := e.klogs
	kl.mu.Lock()
	if kl.handing[ks] {
		kl.mu.Unlock()
		return fmt.Errorf("txn: %q is already being handed over", ks)
	}
	kl.handing[ks] = true
	kl.mu.Unlock()
	defer func() {
		kl.mu.Lock()
		delete(kl.handing, ks)
		kl.mu.Unlock()
	}()
	for {
		kl.mu.Lock()
		n := kl.users[ks]
		kl.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("txn: hand %q over: %d transactions still use it: %w", ks, n, ctx.Err())
		case <-time.After(handoverPoll):
		}
	}
	if k := e.klogOf(ks); k != nil && k.log != nil {
		e.applyMu.Lock()
		last := k.last.Load()
		e.applyMu.Unlock()
		if err := e.FlushKeyspace(ctx, ks); err != nil {
			return fmt.Errorf("txn: hand %q over: flush: %w", ks, err)
		}
		if last != 0 {
			if err := k.log.Truncate(ctx, last+1); err != nil {
				return fmt.Errorf("txn: hand %q over: truncate its commit log: %w", ks, err)
			}
		}
	} else if err := e.FlushKeyspace(ctx, ks); err != nil {
		return fmt.Errorf("txn: hand %q over: flush: %w", ks, err)
	}
	if err := rel.Release(ctx, ks); err != nil {
		return fmt.Errorf("txn: hand %q over: release its lease: %w", ks, err)
	}
	// The next time this node holds ks it opens its log afresh, at the
	// new epoch, and forgets what it knew (klog.go).
	kl.mu.Lock()
	delete(kl.m, ks)
	kl.mu.Unlock()
	e.buf.SetExact(ks, false)
	e.opts.Router.Invalidate(ks)
	e.opts.Logger.Info("keyspace handed over: written back, log truncated, lease released", "keyspace", ks)
	return nil
}

// use counts t among the transactions that touched ks (Handover waits for
// them), once; t.mu is held. It fails while ks is being handed over.
func (t *Txn) use(ks adapters.Keyspace) error {
	kl := t.e.klogs
	if kl == nil {
		return nil
	}
	kl.mu.Lock()
	defer kl.mu.Unlock()
	if kl.handing[ks] {
		return fmt.Errorf("%w: %q", errHandingOver, ks)
	}
	for _, u := range t.uses {
		if u == ks {
			return nil
		}
	}
	t.uses = append(t.uses, ks)
	kl.users[ks]++
	return nil
}

// unuse ends t's uses; t.mu is held.
func (t *Txn) unuse() {
	kl := t.e.klogs
	if kl == nil || len(t.uses) == 0 {
		return
	}
	kl.mu.Lock()
	for _, ks := range t.uses {
		if kl.users[ks]--; kl.users[ks] == 0 {
			delete(kl.users, ks)
		}
	}
	kl.mu.Unlock()
	t.uses = nil
}

// handingOver reports whether ks is being handed over.
func (e *Engine) handingOver(ks adapters.Keyspace) bool {
	if e.klogs == nil {
		return false
	}
	e.klogs.mu.Lock()
	defer e.klogs.mu.Unlock()
	return e.klogs.handing[ks]
}

// Owned is one keyspace this node owns (coherence partitioned): it holds
// its lease and has its commit log open.
type Owned struct {
	Keyspace adapters.Keyspace
	// LastSeq is the last entry appended to its log: it grows with every
	// commit, so its change between two looks is the keyspace's write
	// activity (a rebalance moves the coldest).
	LastSeq uint64
	// InUse counts the transactions using it now.
	InUse int
}

// Owned lists the keyspaces this node owns, in name order; nil outside
// coherence partitioned.
func (e *Engine) Owned() []Owned {
	if e.opts.Router == nil || e.klogs == nil {
		return nil
	}
	kl := e.klogs
	kl.mu.Lock()
	var out []Owned
	for ks, k := range kl.m {
		select {
		case <-k.ready:
		default:
			continue // opening: not owned yet
		}
		if k.err != nil || k.log == nil || kl.handing[ks] || kl.src.Epoch(ks) != k.epoch {
			continue
		}
		out = append(out, Owned{Keyspace: ks, LastSeq: k.last.Load(), InUse: kl.users[ks]})
	}
	kl.mu.Unlock()
	slices.SortFunc(out, func(a, b Owned) int { return strings.Compare(string(a.Keyspace), string(b.Keyspace)) })
	return out
}

// Acquire makes this node ks's owner now, as its first write would: it
// takes the lease (refused while another node's is live: ErrHeld of the
// lease manager, as a Hold) and opens and replays its log. A rebalance
// asks the replica it moves a keyspace to (Handover's other half), so the
// keyspace does not wait for its next writer to land on the right node.
func (e *Engine) Acquire(ctx context.Context, ks adapters.Keyspace) error {
	if e.opts.Router == nil || e.klogs == nil {
		return ErrNoHandover
	}
	if e.draining.Load() {
		return fmt.Errorf("%w: this node is draining", ErrLeaseUnavailable)
	}
	if e.handingOver(ks) {
		return fmt.Errorf("%w: %q", errHandingOver, ks)
	}
	// The caller has just released ks: what this node remembers of its
	// owner (a refused Hold is answered from memory for a while) is stale.
	e.opts.Router.Invalidate(ks)
	_, err := e.ksReady(ctx, ks)
	return err
}
