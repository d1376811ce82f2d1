package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// errCutOff is returned by an operation the end of the phase cut short
// (a transaction still retrying a conflict): it is not counted.
var errCutOff = errors.New("bench: cut off by the end of the phase")

// opFunc runs one client operation and reports how many of its attempts
// aborted on a lock conflict before it succeeded.
type opFunc func(ctx context.Context, rng *rand.Rand, deadline time.Time) (aborts int, err error)

// phase is what the clients of one phase did.
type phase struct {
	ops     int64
	aborts  int64
	elapsed time.Duration
	lat     []time.Duration // per completed operation, sorted
}

// drive runs workers clients for dur (or, with n > 0, n operations in
// all, spread over the clients), each with its own random numbers seeded
// by (seed, stream, client), and stops at the first error.
func drive(ctx context.Context, workers int, dur time.Duration, n int, seed, stream uint64, fn opFunc) (phase, error) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		all  phase
		errs []error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	deadline := start.Add(dur)
	if n > 0 {
		deadline = start.Add(24 * time.Hour)
	}
	for g := range workers {
		quota := -1
		if n > 0 {
			quota = n / workers
			if g < n%workers {
				quota++
			}
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed^stream<<32, uint64(g)))
			var p phase
			var err error
			for i := 0; i != quota && time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				t0 := time.Now()
				var ab int
				ab, err = fn(ctx, rng, deadline)
				p.aborts += int64(ab)
				if errors.Is(err, errCutOff) {
					err = nil
					break
				}
				if errors.Is(err, errUncounted) {
					err = nil
					continue
				}
				if err != nil {
					cancel()
					break
				}
				p.ops++
				p.lat = append(p.lat, time.Since(t0))
			}
			mu.Lock()
			defer mu.Unlock()
			all.ops += p.ops
			all.aborts += p.aborts
			all.lat = append(all.lat, p.lat...)
			if err != nil && len(errs) < 3 {
				errs = append(errs, fmt.Errorf("client %d: %w", g, err))
			}
		})
	}
	wg.Wait()
	all.elapsed = time.Since(start)
	slices.Sort(all.lat)
	if err := errors.Join(errs...); err != nil {
		return all, err
	}
	return all, ctx.Err()
}

// quantile returns the q-quantile of sorted latencies (0 for none).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}

// Result is one measured run: one point of one series of a figure.
type Result struct {
	Figure, Series, Group string
	X                     float64
	Ops                   int64         // operations completed (committed transactions for YCSB-E)
	Elapsed               time.Duration // the measured phase
	Remote                uint64        // store requests of every kind over the phase
	Hits, Lookups         uint64        // buffer lookups answered locally, and all lookups
	Aborts                int64         // attempts aborted by a lock conflict
	P50, P99, Mean        time.Duration // per-operation latency
	// StoreTime and StoreCalls: the time nemo's calls to the backend took
	// over the phase, and how many it made (real targets, from its
	// nemo_remote_request_duration_seconds), so a miss's cost through nemo
	// can be set beside a direct read's; Coalesced counts the misses that
	// shared another read's fetch.
	StoreTime             time.Duration
	StoreCalls, Coalesced uint64
	// NetLate and NetChunks: with a simulated round trip (Options.RTT),
	// how much later than due the delay proxy wrote the chunks it carried
	// over the phase, summed, and how many (every series' traffic to the
	// backend while the phase ran).
	NetLate   time.Duration
	NetChunks int64
	// RefreshedAhead counts the buffer's background refreshes of aging
	// records, RefreshSkipped the ones its refresh budget declined
	// (coherence shared).
	RefreshedAhead, RefreshSkipped uint64
	// Replicas and Owners: in coherence partitioned, the nemos of the run
	// and how many held the table's lease at its end (the rest forward
	// their writes to the owner); 0 otherwise.
	Replicas, Owners int
	// CPU is the CPU time each server process spent over the phase (real
	// targets: the nemo or bare proxy, and the backend when it is local).
	CPU []ProcCPU
	// Bank: the bank workload's audits and final total (replicas-bank);
	// Takeover: what a kill of a partitioned owner cost
	// (replicas-takeover); nil for other runs.
	Bank     *BankStats
	Takeover *TakeoverStats
	// Writeback: the write-back soak's measures (writeback.go).
	Writeback *WritebackStats
}

// ProcCPU is one server process's CPU time over a run's measured phase.
type ProcCPU struct {
	Role string // "server" (nemo, or the bare proxy), "backend" or "client" (the bench's own process)
	Time time.Duration
}

// CPUPerOp is the CPU time per operation of the processes of role (the
// sum over them: the three nemos of the replicas experiment), and
// whether the run measured one.
func (r Result) CPUPerOp(role string) (time.Duration, bool) {
	var t time.Duration
	found := false
	for _, c := range r.CPU {
		if c.Role == role {
			t, found = t+c.Time, true
		}
	}
	return t / time.Duration(max(r.Ops, 1)), found
}

// CoresBusy is the CPU time of every measured process (the servers and
// the clients) per second of the phase: near the machine's core count, the
// run was bound by CPU; well below it, by something else (a
// single-threaded server, waiting).
func (r Result) CoresBusy() (float64, bool) {
	var t time.Duration
	for _, c := range r.CPU {
		t += c.Time
	}
	return t.Seconds() / max(r.Elapsed.Seconds(), 1e-9), len(r.CPU) > 0
}

// ForwardedShare is the share of the writes the replicas that do not own
// the table forward to the owner, the clients' requests being spread
// evenly over the replicas, and whether the run measured it.
func (r Result) ForwardedShare() (float64, bool) {
	if r.Replicas == 0 || r.Owners == 0 {
		return 0, false
	}
	return float64(r.Replicas-r.Owners) / float64(r.Replicas), true
}

// NetLateMean is how much later than due the simulated round trip's
// proxy wrote a chunk, on average over the phase; false without one.
func (r Result) NetLateMean() (time.Duration, bool) {
	if r.NetChunks == 0 {
		return 0, false
	}
	return r.NetLate / time.Duration(r.NetChunks), true
}

// RefreshPerOp is background refreshes per operation.
func (r Result) RefreshPerOp() float64 { return float64(r.RefreshedAhead) / max(float64(r.Ops), 1) }

// Throughput is operations per second.
func (r Result) Throughput() float64 { return float64(r.Ops) / max(r.Elapsed.Seconds(), 1e-9) }

// RemotePerOp is store requests per operation.
func (r Result) RemotePerOp() float64 { return float64(r.Remote) / max(float64(r.Ops), 1) }

// HitRatio is the share of buffer lookups answered locally (0 with no
// buffer).
func (r Result) HitRatio() float64 {
	if r.Lookups == 0 {
		return 0
	}
	return float64(r.Hits) / float64(r.Lookups)
}

// AbortPct is conflict aborts per 100 attempts.
func (r Result) AbortPct() float64 {
	return 100 * float64(r.Aborts) / max(float64(r.Ops+r.Aborts), 1)
}

func (r *Result) setPhase(p phase) {
	r.Ops, r.Aborts, r.Elapsed = p.ops, p.aborts, p.elapsed
	r.P50, r.P99 = quantile(p.lat, 0.50), quantile(p.lat, 0.99)
	var sum time.Duration
	for _, d := range p.lat {
		sum += d
	}
	r.Mean = sum / time.Duration(max(len(p.lat), 1))
}

// StoreCallMean is the mean latency of nemo's calls to the backend, and
// whether the run measured them.
func (r Result) StoreCallMean() (time.Duration, bool) {
	if r.StoreCalls == 0 {
		return 0, false
	}
	return r.StoreTime / time.Duration(r.StoreCalls), true
}
