package txn

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
)

// pclTable is the partition-covering-lock baseline: the key space is cut
// into fixed partitions; a range read S-locks every partition it overlaps,
// a write IX-locks its key's partition (IX is compatible with IX, not with
// S). Row locks on the buffer still order writers of one key. Phantoms are
// prevented at partition granularity, so unrelated keys in one partition
// conflict: the false conflicts next-key locking avoids.
type pclTable struct {
	size    uint64
	stripes [64]pclStripe
}

type pclStripe struct {
	mu    sync.Mutex
	locks map[pclKey]*pclLock
}

type pclKey struct {
	ks adapters.Keyspace
	p  uint64
}

type pclLock struct {
	s, ix map[uint64]int // holder txn id -> count
	// wake, when a refused locker waits, is closed at the next release.
	wake chan struct{}
}

type pclHeld struct {
	k  pclKey
	ix bool
}

func newPCL(size uint64) *pclTable {
	t := &pclTable{size: size}
	for i := range t.stripes {
		t.stripes[i].locks = map[pclKey]*pclLock{}
	}
	return t
}

// partition maps a key to its partition: the first eight bytes as a
// big-endian integer, zero padded, divided by the partition size.
func (p *pclTable) partition(key []byte) uint64 {
	var b [8]byte
	copy(b[:], key)
	return binary.BigEndian.Uint64(b[:]) / p.size
}

// lastPartition is the last partition holding keys below end. That is
// end's own partition, unless end is the first key of it: at most eight
// bytes, zero-padded value a multiple of the size, and a non-zero last byte
// (else a shorter key, end minus trailing zeros, sorts below end in end's
// partition). Then every key below end is in an earlier partition, and
// locking end's would be a false conflict even the baseline does not make.
func (p *pclTable) lastPartition(end []byte) uint64 {
	var b [8]byte
	copy(b[:], end)
	v := binary.BigEndian.Uint64(b[:])
	if len(end) <= 8 && end[len(end)-1] != 0 && v%p.size == 0 {
		return v/p.size - 1
	}
	return v / p.size
}

func (p *pclTable) stripe(k pclKey) *pclStripe {
	return &p.stripes[(k.p^uint64(len(k.ks)))%uint64(len(p.stripes))]
}

// acquire grants one partition lock, or fails at once with a
// *cache.LockConflict (the transaction decides whether to wait).
func (p *pclTable) acquire(t *Txn, k pclKey, ix bool) error {
	st := p.stripe(k)
	st.mu.Lock()
	defer st.mu.Unlock()
	l := st.locks[k]
	if l == nil {
		l = &pclLock{s: map[uint64]int{}, ix: map[uint64]int{}}
		st.locks[k] = l
	}
	other := l.s
	if !ix {
		other = l.ix
	}
	var in []uint64
	for id := range other {
		if id != t.id {
			in = append(in, id)
		}
	}
	if len(in) > 0 {
		mode := "S"
		if ix {
			mode = "IX"
		}
		if l.wake == nil {
			l.wake = make(chan struct{})
		}
		return &cache.LockConflict{Lock: fmt.Sprintf("pcl %s lock on partition %d", mode, k.p), Holders: in, Wake: l.wake}
	}
	mine := l.ix
	if !ix {
		mine = l.s
	}
	if mine[t.id] == 0 {
		t.pcl = append(t.pcl, pclHeld{k, ix})
	}
	mine[t.id]++
	return nil
}

// wholeKeyspace is the partition id of the keyspace-wide lock: writers
// take it in IX, a range too wide to lock partition by partition takes it
// in S (hierarchical locking, so the lock table stays bounded).
const wholeKeyspace = math.MaxUint64

// maxRangePartitions is the most partitions one range read locks one by one.
const maxRangePartitions = 1 << 12

func (p *pclTable) lockKey(t *Txn, ks adapters.Keyspace, key []byte) error {
	if err := p.acquire(t, pclKey{ks, wholeKeyspace}, true); err != nil {
		return err
	}
	return p.acquire(t, pclKey{ks, p.partition(key)}, true)
}

// lockRange S-locks every partition overlapping [start, end).
func (p *pclTable) lockRange(t *Txn, ks adapters.Keyspace, start, end []byte) error {
	if end != nil && bytes.Compare(start, end) >= 0 {
		return nil // empty range: nothing to protect
	}
	lo := p.partition(start)
	hi := uint64(math.MaxUint64) / p.size
	if end != nil {
		hi = p.lastPartition(end)
	}
	if hi-lo >= maxRangePartitions {
		return p.acquire(t, pclKey{ks, wholeKeyspace}, false)
	}
	for q := lo; ; q++ {
		if err := p.acquire(t, pclKey{ks, q}, false); err != nil {
			return err
		}
		if q == hi {
			return nil
		}
	}
}

func (p *pclTable) release(t *Txn) {
	for _, h := range t.pcl {
		st := p.stripe(h.k)
		st.mu.Lock()
		if l := st.locks[h.k]; l != nil {
			delete(l.s, t.id)
			delete(l.ix, t.id)
			if l.wake != nil {
				close(l.wake)
				l.wake = nil
			}
			if len(l.s) == 0 && len(l.ix) == 0 {
				delete(st.locks, h.k)
			}
		}
		st.mu.Unlock()
	}
	t.pcl = nil
}

// PartitionSize is the partition width that cuts the 64-bit key-prefix
// space into n equal partitions (the lock table's budget).
func PartitionSize(n int) uint64 {
	if n <= 1 {
		return math.MaxUint64
	}
	return math.MaxUint64/uint64(n) + 1
}
