package cache

import (
	"github.com/nemocache/nemo/adapters"
)

// LockInfo describes the locks on one record, for tests and the debug API.
type LockInfo struct {
	Key      []byte
	Kind     Kind
	RowX     uint64
	RowS     []uint64
	GapS     []uint64
	GapX     uint64
	Pinned   int
	Dirty    bool
	Gap, Ref bool
}

// Records returns the buffered records in [start, end) with their bits and
// locks (the head fence excluded), for tests and the debug API.
func (b *Buffer) Records(ks adapters.Keyspace, start, end []byte) ([]LockInfo, error) {
	s, err := b.space(ks)
	if err != nil {
		return nil, err
	}
	if start == nil {
		start = []byte{}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []LockInfo
	ids := func(os []*Owner) []uint64 {
		var v []uint64
		for _, o := range os {
			v = append(v, o.ID)
		}
		return v
	}
	iterCov(s, start, end, func(r *record) {
		if r.head() {
			return
		}
		li := LockInfo{Key: cloneBytes(r.key()), Kind: r.kind(), Dirty: r.dirty(), Gap: r.gap(), Ref: r.ref()}
		if l := r.lk.Load(); l != nil {
			l.mu.Lock()
			if l.row.x != nil {
				li.RowX = l.row.x.ID
			}
			if l.gap.x != nil {
				li.GapX = l.gap.x.ID
			}
			li.RowS, li.GapS, li.Pinned = ids(l.row.s), ids(l.gap.s), len(l.pins)
			l.mu.Unlock()
		}
		out = append(out, li)
	})
	return out, nil
}
