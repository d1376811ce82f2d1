package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/invariants"
)

// This file is keyspace lifecycle: opening a keyspace in the buffer, and
// carrying creates and drops to the store in order with every other store
// call.
//
// A drop must reach the store before any later read or write of the
// keyspace does (or a re-created table would show, or receive, the old
// one's records), and a create before the first write-back into it. Both
// are therefore queued in the buffer's keyspace gate, and every store call
// the buffer makes first settles the queue: the pending creates and drops
// run, in the order they were queued, before the call goes out. A failed
// one stays queued and fails the call, so nothing overtakes it; Flush
// settles the queue too, so a checkpoint never covers an unsettled drop.

// OpenKeyspace makes ks known to the buffer (idempotent).
func (b *Buffer) OpenKeyspace(ks adapters.Keyspace) {
	b.mu.RLock()
	_, ok := b.spaces[ks]
	b.mu.RUnlock()
	if ok {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.spaces[ks]; ok {
		return
	}
	s := &keyspace{name: ks, tree: btree.NewG[*record](32, less), wbMu: newCtxRWMutex()}
	s.head = newRecord(nil, nil, Tombstone)
	s.head.flags.Or(flagHead | flagGap)
	s.put(s.head)
	b.used.Add(b.size(s.head))
	b.count.Add(1)
	b.spaces[ks] = s
}

// CreateKeyspace opens ks and queues its creation in the store (see
// SettleKeyspaces). It does no I/O.
func (b *Buffer) CreateKeyspace(ks adapters.Keyspace) {
	b.OpenKeyspace(ks)
	b.gate.queue(ks, false)
}

// DropKeyspace forgets ks and every record of it, dirty ones included, and
// queues its deletion in the store, which runs before any later store call
// of the buffer (see SettleKeyspaces). It does no I/O; ks may be opened
// again afterwards and starts empty.
func (b *Buffer) DropKeyspace(ks adapters.Keyspace) {
	b.ForgetKeyspace(ks)
	b.gate.queue(ks, true)
}

// ForgetKeyspace forgets ks and every record of it, dirty ones included,
// and leaves the store alone: for an engine whose own knowledge of ks may
// be stale because another node owned ks meanwhile, and whose dirty
// records that node had (in a commit log kept in the store) and wrote. It
// waits out a write-back of ks in flight; ks may be opened again
// afterwards and starts empty. The caller holds no lock in ks.
func (b *Buffer) ForgetKeyspace(ks adapters.Keyspace) {
	b.mu.Lock()
	s, ok := b.spaces[ks]
	delete(b.spaces, ks)
	b.mu.Unlock()
	if !ok {
		return
	}
	// Wait out a write-back in flight, so that it cannot reach the store
	// after the keyspace is forgotten.
	s.wbMu.lock()
	defer s.wbMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tree.Ascend(func(r *record) bool {
		b.used.Add(-b.size(r))
		b.count.Add(-1)
		if r.dirty() {
			b.dirty.Add(-b.size(r))
		}
		return true
	})
	s.tree.Clear(false)
	s.dirtyQ = nil
	s.evictQ = nil
	s.dropped = true
	if invariants.Enabled {
		b.assertCounters()
	}
}

// SettleKeyspaces runs the queued keyspace creates and drops against the
// store now. Every store call runs them first anyway; callers that want a
// create or drop to reach the store before they answer (the engine, right
// after committing one) call this.
func (b *Buffer) SettleKeyspaces(ctx context.Context) error {
	if err := b.gate.settle(ctx); err != nil {
		return storeErr("keyspace admin", err)
	}
	return nil
}

// Keyspaces lists the open keyspaces in name order.
func (b *Buffer) Keyspaces() []adapters.Keyspace {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]adapters.Keyspace, 0, len(b.spaces))
	for k := range b.spaces {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// KnownKeyspaces lists, in name order, the keyspaces whose names start
// with prefix that the buffer has open (a write to one, flushed or not,
// opens it) or that the store lists as holding data (when it is an
// adapters.KeyspaceLister; queued creates and drops reach the store
// first). Some may turn out empty: callers that care read them.
func (b *Buffer) KnownKeyspaces(ctx context.Context, prefix string) ([]adapters.Keyspace, error) {
	var out []adapters.Keyspace
	if l, ok := b.rawStore.(adapters.KeyspaceLister); ok {
		if err := b.SettleKeyspaces(ctx); err != nil {
			return nil, err
		}
		kss, err := l.ListKeyspaces(ctx, prefix)
		if err != nil && !errors.Is(err, adapters.ErrNoKeyspaceLister) {
			return nil, storeErr("list keyspaces", err)
		}
		out = kss
	}
	for _, ks := range b.Keyspaces() {
		if strings.HasPrefix(string(ks), prefix) {
			out = append(out, ks)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// keyspaceGate queues keyspace creates and drops until they reach the
// store. Lock order: runMu (held across the admin calls) before opsMu
// (never held across I/O).
type keyspaceGate struct {
	admin   adapters.KeyspaceAdmin // nil: the store has no explicit keyspaces
	pending atomic.Int32           // len(ops), for the lock-free fast path

	calls   atomic.Uint64 // store calls made through the gate (gatedStore), for the refresh-ahead budget
	runMu   ctxMutex
	timeout time.Duration // bounds each store call (Options.StoreTimeout)
	opsMu   sync.Mutex
	ops     map[adapters.Keyspace]*keyspaceOp
	order   []adapters.Keyspace // queue order of ops' keys
	gen     uint64
}

// keyspaceOp is what a keyspace owes the store: a drop, then a create.
type keyspaceOp struct {
	drop, create bool
	gen          uint64 // changes whenever the op is queued again
	dropGen      uint64 // gen of the latest drop queued
}

func (g *keyspaceGate) queue(ks adapters.Keyspace, drop bool) {
	if g.admin == nil {
		return
	}
	g.opsMu.Lock()
	defer g.opsMu.Unlock()
	op := g.ops[ks]
	if op == nil {
		if g.ops == nil {
			g.ops = map[adapters.Keyspace]*keyspaceOp{}
		}
		op = &keyspaceOp{}
		g.ops[ks] = op
		g.order = append(g.order, ks)
		g.pending.Store(int32(len(g.ops)))
	}
	g.gen++
	op.gen = g.gen
	if drop {
		op.drop, op.create = true, false // a create not yet done is undone by the drop
		op.dropGen = g.gen
	} else {
		op.create = true
	}
}

// run carries one queued op to the store, each call bounded by the gate's
// timeout (Options.StoreTimeout).
func (g *keyspaceGate) run(ctx context.Context, ks adapters.Keyspace, op keyspaceOp) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	if op.drop {
		if err := g.admin.DropKeyspace(ctx, ks); err != nil && !errors.Is(err, adapters.ErrNoKeyspaceAdmin) {
			return fmt.Errorf("drop keyspace %q: %w", ks, err)
		}
	}
	if op.create {
		if err := g.admin.CreateKeyspace(ctx, ks); err != nil && !errors.Is(err, adapters.ErrNoKeyspaceAdmin) {
			return fmt.Errorf("create keyspace %q: %w", ks, err)
		}
	}
	return nil
}

// settle runs every queued op, oldest keyspace first; it stops at the first
// failure, which stays queued.
func (g *keyspaceGate) settle(ctx context.Context) error {
	if g.pending.Load() == 0 {
		return nil
	}
	if err := g.runMu.Lock(ctx); err != nil {
		return fmt.Errorf("cache: waiting for a keyspace create or drop in flight: %w", err)
	}
	defer g.runMu.Unlock()
	for {
		g.opsMu.Lock()
		if len(g.order) == 0 {
			g.opsMu.Unlock()
			return nil
		}
		ks := g.order[0]
		op := *g.ops[ks]
		g.opsMu.Unlock()
		if err := g.run(ctx, ks, op); err != nil {
			return err
		}
		g.opsMu.Lock()
		if cur := g.ops[ks]; cur.gen == op.gen {
			delete(g.ops, ks)
			g.order = g.order[1:]
		} else {
			// Queued again while it ran: what ran is done; what was
			// queued since runs next (a create is idempotent, so one
			// that already ran may run again).
			cur.drop = cur.dropGen > op.gen
		}
		g.pending.Store(int32(len(g.ops)))
		g.opsMu.Unlock()
	}
}

// gatedStore is the buffer's view of its store: every call settles the
// keyspace gate first, and is counted.
type gatedStore struct {
	adapters.Store
	gate   *keyspaceGate
	source func(ctx context.Context, ks adapters.Keyspace) (Reader, error) // Options.Source
}

// reader is where ks is read: the store, or what Options.Source names.
func (s gatedStore) reader(ctx context.Context, ks adapters.Keyspace) (Reader, error) {
	if s.source == nil {
		return s.Store, nil
	}
	r, err := s.source(ctx, ks)
	if err != nil || r != nil {
		return r, err
	}
	return s.Store, nil
}

// read runs fn on ks's reader. A source that answers that it no longer
// serves ks (ErrSourceMoved: the owner handed it over since it was
// named) is asked for once more: Source names where ks is read now.
func (s gatedStore) read(ctx context.Context, ks adapters.Keyspace, fn func(Reader) ([]adapters.Record, error)) ([]adapters.Record, error) {
	for try := 1; ; try++ {
		r, err := s.reader(ctx, ks)
		if err != nil {
			return nil, err
		}
		recs, err := fn(r)
		if err == nil || try == 2 || !errors.Is(err, ErrSourceMoved) {
			return recs, err
		}
	}
}

func (s gatedStore) enter(ctx context.Context) error {
	s.gate.calls.Add(1)
	return s.gate.settle(ctx)
}

func (s gatedStore) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	return s.read(ctx, ks, func(r Reader) ([]adapters.Record, error) { return r.Get(ctx, ks, keys) })
}

func (s gatedStore) GetRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	if err := s.enter(ctx); err != nil {
		return nil, false, err
	}
	var more bool
	recs, err := s.read(ctx, ks, func(r Reader) (recs []adapters.Record, err error) {
		recs, more, err = r.GetRange(ctx, ks, start, end, limit)
		return recs, err
	})
	return recs, more, err
}

func (s gatedStore) Upsert(ctx context.Context, ks adapters.Keyspace, writes []adapters.Write) ([]adapters.Version, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	return s.Store.Upsert(ctx, ks, writes)
}

func (s gatedStore) Delete(ctx context.Context, ks adapters.Keyspace, writes []adapters.Write) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	return s.Store.Delete(ctx, ks, writes)
}

// WriteAtomic passes an atomic group to the store, after the gate, when
// the store can apply one (adapters.AtomicWriter).
func (s gatedStore) WriteAtomic(ctx context.Context, ks adapters.Keyspace, ms []adapters.Mutation) ([]adapters.Version, error) {
	aw, ok := s.Store.(adapters.AtomicWriter)
	if !ok {
		return nil, fmt.Errorf("%w: the store has no atomic writes", errors.ErrUnsupported)
	}
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	return aw.WriteAtomic(ctx, ks, ms)
}
