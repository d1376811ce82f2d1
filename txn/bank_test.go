package txn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
)

// TestBankInvariant runs random transfers between accounts from 16
// goroutines, with auditors summing every account in one scan, over a
// buffer far too small for the accounts (so eviction and write-back run
// under the locks all the time). Every audit must see the initial total,
// and after a flush so must the store.
func TestBankInvariant(t *testing.T) {
	for _, ph := range []Phantom{NextKey, PCL} {
		t.Run(string(ph), func(t *testing.T) { bank(t, ph, false) })
		t.Run(string(ph)+"/early", func(t *testing.T) { bank(t, ph, true) })
	}
}

// bank runs the test; early runs the engine with a WAL and early lock
// release.
func bank(t *testing.T, ph Phantom, early bool) {
	ctx := context.Background()
	const (
		accounts  = 96
		initial   = 1000
		workers   = 16
		target    = 10_000 // committed transactions, audits included
		minAudits = 50
	)
	v := newEnv(t,
		// About 60 records fit: fewer than the accounts, so every
		// full scan and many transfers miss, admit and evict.
		cache.Options{MaxBytes: 60 * (64 + 16), AdmitWait: time.Millisecond, FlushInterval: 20 * time.Millisecond, MaxDirtyAge: 20 * time.Millisecond},
		Options{Phantom: ph, PCLPartitionSize: 8, Retries: 50, EarlyRelease: early})
	for i := 0; i < accounts; i++ {
		if err := v.e.Insert(ctx, ks, k(i), u64(initial)); err != nil {
			t.Fatal(err)
		}
	}
	var commits, transfers, audits, conflicts atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(40 * time.Second)
	start := time.Now()
	done := func() bool { return commits.Load() >= target && audits.Load() >= minAudits || t.Failed() }
	count := func(err error, n *atomic.Int64) bool {
		switch {
		case err == nil:
			commits.Add(1)
			n.Add(1)
		case errors.Is(err, ErrConflict):
			conflicts.Add(1) // gave up after the retries; no effect
		default:
			t.Error(err)
			return false
		}
		if time.Now().After(deadline) {
			t.Errorf("only %d commits by the deadline", commits.Load())
			return false
		}
		return true
	}
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g)+seedShift(t), 7))
			for !done() && count(transfer(ctx, v.e, rng, accounts), &transfers) {
				// A breath between transfers: with none in flight for a
				// moment, a full-scan audit can get all its locks.
				time.Sleep(50 * time.Microsecond)
			}
		}()
	}
	// Auditors: a read-only transaction, or an Engine.Scan, over every
	// account. Under NO_WAIT a full scan conflicts with any transfer in
	// flight, so they pause between audits to let transfers run.
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !done() && count(audit(ctx, v.e, accounts, accounts*initial, (g+i)%2 == 0), &audits); i++ {
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	st := v.e.Stats()
	t.Logf("%s: %d commits (%d transfers, %d audits) in %v = %.0f txn/s; lock conflicts %d, aborts %d (%.1f%% of attempts), given up %d; lock waits %d (%v), deadlocks %d; buffer %+v",
		ph, commits.Load(), transfers.Load(), audits.Load(), elapsed.Round(time.Millisecond),
		float64(commits.Load())/elapsed.Seconds(), st.Conflicts, st.Aborts,
		100*float64(st.Aborts)/float64(st.Aborts+st.Commits), conflicts.Load(), st.LockWaits, st.LockWait.Round(time.Millisecond), st.Deadlocks, v.buf.Stats())
	if t.Failed() {
		return
	}
	if audits.Load() < minAudits {
		t.Fatalf("only %d audits committed", audits.Load())
	}
	if bs := v.buf.Stats(); bs.Evictions == 0 {
		t.Fatalf("the buffer never evicted: %+v", bs)
	}
	if err := audit(ctx, v.e, accounts, accounts*initial, false); err != nil {
		t.Fatal(err)
	}
	if err := v.e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs, more, err := v.st.GetRange(ctx, ks, nil, nil, 0)
	if err != nil || more {
		t.Fatal(err, more)
	}
	if got := sum(recs); len(recs) != accounts || got != accounts*initial {
		t.Fatalf("store after flush: %d accounts totalling %d, want %d totalling %d", len(recs), got, accounts, accounts*initial)
	}
}

func sum(recs []adapters.Record) uint64 {
	var s uint64
	for _, r := range recs {
		s += binary.BigEndian.Uint64(r.Value)
	}
	return s
}

// audit sums every account in one read-only transaction (or one
// Engine.Scan) and checks the total.
func audit(ctx context.Context, e *Engine, accounts int, total uint64, single bool) error {
	check := func(recs []adapters.Record) error {
		if got := sum(recs); len(recs) != accounts || got != total {
			return fmt.Errorf("audit saw %d accounts totalling %d, want %d totalling %d", len(recs), got, accounts, total)
		}
		return nil
	}
	if single {
		recs, _, err := e.Scan(ctx, ks, nil, nil, 0, ReadSerializable)
		if err != nil {
			return err
		}
		return check(recs)
	}
	return e.Run(ctx, true, func(x *Txn) error {
		recs, _, err := x.Scan(ctx, ks, nil, nil, 0)
		if err != nil {
			return err
		}
		return check(recs)
	})
}

// transfer moves a random amount between two random accounts. Half use
// GetForUpdate, half a plain read upgraded by the write (which conflicts
// when both sides read first: NO_WAIT aborts one and Run retries it).
func transfer(ctx context.Context, e *Engine, rng *rand.Rand, accounts int) error {
	a, b := rng.IntN(accounts), rng.IntN(accounts-1)
	if b >= a {
		b++
	}
	amount := uint64(rng.IntN(50))
	upgrade := rng.IntN(2) == 0
	return e.Run(ctx, false, func(x *Txn) error {
		read := x.GetForUpdate
		if upgrade {
			read = x.Get
		}
		va, ok, err := read(ctx, ks, k(a))
		if err != nil || !ok {
			return errors.Join(err, errors.New("account missing"))
		}
		vb, ok, err := read(ctx, ks, k(b))
		if err != nil || !ok {
			return errors.Join(err, errors.New("account missing"))
		}
		x1, y1 := binary.BigEndian.Uint64(va), binary.BigEndian.Uint64(vb)
		if x1 < amount {
			return nil // insufficient funds: commit nothing
		}
		if err := x.Update(ctx, ks, k(a), u64(x1-amount)); err != nil {
			return err
		}
		return x.Update(ctx, ks, k(b), u64(y1+amount))
	})
}
