package txn

import (
	"context"
	"errors"
	"fmt"

	"github.com/nemocache/nemo/adapters"
)

// Coherence partitioned (Options.Router): each leased keyspace has one
// owner, the holder of its lease, and the engine of every other node
// forwards to it the operations that write or lock the keyspace. The
// rules:
//
//   - A transaction is bound to a node by its first operation on a leased
//     keyspace: this node (it holds the lease, or no live node does and it
//     takes it: Hold) or the owner's peer address (Router.Route). Bound to
//     a peer, it opens a remote transaction there (Router.Open) and sends
//     it every operation, its commit included; the peer runs them as its
//     own transaction (Engine.BeginServed), with exclusive semantics. An
//     operation on a keyspace another node owns, in a transaction bound
//     elsewhere, fails with ErrOwnersDiffer (the transaction is aborted).
//     Keyspaces without a lease (catalogs) bind nothing and run here.
//   - A served transaction never forwards, and never takes a lease: an
//     operation on a keyspace this node does not own (another node does,
//     or none: the sender takes it itself, so a stale route to a node
//     that handed the keyspace over does not take it back) fails with
//     ErrNotOwner. If that is the
//     remote transaction's first operation, nothing ran there: the sender
//     forgets the route (Router.Invalidate) and routes again (at most
//     routeTries times). Later, the whole transaction is retried: the
//     error matches ErrConflict, which Run retries and clients take as
//     contention.
//   - A forwarded commit whose answer is lost (the peer died, the
//     connection broke) may or may not have been applied: it fails with
//     adapters.ErrUnknownOutcome and is never sent again.
//   - Reads outside transactions (ReadLatest) of a keyspace another node
//     owns, or no node holds, are answered by this node's buffer, under
//     the staleness bound (cache.Options.MaxStaleness); what the buffer
//     misses is read from the owner (cache.Options.Source), whose buffer
//     holds what the store does not have yet; a read the owner refuses
//     as no longer its own is routed again, once
//     (cache.ErrSourceMoved). One whose last holder died
//     (Route.Orphaned) takes the lease and replays the keyspace's log
//     first, as a write would.
//   - A node that takes a keyspace's lease forgets what its buffer knew of
//     it before (klog.go): that was another owner's state, read under the
//     bound, and the owner's transactions read what they lock as
//     buffered.

// Router places keyspaces on nodes (coherence partitioned).
type Router interface {
	// Route says where ks's operations that write or lock run.
	Route(ctx context.Context, ks adapters.Keyspace) (Route, error)
	// Open begins a transaction on the peer at addr.
	Open(ctx context.Context, addr string, readOnly bool) (Remote, error)
	// Invalidate forgets what the router knows of ks's owner: a peer
	// answered that it does not own ks, or this node could not take it.
	Invalidate(ks adapters.Keyspace)
}

// Route is where a keyspace's operations that write or lock run.
type Route struct {
	// Peer is the owner's peer address; "" when they run on this node.
	Peer string
	// Leased: ks has a lease (catalogs and reserved keyspaces have none,
	// and run on every node).
	Leased bool
	// Held: this node holds ks's lease.
	Held bool
	// Orphaned: the last holder's lease ran out without a release; its
	// commit log may hold writes the store lacks.
	Orphaned bool
}

// Remote is a transaction running on the keyspace's owner for this node.
type Remote interface {
	// Do runs one operation of the transaction there. An OpCommit or
	// OpAbort ends it.
	Do(ctx context.Context, op Op) (Result, error)
	// Close lets go of the remote transaction, aborting it unless it
	// ended.
	Close()
}

// OpKind names a transaction operation sent to a keyspace's owner.
type OpKind uint8

// The operations a remote transaction runs: the Txn methods of the same
// names.
const (
	OpGet OpKind = iota + 1
	OpGetForUpdate
	OpGetMany
	OpScan
	OpLockKnown
	OpInsert
	OpUpdate
	OpUpsert
	OpDelete
	OpDropKeyspace
	OpCommit
	OpAbort
	opEnd // one past the last
)

// Valid reports whether k is an operation.
func (k OpKind) Valid() bool { return k >= OpGet && k < opEnd }

// Op is one operation of a remote transaction.
type Op struct {
	Kind     OpKind
	Keyspace adapters.Keyspace // the catalog for OpDropKeyspace
	Key      []byte            // the start for OpScan
	Value    []byte
	End      []byte   // OpScan
	Limit    int      // OpScan
	Keys     [][]byte // OpGetMany
}

// Result is what a remote operation answered.
type Result struct {
	Value         []byte
	Exists, Known bool
	Values        [][]byte // OpGetMany: nil for an absent key
	Records       []adapters.Record
	Next          []byte
	Keyspace      adapters.Keyspace // OpDropKeyspace
	Committed     []Change          // OpCommit
}

// routeTries bounds how often a transaction's first operation on a
// keyspace is routed again after the owner it found moved on.
const routeTries = 3

// BeginServed starts a transaction another node forwarded here (coherence
// partitioned): it never forwards, and an operation on a keyspace this
// node does not own fails with ErrNotOwner.
func (e *Engine) BeginServed(readOnly bool) (*Txn, error) {
	t, err := e.Begin(readOnly)
	if err == nil {
		t.served = true
	}
	return t, err
}

// route binds t to where ks runs (see the rules above) and returns the
// remote transaction to send the operation to, nil to run it here; t.mu
// is held. Running here, ks is ready (ksReady) when it returns.
func (t *Txn) route(ctx context.Context, ks adapters.Keyspace) (Remote, error) {
	rt := t.e.opts.Router
	if rt == nil {
		return nil, nil
	}
	for try := 1; ; try++ {
		r, err := rt.Route(ctx, ks)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrLeaseUnavailable, err)
		}
		if !r.Leased {
			return nil, nil
		}
		if r.Peer != "" {
			return t.bindRemote(ctx, ks, r.Peer)
		}
		if t.served && !r.Held {
			// Nobody holds it (released, lapsed): the sender takes it
			// itself. Taking it here would undo a hand-over whenever a
			// sender's route to this node was stale.
			return nil, fmt.Errorf("%w: %q: this node does not hold its lease", ErrNotOwner, ks)
		}
		if t.remote != nil {
			return nil, t.refuse(fmt.Errorf("%w: %q runs on this node, the transaction on %s", ErrOwnersDiffer, ks, t.remoteAt))
		}
		err = t.ready(ctx, ks)
		if errors.Is(err, ErrNotLeaseHolder) && try < routeTries {
			rt.Invalidate(ks) // another node took it first
			continue
		}
		if errors.Is(err, ErrNotLeaseHolder) && t.served {
			err = fmt.Errorf("%w: %w", ErrNotOwner, err)
		}
		if err == nil {
			t.local = true
		}
		return nil, err
	}
}

// bindRemote returns t's remote transaction on peer, opening it if t is
// not bound yet; t.mu is held.
func (t *Txn) bindRemote(ctx context.Context, ks adapters.Keyspace, peer string) (Remote, error) {
	switch {
	case t.served:
		return nil, fmt.Errorf("%w: %q is owned by %s", ErrNotOwner, ks, peer)
	case t.remote != nil && t.remoteAt == peer:
		return t.remote, nil
	case t.remote != nil:
		return nil, t.refuse(fmt.Errorf("%w: %q is owned by %s, the transaction runs on %s", ErrOwnersDiffer, ks, peer, t.remoteAt))
	case t.local:
		return nil, t.refuse(fmt.Errorf("%w: %q is owned by %s, the transaction runs on this node", ErrOwnersDiffer, ks, peer))
	}
	rem, err := t.e.opts.Router.Open(ctx, peer, t.readOnly)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrOwnerUnavailable, peer, err)
	}
	t.remote, t.remoteAt, t.remoteFresh = rem, peer, true
	return rem, nil
}

// refuse aborts t for err and returns it; t.mu is held.
func (t *Txn) refuse(err error) error {
	t.abortLocked(err)
	return err
}

// forward runs op, an operation on ks, in t's remote transaction rem; t.mu
// is held. A first operation the peer refused as not its own is routed
// again (ErrNotOwner); a later one aborts t as a conflict.
func (t *Txn) forward(ctx context.Context, ks adapters.Keyspace, rem Remote, op Op) (Result, error) {
	t.noteForwarded(op)
	for try := 1; ; try++ {
		res, err := rem.Do(ctx, op)
		fresh := t.remoteFresh
		t.remoteFresh = false
		if err == nil {
			return res, nil
		}
		if !errors.Is(err, ErrNotOwner) {
			if errors.Is(err, ErrConflict) || errors.Is(err, ErrAborted) || errors.Is(err, ErrDone) {
				t.abortLocked(err)
			}
			return Result{}, err
		}
		t.e.opts.Router.Invalidate(ks)
		if !fresh || try >= routeTries {
			t.abortLocked(err)
			return Result{}, fmt.Errorf("%w: %w", errOwnerMoved, err)
		}
		// Nothing ran there: start over on the new owner.
		rem.Close()
		t.remote, t.remoteAt = nil, ""
		if rem, err = t.route(ctx, ks); err != nil {
			return Result{}, err
		}
		if rem == nil {
			return Result{}, errRouteLocal
		}
	}
}

// noteForwarded remembers the keys op names, for forgetForwarded.
func (t *Txn) noteForwarded(op Op) {
	if op.Key == nil && op.Keys == nil || op.Kind == OpScan || op.Kind == OpDropKeyspace {
		return
	}
	if t.forwarded == nil {
		t.forwarded = map[adapters.Keyspace][][]byte{}
	}
	if op.Key != nil {
		t.forwarded[op.Keyspace] = append(t.forwarded[op.Keyspace], op.Key)
	}
	t.forwarded[op.Keyspace] = append(t.forwarded[op.Keyspace], op.Keys...)
}

// forgetForwarded makes this node's buffer forget the keys t's forwarded
// operations named, once t ends: their owner's answer is newer than what
// the buffer holds (cache.Buffer.Forget), so this node's next reads of
// them ask the owner. t.mu is held.
func (t *Txn) forgetForwarded() {
	for ks, keys := range t.forwarded {
		t.e.buf.Forget(ks, keys)
	}
	t.forwarded = nil
}

// errRouteLocal says a forwarded first operation found its keyspace now
// runs here: the caller runs it locally.
var errRouteLocal = errors.New("txn: keyspace now runs on this node")

// errOwnerMoved: a keyspace's owner changed under a transaction bound to
// it; the transaction is retried as a conflict is.
var errOwnerMoved = fmt.Errorf("%w: the keyspace's owner changed during the transaction", ErrConflict)

// remoteFirst runs op for t on the owner of op.Keyspace if that runs
// elsewhere (done true), or tells the caller to run it here (done false,
// the keyspace ready). t.mu is held and the transaction begun.
func (t *Txn) remoteFirst(ctx context.Context, op Op) (res Result, done bool, err error) {
	return t.remoteOn(ctx, op.Keyspace, op)
}

// remoteOn is remoteFirst for an operation that runs where ks does.
func (t *Txn) remoteOn(ctx context.Context, ks adapters.Keyspace, op Op) (res Result, done bool, err error) {
	rem, err := t.route(ctx, ks)
	if err != nil || rem == nil {
		return Result{}, false, err
	}
	res, err = t.forward(ctx, ks, rem, op)
	if errors.Is(err, errRouteLocal) {
		return Result{}, false, nil
	}
	return res, true, err
}

// commitRemote commits t's remote transaction; t.mu is held.
func (t *Txn) commitRemote(ctx context.Context) error {
	res, err := t.remote.Do(ctx, Op{Kind: OpCommit})
	t.remote.Close()
	t.remote = nil
	if err != nil {
		if errors.Is(err, ErrNotOwner) {
			err = fmt.Errorf("%w: %w", errOwnerMoved, err)
		}
		t.abortLocked(err)
		return err
	}
	t.e.stats.commits.Add(1)
	t.committed = res.Committed
	t.finish(committed, nil)
	return nil
}

// Serve runs op, sent by the node that forwarded t (BeginServed).
func (t *Txn) Serve(ctx context.Context, op Op) (Result, error) {
	var r Result
	var err error
	switch op.Kind {
	case OpGet:
		r.Value, r.Exists, err = t.Get(ctx, op.Keyspace, op.Key)
	case OpGetForUpdate:
		r.Value, r.Exists, err = t.GetForUpdate(ctx, op.Keyspace, op.Key)
	case OpGetMany:
		r.Values, err = t.GetMany(ctx, op.Keyspace, op.Keys)
	case OpScan:
		r.Records, r.Next, err = t.Scan(ctx, op.Keyspace, op.Key, op.End, op.Limit)
	case OpLockKnown:
		r.Value, r.Exists, r.Known, err = t.LockKnown(ctx, op.Keyspace, op.Key)
	case OpInsert:
		err = t.Insert(ctx, op.Keyspace, op.Key, op.Value)
	case OpUpdate:
		err = t.Update(ctx, op.Keyspace, op.Key, op.Value)
	case OpUpsert:
		err = t.Upsert(ctx, op.Keyspace, op.Key, op.Value)
	case OpDelete:
		r.Exists, err = t.Delete(ctx, op.Keyspace, op.Key)
	case OpDropKeyspace:
		r.Keyspace, err = t.DropKeyspace(ctx, op.Keyspace, op.Key)
	case OpCommit:
		if err = t.Commit(ctx); err == nil {
			r.Committed = t.Committed()
		}
	case OpAbort:
		t.Abort()
	default:
		err = fmt.Errorf("%w: operation %d", adapters.ErrInvalid, op.Kind)
	}
	return r, err
}
