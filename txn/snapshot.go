package txn

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
)

// Snapshots. Under coherence exclusive a read-only transaction takes no
// locks: it reads the committed state as of its start, so it never blocks
// or aborts a writer and no writer makes it wait, as Datastore's read-only
// transactions read a snapshot. nemo keeps one version of each record, so
// the versions a snapshot still needs are kept aside while it lives: every
// commit installed while a snapshot is open records, for each key it
// writes, what the key held before (its before-image), tagged with the
// commit's sequence number. A snapshot taken at sequence s reads the latest
// state and then, for each key, the before-image of the first commit after
// s that wrote it, if there is one. Reading the latest state before the
// kept versions makes the pair race-free: a commit records its
// before-images before it installs, so a read that saw the new state finds
// the old one kept. Kept versions go once no open snapshot predates their
// commit; past Options.SnapshotBytes the oldest snapshots are given up
// (their next read fails with ErrConflict, so a one-operation read is
// retried on a fresh snapshot).
//
// Under coherence shared the store is written by others whose commits nemo
// never sees, so nemo cannot keep a snapshot (nor could locks held to the
// end make reads consistent against those writers): a read-only
// transaction reads the store's own snapshot instead, or has its reads
// checked at commit (shared.go).

// snapshots is the engine's set of open snapshots and the versions they
// need.
type snapshots struct {
	// mu is held shared by a commit while it records its before-images
	// and installs, and exclusively to open a snapshot: a snapshot's
	// sequence number then covers exactly the commits installed before
	// it.
	mu  sync.RWMutex
	seq atomic.Uint64 // commits installed

	hmu     sync.Mutex // guards the fields below
	open    map[uint64]uint64
	kept    map[adapters.Keyspace]map[string][]version
	bytes   uint64
	limit   uint64
	expired uint64
}

// version is what a key held before the commit numbered seq wrote it.
type version struct {
	seq    uint64
	val    []byte
	exists bool
}

// versionOverhead is what one kept version costs beside its key and value.
const versionOverhead = 64

func newSnapshots(limit uint64) *snapshots {
	return &snapshots{open: map[uint64]uint64{}, kept: map[adapters.Keyspace]map[string][]version{}, limit: limit}
}

// begin opens a snapshot for transaction id and returns its sequence: the
// commits it sees are those numbered up to it.
func (sn *snapshots) begin(id uint64) uint64 {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	s := sn.seq.Load()
	sn.hmu.Lock()
	sn.open[id] = s
	sn.hmu.Unlock()
	return s
}

// end closes id's snapshot and drops what only it needed.
func (sn *snapshots) end(id uint64) {
	sn.hmu.Lock()
	defer sn.hmu.Unlock()
	if _, ok := sn.open[id]; ok {
		delete(sn.open, id)
		sn.prune()
	}
}

// prune drops the versions no open snapshot needs (hmu held): a version
// of commit c serves the snapshots taken before c.
func (sn *snapshots) prune() {
	if len(sn.open) == 0 {
		clear(sn.kept)
		sn.bytes = 0
		return
	}
	oldest := ^uint64(0)
	for _, s := range sn.open {
		oldest = min(oldest, s)
	}
	for ks, m := range sn.kept {
		for key, vs := range m {
			i := sort.Search(len(vs), func(i int) bool { return vs[i].seq > oldest })
			for _, v := range vs[:i] {
				sn.bytes -= uint64(len(key) + len(v.val) + versionOverhead)
			}
			if i == len(vs) {
				delete(m, key)
			} else if i > 0 {
				m[key] = append([]version(nil), vs[i:]...)
			}
		}
		if len(m) == 0 {
			delete(sn.kept, ks)
		}
	}
}

// expireOldest gives up the oldest snapshots until the kept versions fit
// the limit again (hmu held).
func (sn *snapshots) expireOldest() {
	for sn.bytes > sn.limit && len(sn.open) > 0 {
		var id uint64
		oldest := ^uint64(0)
		for i, s := range sn.open {
			if s < oldest || s == oldest && i < id {
				id, oldest = i, s
			}
		}
		delete(sn.open, id)
		sn.expired++
		sn.prune()
	}
}

// image is what a key a commit writes held before it (keep).
type image struct {
	ks  adapters.Keyspace
	key string
	val []byte
	ok  bool
}

// preImages are a commit's before-images, read before it takes the
// engine's apply lock (preread).
type preImages struct {
	taken bool // snapshots were open: imgs holds every key the commit writes
	imgs  []image
	err   error // the store failed a read
}

// preread reads, when any snapshot is open, what each key changes write
// holds now, for keep: outside Engine.applyMu, so that a miss's store
// call never holds up a checkpoint and every commit queued behind it. The
// commit holds X locks on every key it writes, so nothing changes them
// between this read and its install. A nil sn reads nothing.
func (sn *snapshots) preread(ctx context.Context, e *Engine, changes []Change) preImages {
	if sn == nil {
		return preImages{}
	}
	sn.hmu.Lock()
	someOpen := len(sn.open) > 0
	sn.hmu.Unlock()
	if !someOpen {
		return preImages{}
	}
	pre := preImages{taken: true}
	for _, c := range changes {
		if c.Op != ChangePut && c.Op != ChangeDelete {
			continue
		}
		e.buf.OpenKeyspace(c.Keyspace)
		val, ok, err := e.buf.Get(ctx, c.Keyspace, c.Key)
		if err != nil {
			pre.err = err
			break
		}
		pre.imgs = append(pre.imgs, image{c.Keyspace, string(c.Key), val, ok})
	}
	return pre
}

// keep is the commit pipeline's step before a commit installs its
// changes: it gives the commit its place in install order (seq) and, when
// any snapshot is open, records the before-images. The commit installs its
// changes and then calls installed, which lets snapshots open again (Begin
// waits for it). A nil sn (no snapshots: coherence shared) keeps nothing.
// keep records what preread read, so the store call a before-image may
// need is made before the apply lock. Only when no snapshot was open then
// (one opened while the commit was being logged) does keep read them
// itself: what the buffer holds of the keys o, the committing transaction,
// has locked (cache.Buffer.LockKeyKnown: the lock is o's already), and
// from the store, under the apply lock, only the keys the buffer does not
// hold (blind writes). A before-image that cannot be read (the store
// failed) gives up every open snapshot instead of failing a commit that
// is already logged: their next read fails with ErrConflict, and a
// one-operation read retries.
func (sn *snapshots) keep(ctx context.Context, e *Engine, o *cache.Owner, changes []Change, pre preImages) (seq uint64, installed func()) {
	if sn == nil {
		return 0, func() {}
	}
	sn.mu.RLock()
	seq = sn.seq.Add(1)
	sn.hmu.Lock()
	someOpen := len(sn.open) > 0
	sn.hmu.Unlock()
	if someOpen && !pre.taken {
		pre = lateImages(ctx, e, o, changes)
	}
	sn.hmu.Lock()
	defer sn.hmu.Unlock()
	switch {
	case len(sn.open) == 0:
	case pre.err != nil:
		e.opts.Logger.Warn("txn: read-only snapshots given up: a commit's earlier state could not be read", "err", pre.err)
		sn.expired += uint64(len(sn.open))
		clear(sn.open)
		sn.prune()
	default:
		for _, im := range pre.imgs {
			m := sn.kept[im.ks]
			if m == nil {
				m = map[string][]version{}
				sn.kept[im.ks] = m
			}
			m[im.key] = append(m[im.key], version{seq: seq, val: im.val, exists: im.ok})
			sn.bytes += uint64(len(im.key) + len(im.val) + versionOverhead)
		}
		sn.expireOldest()
	}
	return seq, sn.mu.RUnlock
}

// lateImages is keep's preread, for a snapshot opened after the commit's
// preread: from the buffer where it holds the key (o holds X locks on every
// key changes write), else from the store.
func lateImages(ctx context.Context, e *Engine, o *cache.Owner, changes []Change) preImages {
	pre := preImages{taken: true}
	for _, c := range changes {
		if c.Op != ChangePut && c.Op != ChangeDelete {
			continue
		}
		val, ok, known, err := e.buf.LockKeyKnown(c.Keyspace, c.Key, o)
		if err == nil && !known {
			e.stats.lateImageFetches.Add(1)
			val, ok, err = e.buf.Get(ctx, c.Keyspace, c.Key)
		}
		if err != nil {
			return preImages{err: err}
		}
		pre.imgs = append(pre.imgs, image{c.Keyspace, string(c.Key), val, ok})
	}
	return pre
}

// errSnapshotExpired: the snapshot was given up (see snapshots).
var errSnapshotExpired = fmt.Errorf("%w: the read-only transaction's snapshot was given up (too many versions kept for it); retry", ErrConflict)

// before returns what key held at snapshot id's start, when a commit since
// wrote it (found false: the latest state is the snapshot's).
func (sn *snapshots) before(id uint64, ks adapters.Keyspace, key []byte) (v version, found bool, err error) {
	sn.hmu.Lock()
	defer sn.hmu.Unlock()
	s, ok := sn.open[id]
	if !ok {
		return version{}, false, errSnapshotExpired
	}
	vs := sn.kept[ks][string(key)]
	i := sort.Search(len(vs), func(i int) bool { return vs[i].seq > s })
	if i == len(vs) {
		return version{}, false, nil
	}
	return vs[i], true, nil
}

// beforeRange is before for every key in [start, end) (end nil: no
// bound) that a commit wrote since snapshot id began, in key order, each as
// the write that would restore it (a delete where the key was absent).
func (sn *snapshots) beforeRange(id uint64, ks adapters.Keyspace, start, end []byte) ([]cache.Write, error) {
	sn.hmu.Lock()
	defer sn.hmu.Unlock()
	s, ok := sn.open[id]
	if !ok {
		return nil, errSnapshotExpired
	}
	var olds []cache.Write
	for key, vs := range sn.kept[ks] {
		k := []byte(key)
		if bytes.Compare(k, start) < 0 || end != nil && bytes.Compare(k, end) >= 0 {
			continue
		}
		if i := sort.Search(len(vs), func(i int) bool { return vs[i].seq > s }); i < len(vs) {
			olds = append(olds, cache.Write{Key: k, Value: vs[i].val, Delete: !vs[i].exists})
		}
	}
	sort.Slice(olds, func(i, j int) bool { return bytes.Compare(olds[i].Key, olds[j].Key) < 0 })
	return olds, nil
}

func (sn *snapshots) stats() (open, keptBytes, expired uint64) {
	sn.hmu.Lock()
	defer sn.hmu.Unlock()
	return uint64(len(sn.open)), sn.bytes, sn.expired
}

// snapGet reads key as of t's snapshot (t.mu held).
func (t *Txn) snapGet(ctx context.Context, ks adapters.Keyspace, key []byte) ([]byte, bool, error) {
	t.e.buf.OpenKeyspace(ks)
	if t.e.snaps == nil {
		vals, err := t.sharedGet(ctx, ks, [][]byte{key})
		if err != nil {
			return nil, false, err
		}
		return vals[0], vals[0] != nil, nil
	}
	val, ok, err := t.e.buf.Get(ctx, ks, key)
	if err == nil {
		// A read-only result waits for the commits it read from.
		err = t.e.awaitDurable(ctx, t.e.dependKey(ks, key))
	}
	if err != nil {
		return nil, false, err
	}
	v, found, err := t.e.snaps.before(t.id, ks, key)
	switch {
	case err != nil:
		return nil, false, t.fail(err)
	case found:
		return bytes.Clone(v.val), v.exists, nil
	}
	return val, ok, nil
}

// snapScan reads [start, end) as of t's snapshot (t.mu held): the latest
// state with what commits since changed put back as it was.
func (t *Txn) snapScan(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, []byte, error) {
	t.e.buf.OpenKeyspace(ks)
	if t.e.snaps == nil {
		return t.sharedScan(ctx, ks, start, end, limit)
	}
	recs, next, err := t.e.buf.Scan(ctx, ks, start, end, limit)
	if err == nil {
		err = t.e.awaitDurable(ctx, t.e.dependSpan(ks, start, stopAt(end, next)))
	}
	if err != nil {
		return nil, nil, err
	}
	top := end
	if next != nil {
		top = next
	}
	olds, err := t.e.snaps.beforeRange(t.id, ks, start, top)
	if err != nil {
		return nil, nil, t.fail(err)
	}
	if len(olds) == 0 {
		return recs, next, nil
	}
	out, next := mergeWrites(recs, olds, next, limit)
	return out, next, nil
}
