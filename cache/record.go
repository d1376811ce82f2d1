package cache

import (
	"bytes"
	"sync/atomic"
	"unsafe"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/invariants"
)

// Kind is a buffered record's type.
type Kind uint8

const (
	// Regular holds a value.
	Regular Kind = 1
	// Tombstone says the key is absent (a negative result, or a delete).
	Tombstone Kind = 2
	// Sentinel marks a key whose state is not known yet; a range reader
	// anchors its locks on it until the fetch resolves it.
	Sentinel Kind = 3
)

func (k Kind) String() string {
	switch k {
	case Regular:
		return "regular"
	case Tombstone:
		return "tombstone"
	case Sentinel:
		return "sentinel"
	}
	return "invalid"
}

// Flag bits, kept in one atomic word so that readers holding the tree latch
// shared can set the ref bit while others read the rest.
const (
	kindMask  = 0x3
	flagGap   = 1 << 2
	flagDirty = 1 << 3
	flagRef   = 1 << 4
	flagHead  = 1 << 5 // the keyspace's permanent fence at the empty key

	// Extra clock chances (4 bits), for size-aware CLOCK. Every record
	// saves one remote call when hit, but a small one (a tombstone: a key
	// and the overhead) costs a fraction of a large one's bytes. A hit
	// therefore grants credit ≈ average record size / this record's size,
	// minus one: that many extra sweeps before the record becomes a victim
	// (an approximation of GreedyDual-Size's benefit per byte). Records of
	// average size or larger get plain second-chance CLOCK. Without this,
	// negative results are evicted as eagerly as 1 KiB records and the
	// negative-lookup workload pays for it (see cache/bench).
	creditShift = 6
	creditMask  = 15 << creditShift
	maxCredit   = 15

	// The base: what the store held for this key when the buffer last
	// knew (fetched it, or wrote it back). flagBaseAbsent says the key
	// was absent; otherwise a base version of baseLen bytes (at most
	// maxBaseLen) ends buf; neither means unknown. Write-back makes its
	// store write conditional on the base (see baseExpect), so nemo
	// never overwrites a change it did not see.
	flagBaseAbsent = 1 << 10
	baseShift      = 11
	baseMask       = 0xFF << baseShift
	maxBaseLen     = 0xFF

	// Reads since the store last vouched for the record (2 bits,
	// saturating at 3), for refresh ahead (Options.MaxStaleness): a hit
	// counts one, confirm starts again at zero.
	readsShift = 19
	readsMask  = 3 << readsShift
)

// record is one buffered key. Its pointer is stable for as long as it is in
// the tree: state changes mutate it in place, so lock holders may keep it.
// Layout is chosen for size (see BenchmarkRecordOverhead): key, value and
// base version share one allocation, held by its data pointer and two
// lengths (the key's, and the whole buffer's: see all) rather than a slice
// header, which leaves room in the 48-byte size class for sum, the key's
// order-preserving summary that tree comparisons read instead of chasing
// the key (see summary).
type record struct {
	p     *byte  // key ‖ value ‖ base version (see flagBaseAbsent); nil when all three are empty
	klen  uint32 // key length
	n     uint32 // buffer length: key, value and base version
	sum   uint64 // summary(keyspace prefix, key), kept current while the record is in a tree (see keyspace.widen)
	ver   uint32 // bumped on every change of value, kind or dirty state
	flags atomic.Uint32
	wb    uint32 // fetch epoch at this record's last store write (0: never written); see keyspace.removable
	seen  uint32 // tick at which the store last vouched for this record (see Buffer.tick; used only with Options.MaxStaleness)
	lk    atomic.Pointer[lockState]
}

// less orders records by key. Sums are an order-preserving summary of the
// keys (computed against the same keyspace prefix for every record in a
// tree and every probe searching it), so different sums decide without
// reading either key; equal sums fall back to the keys.
func less(a, b *record) bool {
	if a.sum != b.sum {
		return a.sum < b.sum
	}
	return bytes.Compare(a.key(), b.key()) < 0
}

func newRecord(key, val []byte, k Kind) *record {
	r := &record{}
	nb := make([]byte, len(key)+len(val))
	copy(nb, key)
	copy(nb[len(key):], val)
	r.klen = uint32(len(key))
	r.setAll(nb)
	r.flags.Store(uint32(k))
	return r
}

func (r *record) key() []byte {
	if r.p == nil {
		return nil
	}
	return unsafe.Slice(r.p, r.n)[:r.klen:r.klen]
}

// all is the record's whole buffer: key ‖ value ‖ base version.
func (r *record) all() []byte {
	if r.p == nil {
		return nil
	}
	return unsafe.Slice(r.p, r.n)
}

// setAll installs nb (key ‖ value ‖ base version) as the record's buffer.
func (r *record) setAll(nb []byte) { r.p, r.n = unsafe.SliceData(nb), uint32(len(nb)) }

func (r *record) value() []byte { return r.all()[r.klen : int(r.n)-r.baseLen()] }
func (r *record) baseLen() int  { return int(r.flags.Load()&baseMask) >> baseShift }

// bytes is the record's buffer length, what the budget charges for it
// beyond RecordOverhead.
func (r *record) bytes() int { return int(r.n) }

func (b *Buffer) size(r *record) int64 { return int64(r.bytes()) + b.opts.RecordOverhead }

func cloneBytes(v []byte) []byte {
	out := make([]byte, len(v))
	copy(out, v)
	return out
}

// baseExpect is the precondition of writing this record back: the key
// must still be at the base version, or still absent; ExpectAny when the
// base is unknown (a blind write into a key the buffer never knew).
func (r *record) baseExpect() adapters.Expect {
	f := r.flags.Load()
	switch n := int(f&baseMask) >> baseShift; {
	case f&flagBaseAbsent != 0:
		return adapters.Expect{Kind: adapters.ExpectAbsent}
	case n > 0:
		all := r.all()
		return adapters.Expect{Kind: adapters.ExpectVersion, Version: adapters.Version(all[len(all)-n:])}
	}
	return adapters.Expect{}
}

// setBase records what the store holds for the key (caller holds the tree
// latch exclusively, or owns r before it is published) and returns the
// change in resident bytes. A version too long to keep makes the base
// unknown.
func (r *record) setBase(e adapters.Expect) int64 {
	var ver []byte
	if e.Kind == adapters.ExpectVersion && len(e.Version) <= maxBaseLen {
		ver = []byte(e.Version)
	}
	old := r.bytes()
	all := r.all()
	body := all[:len(all)-r.baseLen()]
	nb := make([]byte, len(body)+len(ver))
	copy(nb, body)
	copy(nb[len(body):], ver)
	r.setAll(nb)
	f := r.flags.Load() &^ (baseMask | flagBaseAbsent)
	f |= uint32(len(ver)) << baseShift
	if e.Kind == adapters.ExpectAbsent {
		f |= flagBaseAbsent
	}
	r.flags.Store(f)
	return int64(r.bytes() - old)
}
func (r *record) kind() Kind  { return Kind(r.flags.Load() & kindMask) }
func (r *record) gap() bool   { return r.flags.Load()&flagGap != 0 }
func (r *record) dirty() bool { return r.flags.Load()&flagDirty != 0 }
func (r *record) ref() bool   { return r.flags.Load()&flagRef != 0 }
func (r *record) head() bool  { return r.flags.Load()&flagHead != 0 }

func (r *record) setBit(bit uint32, on bool) {
	if on {
		r.flags.Or(bit)
	} else {
		r.flags.And(^uint32(bit))
	}
}

func (r *record) setGap(on bool)   { r.setBit(flagGap, on) }
func (r *record) setRef(on bool)   { r.setBit(flagRef, on) }
func (r *record) setDirty(on bool) { r.setBit(flagDirty, on) }

// touch records a use, granting credit extra sweeps (see creditMask) and,
// for a hit, the ref bit and one more read (see readsMask). It
// writes only if something changes, so hits do not keep dirtying a shared
// cache line; losing a race with another toucher loses nothing.
func (r *record) touch(credit uint32, ref bool) {
	f := r.flags.Load()
	want := f
	if ref {
		want |= flagRef
		if f&readsMask != readsMask {
			want += 1 << readsShift
		}
	}
	if credit > (f&creditMask)>>creditShift {
		want = want&^creditMask | credit<<creditShift
	}
	if want != f {
		r.flags.CompareAndSwap(f, want)
	}
}

func (r *record) credit() uint32 { return (r.flags.Load() & creditMask) >> creditShift }

// credit is r's size-aware CLOCK credit: the typical regular record's
// size over r's, minus one, capped. A tombstone thus earns about as many
// extra sweeps as it is times smaller than a value, as GreedyDual-Size
// would rank it by benefit per byte.
func (b *Buffer) credit(r *record) uint32 {
	if c := b.regSize.Load() / b.size(r); c > 1 {
		return uint32(min(c-1, maxCredit))
	}
	return 0
}

// touch records a hit on r: ref bit and credit.
func (b *Buffer) touch(r *record) { r.touch(b.credit(r), true) }

// noteSize folds a regular record's size into the moving average (a
// benign race: an update lost to a concurrent one changes nothing).
func (b *Buffer) noteSize(r *record) {
	if r.kind() != Regular {
		return
	}
	old, n := b.regSize.Load(), b.size(r)
	if old == 0 {
		old = n
	}
	b.regSize.Store(old + (n-old)/32)
}

// reads is how many hits the record had since its last confirmation (at
// most 3).
func (r *record) reads() uint32 { return (r.flags.Load() & readsMask) >> readsShift }

// spendCredit uses one extra chance (exclusive latch).
func (r *record) spendCredit() {
	f := r.flags.Load()
	r.flags.Store(f&^creditMask | ((f&creditMask)>>creditShift-1)<<creditShift)
}

// set replaces kind and value in place (caller holds the tree latch
// exclusively) and returns the change in resident bytes.
func (r *record) set(k Kind, val []byte) int64 {
	if invariants.Enabled && r.head() && k != Tombstone {
		panic(invariants.Errorf("the head fence turned %s", k))
	}
	old := int64(r.bytes())
	if k != Regular {
		val = nil
	}
	// The base version moves to the end of the new value; with the same
	// length it is already there. (A shorter value gets a new buffer: the
	// capacity is the buffer's length, so it cannot keep spare room.)
	all, klen, bl := r.all(), int(r.klen), r.baseLen()
	base := all[len(all)-bl:]
	if len(val) == len(all)-klen-bl {
		copy(all[klen:], val)
	} else {
		nb := make([]byte, klen+len(val)+bl)
		copy(nb, all[:klen])
		copy(nb[klen:], val)
		copy(nb[klen+len(val):], base)
		r.setAll(nb)
	}
	f := r.flags.Load()
	r.flags.Store(f&^(kindMask|creditMask) | uint32(k))
	r.ver++
	return int64(r.bytes()) - old
}

// locked reports whether any transaction holds or waits on this record.
func (r *record) locked() bool {
	l := r.lk.Load()
	return l != nil && !l.free()
}
