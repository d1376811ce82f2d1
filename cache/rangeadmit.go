package cache

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/nemocache/nemo/adapters"
)

// rangeFilter is the range admission filter (Options.RangeAdmitSlots): a
// direct-mapped table of hashes of keys fetched by range fetches that were
// not admitted. A full buffer admits a range fetch only if the table holds
// one of its keys: a range read once, such as a scan over the cold end of
// the key space, passes through; a range read again while its keys are
// remembered is admitted. A key's slot is taken over by a later key that
// hashes to it, so the table remembers about its size in recent keys with
// nothing to clean up. Slots are atomics: a lost race forgets one key, which
// costs at most one more fetch. Safe for concurrent use without the latch.
type rangeFilter struct {
	slots atomic.Pointer[[]atomic.Uint64] // nil until the first filtered fetch; a 0 slot is empty
}

var filterSeed = maphash.MakeSeed()

func keyHash(k []byte) uint64 { return maphash.Bytes(filterSeed, k) | 1 } // never 0, the empty slot

// rangeAdmissible reports whether a range fetch that returned recs may enter
// the buffer: always below the evictor's low mark (nothing hotter would be
// flushed) or with the filter off; above it, when one of recs was fetched
// and not admitted before (the hit is consumed). A fetch not admitted
// leaves its keys behind for the next one. An empty fetch has nothing to
// flush anything out with and is always admitted (its fences and sealed
// gaps are what answers the next scan of the range).
func (b *Buffer) rangeAdmissible(s *keyspace, recs []adapters.Record) bool {
	n := b.opts.RangeAdmitSlots
	if n < 0 || len(recs) == 0 || b.used.Load() < b.low() {
		return true
	}
	p := s.rangeFilter.slots.Load()
	if p == nil {
		fresh := make([]atomic.Uint64, n)
		if !s.rangeFilter.slots.CompareAndSwap(nil, &fresh) {
			p = s.rangeFilter.slots.Load()
		} else {
			p = &fresh
		}
	}
	slots := *p
	hs := make([]uint64, len(recs))
	for i, r := range recs {
		hs[i] = keyHash(r.Key)
		if slot := &slots[hs[i]%uint64(n)]; slot.Load() == hs[i] {
			slot.CompareAndSwap(hs[i], 0) // admitted: buffered keys need no memory
			return true
		}
	}
	for _, h := range hs {
		slots[h%uint64(n)].Store(h)
	}
	b.stats.rangeFiltered.Add(1)
	return false
}
