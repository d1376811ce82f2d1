package txn

import (
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
