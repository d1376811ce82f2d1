package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/nemocache/nemo/adapters"
)

// ErrInvariant is wrapped by every violation Check reports.
var ErrInvariant = errors.New("cache: invariant violated")

// Check verifies the buffer's invariants against the store. Call it when the
// buffer is quiescent (no operation, write-back or transaction in flight):
//   - per keyspace the tree is in strictly increasing key order and starts
//     with its fence at the empty key, and every record's sum is its key's
//     summary against the keyspace's prefix, which every key but the
//     head's shares;
//   - no false negatives or stale hits: a clean tombstone's key is absent
//     from the store, a clean regular record equals the store's value and
//     its base version (what write-back conditions on) is the store's;
//   - gap-bit soundness: a gap bit 0 means the store holds no key strictly
//     between the record and its successor (dirty records are all buffered,
//     so store plus dirty state agree there);
//   - no locks, pins or sentinels remain;
//   - resident and dirty byte counts equal the sums over the records.
func (b *Buffer) Check(ctx context.Context) error { return b.CheckWith(ctx, CheckOptions{}) }

// CheckOptions adjust Check to a backend.
type CheckOptions struct {
	// Equal says whether a clean record's value matches the store's;
	// nil means bytes.Equal. A backend that stamps what it stores (Azure's
	// Timestamp and ETag) passes a comparison that ignores the stamp.
	Equal func(store, buffered []byte) bool
	// OthersWrite says the store has writers the buffer does not see
	// (coherence shared, or a test writing behind its back): clean
	// records and sealed gaps may lag the store, so they are not
	// compared with it; everything else is checked.
	OthersWrite bool
	// OthersWriteKey, when set, names the keys the store has writers for
	// that the buffer does not see, where only some are written so (a
	// catalog of tables other programs create and delete in the same
	// account): a clean record of such a key is not compared with the
	// store, and a sealed gap is not faulted for the store holding such
	// a key in it. Every other key is checked as usual.
	OthersWriteKey func(ks adapters.Keyspace, key []byte) bool
}

// CheckWith is Check with options.
func (b *Buffer) CheckWith(ctx context.Context, o CheckOptions) error {
	return b.check(ctx, true, o)
}

// check is Check; without full it reads nothing from the store and skips
// what only holds when nothing is in flight (locks, pins, sentinels),
// checking the trees' structure and the counters alone: the part cheap
// and safe enough for Close to run under the invariants tag.
func (b *Buffer) check(ctx context.Context, full bool, o CheckOptions) error {
	if o.Equal == nil {
		o.Equal = bytes.Equal
	}
	c := checker{b: b, ctx: ctx, full: full, o: o}
	// Hold every keyspace still at once (and admissions), so the byte
	// totals are compared with one consistent state even while background
	// workers run.
	spaces := b.spacesSnapshot()
	sort.Slice(spaces, func(i, j int) bool { return spaces[i].name < spaces[j].name })
	// Out of the usual order (doc.go): budgetMu over every keyspace's
	// wbMu and latch at once, taken in name order, with store reads below
	// made under the latches. Safe only because Check runs quiescent.
	b.budgetMu.Lock()
	for _, s := range spaces {
		s.wbMu.lock()
		s.mu.Lock()
	}
	defer func() {
		for _, s := range spaces {
			s.mu.Unlock()
			s.wbMu.Unlock()
		}
		b.budgetMu.Unlock()
	}()
	for _, s := range spaces {
		c.keyspace(s)
	}
	c.totals()
	return errors.Join(c.errs...)
}

// checker is one run of check: what it found wrong, and the byte and
// record totals it sums over the trees.
type checker struct {
	b                  *Buffer
	ctx                context.Context
	full               bool
	o                  CheckOptions
	errs               []error
	used, dirty, count int64
}

// bad records a violation in keyspace ks.
func (c *checker) bad(ks adapters.Keyspace, f string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: keyspace %q: %s", ErrInvariant, ks, fmt.Sprintf(f, args...)))
}

// keyspace checks every record of s.
func (c *checker) keyspace(s *keyspace) {
	var recs []*record
	s.tree.Ascend(func(r *record) bool { recs = append(recs, r); return true })
	c.count += int64(len(recs))
	for i, r := range recs {
		c.used += c.b.size(r)
		if r.dirty() {
			c.dirty += c.b.size(r)
		}
		c.structure(s, recs, i)
		if !c.full {
			continue
		}
		c.settled(s, r)
		if c.o.OthersWrite {
			continue
		}
		if i > 0 && !r.dirty() && r.kind() != Sentinel && !c.othersWrite(s, r.key()) && !c.clean(s, r) {
			continue
		}
		if c.b.opts.Policy == PolicyNemo && !r.gap() {
			c.sealedGap(s, recs, i)
		}
	}
}

// structure checks recs[i]'s place in the tree: its summary, the
// keyspace's prefix, the head fence first and keys in increasing order.
func (c *checker) structure(s *keyspace, recs []*record, i int) {
	r := recs[i]
	k := r.key()
	if r.sum != summary(s.pfx, k) {
		c.bad(s.name, "record %q: sum %#x, want %#x for prefix %q", k, r.sum, summary(s.pfx, k), s.pfx)
	}
	if !r.head() && s.pfxSet && !bytes.HasPrefix(k, s.pfx) {
		c.bad(s.name, "record %q outside the keyspace prefix %q", k, s.pfx)
	}
	switch {
	case i == 0:
		if !r.head() || len(k) != 0 {
			c.bad(s.name, "first record is not the head fence")
		}
	case r.head():
		c.bad(s.name, "head fence at position %d", i)
	}
	if i > 0 && bytes.Compare(recs[i-1].key(), k) >= 0 {
		c.bad(s.name, "keys out of order at %q", k)
	}
}

// settled checks that nothing in flight is left on r: no lock, pin or
// sentinel.
func (c *checker) settled(s *keyspace, r *record) {
	if r.locked() {
		c.bad(s.name, "record %q still locked or pinned", r.key())
	}
	if r.kind() == Sentinel {
		c.bad(s.name, "sentinel %q left behind", r.key())
	}
}

// clean checks a clean record against the store: no false negative, no
// stale hit, its base the store's version. It returns false when the
// store could not tell (the gap after r is then not checked either).
func (c *checker) clean(s *keyspace, r *record) bool {
	k := r.key()
	got, err := c.b.store.Get(c.ctx, s.name, [][]byte{k})
	if err != nil && r.kind() == Tombstone && errors.Is(err, adapters.ErrInvalid) {
		// A range bound (e.g. the end of a Datastore key's
		// subtree) is no key the store can hold: absent.
		return false
	}
	if err == nil && len(got) != 1 {
		err = errShortReply
	}
	if err != nil {
		c.errs = append(c.errs, fmt.Errorf("cache: check: %w", err))
		return false
	}
	c.compare(s, r, got[0])
	return true
}

// compare checks clean record r against cur, the store's record for its key.
func (c *checker) compare(s *keyspace, r *record, cur adapters.Record) {
	k, base := r.key(), r.baseExpect()
	switch {
	case r.kind() == Tombstone && cur.Value != nil:
		c.bad(s.name, "false negative: clean tombstone %q but the store has it", k)
	case r.kind() == Regular && cur.Value == nil:
		c.bad(s.name, "clean record %q is absent from the store", k)
	case r.kind() == Regular && !c.o.Equal(cur.Value, r.value()):
		c.bad(s.name, "clean record %q differs from the store", k)
	case r.kind() == Regular && base.Kind == adapters.ExpectVersion && cur.Version != "" && base.Version != cur.Version:
		// Write-back is conditioned on the base: a stale one
		// would make the next write of this key conflict.
		c.bad(s.name, "clean record %q has base version %q, the store %q", k, base.Version, cur.Version)
	case r.kind() == Tombstone && base.Kind == adapters.ExpectVersion:
		c.bad(s.name, "clean tombstone %q has a base version", k)
	}
}

// sealedGap checks that the store holds nothing in the sealed gap after
// recs[i].
func (c *checker) sealedGap(s *keyspace, recs []*record, i int) {
	k := recs[i].key()
	lo := adapters.Successor(k)
	var hi []byte
	if i+1 < len(recs) {
		hi = recs[i+1].key()
	}
	if hi != nil && bytes.Compare(lo, hi) >= 0 {
		return
	}
	limit := 1
	if c.o.OthersWriteKey != nil {
		limit = 0 // every key in the gap: some may be others'
	}
	got, _, err := c.b.store.GetRange(c.ctx, s.name, lo, hi, limit)
	if err != nil {
		c.errs = append(c.errs, fmt.Errorf("cache: check: %w", err))
		return
	}
	for _, g := range got {
		if !c.othersWrite(s, g.Key) {
			c.bad(s.name, "gap after %q is sealed but the store has %q", k, g.Key)
			return
		}
	}
}

// othersWrite says whether key of s has writers the buffer does not see
// (CheckOptions.OthersWriteKey).
func (c *checker) othersWrite(s *keyspace, key []byte) bool {
	return c.o.OthersWriteKey != nil && c.o.OthersWriteKey(s.name, key)
}

// totals compares the buffer's counters with the sums over the records.
func (c *checker) totals() {
	b := c.b
	if u := b.used.Load(); u != c.used {
		c.errs = append(c.errs, fmt.Errorf("%w: resident bytes %d, records sum to %d", ErrInvariant, u, c.used))
	}
	if n := b.count.Load(); n != c.count {
		c.errs = append(c.errs, fmt.Errorf("%w: record count %d, trees hold %d", ErrInvariant, n, c.count))
	}
	if d := b.dirty.Load(); d != c.dirty {
		c.errs = append(c.errs, fmt.Errorf("%w: dirty bytes %d, records sum to %d", ErrInvariant, d, c.dirty))
	}
}
