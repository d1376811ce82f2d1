package txn

import (
	"context"
	"sync"
	"time"

	"github.com/nemocache/nemo/adapters"
)

// Keyspace handles. A frontend resolves a keyspace (an Azure table) through
// a catalog on every request; Engine.LookupKeyspace keeps what it resolved
// resident here, outside the record buffer, so a hit costs a map lookup
// and no eviction or cache policy can turn it into a remote call. Every
// commit that changes a catalog entry drops its handle after it is
// installed; a lookup that raced such a commit does not keep what it read
// (the generation tells). A handle is trusted as long as a buffered record
// would be: for ever without a staleness bound (every catalog change is
// then this engine's), and for cache.Options.MaxStaleness with one (other
// nodes create and delete tables: coherence shared, or exclusive with a
// bound).
type handles struct {
	ttl time.Duration // 0: never stale

	mu       sync.RWMutex
	gen      uint64 // bumped by every drop
	catalogs map[adapters.Keyspace]map[string]handle
	// resolving are the catalog reads in flight (resolve), so that the
	// lookups that find a handle gone stale at once (every request of a
	// busy table, each second in coherence shared) make one store call
	// between them, not one each.
	resolving map[resolveKey]*resolution
}

// resolveKey names a catalog read: the entry, and the generation it
// started at (a lookup after a catalog change never joins a read begun
// before it).
type resolveKey struct {
	cat adapters.Keyspace
	key string
	gen uint64
}

// resolution is a catalog read in flight; done closes when x and err
// are set.
type resolution struct {
	done   chan struct{}
	x      handle
	err    error
	joined int // lookups waiting on this read besides its own (h.mu)
}

// resolve returns the handle of key in catalog cat, read by read (whose
// result it keeps, unless a catalog change came since gen) or by a read
// of the same entry already in flight since the same generation.
func (h *handles) resolve(ctx context.Context, cat adapters.Keyspace, key []byte, gen uint64, read func() (handle, error)) (handle, error) {
	k := resolveKey{cat, string(key), gen}
	h.mu.Lock()
	if r := h.resolving[k]; r != nil {
		r.joined++
		h.mu.Unlock()
		select {
		case <-r.done:
			return r.x, r.err
		case <-ctx.Done():
			return handle{}, ctx.Err()
		}
	}
	if h.resolving == nil {
		h.resolving = map[resolveKey]*resolution{}
	}
	r := &resolution{done: make(chan struct{})}
	h.resolving[k] = r
	h.mu.Unlock()
	r.x, r.err = read()
	// The handle is kept before the lookups that joined are woken: one
	// that woke first would find neither the handle nor the read in
	// flight, and read again (a transaction's lookup reads the entry
	// under its lock when the handle is missing).
	if r.err == nil {
		h.put(cat, key, r.x, gen)
	}
	h.mu.Lock()
	delete(h.resolving, k)
	h.mu.Unlock()
	close(r.done)
	return r.x, r.err
}

type handle struct {
	ks adapters.Keyspace
	ok bool // the entry exists
	at time.Time
}

// get returns the handle of key in catalog cat if it is fresh, and the
// generation to pass to put after resolving it otherwise.
func (h *handles) get(cat adapters.Keyspace, key []byte) (handle, bool, uint64) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	x, ok := h.catalogs[cat][string(key)]
	if ok && h.ttl > 0 && time.Since(x.at) > h.ttl {
		ok = false
	}
	return x, ok, h.gen
}

// put keeps a resolved handle unless a catalog change came since gen.
func (h *handles) put(cat adapters.Keyspace, key []byte, x handle, gen uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen != gen {
		return
	}
	if h.catalogs == nil {
		h.catalogs = map[adapters.Keyspace]map[string]handle{}
	}
	m := h.catalogs[cat]
	if m == nil {
		m = map[string]handle{}
		h.catalogs[cat] = m
	}
	m[string(key)] = x
}

// drop forgets the handles of the changed catalog entries (after the
// changes are installed).
func (h *handles) drop(changes []Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range changes {
		if m := h.catalogs[c.Keyspace]; m != nil && (c.Op == ChangePut || c.Op == ChangeDelete) {
			delete(m, string(c.Key))
			h.gen++
		}
	}
}

// clear drops every handle (Engine.Reset); a read in flight does not keep
// what it read (the generation tells).
func (h *handles) clear() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.catalogs = nil
	h.gen++
}
