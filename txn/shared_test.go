package txn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/storetest"
	"github.com/nemocache/nemo/cache"
)

// sharedPair is two engines in coherence mode shared, each over its own
// buffer, over one store: two nemo replicas in one process. The store is
// also written directly (an outside writer).
type sharedPair struct {
	a, b *Engine
	st   *embedded.Store
}

func newSharedPair(t *testing.T) *sharedPair {
	t.Helper()
	st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.CreateKeyspace(context.Background(), ks); err != nil {
		t.Fatal(err)
	}
	p := &sharedPair{st: st}
	for _, e := range []**Engine{&p.a, &p.b} {
		b, err := cache.New(st, cache.Options{FreshLocks: true, MaxStaleness: time.Hour, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		b.OpenKeyspace(ks)
		eng, err := New(b, Options{Mode: WriteThrough, Coherence: Shared, Logger: quiet, Retries: 50})
		if err != nil {
			t.Fatal(err)
		}
		*e = eng
		t.Cleanup(func() {
			_ = eng.Close()
			// The replicas and the outside writer change the store
			// behind each buffer: the structure is checked, not the
			// values.
			if err := b.CheckWith(context.Background(), cache.CheckOptions{OthersWrite: true}); err != nil && !t.Failed() {
				t.Errorf("buffer check: %v", err)
			}
			_ = b.Close()
		})
	}
	return p
}

func (p *sharedPair) stored(t *testing.T, key string) (string, bool) {
	t.Helper()
	recs, err := p.st.Get(context.Background(), ks, [][]byte{[]byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	return string(recs[0].Value), recs[0].Value != nil
}

// TestSharedInsertSeesOtherReplica: B knows k is absent (it read it);
// A inserts k; B's insert must fail with ErrExists, from the store's
// truth, not succeed from B's buffer.
func TestSharedInsertSeesOtherReplica(t *testing.T) {
	p := newSharedPair(t)
	ctx := context.Background()
	if _, ok, err := p.b.Get(ctx, ks, []byte("k"), ReadLatest); err != nil || ok {
		t.Fatalf("B's first read: ok=%v err=%v", ok, err)
	}
	if err := p.a.Run(ctx, false, func(tx *Txn) error { return tx.Insert(ctx, ks, []byte("k"), []byte("A")) }); err != nil {
		t.Fatal(err)
	}
	err := p.b.Run(ctx, false, func(tx *Txn) error { return tx.Insert(ctx, ks, []byte("k"), []byte("B")) })
	if !errors.Is(err, ErrExists) {
		t.Fatalf("B's insert of a key A inserted: %v, want ErrExists", err)
	}
	if v, _ := p.stored(t, "k"); v != "A" {
		t.Fatalf("store holds %q, want A's insert", v)
	}
	// An outside writer deletes k: B's update must now find it absent.
	if err := p.st.Delete(ctx, ks, storetest.Deletes([][]byte{[]byte("k")})); err != nil {
		t.Fatal(err)
	}
	err = p.b.Run(ctx, false, func(tx *Txn) error { return tx.Update(ctx, ks, []byte("k"), []byte("B2")) })
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("B's update of a key deleted behind it: %v, want ErrNotFound", err)
	}
}

// TestSharedNoLostUpdate runs read-modify-write increments of one counter
// from both replicas and an outside writer at once: the counter ends at
// exactly the number of acknowledged increments.
func TestSharedNoLostUpdate(t *testing.T) {
	p := newSharedPair(t)
	ctx := context.Background()
	key := []byte("ctr")
	if _, err := p.st.Upsert(ctx, ks, adapters.Puts([]adapters.Record{{Key: key, Value: binary.BigEndian.AppendUint64(nil, 0)}})); err != nil {
		t.Fatal(err)
	}
	const per = 40
	var mu sync.Mutex
	acked := 0
	var wg sync.WaitGroup
	for w, e := range []*Engine{p.a, p.a, p.b, p.b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				err := e.Run(ctx, false, func(tx *Txn) error {
					v, ok, err := tx.GetForUpdate(ctx, ks, key)
					if err != nil || !ok {
						return fmt.Errorf("worker %d read: ok=%v %w", w, ok, err)
					}
					return tx.Update(ctx, ks, key, binary.BigEndian.AppendUint64(nil, binary.BigEndian.Uint64(v)+1))
				})
				if err == nil {
					mu.Lock()
					acked++
					mu.Unlock()
				} else if !errors.Is(err, ErrConflict) {
					t.Error(err)
					return
				}
			}
		}()
	}
	// The outside writer increments with compare-and-set on the version.
	outside := 0
	for range per {
		recs, err := p.st.Get(ctx, ks, [][]byte{key})
		if err != nil {
			t.Fatal(err)
		}
		n := binary.BigEndian.Uint64(recs[0].Value) + 1
		_, err = p.st.Upsert(ctx, ks, []adapters.Write{{Key: key, Value: binary.BigEndian.AppendUint64(nil, n),
			Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: recs[0].Version}}})
		switch {
		case err == nil:
			outside++
		case !errors.Is(err, adapters.ErrConflict):
			t.Fatal(err)
		}
	}
	wg.Wait()
	v, _ := p.stored(t, "ctr")
	if got := binary.BigEndian.Uint64([]byte(v)); got != uint64(acked+outside) {
		t.Fatalf("counter = %d, want %d acknowledged increments (%d through nemo, %d outside): an update was lost", got, acked+outside, acked, outside)
	}
	if acked == 0 {
		t.Fatal("no increment through nemo was acknowledged")
	}
	t.Logf("%d increments through the two replicas, %d outside, none lost", acked, outside)
}

// TestSharedBlindUpsertNeverConflicts: upserts of one key from both
// replicas and the outside writer all succeed (no read, no condition), and
// the store ends with one of them.
func TestSharedBlindUpsertNeverConflicts(t *testing.T) {
	p := newSharedPair(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i, e := range []*Engine{p.a, p.b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				v := []byte(fmt.Sprintf("%d-%d", i, j))
				if err := e.Run(ctx, false, func(tx *Txn) error { return tx.Upsert(ctx, ks, []byte("k"), v) }); err != nil {
					errs <- err
				}
			}
		}()
	}
	for j := range 50 {
		if _, err := p.st.Upsert(ctx, ks, adapters.Puts([]adapters.Record{{Key: []byte("k"), Value: []byte(fmt.Sprint("o-", j))}})); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("blind upsert failed: %v", err)
	}
}

// TestSharedRepeatableRead: a transaction that read a key keeps seeing
// what it read (a second locking read does not fetch again), and its write
// is conditioned on it: an outside change in between aborts the commit
// (ErrConflict), and the retry sees the change.
func TestSharedRepeatableRead(t *testing.T) {
	p := newSharedPair(t)
	ctx := context.Background()
	if _, err := p.st.Upsert(ctx, ks, adapters.Puts([]adapters.Record{{Key: []byte("k"), Value: []byte("1")}})); err != nil {
		t.Fatal(err)
	}
	attempts := 0
	err := p.a.Run(ctx, false, func(tx *Txn) error {
		attempts++
		v1, _, err := tx.Get(ctx, ks, []byte("k"))
		if err != nil {
			return err
		}
		if attempts == 1 {
			// Behind the transaction's back.
			if _, err := p.st.Upsert(ctx, ks, adapters.Puts([]adapters.Record{{Key: []byte("k"), Value: []byte("2")}})); err != nil {
				return err
			}
		}
		v2, _, err := tx.GetForUpdate(ctx, ks, []byte("k"))
		if err != nil {
			return err
		}
		if string(v1) != string(v2) {
			return fmt.Errorf("the transaction read %q then %q", v1, v2)
		}
		return tx.Update(ctx, ks, []byte("k"), append(v2, '+'))
	})
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 2 {
		t.Errorf("%d attempts, want 2 (the first refused by the store)", attempts)
	}
	if v, _ := p.stored(t, "k"); v != "2+" {
		t.Fatalf("store holds %q, want 2+ (the retry built on the outside write)", v)
	}
}

// switchLeaser is a Leaser a test turns on and off.
type switchLeaser struct {
	mu     sync.Mutex
	lost   bool
	lapsed bool // this node's own lease unconfirmed (not another's)
}

func (l *switchLeaser) Hold(context.Context, adapters.Keyspace) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.lapsed:
		return errors.New(`keyspace "t": lease lapsed without renewal`)
	case l.lost:
		return fmt.Errorf(`%w: keyspace "t" is held by node "b"`, ErrNotLeaseHolder)
	}
	return nil
}

func (l *switchLeaser) set(lost bool) {
	l.mu.Lock()
	l.lost = lost
	l.mu.Unlock()
}

// TestLeaseCheckedAtWriteAndCommit: a write of a keyspace whose lease this
// node does not hold is refused (ErrNotLeaseHolder, naming the holder),
// and a lease lost while a transaction runs fails its commit: nothing is
// logged or installed. A lease of this node's that it cannot confirm is
// ErrLeaseUnavailable.
func TestLeaseCheckedAtWriteAndCommit(t *testing.T) {
	l := &switchLeaser{}
	v := newEnv(t, cache.Options{}, Options{Leases: l})
	ctx := context.Background()
	l.set(true)
	err := v.e.Run(ctx, false, func(tx *Txn) error { return tx.Upsert(ctx, ks, []byte("a"), []byte("1")) })
	if !errors.Is(err, ErrNotLeaseHolder) || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("write without the lease: %v", err)
	}
	l.set(false)
	tx, err := v.e.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Upsert(ctx, ks, []byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	l.set(true) // lost while the transaction runs
	if err := tx.Commit(ctx); !errors.Is(err, ErrNotLeaseHolder) {
		t.Fatalf("commit after the lease was lost: %v", err)
	}
	l.set(false)
	if _, ok, err := v.e.Get(ctx, ks, []byte("a"), ReadLatest); err != nil || ok {
		t.Fatalf("the refused commit's write is visible: ok=%v err=%v", ok, err)
	}
	// This node's own lease, unconfirmed (a backend outage): refused as
	// retryable, not as another node's.
	l.mu.Lock()
	l.lapsed = true
	l.mu.Unlock()
	err = v.e.Run(ctx, false, func(tx *Txn) error { return tx.Upsert(ctx, ks, []byte("a"), []byte("1")) })
	if !errors.Is(err, ErrLeaseUnavailable) || errors.Is(err, ErrNotLeaseHolder) {
		t.Fatalf("write with this node's lease lapsed: %v, want ErrLeaseUnavailable alone", err)
	}
}

// TestLeaseGatesWriteBack: the engine's write-back asks its lease before
// it writes a keyspace back, so write-back of a keyspace whose
// lease another node holds writes nothing to the store and the flush says
// why; once the lease is back the same records are written.
func TestLeaseGatesWriteBack(t *testing.T) {
	l := &switchLeaser{}
	v := newEnv(t, cache.Options{FlushInterval: time.Hour, MaxDirtyAge: time.Hour}, Options{Leases: l})
	ctx := context.Background()
	if err := v.e.Upsert(ctx, ks, []byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	stored := func() []byte {
		t.Helper()
		recs, err := v.st.Get(ctx, ks, [][]byte{[]byte("a")})
		if err != nil || len(recs) != 1 {
			t.Fatalf("store Get: %v, %d records", err, len(recs))
		}
		return recs[0].Value
	}
	l.set(true)
	if err := v.e.Checkpoint(ctx); !errors.Is(err, ErrNotLeaseHolder) {
		t.Fatalf("flush without the lease: %v, want ErrNotLeaseHolder", err)
	}
	if got := stored(); got != nil {
		t.Fatalf("the store holds %q written back without the lease", got)
	}
	l.set(false)
	if err := v.e.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if got := stored(); string(got) != "1" {
		t.Fatalf("the store holds %q after the lease came back, want 1", got)
	}
}

// TestSharedStoreOutage: writing through with the store down fails the
// commit with ErrStore (wrapping adapters.ErrUnavailable) and installs
// nothing; once the store is back the same transaction succeeds and reads
// return it.
func TestSharedStoreOutage(t *testing.T) {
	v := newEnv(t, cache.Options{FreshLocks: true, MaxStaleness: time.Second}, Options{Mode: WriteThrough, Coherence: Shared})
	ctx := context.Background()
	put := func(val string) error {
		return v.e.Run(ctx, false, func(tx *Txn) error {
			if _, _, err := tx.GetForUpdate(ctx, ks, []byte("k")); err != nil {
				return err
			}
			return tx.Upsert(ctx, ks, []byte("k"), []byte(val))
		})
	}
	if err := put("1"); err != nil {
		t.Fatal(err)
	}
	v.fault.SetDown(true)
	if err := put("2"); !errors.Is(err, ErrStore) || !errors.Is(err, adapters.ErrUnavailable) {
		t.Fatalf("write with the store down: %v", err)
	}
	v.fault.SetDown(false)
	if got, _, err := v.e.Get(ctx, ks, []byte("k"), ReadLatest); err != nil || string(got) != "1" {
		t.Fatalf("after the failed write: %q, %v; want 1", got, err)
	}
	if err := put("3"); err != nil {
		t.Fatal(err)
	}
	if got, _, err := v.e.Get(ctx, ks, []byte("k"), ReadLatest); err != nil || string(got) != "3" {
		t.Fatalf("after recovery: %q, %v; want 3", got, err)
	}
}

// TestSharedNoWriteSkew: two replicas' transactions each read x and y and
// write one of them on the strength of both (the classic write skew, here
// "at least one stays on call"). The second to commit must fail, since a
// key it only read changed in the store, and its retry must see that.
func TestSharedNoWriteSkew(t *testing.T) {
	p := newSharedPair(t)
	ctx := context.Background()
	if _, err := p.st.Upsert(ctx, ks, adapters.Puts([]adapters.Record{{Key: []byte("x"), Value: []byte("on")}, {Key: []byte("y"), Value: []byte("on")}})); err != nil {
		t.Fatal(err)
	}
	// Both read both, then each turns its own off if the other is on.
	offIfOtherOn := func(tx *Txn, mine, other string) error {
		if _, _, err := tx.Get(ctx, ks, []byte(mine)); err != nil {
			return err
		}
		v, _, err := tx.Get(ctx, ks, []byte(other))
		if err != nil {
			return err
		}
		if string(v) == "on" {
			return tx.Upsert(ctx, ks, []byte(mine), []byte("off"))
		}
		return nil
	}
	ta, err := p.a.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := p.b.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	if err := offIfOtherOn(ta, "x", "y"); err != nil {
		t.Fatal(err)
	}
	if err := offIfOtherOn(tb, "y", "x"); err != nil {
		t.Fatal(err)
	}
	if err := ta.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tb.Commit(ctx); !errors.Is(err, ErrConflict) {
		t.Fatalf("the second commit, whose read of x is out of date: %v, want a conflict", err)
	}
	// Retried, it sees x off and leaves y on.
	if err := p.b.Run(ctx, false, func(tx *Txn) error { return offIfOtherOn(tx, "y", "x") }); err != nil {
		t.Fatal(err)
	}
	x, _ := p.stored(t, "x")
	y, _ := p.stored(t, "y")
	if x == "off" && y == "off" {
		t.Fatal("write skew: both turned off")
	}
}

// TestSharedNoPhantom: a transaction reads a range and, finding it empty,
// inserts into it ("at most one booking per slot"); another replica's
// transaction does the same with another key in the range and commits
// first. The first commit must fail (its range read is out of date: a
// phantom appeared), and its retry must see the other booking.
func TestSharedNoPhantom(t *testing.T) {
	p := newSharedPair(t)
	ctx := context.Background()
	bookIfFree := func(tx *Txn, key string) error {
		recs, _, err := tx.Scan(ctx, ks, []byte("slot/"), []byte("slot0"), 0)
		if err != nil {
			return err
		}
		if len(recs) > 0 {
			return nil
		}
		return tx.Insert(ctx, ks, []byte(key), []byte("booked"))
	}
	ta, err := p.a.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	if err := bookIfFree(ta, "slot/a"); err != nil {
		t.Fatal(err)
	}
	if err := p.b.Run(ctx, false, func(tx *Txn) error { return bookIfFree(tx, "slot/b") }); err != nil {
		t.Fatal(err)
	}
	if err := ta.Commit(ctx); !errors.Is(err, ErrConflict) {
		t.Fatalf("the commit whose range read missed the other booking: %v, want a conflict", err)
	}
	if err := p.a.Run(ctx, false, func(tx *Txn) error { return bookIfFree(tx, "slot/a") }); err != nil {
		t.Fatal(err)
	}
	recs, _, err := p.st.GetRange(ctx, ks, []byte("slot/"), []byte("slot0"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("%d bookings in the store, want 1: %v", len(recs), recs)
	}
}

// TestSharedRangeReadIsFresh: a transaction's range read inside the
// staleness bound still sees what another writer changed in the store.
func TestSharedRangeReadIsFresh(t *testing.T) {
	p := newSharedPair(t)
	ctx := context.Background()
	if _, err := p.st.Upsert(ctx, ks, adapters.Puts([]adapters.Record{{Key: []byte("r1"), Value: []byte("1")}})); err != nil {
		t.Fatal(err)
	}
	scan := func() string {
		var got string
		if err := p.a.Run(ctx, true, func(tx *Txn) error {
			recs, _, err := tx.Scan(ctx, ks, []byte("r"), []byte("s"), 0)
			got = fmt.Sprint(len(recs))
			for _, r := range recs {
				got += " " + string(r.Key) + "=" + string(r.Value)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := scan(); got != "1 r1=1" {
		t.Fatalf("first scan: %s", got)
	}
	if _, err := p.st.Upsert(ctx, ks, adapters.Puts([]adapters.Record{{Key: []byte("r1"), Value: []byte("2")}, {Key: []byte("r2"), Value: []byte("x")}})); err != nil {
		t.Fatal(err)
	}
	if got := scan(); got != "2 r1=2 r2=x" {
		t.Fatalf("scan after an outside change, within the staleness bound: %s", got)
	}
}

// TestSharedChecksKeyspacesItOnlyReads: a transaction that reads a key of
// one keyspace and writes another fails if the key it read changed in the
// store before its commit (the read keyspace is checked first).
func TestSharedChecksKeyspacesItOnlyReads(t *testing.T) {
	p := newSharedPair(t)
	ctx := context.Background()
	const other adapters.Keyspace = "u"
	if err := p.st.CreateKeyspace(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := p.st.Upsert(ctx, ks, adapters.Puts([]adapters.Record{{Key: []byte("limit"), Value: []byte("1")}})); err != nil {
		t.Fatal(err)
	}
	tx, err := p.a.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tx.Get(ctx, ks, []byte("limit")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Upsert(ctx, other, []byte("order"), []byte("placed under limit 1")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.st.Upsert(ctx, ks, adapters.Puts([]adapters.Record{{Key: []byte("limit"), Value: []byte("0")}})); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); !errors.Is(err, ErrConflict) {
		t.Fatalf("commit after a key it only read changed: %v, want a conflict", err)
	}
	recs, err := p.st.Get(ctx, other, [][]byte{[]byte("order")})
	if err != nil || recs[0].Value != nil {
		t.Fatalf("the refused commit wrote the other keyspace: %v %v", recs, err)
	}
}

// TestSharedNoReadSkew: a transaction reads account a at one replica, a
// transfer from a to b commits at the other, and the transaction then
// reads b: it saw a before the transfer and b after it, a total no state
// of the store ever held. It writes nothing, read-write or read-only
// alike, and its commit must still fail (ErrConflict: the client retries)
// rather than confirm what it read; the retry sees a consistent total.
// (The embedded store has no snapshots, so a read-only transaction here
// has its reads checked at commit, as in front of Azure.)
func TestSharedNoReadSkew(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("readOnly=%v", readOnly), func(t *testing.T) {
			p := newSharedPair(t)
			ctx := context.Background()
			if _, err := p.st.Upsert(ctx, ks, adapters.Puts([]adapters.Record{{Key: k(0), Value: u64(1000)}, {Key: k(1), Value: u64(1000)}})); err != nil {
				t.Fatal(err)
			}
			total := func(tx *Txn, scan bool) (uint64, error) {
				if scan {
					recs, _, err := tx.Scan(ctx, ks, k(0), k(2), 0)
					return sum(recs), err
				}
				var s uint64
				for i := range 2 {
					v, _, err := tx.Get(ctx, ks, k(i))
					if err != nil {
						return 0, err
					}
					s += binary.BigEndian.Uint64(v)
				}
				return s, nil
			}
			for _, scan := range []bool{false, true} {
				tx, err := p.a.Begin(readOnly)
				if err != nil {
					t.Fatal(err)
				}
				if _, _, err := tx.Get(ctx, ks, k(0)); err != nil {
					t.Fatal(err)
				}
				if err := p.b.Run(ctx, false, func(x *Txn) error { return moveAll(ctx, x, 100) }); err != nil {
					t.Fatal(err)
				}
				seen, err := total(tx, scan)
				if err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(ctx); !errors.Is(err, ErrConflict) {
					t.Fatalf("scan=%v: a commit after reading across a transfer (saw %d): %v, want a conflict", scan, seen, err)
				}
				var again uint64
				if err := p.a.Run(ctx, readOnly, func(x *Txn) (err error) {
					again, err = total(x, scan)
					return err
				}); err != nil || again != 2000 {
					t.Fatalf("scan=%v: the retry saw %d (%v), want 2000", scan, again, err)
				}
			}
		})
	}
}

// moveAll moves amount from account 0 to account 1 in x.
func moveAll(ctx context.Context, x *Txn, amount uint64) error {
	va, _, err := x.GetForUpdate(ctx, ks, k(0))
	if err != nil {
		return err
	}
	vb, _, err := x.GetForUpdate(ctx, ks, k(1))
	if err != nil {
		return err
	}
	if err := x.Update(ctx, ks, k(0), u64(binary.BigEndian.Uint64(va)-amount)); err != nil {
		return err
	}
	return x.Update(ctx, ks, k(1), u64(binary.BigEndian.Uint64(vb)+amount))
}

// TestSharedBank runs random transfers between accounts from both
// replicas at once, with audits at both in every form a client can make:
// a read-write or a read-only transaction, reading every account by key
// or by one scan. A committed audit must have seen the initial total;
// one whose commit failed (its reads were out of date) proves nothing and
// is retried.
func TestSharedBank(t *testing.T) {
	p := newSharedPair(t)
	ctx := context.Background()
	const (
		accounts = 12
		initial  = 1000
		perForm  = 15 // committed audits of each form
	)
	for i := 0; i < accounts; i++ {
		if _, err := p.st.Upsert(ctx, ks, adapters.Puts([]adapters.Record{{Key: k(i), Value: u64(initial)}})); err != nil {
			t.Fatal(err)
		}
	}
	engines := []*Engine{p.a, p.b}
	stop := make(chan struct{})
	var transfers atomic.Int64
	var movers, auditors sync.WaitGroup
	for g := 0; g < 4; g++ {
		movers.Add(1)
		go func() {
			defer movers.Done()
			rng := rand.New(rand.NewPCG(uint64(g)+seedShift(t), 26))
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := transfer(ctx, engines[g%2], rng, accounts)
				switch {
				case err == nil:
					transfers.Add(1)
				case !errors.Is(err, ErrConflict):
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	type form struct {
		readOnly, scan bool
	}
	var wrong, aborted atomic.Int64
	for _, f := range []form{{false, false}, {false, true}, {true, false}, {true, true}} {
		for r, e := range engines {
			auditors.Add(1)
			go func() {
				defer auditors.Done()
				for committed := 0; committed < perForm && !t.Failed(); {
					var seen uint64
					var n int
					err := e.Run(ctx, f.readOnly, func(x *Txn) error {
						seen, n = 0, 0
						if f.scan {
							recs, _, err := x.Scan(ctx, ks, k(0), k(accounts), 0)
							seen, n = sum(recs), len(recs)
							return err
						}
						for i := 0; i < accounts; i++ {
							v, ok, err := x.Get(ctx, ks, k(i))
							if err != nil {
								return err
							}
							if ok {
								seen, n = seen+binary.BigEndian.Uint64(v), n+1
							}
						}
						return nil
					})
					switch {
					case errors.Is(err, ErrConflict):
						aborted.Add(1) // Run's retries ran out: try again
						continue
					case err != nil:
						t.Errorf("replica %d, audit %+v: %v", r, f, err)
						return
					}
					committed++
					if seen != accounts*initial || n != accounts {
						wrong.Add(1)
						t.Errorf("replica %d, audit %+v committed having seen %d accounts totalling %d", r, f, n, seen)
					}
				}
			}()
		}
	}
	auditors.Wait()
	close(stop)
	movers.Wait()
	t.Logf("%d transfers; audits retried %d times; wrong totals %d", transfers.Load(), aborted.Load(), wrong.Load())
	if transfers.Load() == 0 {
		t.Fatal("no transfer committed: the audits ran alone")
	}
}
