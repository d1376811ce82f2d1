package cache

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/google/btree"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/invariants"
	"github.com/nemocache/nemo/internal/obs"
)

// Buffer is the record buffer over one Store. All methods are safe for
// concurrent use.
type Buffer struct {
	opts     Options
	store    adapters.Store // gatedStore: every call settles the keyspace gate first
	rawStore adapters.Store // the store itself, for its optional interfaces
	gate     *keyspaceGate

	mu     sync.RWMutex // guards spaces
	spaces map[adapters.Keyspace]*keyspace

	used     atomic.Int64 // resident bytes, every record of every keyspace
	count    atomic.Int64 // resident records
	regSize  atomic.Int64 // moving average size of admitted regular records (size-aware CLOCK)
	dirty    atomic.Int64 // bytes of dirty records
	budgetMu sync.Mutex   // makes an admission's budget check and charge atomic
	// limit is the dirty bytes writers may leave (throttle.go): at most
	// MaxDirtyBytes, less while write-back falls behind MaxDirtyAge.
	limit dirtyLimit

	roomMu sync.Mutex
	room   chan struct{} // closed and replaced whenever eviction frees bytes

	evictKick chan struct{}
	// wbWanted wakes whoever drives write-back (WriteBackWanted).
	wbWanted chan struct{}
	stop     chan struct{}
	wg       sync.WaitGroup
	closed   atomic.Bool
	// bg is the context of the background refreshes' store calls (stale.go),
	// cancelled when the workers stop (StopWorkers), so a hung store call
	// ends then.
	bg       context.Context
	bgCancel context.CancelFunc
	stopOnce sync.Once

	clock staleClock // confirmation stamps (Options.MaxStaleness)
	ahead refreshAhead

	stats counters
}

// keyspace is one tree and its bookkeeping.
type keyspace struct {
	name adapters.Keyspace
	// exact: the staleness bound does not apply to this keyspace
	// (SetExact: its only writer is this node).
	exact atomic.Bool
	// writes counts the writes applied to the tree (applyOne, under the
	// latch held exclusively), and Forget's calls: a scan whose answer
	// joins records it read before a fetch with ones it reads after checks
	// that none came in between (scanOnce), and a miss waits only for a
	// fetch begun since the last (takeoff).
	writes atomic.Uint64
	mu     sync.RWMutex // the tree latch; never held across store I/O
	tree   *btree.BTreeG[*record]
	head   *record // permanent fence at the empty key: its gap bit is the gap before the first key

	// pfx is the common prefix of the keys buffered so far (the head's
	// aside), against which every record's and probe's sum is computed
	// (see summary): set by the first key, cut back by any key that does
	// not share it (widen). pfxSet says it has been set.
	pfx    []byte
	pfxSet bool

	hand []byte // CLOCK hand: the next key to examine

	rangeFilter rangeFilter // range fetches seen and not admitted (rangeadmit.go)

	// Fetch epochs keep fetched data from going stale. A fetch may read a
	// key's old store value while a write-back stores the new one; that is
	// harmless while the written record stays buffered (buffered records
	// take precedence over fetched ones), so a record written back at epoch
	// e may not leave the buffer while a fetch of epoch <= e is in flight.
	epoch    atomic.Uint32 // last epoch handed to a fetch
	fetchMu  sync.Mutex
	inflight map[uint32]int // epochs of fetches in flight, with counts
	// flights are the point fetches in progress that concurrent misses of
	// the same key may wait for instead of asking the store again
	// (fetch.go). Guarded by fetchMu.
	flights map[string]*flight
	wbMu    *ctxRWMutex // write-back lock: exclusive for write-back, replay, drop and Check; shared for write-through (doc.go, Lock order)
	// sent remembers, per key, the digests of the writes the buffer may
	// have left in the store since the store last confirmed one: those
	// write-back sent (a call that failed without an answer may have
	// landed), and after a restart every value the replayed log holds for
	// the key (a write, the unwritten value its record held, Write.Prior,
	// or a confirmed write-back, ReplayWritten), any of which a write-back
	// before the crash may have left there. A later refusal that finds one
	// of them in the store is the buffer's own write, not another
	// writer's. Guarded by wbMu held exclusively; an entry goes when the store confirms a
	// write of the key.
	sent map[string][]uint64

	dirtyQ []dirtyEntry // records in the order they became dirty (age bound: TakeAged), then retries
	// evictQ holds the dirty records the background evictor chose, left
	// for write-back (TakeEvictions). Guarded by mu.
	evictQ map[*record]struct{}
	// taken holds, for each record TakeAged took off dirtyQ whose
	// write-back has not made it clean yet, when it became dirty: its age
	// still counts in FlushLag while the write-back runs and after it
	// failed (a retry entry tells no age). Guarded by mu.
	taken   map[*record]time.Time
	dropped bool

	refreshing map[string]bool // keys being refreshed ahead of their bound (guarded by Buffer.ahead.mu)
}

type dirtyEntry struct {
	r  *record
	at time.Time // when r became dirty; for a retry, when it fell due
	// retry marks an entry put back by a write-back that left r dirty,
	// due at once; at is not r's age.
	retry bool
}

// New returns a buffer over store. Close stops its background workers.
func New(store adapters.Store, opts Options) (*Buffer, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	gate := &keyspaceGate{runMu: newCtxMutex(), timeout: opts.StoreTimeout}
	if a, ok := store.(adapters.KeyspaceAdmin); ok {
		gate.admin = a
	}
	b := &Buffer{
		opts:      opts,
		store:     gatedStore{Store: store, gate: gate, source: opts.Source},
		rawStore:  store,
		gate:      gate,
		spaces:    map[adapters.Keyspace]*keyspace{},
		room:      make(chan struct{}),
		evictKick: make(chan struct{}, 1),
		wbWanted:  make(chan struct{}, 1),
		stop:      make(chan struct{}),
		clock:     newStaleClock(opts),
	}
	b.limit.bytes.Store(opts.MaxDirtyBytes)
	b.stats.writebackBatch, b.stats.writebackDelay = obs.NewDurationHistogram(), obs.NewDurationHistogram()
	b.bg, b.bgCancel = context.WithCancel(context.Background())
	if !b.opts.DisableWorkers && b.opts.Policy != PolicyNone {
		for i := 0; i < b.opts.EvictWorkers; i++ {
			b.wg.Add(1)
			go b.evictLoop()
		}
	}
	return b, nil
}

// Options returns the effective options (defaults filled in).
func (b *Buffer) Options() Options { return b.opts }

// Close stops the background workers. It does not flush: write dirty
// records back first (the engine's Flush). Under the invariants tag it
// then checks the trees and counters (Check without the store reads:
// those cost one request per record) and panics if they are broken.
func (b *Buffer) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.StopWorkers()
	b.ahead.close()
	if invariants.Enabled {
		if err := b.check(context.Background(), false, CheckOptions{}); err != nil {
			panic(invariants.Errorf("at Close: %v", err))
		}
	}
	return nil
}

// StopWorkers stops the background evictor and cancels the refreshes
// running ahead (their store calls end), and waits until the evictor is
// gone. The buffer writes nothing back by itself: the write-back its
// evictor left undone stays queued (TakeEvictions). Everything else still
// works after it; Close calls it too. It is idempotent.
func (b *Buffer) StopWorkers() {
	b.stopOnce.Do(func() {
		close(b.stop)
		b.bgCancel()
		b.wg.Wait()
	})
}

// stopping reports whether StopWorkers was called.
func (b *Buffer) stopping() bool {
	select {
	case <-b.stop:
		return true
	default:
		return false
	}
}

func (b *Buffer) space(ks adapters.Keyspace) (*keyspace, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	b.mu.RLock()
	s, ok := b.spaces[ks]
	b.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownKeyspace, ks)
	}
	return s, nil
}

func (b *Buffer) checkKey(key []byte) error {
	if len(key) == 0 {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(key) > b.opts.MaxKeyBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLarge, len(key), b.opts.MaxKeyBytes)
	}
	return nil
}

func (b *Buffer) checkValue(v []byte) error {
	if len(v) > b.opts.MaxValueBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrValueTooLarge, len(v), b.opts.MaxValueBytes)
	}
	return nil
}

func storeErr(op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %s: %w", ErrStore, op, err)
}

// --- tree helpers; the caller holds s.mu (shared for reads, exclusive for changes) ---

// floor returns the record with the largest key <= key; the head fence
// guarantees one exists.
func (s *keyspace) floor(key []byte) *record {
	var out *record
	p := s.getProbe(key)
	s.tree.DescendLessOrEqual(p, func(r *record) bool { out = r; return false })
	putProbe(p)
	return out
}

// probe is a record used only as a search pivot in s; it aliases key.
func (s *keyspace) probe(key []byte) *record {
	p := &record{}
	p.alias(key)
	p.sum = summary(s.pfx, key)
	return p
}

// getProbe is probe from the pool; putProbe returns it.
func (s *keyspace) getProbe(key []byte) *record {
	p := probes.Get().(*record)
	p.alias(key)
	p.sum = summary(s.pfx, key)
	return p
}

// alias points r's key at key (a search pivot; nothing else set).
func (r *record) alias(key []byte) {
	r.p, r.klen, r.n = unsafe.SliceData(key), uint32(len(key)), uint32(len(key))
}

// probes recycles pivots for the hot point-lookup path (one allocation
// less per Get); the tree keeps no reference to a pivot after a call.
var probes = sync.Pool{New: func() any { return new(record) }}

func putProbe(p *record) {
	p.p = nil
	probes.Put(p)
}

// summary maps key to a uint64, non-decreasing in key order, that tells
// apart the keys sharing pfx (the keyspace's common prefix) by the 8 bytes
// after it: keys below every key with the prefix map to 0, keys above to
// the maximum, the others to those 8 bytes (zero-padded, big-endian),
// clamped between. Sorting by summary, then key, is sorting by key.
func summary(pfx, key []byte) uint64 {
	n := min(len(pfx), len(key))
	if c := bytes.Compare(key[:n], pfx[:n]); c != 0 {
		if c < 0 {
			return 0
		}
		return math.MaxUint64
	}
	if len(key) < len(pfx) {
		return 0 // a proper prefix of pfx sorts before every key that has it
	}
	var w [8]byte
	copy(w[:], key[len(pfx):])
	return min(max(binary.BigEndian.Uint64(w[:]), 1), math.MaxUint64-1)
}

// widen makes key's summary, and every other, informative (exclusive
// latch, before key's record enters the tree): the first key sets the
// prefix; a key that does not share it cuts it back to what they share
// and recomputes every record's sum, the tree's order being unchanged.
// That walk is O(records), and happens at most once per prefix length a
// keyspace's keys ever cut back to, typically while it is small.
func (s *keyspace) widen(key []byte) {
	if !s.pfxSet {
		s.pfx, s.pfxSet = bytes.Clone(key), true
	} else {
		n := 0
		for n < len(s.pfx) && n < len(key) && s.pfx[n] == key[n] {
			n++
		}
		if n == len(s.pfx) {
			return
		}
		s.pfx = s.pfx[:n]
	}
	s.tree.Ascend(func(r *record) bool { r.sum = summary(s.pfx, r.key()); return true })
}

// put adds r to the tree (exclusive latch; no record of its key is
// there) with its sum.
func (s *keyspace) put(r *record) {
	if !r.head() {
		s.widen(r.key())
	}
	r.sum = summary(s.pfx, r.key())
	s.tree.ReplaceOrInsert(r)
}

// lower returns the record with the largest key < key.
func (s *keyspace) lower(key []byte) *record {
	var out *record
	p := s.probe(key)
	s.tree.DescendLessOrEqual(p, func(r *record) bool {
		if bytes.Equal(r.key(), key) {
			return true
		}
		out = r
		return false
	})
	return out
}

// after returns the record with the smallest key > key, or nil.
func (s *keyspace) after(key []byte) *record {
	var out *record
	p := s.getProbe(key)
	defer putProbe(p)
	s.tree.AscendGreaterOrEqual(p, func(r *record) bool {
		if bytes.Equal(r.key(), key) {
			return true
		}
		out = r
		return false
	})
	return out
}

// insert adds a new record (exclusive latch). It inherits the next-key lock
// holders of the gap it lands in, so a lock never shrinks, and the stamp of
// that gap's knowledge (its caller confirms it when it fetched r).
func (b *Buffer) insert(s *keyspace, r *record, pred *record) {
	if pl := pred.lk.Load(); pl != nil {
		pl.inheritInto(s, r)
	}
	r.seen = pred.seen
	s.put(r)
	b.count.Add(1)
	b.noteSize(r)
	r.touch(b.credit(r), false) // an admission earns its credit, not a ref bit
}

// remove takes r out of the tree (exclusive latch) and fixes its
// predecessor's gap bit: a regular record or sentinel leaves an unknown gap;
// a tombstone leaves what it knew.
func (b *Buffer) remove(s *keyspace, r *record) {
	if invariants.Enabled && r.head() {
		panic(invariants.Errorf("keyspace %q: removing its head fence", s.name))
	}
	if invariants.Enabled && r.dirty() {
		// Every caller writes a record back (or drops the keyspace)
		// before it goes: removing a dirty one loses a committed write.
		panic(invariants.Errorf("keyspace %q: removing dirty record %q", s.name, r.key()))
	}
	if invariants.Enabled && r.locked() {
		// The exclusive latch holds off lockers: a locked record must
		// stay, or its locks (and what they protect) vanish with it.
		panic(invariants.Errorf("keyspace %q: removing locked or pinned record %q", s.name, r.key()))
	}
	pred := s.lower(r.key())
	if r.kind() == Tombstone {
		if r.gap() {
			pred.setGap(true)
		} else if !pred.gap() {
			// The two sealed gaps become one, as old as the older.
			pred.seen = min(pred.seen, r.seen)
		}
	} else {
		pred.setGap(true)
	}
	s.tree.Delete(r)
	b.count.Add(-1)
	b.used.Add(-b.size(r))
	if r.dirty() {
		b.dirty.Add(-b.size(r))
	}
	if invariants.Enabled {
		b.assertCounters()
	}
}

// assertCounters panics if a resident byte, record or dirty byte counter
// went negative: every decrement undoes an earlier increment for the same
// record, so none may.
func (b *Buffer) assertCounters() {
	if u, c, d := b.used.Load(), b.count.Load(), b.dirty.Load(); invariants.Enabled && (u < 0 || c < 0 || d < 0) {
		panic(invariants.Errorf("negative counter: used %d, count %d, dirty %d", u, c, d))
	}
}

// markDirty records that r now holds a version the store has not seen.
func (b *Buffer) markDirty(s *keyspace, r *record, wasDirty bool, delta int64) {
	if invariants.Enabled && r.kind() == Sentinel {
		panic(invariants.Errorf("keyspace %q: sentinel %q marked dirty", s.name, r.key()))
	}
	if wasDirty {
		if d := b.dirty.Add(delta); invariants.Enabled && d < 0 {
			panic(invariants.Errorf("dirty bytes %d after rewriting %q", d, r.key()))
		}
		return
	}
	r.setDirty(true)
	b.dirty.Add(b.size(r))
	delete(s.taken, r) // a new dirty period: this entry tells its age
	s.dirtyQ = append(s.dirtyQ, dirtyEntry{r: r, at: time.Now()})
	if b.dirty.Load() > b.limit.bytes.Load() {
		kick(b.wbWanted)
	}
}

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// reserve charges n bytes of admission to the budget. It admits while the
// buffer is under budget, so one admission overruns it by at most its own
// size; over budget it wakes the evictor and waits up to AdmitWait (not at
// all when wait is false: the caller holds a lock eviction needs), then
// gives up (the caller bypasses the buffer).
func (b *Buffer) reserve(ctx context.Context, n int64, wait bool) bool {
	deadline := time.Now().Add(b.opts.AdmitWait)
	for {
		// Take the wake-up channel before looking at the budget: room
		// freed after the look closes this very channel, so the wake-up
		// cannot be lost.
		b.roomMu.Lock()
		room := b.room
		b.roomMu.Unlock()
		b.budgetMu.Lock()
		if b.used.Load() < b.opts.MaxBytes {
			b.used.Add(n)
			b.budgetMu.Unlock()
			return true
		}
		b.budgetMu.Unlock()
		kick(b.evictKick)
		left := time.Until(deadline)
		if left <= 0 || !wait || b.opts.DisableWorkers {
			b.stats.admitBypass.Add(1)
			return false
		}
		t := time.NewTimer(left)
		select {
		case <-room:
			t.Stop()
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			b.stats.admitBypass.Add(1)
			return false
		}
	}
}

func (b *Buffer) freed() {
	b.roomMu.Lock()
	close(b.room)
	b.room = make(chan struct{})
	b.roomMu.Unlock()
}

// beginFetch registers a store read about to start and returns its epoch;
// endFetch must follow.
func (s *keyspace) beginFetch() uint32 {
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	e := s.epoch.Add(1)
	if e == 0 { // 0 means "never written back"
		e = s.epoch.Add(1)
	}
	if s.inflight == nil {
		s.inflight = map[uint32]int{}
	}
	s.inflight[e]++
	return e
}

func (s *keyspace) endFetch(e uint32) {
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	if s.inflight[e]--; s.inflight[e] <= 0 {
		delete(s.inflight, e)
	}
}

// wrote stamps r as just written to the store (tree latch held
// exclusively): fetches already in flight may have read the value before.
func (s *keyspace) wrote(r *record) { r.wb = s.epoch.Load() }

// removable reports whether r may leave the buffer without a fetch in
// flight coming back with a value older than r's (tree latch held
// exclusively). Epochs wrap; comparisons are modular.
func (s *keyspace) removable(r *record) bool {
	if r.wb == 0 {
		return true // never written by us: the store has not changed under any fetch
	}
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	for e := range s.inflight {
		if int32(r.wb-e) >= 0 { // a fetch started before r's write finished
			return false
		}
	}
	if len(s.inflight) == 0 {
		r.wb = 0 // nothing can be stale any more: forget the stamp
	}
	return true
}
