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
	var errs []error
	bad := func(ks adapters.Keyspace, f string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: keyspace %q: %s", ErrInvariant, ks, fmt.Sprintf(f, args...)))
	}
	var used, dirty, count int64
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
		var recs []*record
		s.tree.Ascend(func(r *record) bool { recs = append(recs, r); return true })
		count += int64(len(recs))
		for i, r := range recs {
			used += b.size(r)
			if r.dirty() {
				dirty += b.size(r)
			}
			k := r.key()
			if r.sum != summary(s.pfx, k) {
				bad(s.name, "record %q: sum %#x, want %#x for prefix %q", k, r.sum, summary(s.pfx, k), s.pfx)
			}
			if !r.head() && s.pfxSet && !bytes.HasPrefix(k, s.pfx) {
				bad(s.name, "record %q outside the keyspace prefix %q", k, s.pfx)
			}
			if i == 0 {
				if !r.head() || len(k) != 0 {
					bad(s.name, "first record is not the head fence")
				}
			} else {
				if r.head() {
					bad(s.name, "head fence at position %d", i)
				}
				if bytes.Compare(recs[i-1].key(), k) >= 0 {
					bad(s.name, "keys out of order at %q", k)
				}
			}
			if !full {
				continue
			}
			if r.locked() {
				bad(s.name, "record %q still locked or pinned", k)
			}
			if r.kind() == Sentinel {
				bad(s.name, "sentinel %q left behind", k)
			}
			if o.OthersWrite {
				continue
			}
			if i > 0 && !r.dirty() && r.kind() != Sentinel {
				got, err := b.store.Get(ctx, s.name, [][]byte{k})
				if err != nil && r.kind() == Tombstone && errors.Is(err, adapters.ErrInvalid) {
					// A range bound (e.g. the end of a Datastore key's
					// subtree) is no key the store can hold: absent.
					continue
				}
				if err == nil && len(got) != 1 {
					err = errShortReply
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("cache: check: %w", err))
					continue
				}
				cur, base := got[0], r.baseExpect()
				switch {
				case r.kind() == Tombstone && cur.Value != nil:
					bad(s.name, "false negative: clean tombstone %q but the store has it", k)
				case r.kind() == Regular && cur.Value == nil:
					bad(s.name, "clean record %q is absent from the store", k)
				case r.kind() == Regular && !o.Equal(cur.Value, r.value()):
					bad(s.name, "clean record %q differs from the store", k)
				case r.kind() == Regular && base.Kind == adapters.ExpectVersion && cur.Version != "" && base.Version != cur.Version:
					// Write-back is conditioned on the base: a stale one
					// would make the next write of this key conflict.
					bad(s.name, "clean record %q has base version %q, the store %q", k, base.Version, cur.Version)
				case r.kind() == Tombstone && base.Kind == adapters.ExpectVersion:
					bad(s.name, "clean tombstone %q has a base version", k)
				}
			}
			if b.opts.Policy == PolicyNemo && !r.gap() {
				lo := adapters.Successor(k)
				var hi []byte
				if i+1 < len(recs) {
					hi = recs[i+1].key()
				}
				if hi == nil || bytes.Compare(lo, hi) < 0 {
					got, _, err := b.store.GetRange(ctx, s.name, lo, hi, 1)
					if err != nil {
						errs = append(errs, fmt.Errorf("cache: check: %w", err))
					} else if len(got) > 0 {
						bad(s.name, "gap after %q is sealed but the store has %q", k, got[0].Key)
					}
				}
			}
		}
	}
	if u := b.used.Load(); u != used {
		errs = append(errs, fmt.Errorf("%w: resident bytes %d, records sum to %d", ErrInvariant, u, used))
	}
	if c := b.count.Load(); c != count {
		errs = append(errs, fmt.Errorf("%w: record count %d, trees hold %d", ErrInvariant, c, count))
	}
	if d := b.dirty.Load(); d != dirty {
		errs = append(errs, fmt.Errorf("%w: dirty bytes %d, records sum to %d", ErrInvariant, d, dirty))
	}
	return errors.Join(errs...)
}
