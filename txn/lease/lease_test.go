package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/fault"
)

// clock is a fake monotonic clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const (
	ttl      = 15 * time.Second
	leasesKS = adapters.Keyspace("leases")
)

func openEmbedded(t *testing.T) *embedded.Store {
	t.Helper()
	s, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// addrOf is the peer address the tests' managers advertise.
func addrOf(holder string) string { return holder + ":7070" }

// manager returns a Manager whose renewals the test drives (renewAll),
// with peer address addrOf(holder).
func manager(t *testing.T, store adapters.Store, codec Codec, holder string, clk *clock) *Manager {
	t.Helper()
	m, err := New(Options{Store: store, Codec: codec, Holder: holder, Addr: addrOf(holder), TTL: ttl, Now: clk.Now, manualRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// twoNodes is nodes "a" and "b" sharing a clock, with their leases in one
// embedded store under RawCodec.
func twoNodes(t *testing.T) (*embedded.Store, Codec, *clock, *Manager, *Manager) {
	t.Helper()
	s := openEmbedded(t)
	codec := RawCodec(leasesKS)
	clk := newClock()
	return s, codec, clk, manager(t, s, codec, "a", clk), manager(t, s, codec, "b", clk)
}

// stored reads the lease record of ks straight from the store.
func stored(t *testing.T, store adapters.Store, codec Codec, ks adapters.Keyspace) (adapters.LeaseRecord, adapters.Version) {
	t.Helper()
	recs, err := store.Get(context.Background(), codec.Keyspace(ks), [][]byte{codec.Key(ks)})
	if err != nil {
		t.Fatal(err)
	}
	if recs[0].Value == nil {
		t.Fatalf("no lease record for %q", ks)
	}
	r, err := codec.Decode(recs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return r, recs[0].Version
}

func mustHold(t *testing.T, m *Manager, ks adapters.Keyspace) {
	t.Helper()
	if err := m.Hold(context.Background(), ks); err != nil {
		t.Fatalf("%s: Hold(%q): %v", m.opts.Holder, ks, err)
	}
}

// mustBeHeld checks that m's Hold is refused with a HeldError naming holder.
func mustBeHeld(t *testing.T, m *Manager, ks adapters.Keyspace, holder string, epoch uint64) *HeldError {
	t.Helper()
	err := m.Hold(context.Background(), ks)
	var he *HeldError
	if !errors.As(err, &he) || !errors.Is(err, ErrHeld) {
		t.Fatalf("%s: Hold(%q) = %v, want a HeldError", m.opts.Holder, ks, err)
	}
	if he.Holder != holder || he.Epoch != epoch || he.Keyspace != ks {
		t.Fatalf("%s: HeldError %+v, want holder %q epoch %d", m.opts.Holder, he, holder, epoch)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("%q", holder)) || !strings.Contains(err.Error(), he.Expiry.UTC().Format(time.RFC3339)) {
		t.Fatalf("message %q does not name the holder and its expiry", err)
	}
	return he
}

func TestOptions(t *testing.T) {
	s := openEmbedded(t)
	for _, o := range []Options{
		{Codec: RawCodec(leasesKS), Holder: "a"},
		{Store: s, Holder: "a"},
		{Store: s, Codec: RawCodec(leasesKS)},
		{Store: s, Codec: RawCodec(leasesKS), Holder: "a", TTL: 500 * time.Millisecond},
		{Store: s, Codec: RawCodec(leasesKS), Holder: "a", Addr: "10.0.0.1"},
		{Store: s, Codec: RawCodec(leasesKS), Holder: "a", Addr: ":7070"},
		{Store: s, Codec: RawCodec(leasesKS), Holder: "a", Addr: "10.0.0.1:"},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
	for _, addr := range []string{"", "10.0.0.1:7070", "[fd00::1]:7070", "nemo-0.nemo:7070"} {
		if err := (Options{Store: s, Codec: RawCodec(leasesKS), Holder: "a", Addr: addr}).Validate(); err != nil {
			t.Errorf("addr %q: %v", addr, err)
		}
	}
	o := Options{Store: s, Codec: RawCodec(leasesKS), Holder: "a"}
	o.EnsureDefaults()
	if o.TTL != DefaultTTL || o.Now == nil || o.Logger == nil || o.Validate() != nil {
		t.Fatalf("defaults: %+v, %v", o, o.Validate())
	}
}

func TestAcquireRenewRelease(t *testing.T) {
	s := openEmbedded(t)
	clk := newClock()
	codec := RawCodec(leasesKS)
	a := manager(t, s, codec, "a", clk)
	mustHold(t, a, "t1")
	if a.Epoch("t1") != 1 {
		t.Fatalf("epoch %d", a.Epoch("t1"))
	}
	r, v1 := stored(t, s, codec, "t1")
	if r.Holder != "a" || r.Epoch != 1 || !r.Expiry.Equal(clk.Now().Add(ttl)) || r.Addr != addrOf("a") {
		t.Fatalf("stored %+v", r)
	}
	// The fast path makes no store call.
	calls := a.Stats().StoreCalls
	for range 100 {
		mustHold(t, a, "t1")
	}
	if got := a.Stats().StoreCalls; got != calls {
		t.Fatalf("Hold of a held lease made %d store calls", got-calls)
	}
	// Renewal every TTL/3 keeps it valid well past the first deadline.
	for range 9 {
		clk.Advance(ttl / 3)
		a.renewAll(context.Background())
		mustHold(t, a, "t1")
	}
	r, v2 := stored(t, s, codec, "t1")
	if r.Holder != "a" || r.Epoch != 1 || v2 == v1 || !r.Expiry.Equal(clk.Now().Add(ttl)) || r.Addr != addrOf("a") {
		t.Fatalf("after renewals: %+v version %s (was %s)", r, v2, v1)
	}
	st := a.Stats()
	if st.Held != 1 || st.Acquisitions != 1 || st.Renewals != 9 || st.RenewalFailures != 0 || st.Takeovers != 0 {
		t.Fatalf("stats %+v", st)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	r, _ = stored(t, s, codec, "t1")
	if r.Holder != "" || r.Epoch != 1 || r.Addr != "" {
		t.Fatalf("after Close: %+v", r)
	}
	if st := a.Stats(); st.Held != 0 || st.Releases != 1 {
		t.Fatalf("stats after Close %+v", st)
	}
	if err := a.Hold(context.Background(), "t1"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Hold after Close: %v", err)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestSecondRefusedAndTakeoverAfterTTL(t *testing.T) {
	s := openEmbedded(t)
	codec := RawCodec(leasesKS)
	clkA, clkB := newClock(), newClock()
	clkB.Advance(-time.Hour) // B's clock has nothing to do with A's
	a := manager(t, s, codec, "a", clkA)
	b := manager(t, s, codec, "b", clkB)
	mustHold(t, a, "t1")
	mustBeHeld(t, b, "t1", "a", 1)

	// A renews while B watches: B's wait restarts at the version it
	// first sees after the renewal.
	clkB.Advance(10 * time.Second)
	mustBeHeld(t, b, "t1", "a", 1)
	clkA.Advance(ttl / 3)
	a.renewAll(context.Background())
	clkB.Advance(6 * time.Second) // 16s since B first saw a version
	mustBeHeld(t, b, "t1", "a", 1)

	// A stops renewing. B takes over only after a whole TTL of the
	// unchanged version on its own clock.
	clkB.Advance(ttl - time.Millisecond)
	mustBeHeld(t, b, "t1", "a", 1)
	if st := b.Stats(); st.Takeovers != 0 || st.Held != 0 {
		t.Fatalf("B stats %+v", st)
	}
	clkB.Advance(time.Millisecond)
	mustHold(t, b, "t1")
	if b.Epoch("t1") != 2 {
		t.Fatalf("B epoch %d, want 2", b.Epoch("t1"))
	}
	if st := b.Stats(); st.Takeovers != 1 || st.Acquisitions != 1 || st.Held != 1 {
		t.Fatalf("B stats %+v", st)
	}
	if r, _ := stored(t, s, codec, "t1"); r.Holder != "b" || r.Epoch != 2 {
		t.Fatalf("stored %+v", r)
	}

	// A's next renewal is refused: it drops the lease, and its Hold
	// reports B.
	a.renewAll(context.Background())
	if st := a.Stats(); st.Held != 0 || st.RenewalFailures != 1 || a.Epoch("t1") != 0 {
		t.Fatalf("A stats %+v, epoch %d", st, a.Epoch("t1"))
	}
	mustBeHeld(t, a, "t1", "b", 2)
}

func TestRefusalAnsweredFromMemoryBriefly(t *testing.T) {
	_, _, clk, a, b := twoNodes(t)
	mustHold(t, a, "t1")
	mustBeHeld(t, b, "t1", "a", 1)
	calls := b.Stats().StoreCalls
	for range 50 {
		mustBeHeld(t, b, "t1", "a", 1)
	}
	if got := b.Stats().StoreCalls; got != calls {
		t.Fatalf("refused Holds made %d store calls within TTL/15", got-calls)
	}
	clk.Advance(ttl / 15)
	mustBeHeld(t, b, "t1", "a", 1)
	if got := b.Stats().StoreCalls; got != calls+1 {
		t.Fatalf("after TTL/15 a refused Hold made %d store calls, want 1", got-calls)
	}
}

func TestLostWhenRenewalFails(t *testing.T) {
	s := openEmbedded(t)
	codec := RawCodec(leasesKS)
	clk := newClock()
	fs := fault.New(s, fault.Config{})
	a := manager(t, fs, codec, "a", clk)
	b := manager(t, s, codec, "b", clk)
	mustHold(t, a, "t1")
	mustBeHeld(t, b, "t1", "a", 1)

	fs.SetDown(true)
	for range 2 { // renewals at TTL/3 and 2TTL/3 fail
		clk.Advance(ttl / 3)
		a.renewAll(context.Background())
		mustHold(t, a, "t1") // still within TTL - TTL/5
	}
	if st := a.Stats(); st.RenewalFailures != 2 || st.Held != 1 {
		t.Fatalf("stats %+v", st)
	}
	validity := ttl - ttl/5
	clk.Advance(validity - 2*(ttl/3) - time.Millisecond)
	mustHold(t, a, "t1")
	clk.Advance(time.Millisecond)
	err := a.Hold(context.Background(), "t1")
	if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), `"t1"`) {
		t.Fatalf("Hold after the validity window: %v, want ErrLost naming the keyspace", err)
	}
	// A stops before B may take over: B still waits.
	mustBeHeld(t, b, "t1", "a", 1)

	// Renewal recovers while nobody took it: valid again, same epoch.
	fs.SetDown(false)
	a.renewAll(context.Background())
	mustHold(t, a, "t1")
	if a.Epoch("t1") != 1 {
		t.Fatalf("epoch %d", a.Epoch("t1"))
	}

	// B sees the renewed version (a new one: its wait starts again).
	clk.Advance(ttl / 15)
	mustBeHeld(t, b, "t1", "a", 1)
	seen := clk.Now()

	// It lapses again; this time B takes over a TTL after it first saw
	// the last version, and A stays out (lost, then refused: held by B).
	fs.SetDown(true)
	clk.Advance(validity)
	if err := a.Hold(context.Background(), "t1"); !errors.Is(err, ErrLost) {
		t.Fatalf("Hold: %v, want ErrLost", err)
	}
	mustBeHeld(t, b, "t1", "a", 1)
	clk.Advance(seen.Add(ttl).Sub(clk.Now()) - time.Millisecond)
	mustBeHeld(t, b, "t1", "a", 1)
	clk.Advance(time.Millisecond)
	mustHold(t, b, "t1")
	if b.Epoch("t1") != 2 {
		t.Fatalf("B epoch %d", b.Epoch("t1"))
	}
	if err := a.Hold(context.Background(), "t1"); !errors.Is(err, ErrLost) {
		t.Fatalf("Hold while A's store is down: %v, want ErrLost", err)
	}
	fs.SetDown(false)
	a.renewAll(context.Background()) // refused: dropped
	mustBeHeld(t, a, "t1", "b", 2)
}

// The validity window of a lease ends before any contender may take it
// over, whatever the order of the events: A's deadline counts from just
// before its write was sent, B's wait from when B first sees its version.
func TestValidityEndsBeforeTakeover(t *testing.T) {
	_, _, clk, a, b := twoNodes(t)
	mustHold(t, a, "t1")
	start := clk.Now()
	var lostAt, takenAt time.Time
	for step := 0; lostAt.IsZero() || takenAt.IsZero(); step++ {
		if lostAt.IsZero() && a.Hold(context.Background(), "t1") != nil {
			lostAt = clk.Now()
		}
		if takenAt.IsZero() && b.Hold(context.Background(), "t1") == nil {
			takenAt = clk.Now()
		}
		clk.Advance(250 * time.Millisecond)
		if step > 1000 {
			t.Fatal("no takeover")
		}
	}
	if !lostAt.Before(takenAt) {
		t.Fatalf("A lost its lease %v after acquiring it, B took it over at %v", lostAt.Sub(start), takenAt.Sub(start))
	}
	t.Logf("A stopped at +%v, B took over at +%v", lostAt.Sub(start), takenAt.Sub(start))
}

func TestRestartSameHolderKeepsEpoch(t *testing.T) {
	s := openEmbedded(t)
	codec := RawCodec(leasesKS)
	clk := newClock()
	b := manager(t, s, codec, "b", clk)
	mustHold(t, b, "t1")
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	a := manager(t, s, codec, "a", clk)
	mustHold(t, a, "t1")
	if a.Epoch("t1") != 2 {
		t.Fatalf("epoch %d", a.Epoch("t1"))
	}
	// A "crashes" (no Close) and restarts at once: same Holder.
	a2 := manager(t, s, codec, "a", clk)
	mustHold(t, a2, "t1")
	if a2.Epoch("t1") != 2 {
		t.Fatalf("epoch after restart %d, want 2", a2.Epoch("t1"))
	}
	if st := a2.Stats(); st.Acquisitions != 1 || st.Takeovers != 0 {
		t.Fatalf("stats %+v", st)
	}
	if r, _ := stored(t, s, codec, "t1"); r.Holder != "a" || r.Epoch != 2 {
		t.Fatalf("stored %+v", r)
	}
}

func TestCloseReleasesForImmediateTakeover(t *testing.T) {
	s := openEmbedded(t)
	codec := RawCodec(leasesKS)
	clk := newClock()
	a := manager(t, s, codec, "a", clk)
	for _, ks := range []adapters.Keyspace{"t1", "t2", "t3"} {
		mustHold(t, a, ks)
	}
	b := manager(t, s, codec, "b", clk)
	mustBeHeld(t, b, "t1", "a", 1)
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Releases != 3 || st.Held != 0 {
		t.Fatalf("stats %+v", st)
	}
	// No TTL to wait: a node that had not been refused takes it at once.
	c := manager(t, s, codec, "c", clk)
	mustHold(t, c, "t2")
	if c.Epoch("t2") != 2 {
		t.Fatalf("epoch %d", c.Epoch("t2"))
	}
	// B, refused a moment ago, reads again after TTL/15.
	clk.Advance(ttl / 15)
	mustHold(t, b, "t1")
	if b.Epoch("t1") != 2 || b.Stats().Takeovers != 0 {
		t.Fatalf("epoch %d stats %+v", b.Epoch("t1"), b.Stats())
	}
}

func TestRaceForFreeLease(t *testing.T) {
	s := openEmbedded(t)
	codec := RawCodec(leasesKS)
	clk := newClock()
	const n = 4
	ms := make([]*Manager, n)
	for i := range ms {
		ms[i] = manager(t, s, codec, fmt.Sprintf("node%d", i), clk)
	}
	for round := range 30 {
		ks := adapters.Keyspace(fmt.Sprintf("race%d", round))
		if round%2 == 1 { // a released lease rather than an absent one
			mustHold(t, ms[0], ks)
			ms[0].mu.Lock()
			l := ms[0].leases[ks]
			ms[0].mu.Unlock()
			if err := ms[0].writeGroup(context.Background(), []*lease{l}, true); err != nil {
				t.Fatal(err)
			}
		}
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, m := range ms {
			wg.Go(func() {
				<-start
				errs[i] = m.Hold(context.Background(), ks)
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: both %d and %d won", round, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, ErrHeld):
				t.Fatalf("round %d: node %d: %v", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody won: %v", round, errs)
		}
		r, _ := stored(t, s, codec, ks)
		want := uint64(1 + round%2)
		if r.Holder != ms[winner].opts.Holder || r.Epoch != want || ms[winner].Epoch(ks) != want {
			t.Fatalf("round %d: stored %+v, winner %d", round, r, winner)
		}
		for i, err := range errs {
			var he *HeldError
			if err != nil && (!errors.As(err, &he) || he.Holder != r.Holder) {
				t.Fatalf("round %d: node %d was refused with %v, want the winner %q", round, i, err, r.Holder)
			}
		}
	}
}

// Hold from many goroutines while renewals run (go test -race).
func TestConcurrentHoldAndRenew(t *testing.T) {
	s := openEmbedded(t)
	codec := RawCodec(leasesKS)
	clk := newClock()
	a := manager(t, s, codec, "a", clk)
	// Acquired before the clock starts racing ahead: an acquisition
	// whose write takes longer than the validity window (here, on the
	// fake clock, 24 renewal rounds) is rightly reported lost.
	for i := range 5 {
		mustHold(t, a, adapters.Keyspace(fmt.Sprintf("k%d", i)))
	}
	stop := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		for {
			select {
			case <-stop:
				return
			default:
			}
			clk.Advance(ttl / 30)
			a.renewAll(context.Background())
		}
	}()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 300 {
				if err := a.Hold(context.Background(), adapters.Keyspace(fmt.Sprintf("k%d", (i+j)%5))); err != nil {
					t.Error(err)
					return
				}
				_ = a.Epoch("k0")
				_ = a.Stats()
			}
		})
	}
	wg.Wait()
	close(stop)
	<-renewed
	if st := a.Stats(); st.Held != 5 || st.Acquisitions != 5 || st.Renewals == 0 || st.RenewalFailures != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// The renewal goroutine on the real clock: at TTL 1s it renews every 333ms.
func TestRenewalGoroutine(t *testing.T) {
	s := openEmbedded(t)
	m, err := New(Options{Store: s, Codec: RawCodec(leasesKS), Holder: "a", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mustHold(t, m, "t1")
	time.Sleep(1500 * time.Millisecond)
	mustHold(t, m, "t1") // past the first validity window
	if st := m.Stats(); st.Renewals < 3 || st.RenewalFailures != 0 {
		t.Fatalf("stats %+v", st)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r, _ := stored(t, s, RawCodec(leasesKS), "t1"); r.Holder != "" {
		t.Fatalf("after Close %+v", r)
	}
}

func TestUnleasableKeyspace(t *testing.T) {
	s := openEmbedded(t)
	a := manager(t, s, RawCodec(leasesKS), "a", newClock())
	if err := a.Hold(context.Background(), leasesKS); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("Hold of the lease keyspace itself: %v", err)
	}
}

// The renewal traffic of the design: at TTL 15s a held lease is renewed
// every TTL/3, 3 record writes per TTL, 12 per minute; the leases sharing
// one lease keyspace are renewed in one call.
func TestRenewalTraffic(t *testing.T) {
	for _, n := range []int{1, 10} {
		t.Run(fmt.Sprintf("keyspaces=%d", n), func(t *testing.T) {
			s := openEmbedded(t)
			clk := newClock()
			m := manager(t, s, RawCodec(leasesKS), "a", clk)
			for i := range n {
				mustHold(t, m, adapters.Keyspace(fmt.Sprintf("t%d", i)))
			}
			before := m.Stats()
			const minutes = 10
			for elapsed := time.Duration(0); elapsed < minutes*time.Minute; elapsed += ttl / 3 {
				clk.Advance(ttl / 3)
				m.renewAll(context.Background())
				for i := range n {
					mustHold(t, m, adapters.Keyspace(fmt.Sprintf("t%d", i)))
				}
			}
			after := m.Stats()
			calls := float64(after.StoreCalls-before.StoreCalls) / minutes / float64(n)
			writes := float64(after.Renewals-before.Renewals) / minutes / float64(n)
			t.Logf("TTL %v, %d keyspaces: %.1f record writes and %.2f store calls per keyspace per minute", ttl, n, writes, calls)
			if writes != 12 {
				t.Fatalf("%.2f renewal writes per keyspace per minute, want 12 (3 per TTL)", writes)
			}
			if want := 12 / float64(n); calls != want {
				t.Fatalf("%.2f store calls per keyspace per minute, want %.2f (one per lease keyspace per TTL/3)", calls, want)
			}
		})
	}
}

// batchRenewal: one node holds three leases that share a lease keyspace;
// another takes the middle one over. The next renewal round renews the
// other two in one call, reads the refused one's record (one call) and
// drops it, since the record names the other node.
func batchRenewal(t *testing.T, s adapters.Store, codec Codec, kss [3]adapters.Keyspace) {
	t.Helper()
	ctx := context.Background()
	clk, clkX := newClock(), newClock()
	a := manager(t, s, codec, "node-a", clk)
	x := manager(t, s, codec, "node-x", clkX)
	for _, ks := range kss {
		mustHold(t, a, ks)
	}
	mustBeHeld(t, x, kss[1], "node-a", 1)
	clkX.Advance(ttl)
	mustHold(t, x, kss[1])
	before := a.Stats()
	_, v0 := stored(t, s, codec, kss[0])
	a.renewAll(ctx)
	st := a.Stats()
	if st.StoreCalls-before.StoreCalls != 2 || st.Renewals-before.Renewals != 2 || st.RenewalFailures-before.RenewalFailures != 1 ||
		st.Drops-before.Drops != 1 || st.Adoptions != 0 || st.Held != 2 {
		t.Fatalf("stats before %+v after %+v", before, st)
	}
	if _, v := stored(t, s, codec, kss[0]); v == v0 {
		t.Fatal("the first lease was not renewed")
	}
	mustHold(t, a, kss[0])
	mustHold(t, a, kss[2])
	mustBeHeld(t, a, kss[1], "node-x", 2)
	if r, _ := stored(t, s, codec, kss[1]); r.Holder != "node-x" || r.Epoch != 2 {
		t.Fatalf("taken lease %+v", r)
	}
}

func TestBatchRenewal(t *testing.T) {
	batchRenewal(t, openEmbedded(t), RawCodec(leasesKS), [3]adapters.Keyspace{"t1", "t2", "t3"})
}

// attemptStore records, per call, whether its context asked the store for
// a single attempt (adapters.WithSingleAttempt).
type attemptStore struct {
	adapters.Store
	mu     sync.Mutex
	single []bool
}

func (s *attemptStore) note(ctx context.Context) {
	s.mu.Lock()
	s.single = append(s.single, adapters.SingleAttempt(ctx))
	s.mu.Unlock()
}

func (s *attemptStore) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	s.note(ctx)
	return s.Store.Get(ctx, ks, keys)
}

func (s *attemptStore) Upsert(ctx context.Context, ks adapters.Keyspace, ws []adapters.Write) ([]adapters.Version, error) {
	s.note(ctx)
	return s.Store.Upsert(ctx, ks, ws)
}

func (s *attemptStore) take() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.single
	s.single = nil
	return out
}

// TestRenewalCallsAreSingleAttempts: a renewal's write and the read that
// settles it ask the store for one attempt each (the round settles a
// failure itself, at once, where the store's backoffs would spend the
// validity margin); an acquire, which a client's request waits on, and a
// release keep the store's retries.
func TestRenewalCallsAreSingleAttempts(t *testing.T) {
	s := &attemptStore{Store: openEmbedded(t)}
	clk := newClock()
	m := manager(t, s, RawCodec(leasesKS), "a", clk)
	mustHold(t, m, "t1")
	if got := s.take(); len(got) == 0 || slices.Contains(got, true) {
		t.Fatalf("acquire: single attempt per call %v, want the store's retries on every call", got)
	}
	clk.Advance(ttl / 3)
	m.renewAll(context.Background())
	if got := s.take(); len(got) != 1 || !got[0] {
		t.Fatalf("renewal: single attempt per call %v, want one call, a single attempt", got)
	}
	// The record rewritten as it is: its version moves, so the next
	// renewal is refused and settled by reading it (still ours).
	codec := RawCodec(leasesKS)
	rec, _ := stored(t, s.Store, codec, "t1")
	val, err := codec.Encode("t1", rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Store.Upsert(context.Background(), codec.Keyspace("t1"), []adapters.Write{{Key: codec.Key("t1"), Value: val}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(ttl / 3)
	m.renewAll(context.Background())
	if got := s.take(); len(got) < 2 || slices.Contains(got, false) {
		t.Fatalf("refused renewal settled by reading: single attempt per call %v, want every call a single attempt", got)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.take(); len(got) == 0 || slices.Contains(got, true) {
		t.Fatalf("release: single attempt per call %v, want the store's retries", got)
	}
}
