package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/nemocache/nemo/cache"
)

// The bank workload (figure replicas-bank): bankAccounts accounts, each
// starting with bankInitial, and clients that move a random amount (1 to
// bankMaxAmount) between two accounts chosen uniformly at random, every
// transfer one transaction conditioned on what it read (Azure: an entity
// group batch of two updates with the ETags read just before; Datastore:
// a read-write transaction), retried after a conflict; bankAuditPct
// percent of the operations are audits instead, reading every account
// (Azure: a query of the accounts' partition; Datastore: a read-only
// transaction). Balances may go negative (no overdraft check: every
// transfer writes both accounts). At the end of each series, its nemos
// drained, the total read straight from the backend must be
// bankAccounts*bankInitial, or the series fails.
const (
	bankAccounts  = 1000
	bankInitial   = 1000
	bankMaxAmount = 100
	bankAuditPct  = 2
)

// errUncounted is returned by an operation drive does not count (an
// audit of the bank workload, counted by the workload itself).
var errUncounted = errors.New("bench: operation not counted")

// bankClient is one client of the bank through whatever answers (a
// nemo, or the backend itself).
type bankClient interface {
	// transfer moves amount from one account to another in one
	// transaction; false (and no error) when it conflicted and nothing
	// moved.
	transfer(ctx context.Context, from, to int, amount int64) (bool, error)
	// audit reads every account and returns how many it saw and their
	// total.
	audit(ctx context.Context) (n int, total int64, err error)
}

// bankTarget is a real target that can hold the bank and the take-over
// experiment's keys beside its items.
type bankTarget interface {
	// bankClient opens a bank client of the server at addr, counting
	// the requests it sends in sent.
	bankClient(ctx context.Context, addr string, sent *atomic.Uint64) (bankClient, func() error, error)
	// bankReset writes every account's initial balance straight into
	// the backend.
	bankReset(ctx context.Context) error
	// bankTotal reads every account straight from the backend.
	bankTotal(ctx context.Context) (n int, total int64, err error)
	// seqWriter opens a writer of run's keys through the server at addr
	// (no SDK retries: the experiment retries itself).
	seqWriter(ctx context.Context, addr, run string, sent *atomic.Uint64) (seqWriter, func() error, error)
	// seqRead reads run's keys straight from the backend: each one's
	// value, -1 for a key absent.
	seqRead(ctx context.Context, run string, keys []string) (map[string]int64, error)
}

// seqWriter upserts a key's sequence number (the take-over experiment).
type seqWriter interface {
	upsert(ctx context.Context, key string, seq int64) error
}

func bankName(i int) string { return fmt.Sprintf("a%04d", i) }

// bankWork is one series' clients of the bank, used in turn.
type bankWork struct {
	clients         []bankClient
	next            atomic.Uint64
	audits, inexact atomic.Int64
}

// do is one operation: with probability bankAuditPct percent an audit
// (not counted by drive), else a transfer retried until it commits
// (its conflicts are the aborts) or the phase ends.
func (w *bankWork) do(ctx context.Context, rng *rand.Rand, deadline time.Time) (int, error) {
	c := w.clients[(w.next.Add(1)-1)%uint64(len(w.clients))]
	if rng.IntN(100) < bankAuditPct {
		n, total, err := c.audit(ctx)
		if err != nil {
			return 0, fmt.Errorf("audit: %w", err)
		}
		w.audits.Add(1)
		if n != bankAccounts || total != bankAccounts*bankInitial {
			w.inexact.Add(1)
		}
		return 0, errUncounted
	}
	from := rng.IntN(bankAccounts)
	to := (from + 1 + rng.IntN(bankAccounts-1)) % bankAccounts
	amount := int64(1 + rng.IntN(bankMaxAmount))
	for aborts := 0; ; aborts++ {
		ok, err := c.transfer(ctx, from, to, amount)
		if err != nil {
			return aborts, fmt.Errorf("transfer %d from %s to %s: %w", amount, bankName(from), bankName(to), err)
		}
		if ok {
			return aborts, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return aborts, errCutOff
		}
	}
}

// bankTarget is the run's target, which must be a bankTarget: what
// cannot says the error if it is not.
func (r *runner) bankTarget(ctx context.Context, what string) (cacheTarget, bankTarget, error) {
	tg, _, err := r.target(ctx)
	if err != nil {
		return nil, nil, err
	}
	bt, ok := tg.(bankTarget)
	if !ok {
		return nil, nil, fmt.Errorf("target %s cannot %s", r.o.Target, what)
	}
	return tg, bt, nil
}

// runBank measures one series of the bank workload on a real target:
// the accounts reset, the series' servers started, the workload run
// unmeasured for sc.Measure when nemo answers (its buffers warmed), then
// measured for sc.Measure; the servers drained, the total checked
// straight in the backend.
func (r *runner) runBank(ctx context.Context, sp runSpec) (res Result, err error) {
	tg, bt, err := r.bankTarget(ctx, "hold the bank")
	if err != nil {
		return res, err
	}
	if err := bt.bankReset(ctx); err != nil {
		return res, fmt.Errorf("bank reset: %w", err)
	}
	st, err := tg.open(ctx, stackSpec{server: sp.server, policy: sp.policy, mode: sp.mode, maxBytes: 64 << 20, replicas: sp.replicas})
	if err != nil {
		return res, err
	}
	ps := st.(*procStack)
	defer func() {
		if ps != nil {
			err = errors.Join(err, ps.close())
		}
	}()
	w := &bankWork{}
	for _, addr := range ps.clientAddrs {
		c, closeC, err := bt.bankClient(ctx, addr, &ps.sent)
		if err != nil {
			return res, err
		}
		defer closeC()
		w.clients = append(w.clients, c)
	}
	sc := *r.o.Scale
	if sp.server == serverNemo && sp.policy != cache.PolicyNone {
		if _, err := drive(ctx, sc.Workers, sc.Measure, 0, r.o.Seed, 1, w.do); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
	}
	a0, i0 := w.audits.Load(), w.inexact.Load()
	r0, b0 := ps.remote(), ps.buffer()
	c0, err := cpuSnapshot(ps.procs())
	if err != nil {
		return res, err
	}
	p, err := drive(ctx, sc.Workers, sc.Measure, 0, r.o.Seed, 2, w.do)
	if err != nil {
		return res, err
	}
	c1, err := cpuSnapshot(ps.procs())
	if err != nil {
		return res, err
	}
	r1, b1 := ps.remote(), ps.buffer()
	res.setPhase(p)
	res.Remote = r1 - r0
	hits := b1.Hits + b1.NegativeHits + b1.RangeHits - b0.Hits - b0.NegativeHits - b0.RangeHits
	res.Hits, res.Lookups = hits, hits+b1.Misses+b1.RangeFetches-b0.Misses-b0.RangeFetches
	for i, pr := range ps.procs() {
		res.CPU = append(res.CPU, ProcCPU{Role: pr.role, Time: c1[i] - c0[i]})
	}
	res.Bank = &BankStats{Audits: w.audits.Load() - a0, Inexact: w.inexact.Load() - i0}
	if n, k, ok := ps.owners(); ok {
		res.Replicas, res.Owners = n, k
	}
	// Drain the nemos (a partitioned owner writes its tables back), then
	// read the total where it lives.
	cerr := ps.close()
	ps = nil
	if cerr != nil {
		return res, cerr
	}
	n, total, err := bt.bankTotal(ctx)
	if err != nil {
		return res, fmt.Errorf("reading the accounts back: %w", err)
	}
	res.Bank.Total = total
	if n != bankAccounts || total != bankAccounts*bankInitial {
		return res, fmt.Errorf("BALANCE NOT CONSERVED: after %d transfers the backend holds %d accounts totalling %d, want %d totalling %d",
			res.Ops, n, total, bankAccounts, bankAccounts*bankInitial)
	}
	return res, nil
}

// BankStats is what a bank run adds to its Result.
type BankStats struct {
	Audits  int64 // audits completed in the measured phase
	Inexact int64 // of them, those that saw a total other than the bank's
	Total   int64 // the total read straight from the backend at the end
}
