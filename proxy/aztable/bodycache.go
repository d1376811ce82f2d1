package aztable

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

// bodyCache keeps the JSON bodies of recent point reads, so that a hot
// entity read again is answered without writing its JSON again (about a
// third of a buffered read's CPU for a 1 KiB entity). An entry is the body
// written for one version of one entity at one metadata level and address;
// it is used only while the buffer still holds that version: its ETag (a
// new one on every write, by nemo or by the service) and a hash of its
// stored value must both match. Bytes are bounded (keys and bodies
// counted); CLOCK picks what to drop. A body costs as much again as the
// record it renders, so the cache is a small slice of the budget for the
// hottest entities, not a copy of the buffer.
//
// Lock order: mu is a leaf.
type bodyCache struct {
	max  int64
	seed maphash.Seed

	mu    sync.RWMutex
	used  int64
	m     map[bodyKey]*bodyEntry
	clock []*bodyEntry
	hand  int
}

// bodyKey names what a body depends on besides the value: the entity, the
// metadata level, and odata.metadata (the address the client used).
type bodyKey struct {
	table, pk, rk, context string
	level                  tablecodec.MetadataLevel
}

type bodyEntry struct {
	k    bodyKey
	etag string
	sum  uint64 // maphash of the stored value
	body []byte
	ref  atomic.Bool
	idx  int // place in clock; guarded by mu
}

// bodyOverhead is what an entry costs besides its strings and body.
const bodyOverhead = 160

func newBodyCache(max int64) *bodyCache {
	if max <= 0 {
		return nil
	}
	return &bodyCache{max: max, seed: maphash.MakeSeed(), m: map[bodyKey]*bodyEntry{}}
}

func (c *bodyCache) size(e *bodyEntry) int64 {
	return bodyOverhead + int64(len(e.k.table)+len(e.k.pk)+len(e.k.rk)+len(e.k.context)+len(e.etag)+len(e.body))
}

// get returns the body cached for k if it was written from the value v
// (whose ETag is etag), or nil.
func (c *bodyCache) get(k bodyKey, etag string, v []byte) []byte {
	if c == nil {
		return nil
	}
	c.mu.RLock()
	e := c.m[k]
	c.mu.RUnlock()
	if e == nil || e.etag != etag || e.sum != maphash.Bytes(c.seed, v) {
		return nil
	}
	e.ref.Store(true)
	return e.body
}

// put caches body, written from the value v (ETag etag), for k. body must
// not change afterwards.
func (c *bodyCache) put(k bodyKey, etag string, v, body []byte) {
	if c == nil {
		return
	}
	e := &bodyEntry{k: k, etag: etag, sum: maphash.Bytes(c.seed, v), body: body}
	n := c.size(e)
	if n > c.max/8 {
		return // one entry never takes much of the cache
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[k]; old != nil {
		// Readers may hold old: replace it rather than change it.
		e.idx = old.idx
		c.clock[e.idx] = e
		c.m[k] = e
		c.used += n - c.size(old)
		return
	}
	for c.used+n > c.max && len(c.clock) > 0 {
		c.evictOne()
	}
	e.idx = len(c.clock)
	c.m[k] = e
	c.clock = append(c.clock, e)
	c.used += n
}

// evictOne drops the first entry under the hand whose ref bit is clear,
// clearing the bits it passes. Called with mu held.
func (c *bodyCache) evictOne() {
	for {
		if c.hand >= len(c.clock) {
			c.hand = 0
		}
		e := c.clock[c.hand]
		if e.ref.Swap(false) {
			c.hand++
			continue
		}
		last := len(c.clock) - 1
		c.clock[c.hand] = c.clock[last]
		c.clock[c.hand].idx = c.hand
		c.clock[last] = nil
		c.clock = c.clock[:last]
		delete(c.m, e.k)
		c.used -= c.size(e)
		return
	}
}
