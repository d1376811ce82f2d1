package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/fault"
)

// mustOwner returns m's Owner of ks and how many store calls it made.
func mustOwner(t *testing.T, m *Manager, ks adapters.Keyspace) (Owner, uint64) {
	t.Helper()
	before := m.Stats().StoreCalls
	o, err := m.Owner(context.Background(), ks)
	if err != nil {
		t.Fatalf("%s: Owner(%q): %v", m.opts.Holder, ks, err)
	}
	return o, m.Stats().StoreCalls - before
}

// wantOwner checks m's Owner of ks and the store calls it made.
func wantOwner(t *testing.T, m *Manager, ks adapters.Keyspace, want Owner, calls uint64) {
	t.Helper()
	got, n := mustOwner(t, m, ks)
	if got != want || n != calls {
		t.Fatalf("%s: Owner(%q) = %+v with %d store calls, want %+v with %d", m.opts.Holder, ks, got, n, want, calls)
	}
}

// The record carries the holder's peer address with every acquire and
// renewal, and a release clears it; a node restarted with another address
// (same identity) writes its new one when it takes its lease back.
func TestRecordCarriesTheHoldersAddr(t *testing.T) {
	s := openEmbedded(t)
	codec := RawCodec(leasesKS)
	clk := newClock()
	a := manager(t, s, codec, "a", clk)
	mustHold(t, a, "t1")
	if r, _ := stored(t, s, codec, "t1"); r.Addr != "a:7070" {
		t.Fatalf("after acquire %+v", r)
	}
	clk.Advance(ttl / 3)
	a.renewAll(context.Background())
	if r, _ := stored(t, s, codec, "t1"); r.Addr != "a:7070" {
		t.Fatalf("after renewal %+v", r)
	}
	// A "crash", and a restart on another address.
	moved, err := New(Options{Store: s, Codec: codec, Holder: "a", Addr: "10.1.2.3:7070", TTL: ttl, Now: clk.Now, manualRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	mustHold(t, moved, "t1")
	if r, _ := stored(t, s, codec, "t1"); r.Holder != "a" || r.Epoch != 1 || r.Addr != "10.1.2.3:7070" {
		t.Fatalf("after the restart %+v", r)
	}
	if err := moved.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r, _ := stored(t, s, codec, "t1"); r.Holder != "" || r.Addr != "" {
		t.Fatalf("after release %+v", r)
	}
	// A node without a peer listener writes none.
	n, err := New(Options{Store: s, Codec: codec, Holder: "n", TTL: ttl, Now: clk.Now, manualRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	mustHold(t, n, "t1")
	if r, _ := stored(t, s, codec, "t1"); r.Holder != "n" || r.Epoch != 2 || r.Addr != "" {
		t.Fatalf("a node without an address: %+v", r)
	}
}

// Owner reads the record at most once per TTL/15, answers its own lease
// without a store call, and names the holder's address.
func TestOwnerAnswersFromMemory(t *testing.T) {
	_, _, clk, a, b := twoNodes(t)

	// Nothing stored yet (not even the lease keyspace): nobody owns it.
	wantOwner(t, b, "t1", Owner{}, 1)
	wantOwner(t, b, "t1", Owner{}, 0)

	mustHold(t, a, "t1")
	self := Owner{Self: true, Holder: "a", Addr: "a:7070", Epoch: 1, Live: true}
	for range 50 {
		wantOwner(t, a, "t1", self, 0)
	}
	// b remembers the absent record until TTL/15 has passed.
	clk.Advance(ttl/15 - time.Millisecond)
	wantOwner(t, b, "t1", Owner{}, 0)
	clk.Advance(time.Millisecond)
	held := Owner{Holder: "a", Addr: "a:7070", Epoch: 1, Live: true}
	wantOwner(t, b, "t1", held, 1)
	for range 50 {
		wantOwner(t, b, "t1", held, 0)
	}
	clk.Advance(ttl / 15)
	wantOwner(t, b, "t1", held, 1)
	if err := b.Hold(context.Background(), "t1"); !errors.Is(err, ErrHeld) {
		t.Fatalf("Hold: %v", err)
	}
}

// Hold and Owner share what the node last read of another's record: a
// refused Hold answers the next Owner, and an Owner that found another
// node's live lease answers the next Hold, each without a store call.
func TestOwnerAndHoldShareTheirMemory(t *testing.T) {
	_, _, _, a, b := twoNodes(t)
	mustHold(t, a, "t1")
	mustHold(t, a, "t2")

	he := mustBeHeld(t, b, "t1", "a", 1)
	if he.Addr != "a:7070" {
		t.Fatalf("HeldError %+v does not name the holder's address", he)
	}
	wantOwner(t, b, "t1", Owner{Holder: "a", Addr: "a:7070", Epoch: 1, Live: true}, 0)

	wantOwner(t, b, "t2", Owner{Holder: "a", Addr: "a:7070", Epoch: 1, Live: true}, 1)
	before := b.Stats().StoreCalls
	he = mustBeHeld(t, b, "t2", "a", 1)
	if n := b.Stats().StoreCalls - before; n != 0 || he.Addr != "a:7070" {
		t.Fatalf("Hold after Owner made %d store calls, refused with %+v", n, he)
	}
}

// A stale answer costs one read: after a hand-over the old answer is
// given from memory until the caller, told by the peer it named that it
// is not the owner, invalidates it. Many callers at once, each after its
// own Invalidate, make one read between them when they meet.
func TestOwnerInvalidate(t *testing.T) {
	s, codec, clk, a, b := twoNodes(t)
	c := manager(t, s, codec, "c", clk)
	mustHold(t, a, "t1")
	wantOwner(t, b, "t1", Owner{Holder: "a", Addr: "a:7070", Epoch: 1, Live: true}, 1)

	// a hands t1 over; c takes it.
	if err := a.Release(context.Background(), "t1"); err != nil {
		t.Fatal(err)
	}
	mustHold(t, c, "t1")
	wantOwner(t, b, "t1", Owner{Holder: "a", Addr: "a:7070", Epoch: 1, Live: true}, 0) // stale, from memory
	b.Invalidate("t1")
	moved := Owner{Holder: "c", Addr: "c:7070", Epoch: 2, Live: true}
	wantOwner(t, b, "t1", moved, 1)
	wantOwner(t, b, "t1", moved, 0)

	// Invalidate makes Hold read again too (and changes nothing of a
	// lease the node holds).
	mustBeHeld(t, b, "t1", "c", 2)
	c.Invalidate("t1")
	wantOwner(t, c, "t1", Owner{Self: true, Holder: "c", Addr: "c:7070", Epoch: 2, Live: true}, 0)

	b.Invalidate("t1")
	before := b.Stats().StoreCalls
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			<-start
			if o, err := b.Owner(context.Background(), "t1"); err != nil || o != moved {
				t.Errorf("Owner = %+v, %v", o, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if n := b.Stats().StoreCalls - before; n != 1 {
		t.Fatalf("8 concurrent Owners after one Invalidate made %d store calls, want 1", n)
	}
}

// Live follows Hold's takeover rule: another node's lease is live until
// its record's version has stayed unchanged for a whole TTL on this
// node's clock, and Owner reads again no later than that moment.
func TestOwnerLiveness(t *testing.T) {
	s := openEmbedded(t)
	codec := RawCodec(leasesKS)
	clkA, clkB := newClock(), newClock()
	clkB.Advance(-time.Hour) // B's clock has nothing to do with A's
	a := manager(t, s, codec, "a", clkA)
	b := manager(t, s, codec, "b", clkB)
	mustHold(t, a, "t1")
	live := Owner{Holder: "a", Addr: "a:7070", Epoch: 1, Live: true}
	wantOwner(t, b, "t1", live, 1)

	// A renews: a new version, B's wait restarts when it reads it.
	clkB.Advance(10 * time.Second)
	clkA.Advance(ttl / 3)
	a.renewAll(context.Background())
	wantOwner(t, b, "t1", live, 1)
	seen := clkB.Now()

	// A stops renewing: live until a TTL after B first saw that version.
	for clkB.Now().Before(seen.Add(ttl - 2*ttl/15)) {
		clkB.Advance(ttl / 15)
		wantOwner(t, b, "t1", live, 1)
	}
	clkB.Advance(ttl/15 + ttl/30)
	wantOwner(t, b, "t1", live, 1)
	// The next read is due when the lease may be taken over, sooner than
	// TTL/15 after the last.
	clkB.Advance(seen.Add(ttl).Sub(clkB.Now()) - time.Millisecond)
	wantOwner(t, b, "t1", live, 0)
	clkB.Advance(time.Millisecond)
	wantOwner(t, b, "t1", Owner{Holder: "a", Addr: "a:7070", Epoch: 1}, 1)
	// Not live: B's next write takes it over at once.
	mustHold(t, b, "t1")
	wantOwner(t, b, "t1", Owner{Self: true, Holder: "b", Addr: "b:7070", Epoch: 2, Live: true}, 0)
	if st := b.Stats(); st.Takeovers != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A released record is not live, and neither is one naming this node
// that it does not hold (its previous run's): Hold takes either at once.
func TestOwnerNotLive(t *testing.T) {
	s := openEmbedded(t)
	codec := RawCodec(leasesKS)
	clk := newClock()
	a := manager(t, s, codec, "a", clk)
	mustHold(t, a, "t1")
	mustHold(t, a, "t2")
	if err := a.Release(context.Background(), "t1"); err != nil {
		t.Fatal(err)
	}
	b := manager(t, s, codec, "b", clk)
	wantOwner(t, b, "t1", Owner{Epoch: 1}, 1)
	mustHold(t, b, "t1")

	// a "crashes" holding t2 and restarts: its old record is not live.
	a2 := manager(t, s, codec, "a", clk)
	wantOwner(t, a2, "t2", Owner{Holder: "a", Addr: "a:7070", Epoch: 1}, 1)
	mustHold(t, a2, "t2")
	wantOwner(t, a2, "t2", Owner{Self: true, Holder: "a", Addr: "a:7070", Epoch: 1, Live: true}, 0)
}

// A node whose own lease has lapsed names nobody: Owner says ErrLost, as
// Hold does, without a store call, and recovers with its renewal.
func TestOwnerOfALapsedLease(t *testing.T) {
	s := openEmbedded(t)
	clk := newClock()
	fs := fault.New(s, fault.Config{})
	a := manager(t, fs, RawCodec(leasesKS), "a", clk)
	mustHold(t, a, "t1")
	fs.SetDown(true)
	clk.Advance(ttl - ttl/5)
	before := a.Stats().StoreCalls
	if _, err := a.Owner(context.Background(), "t1"); !errors.Is(err, ErrLost) {
		t.Fatalf("Owner of a lapsed lease: %v, want ErrLost", err)
	}
	if n := a.Stats().StoreCalls - before; n != 0 {
		t.Fatalf("%d store calls", n)
	}
	fs.SetDown(false)
	a.renewAll(context.Background())
	wantOwner(t, a, "t1", Owner{Self: true, Holder: "a", Addr: "a:7070", Epoch: 1, Live: true}, 0)
}

func TestOwnerErrors(t *testing.T) {
	s := openEmbedded(t)
	clk := newClock()
	fs := fault.New(s, fault.Config{})
	a := manager(t, fs, RawCodec(leasesKS), "a", clk)
	if _, err := a.Owner(context.Background(), leasesKS); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("Owner of the lease keyspace itself: %v", err)
	}
	fs.SetDown(true)
	if _, err := a.Owner(context.Background(), "t1"); !errors.Is(err, adapters.ErrUnavailable) {
		t.Fatalf("Owner with the store down: %v", err)
	}
	fs.SetDown(false)
	wantOwner(t, a, "t1", Owner{}, 1) // a failed read is not remembered
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Owner(context.Background(), "t1"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Owner after Close: %v", err)
	}
}

// Release gives up one lease: the record is released (same epoch, no
// address), another node takes it at once, and the node's other leases
// stay held and renewed.
func TestRelease(t *testing.T) {
	s, codec, clk, a, b := twoNodes(t)
	mustHold(t, a, "t1")
	mustHold(t, a, "t2")
	before := a.Stats()
	if err := a.Release(context.Background(), "t1"); err != nil {
		t.Fatal(err)
	}
	st := a.Stats()
	if st.Releases != 1 || st.Held != 1 || st.StoreCalls-before.StoreCalls != 1 || a.Epoch("t1") != 0 {
		t.Fatalf("stats before %+v after %+v", before, st)
	}
	if r, _ := stored(t, s, codec, "t1"); r.Holder != "" || r.Epoch != 1 || r.Addr != "" {
		t.Fatalf("released record %+v", r)
	}
	mustHold(t, b, "t1")
	if b.Epoch("t1") != 2 || b.Stats().Takeovers != 0 {
		t.Fatalf("b epoch %d stats %+v", b.Epoch("t1"), b.Stats())
	}
	// The other lease is still held (no store call) and renewed alone.
	calls := a.Stats().StoreCalls
	mustHold(t, a, "t2")
	_, v := stored(t, s, codec, "t2")
	clk.Advance(ttl / 3)
	a.renewAll(context.Background())
	if _, v2 := stored(t, s, codec, "t2"); v2 == v || a.Stats().StoreCalls-calls != 1 {
		t.Fatalf("renewal after a release: version %s (was %s), %d calls", v2, v, a.Stats().StoreCalls-calls)
	}
	// Releasing what it does not hold does nothing; a's next Hold of t1
	// finds b's lease.
	calls = a.Stats().StoreCalls
	for _, ks := range []adapters.Keyspace{"t1", "never"} {
		if err := a.Release(context.Background(), ks); err != nil {
			t.Fatalf("Release(%q): %v", ks, err)
		}
	}
	if n := a.Stats().StoreCalls - calls; n != 0 {
		t.Fatalf("releasing unheld leases made %d store calls", n)
	}
	mustBeHeld(t, a, "t1", "b", 2)
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(context.Background(), "t2"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Release after Close: %v", err)
	}
}

// A release whose answer stays unknown (the store is down) is reported,
// and the lease is not held here any more: the node does not write as its
// owner while the record may or may not be released.
func TestReleaseUnsettled(t *testing.T) {
	s := openEmbedded(t)
	clk := newClock()
	a, fs := lossy(t, s, "a", clk)
	mustHold(t, a, "t1")
	fs.SetDown(true)
	err := a.Release(context.Background(), "t1")
	if !errors.Is(err, adapters.ErrUnavailable) {
		t.Fatalf("Release with the store down: %v", err)
	}
	if st := a.Stats(); st.Held != 0 || st.Releases != 0 {
		t.Fatalf("stats %+v", st)
	}
	fs.SetDown(false)
	mustHold(t, a, "t1") // the record still names it: taken back, same epoch
	ours(t, a, s, "t1", 1)
}
