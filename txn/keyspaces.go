package txn

import (
	"context"
	"fmt"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/obs"
)

// Keyspace lifecycle. A keyspace is opened in the buffer on first use by
// any engine call, so frontends never open one themselves. Keyspaces that
// exist explicitly in the store (Azure tables; the embedded store's
// buckets) are listed in a catalog: a keyspace whose records map a catalog
// key (the dialect's spelling of the name, e.g. lower-cased for Azure's
// case-insensitive table names) to the keyspace's name. Creating and
// dropping go through a transaction, so they lock the catalog entry like
// any write, are logged in the WAL with it, and replay in order: a drop
// replayed discards the keyspace's earlier records, so a table dropped
// before a crash never comes back. The store side of a create or drop runs
// in the buffer's keyspace gate, before any later store call (see
// cache.Buffer.DropKeyspace).

// CreateKeyspace registers ks under key in catalog cat and creates it in
// the store before returning; ErrExists if key is taken. The entry stays
// X-locked until the transaction ends.
func (t *Txn) CreateKeyspace(ctx context.Context, cat adapters.Keyspace, key []byte, ks adapters.Keyspace) error {
	if ks == cat || ks == "" {
		return fmt.Errorf("%w: keyspace %q in catalog %q", ErrInvalidKey, ks, cat)
	}
	if _, exists, err := t.GetForUpdate(ctx, cat, key); err != nil {
		return err
	} else if exists {
		return fmt.Errorf("%w: %q", ErrExists, key)
	}
	// Its commit log (kept in the backend) first: the create is logged
	// there.
	t.mu.Lock()
	err := t.ready(ctx, ks)
	t.mu.Unlock()
	if err != nil {
		return err
	}
	// The store side first, so a store that refuses the create fails the
	// transaction instead of a write-back later.
	t.e.buf.CreateKeyspace(ks)
	if err := t.e.buf.SettleKeyspaces(ctx); err != nil {
		return err
	}
	if err := t.Insert(ctx, cat, key, []byte(ks)); err != nil {
		return err
	}
	t.mu.Lock()
	t.ksOps = append(t.ksOps, Change{Op: ChangeCreateKeyspace, Keyspace: ks})
	t.mu.Unlock()
	return nil
}

// DropKeyspace removes key from catalog cat and, at commit, drops the
// keyspace it names: every record of it, dirty ones included, in the
// buffer and then in the store. ErrNotFound if key is absent. It returns
// the dropped keyspace.
func (t *Txn) DropKeyspace(ctx context.Context, cat adapters.Keyspace, key []byte) (adapters.Keyspace, error) {
	if t.e.opts.Router != nil && !t.served {
		// Coherence partitioned: the drop runs where the keyspace does.
		if ks, ok, err := t.e.LookupKeyspace(ctx, cat, key); err != nil || ok {
			if err != nil {
				return "", err
			}
			if r, done, err := t.dropOn(ctx, ks, cat, key); done || err != nil {
				return r.Keyspace, err
			}
		}
	}
	v, exists, err := t.GetForUpdate(ctx, cat, key)
	if err != nil {
		return "", err
	}
	if !exists {
		return "", fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	ks := adapters.Keyspace(v)
	if _, err := t.Delete(ctx, cat, key); err != nil {
		return "", err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// Its commit log (kept in the backend) logs the drop, so that a
	// replay never brings its records back.
	if err := t.ready(ctx, ks); err != nil {
		return "", err
	}
	t.ksOps = append(t.ksOps, Change{Op: ChangeDropKeyspace, Keyspace: ks})
	return ks, nil
}

// dropOn sends a drop of the keyspace ks that cat names under key to ks's
// owner, if that is another node (done).
func (t *Txn) dropOn(ctx context.Context, ks, cat adapters.Keyspace, key []byte) (Result, bool, error) {
	t.mu.Lock()
	defer t.end()
	if err := t.begin(true); err != nil {
		return Result{}, false, err
	}
	return t.remoteOn(ctx, ks, Op{Kind: OpDropKeyspace, Keyspace: cat, Key: key})
}

// LookupKeyspace resolves key in catalog cat, S-locking the entry until
// the transaction ends, so a concurrent drop cannot interleave with the
// transaction's use of the keyspace.
func (t *Txn) LookupKeyspace(ctx context.Context, cat adapters.Keyspace, key []byte) (adapters.Keyspace, bool, error) {
	t.mu.Lock()
	if t.catalogs == nil {
		t.catalogs = map[adapters.Keyspace]bool{}
	}
	t.catalogs[cat] = true
	t.mu.Unlock()
	ctx = obs.Quiet(ctx) // a catalog read is not the request's data
	if x, ok, err := t.lookupResident(ctx, cat, key); ok || err != nil {
		return x.ks, x.ok, err
	}
	// No fresh handle: resolve one as a lookup outside the transaction
	// does (one catalog read among all the lookups waiting for it), then
	// take it under our lock as above; the entry is read under the lock
	// only if the handle changed meanwhile or the transaction writes the
	// entry itself.
	if _, fresh, gen := t.e.handles.get(cat, key); !fresh {
		if _, err := t.e.resolveHandle(ctx, cat, key, gen); err != nil {
			return "", false, err
		}
		if x, ok, err := t.lookupResident(ctx, cat, key); ok || err != nil {
			return x.ks, x.ok, err
		}
	}
	v, ok, err := t.Get(ctx, cat, key)
	if err != nil || !ok {
		return "", false, err
	}
	return adapters.Keyspace(v), true, nil
}

// lookupResident resolves key in catalog cat from the engine's resident
// handle, S-locking the entry without reading it: so a lookup costs no
// remote call even where the buffer keeps nothing (policy none). The
// handle is taken only if it is current once the lock is held: a commit
// that changes the entry holds it X and drops the handle before letting
// go (commitChanges), so a handle that survives our S lock is the entry's
// state under it. ok false says read the entry instead (no handle, or it
// changed meanwhile, or the transaction writes the entry itself).
func (t *Txn) lookupResident(ctx context.Context, cat adapters.Keyspace, key []byte) (x handle, ok bool, err error) {
	x, fresh, gen := t.e.handles.get(cat, key)
	if !fresh {
		return handle{}, false, nil
	}
	t.mu.Lock()
	defer t.end()
	if err := t.begin(false); err != nil {
		return handle{}, false, err
	}
	if _, pending := t.pending(cat, key); pending || t.snapshot {
		return handle{}, false, nil
	}
	t.e.buf.OpenKeyspace(cat)
	if err := t.acquire(ctx, func() error { return t.e.buf.LockKeySharedBlind(cat, key, t.owner) }); err != nil {
		return handle{}, false, t.fail(err)
	}
	y, still, gen2 := t.e.handles.get(cat, key)
	if !still || gen2 != gen || y.ks != x.ks || y.ok != x.ok {
		return handle{}, false, nil
	}
	// What the handle says may be a commit released early and not yet
	// durable: the transaction depends on it as on a read.
	t.depend(t.e.dependKey(cat, key))
	return x, true, nil
}

// LookupKeyspace resolves key in catalog cat as of the latest commit,
// without locks, from the resident handles when it can (handles.go).
func (e *Engine) LookupKeyspace(ctx context.Context, cat adapters.Keyspace, key []byte) (adapters.Keyspace, bool, error) {
	x, fresh, gen := e.handles.get(cat, key)
	if !fresh {
		var err error
		if x, err = e.resolveHandle(ctx, cat, key, gen); err != nil {
			return "", false, err
		}
	}
	return x.ks, x.ok, nil
}

// resolveHandle reads key in catalog cat as of the latest commit and keeps
// it as the resident handle, sharing a read in flight (handles.resolve).
func (e *Engine) resolveHandle(ctx context.Context, cat adapters.Keyspace, key []byte, gen uint64) (handle, error) {
	return e.handles.resolve(ctx, cat, key, gen, func() (handle, error) {
		at := time.Now()
		v, ok, err := e.Get(obs.Quiet(ctx), cat, key, ReadLatest)
		if err != nil {
			return handle{}, err
		}
		x := handle{ok: ok, at: at}
		if ok {
			x.ks = adapters.Keyspace(v)
		}
		return x, nil
	})
}

// ListKeyspaces lists catalog cat from key start (inclusive) in key order,
// at most limit entries when limit > 0, as of the latest commit. next, when
// non-nil, is where the next page starts.
func (e *Engine) ListKeyspaces(ctx context.Context, cat adapters.Keyspace, start []byte, limit int) (kss []adapters.Keyspace, next []byte, err error) {
	recs, next, err := e.Scan(ctx, cat, start, nil, limit, ReadLatest)
	if err != nil {
		return nil, nil, err
	}
	kss = make([]adapters.Keyspace, len(recs))
	for i, r := range recs {
		kss[i] = adapters.Keyspace(r.Value)
	}
	return kss, next, nil
}

// Keyspaces lists, in name order, the keyspaces whose names start with
// prefix that the buffer holds or the store lists (see
// cache.Buffer.KnownKeyspaces): a frontend answering a query about its
// keyspaces (Datastore's __namespace__) reads each one it cares about,
// since some may hold no records.
func (e *Engine) Keyspaces(ctx context.Context, prefix string) ([]adapters.Keyspace, error) {
	return e.buf.KnownKeyspaces(ctx, prefix)
}

// Unflushed reports whether ks holds a committed write whose key satisfies
// match and that the store has not been sent yet (a frontend asks before
// passing a query it cannot answer itself to the backend).
func (e *Engine) Unflushed(ks adapters.Keyspace, match func(key []byte) bool) (bool, error) {
	e.buf.OpenKeyspace(ks)
	return e.buf.AnyDirty(ks, match)
}
