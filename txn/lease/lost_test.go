package lease

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/fault"
)

// Every lease write (acquire, renewal, release) can be applied by the
// store with its answer lost. These tests lose them on purpose
// (fault.Store.SetLoseNext: the write is applied whole, then the call
// fails) and check that a refused or unanswered write is settled by
// reading the record: a record that still names this node and its epoch
// is adopted, and only another holder's record drops the lease.

// lossy is a manager over a fault store wrapping s, and the fault store.
func lossy(t *testing.T, s adapters.Store, holder string, clk *clock) (*Manager, *fault.Store) {
	t.Helper()
	fs := fault.New(s, fault.Config{})
	return manager(t, fs, RawCodec(leasesKS), holder, clk), fs
}

// ours checks that m holds ks and that m's version of it is the store's.
func ours(t *testing.T, m *Manager, s adapters.Store, ks adapters.Keyspace, epoch uint64) {
	t.Helper()
	mustHold(t, m, ks)
	r, v := stored(t, s, RawCodec(leasesKS), ks)
	m.mu.Lock()
	mine := m.leases[ks].version
	m.mu.Unlock()
	if r.Holder != m.opts.Holder || r.Epoch != epoch || v != mine || m.Epoch(ks) != epoch {
		t.Fatalf("stored %+v version %s; %s knows version %s epoch %d, want epoch %d", r, v, m.opts.Holder, mine, m.Epoch(ks), epoch)
	}
}

func TestRenewalReplyLostSettledAtOnce(t *testing.T) {
	s := openEmbedded(t)
	clk := newClock()
	a, fs := lossy(t, s, "a", clk)
	mustHold(t, a, "t1")
	acquired := clk.Now()
	clk.Advance(ttl / 3)
	renewed := clk.Now()
	fs.SetLoseNext(adapters.OpUpsert, 1)
	before := a.Stats()
	a.renewAll(context.Background())
	st := a.Stats()
	if st.StoreCalls-before.StoreCalls != 2 || st.Adoptions != 1 || st.Renewals != 1 || st.RenewalFailures != 0 || st.Drops != 0 {
		t.Fatalf("stats %+v, want one write and one read, the write adopted as a renewal", st)
	}
	ours(t, a, s, "t1", 1)
	// Valid from when the lost renewal was sent, as if its answer had
	// come: past the acquire's own deadline.
	clk.Advance(acquired.Add(ttl - ttl/5).Sub(clk.Now()))
	mustHold(t, a, "t1")
	clk.Advance(renewed.Add(ttl - ttl/5).Sub(clk.Now()))
	if err := a.Hold(context.Background(), "t1"); !errors.Is(err, ErrLost) {
		t.Fatalf("Hold past the lost renewal's deadline: %v, want ErrLost", err)
	}
}

// The case: a renewal applied with its answer lost, and nothing
// read back before the next renewal, whose write is then refused (the
// version moved). The old code took the refusal for another node's and
// dropped its own lease.
func TestRenewalRefusedAfterLostReplyKeepsLease(t *testing.T) {
	s := openEmbedded(t)
	clk := newClock()
	a, fs := lossy(t, s, "a", clk)
	b := manager(t, s, RawCodec(leasesKS), "b", clk)
	mustHold(t, a, "t1")
	mustBeHeld(t, b, "t1", "a", 1)

	clk.Advance(ttl / 3)
	lostAt := clk.Now()
	fs.SetLoseNext(adapters.OpUpsert, 1)
	fs.SetLoseNext(adapters.OpGet, settleReads) // nothing settles it now
	a.renewAll(context.Background())
	if st := a.Stats(); st.Held != 1 || st.RenewalFailures != 1 || st.Adoptions != 0 || st.Drops != 0 {
		t.Fatalf("after the unsettled renewal: %+v", st)
	}
	mustHold(t, a, "t1") // still within its deadline

	clk.Advance(ttl / 3)
	before := a.Stats()
	a.renewAll(context.Background()) // refused, read, adopted, written again
	st := a.Stats()
	if st.Held != 1 || st.Drops != 0 || st.Adoptions != 1 || st.Renewals-before.Renewals != 2 || st.StoreCalls-before.StoreCalls != 3 {
		t.Fatalf("stats before %+v after %+v: want the refusal settled as ours (write, read, write)", before, st)
	}
	ours(t, a, s, "t1", 1)
	// The second write renewed it afresh: valid a whole window from now.
	clk.Advance(lostAt.Add(ttl - ttl/5).Sub(clk.Now()))
	mustHold(t, a, "t1")
	// Another node saw the lease renewed all along.
	clk.Advance(ttl / 15)
	mustBeHeld(t, b, "t1", "a", 1)
}

func TestAcquireReplyLost(t *testing.T) {
	s := openEmbedded(t)
	clk := newClock()
	a, fsA := lossy(t, s, "a", clk)
	fsA.SetLoseNext(adapters.OpUpsert, 1)
	mustHold(t, a, "t1") // written, lost, read back as ours, renewed
	ours(t, a, s, "t1", 1)
	if st := a.Stats(); st.Acquisitions != 1 || st.Takeovers != 0 {
		t.Fatalf("stats %+v", st)
	}

	// A takeover whose answer is lost is still a takeover.
	b, fsB := lossy(t, s, "b", clk)
	mustBeHeld(t, b, "t1", "a", 1)
	clk.Advance(ttl)
	fsB.SetLoseNext(adapters.OpUpsert, 1)
	mustHold(t, b, "t1")
	ours(t, b, s, "t1", 2)
	if st := b.Stats(); st.Acquisitions != 1 || st.Takeovers != 1 {
		t.Fatalf("stats %+v", st)
	}

	// An acquire whose every write is lost ends in the store's error.
	c, fsC := lossy(t, s, "c", clk)
	fsC.SetLoseNext(adapters.OpUpsert, maxAcquireRounds)
	if err := c.Hold(context.Background(), "t2"); !errors.Is(err, adapters.ErrUnavailable) {
		t.Fatalf("Hold with every write lost: %v, want the store's error", err)
	}
	mustHold(t, c, "t2") // the next Hold reads it back as ours
	ours(t, c, s, "t2", 1)
}

// Close and Release settle a release whose answer was lost alike.
func TestReleaseReplyLost(t *testing.T) {
	release := map[string]func(*Manager) error{
		"Close":   func(m *Manager) error { return m.Close(context.Background()) },
		"Release": func(m *Manager) error { return m.Release(context.Background(), "t1") },
	}
	for _, c := range []struct {
		how       string
		readsLost bool
	}{{"Close", false}, {"Close", true}, {"Release", false}, {"Release", true}} {
		how, readsLost := c.how, c.readsLost
		t.Run(fmt.Sprintf("%s/earlier renewal unsettled=%v", how, readsLost), func(t *testing.T) {
			s := openEmbedded(t)
			clk := newClock()
			a, fs := lossy(t, s, "a", clk)
			mustHold(t, a, "t1")
			if readsLost {
				// A renewal applied with its answer lost and never read
				// back: the release's version is stale and refused.
				clk.Advance(ttl / 3)
				fs.SetLoseNext(adapters.OpUpsert, 1)
				fs.SetLoseNext(adapters.OpGet, settleReads)
				a.renewAll(context.Background())
			}
			fs.SetLoseNext(adapters.OpUpsert, 1)
			if err := release[how](a); err != nil {
				t.Fatalf("%s: %v", how, err)
			}
			if r, _ := stored(t, s, RawCodec(leasesKS), "t1"); r.Holder != "" || r.Epoch != 1 {
				t.Fatalf("after %s: %+v, want released", how, r)
			}
			if st := a.Stats(); st.Releases != 1 || st.Held != 0 {
				t.Fatalf("stats %+v", st)
			}
			// Another node takes it at once, with no TTL to wait.
			c := manager(t, s, RawCodec(leasesKS), "c", clk)
			mustHold(t, c, "t1")
			if c.Epoch("t1") != 2 {
				t.Fatalf("epoch %d", c.Epoch("t1"))
			}
		})
	}
}

// A record of ours at another epoch, or released, is not ours: the lease
// is dropped, naming what the record says.
func TestRenewalRefusedByAnotherHolderDrops(t *testing.T) {
	s := openEmbedded(t)
	clk := newClock()
	a := manager(t, s, RawCodec(leasesKS), "a", clk)
	mustHold(t, a, "t1")
	// Someone rewrote the record: same holder name, a later epoch.
	_, v := stored(t, s, RawCodec(leasesKS), "t1")
	val, _ := RawCodec(leasesKS).Encode("t1", adapters.LeaseRecord{Holder: "a", Epoch: 7, Expiry: clk.Now().Add(ttl)})
	if _, err := s.Upsert(context.Background(), leasesKS, []adapters.Write{{Key: RawCodec(leasesKS).Key("t1"), Value: val,
		Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: v}}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(ttl / 3)
	a.renewAll(context.Background())
	if st := a.Stats(); st.Held != 0 || st.Drops != 1 || st.Adoptions != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestLostRepliesRandomized: one node renewing through a store that loses
// a third of its answers (writes applied, reads failed) keeps its lease
// (no drop); a second node that stalls it now and then takes the lease
// over only when the first has stopped trusting it, never while both
// would act as its writer.
func TestLostRepliesRandomized(t *testing.T) {
	lossyOps := map[adapters.Op]fault.OpConfig{
		adapters.OpUpsert: {ErrorRate: 0.3, PartialRate: 1},
		adapters.OpGet:    {ErrorRate: 0.3},
	}
	t.Run("alone", func(t *testing.T) {
		s := openEmbedded(t)
		clk := newClock()
		a, fs := lossy(t, s, "a", clk)
		mustHold(t, a, "t1")
		fs.SetConfig(fault.Config{Seed: 11, Ops: lossyOps})
		lapsed := 0
		for step := range 3000 {
			clk.Advance(ttl / 15)
			if step%5 == 4 {
				a.renewAll(context.Background())
			}
			if err := a.Hold(context.Background(), "t1"); err != nil {
				if !errors.Is(err, ErrLost) {
					t.Fatalf("step %d: %v", step, err)
				}
				lapsed++
			}
		}
		st := a.Stats()
		t.Logf("600 renewals through lost replies: %+v; Hold refused at %d of 3000 steps", st, lapsed)
		if st.Drops != 0 || st.Held != 1 || a.Epoch("t1") != 1 || st.Adoptions == 0 {
			t.Fatalf("stats %+v epoch %d: want the lease kept, with adoptions", st, a.Epoch("t1"))
		}
		if lapsed != 0 {
			t.Fatalf("the lease lapsed at %d steps", lapsed)
		}
	})
	t.Run("contended", func(t *testing.T) {
		s := openEmbedded(t)
		clk := newClock()
		a, fsA := lossy(t, s, "a", clk)
		b, fsB := lossy(t, s, "b", clk)
		fsA.SetConfig(fault.Config{Seed: 12, Ops: lossyOps})
		fsB.SetConfig(fault.Config{Seed: 13, Ops: lossyOps})
		ctx := context.Background()
		nodes := []*Manager{a, b}
		stalled, stalls := -1, 0 // the node whose renewals stall, and for how many steps
		both, handovers, last := 0, 0, -1
		for step := range 8000 {
			clk.Advance(ttl / 15)
			if stalls == 0 && step%300 == 0 && last >= 0 {
				stalled, stalls = last, 20+step%7*5 // the holder stalls 1.3 to 3.3 TTLs
			}
			if step%5 == 4 {
				for i, m := range nodes {
					if i != stalled || stalls == 0 {
						m.renewAll(ctx)
					}
				}
			}
			stalls = max(stalls-1, 0)
			var ok []int
			for i, m := range nodes {
				if m.Hold(ctx, "t1") == nil {
					ok = append(ok, i)
				}
			}
			if len(ok) == 2 {
				both++
				t.Errorf("step %d: both nodes hold the lease", step)
			}
			if len(ok) == 1 && ok[0] != last {
				if last >= 0 {
					handovers++
				}
				last = ok[0]
			}
		}
		sa, sb := a.Stats(), b.Stats()
		t.Logf("%d hand-overs\na %+v\nb %+v", handovers, sa, sb)
		if handovers < 10 || sa.Takeovers+sb.Takeovers < 10 {
			t.Fatalf("%d hand-overs: the test did not test takeovers", handovers)
		}
		if both != 0 {
			t.Fatalf("both held the lease at %d steps", both)
		}
	})
}

// Lost renewals that nobody reads back: each later one expects the same
// old version, so only the first can apply, and the record names it by its
// Expiry. The next renewal is refused, reads the record, adopts it and
// writes again.
func TestFirstLostRenewalIsTheOneApplied(t *testing.T) {
	s := openEmbedded(t)
	clk := newClock()
	a, fs := lossy(t, s, "a", clk)
	mustHold(t, a, "t1")
	for range 3 {
		clk.Advance(ttl / 3)
		fs.SetLoseNext(adapters.OpUpsert, 1)
		fs.SetLoseNext(adapters.OpGet, settleReads)
		a.renewAll(context.Background())
	}
	r, _ := stored(t, s, RawCodec(leasesKS), "t1")
	a.mu.Lock()
	unsure := append([]sent(nil), a.leases["t1"].unsure...)
	a.mu.Unlock()
	if len(unsure) != 3 || !unsure[0].expiry.Equal(r.Expiry) {
		t.Fatalf("stored expiry %v; unsure writes %+v: want the first one's", r.Expiry, unsure)
	}
	if err := a.Hold(context.Background(), "t1"); !errors.Is(err, ErrLost) {
		t.Fatalf("Hold a TTL after the last answered write: %v, want ErrLost", err)
	}
	a.renewAll(context.Background())
	ours(t, a, s, "t1", 1)
	if st := a.Stats(); st.Adoptions != 1 || st.Drops != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// adoptLocked gives the lease the validity of the write the record names
// (by its Expiry), as if that write's answer had come: never a later
// write's, and none for a write it does not remember.
func TestAdoptedValidityIsTheWrites(t *testing.T) {
	s := openEmbedded(t)
	clk := newClock()
	m := manager(t, s, RawCodec(leasesKS), "a", clk)
	t0 := clk.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	exp := func(d time.Duration) time.Time { return at(d).Add(ttl).UTC().Truncate(time.Millisecond) }
	valid := ttl - ttl/5
	for _, c := range []struct {
		name  string
		named time.Time // the stored record's Expiry
		want  time.Time // validUntil after adoption
		this  bool
	}{
		{"first", exp(5 * time.Second), at(5*time.Second + valid), false},
		{"second", exp(10 * time.Second), at(10*time.Second + valid), false},
		{"this round's", exp(15 * time.Second), at(15*time.Second + valid), true},
		{"forgotten", exp(2 * time.Second), at(valid), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := &lease{ks: "t1", held: true, epoch: 1, version: "v0", validUntil: at(valid)}
			for _, d := range []time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second} {
				l.unsure = append(l.unsure, sent{expiry: exp(d), start: at(d)})
			}
			m.mu.Lock()
			this := m.adoptLocked(l, readBack{rec: adapters.LeaseRecord{Holder: "a", Epoch: 1, Expiry: c.named}, version: "v1", exists: true}, at(15*time.Second))
			m.mu.Unlock()
			if !l.validUntil.Equal(c.want) || this != c.this || l.version != "v1" || len(l.unsure) != 0 {
				t.Fatalf("validUntil +%v this round %v version %s unsure %d; want +%v %v v1 0",
					l.validUntil.Sub(t0), this, l.version, len(l.unsure), c.want.Sub(t0), c.this)
			}
		})
	}
}
