package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/enum"
)

// The take-over experiment (figure replicas-takeover): three replicas in
// coherence partitioned (partitionedEnv: wal.location backend,
// coherence.lease_ttl takeoverLeaseTTL), Scale.Workers clients upserting
// through all three in turn, each client its own takeoverKeys keys and
// one write at a time (so each key's last acknowledged value is known),
// every write retried (through the next live replica, every 20 ms,
// each attempt cut off after 2 s, the SDK's own retries off) until it is
// acknowledged. After max(Scale.Measure, 2 s) the owner of the table (the
// replica whose nemo_lease_held is 1) is killed with SIGKILL and taken out
// of the clients' rotation at once (a load balancer that knows); the
// writes go on through the two others, which forward them to an owner
// that is gone until the lease lapses and one of them takes the table,
// replaying its commit log from the backend. Measured: the time from the
// kill to the first acknowledgement of an attempt sent after it, the
// latency of the writes in flight in the takeoverWindow after the kill, the
// failed attempts, and the log entries the survivors say they replayed.
// Then the survivors are drained and every key read straight from the
// backend: a value older than the key's last acknowledged one is a lost
// write, and fails the run.
const (
	takeoverKeys     = 50
	takeoverWindow   = 10 * time.Second
	takeoverLeaseTTL = 5 * time.Second // NEMO_COHERENCE_LEASE_TTL in partitionedEnv
	takeoverGiveUp   = time.Minute
	takeoverAttempt  = 2 * time.Second
	takeoverBackoff  = 20 * time.Millisecond
)

// TakeoverStats is what a kill of the partitioned owner cost.
type TakeoverStats struct {
	LeaseTTL time.Duration
	// LeaseTaken: from the kill to the first sight (polled every 100 ms)
	// of a survivor reporting the table's lease (nemo_lease_held).
	LeaseTaken time.Duration
	// FirstOK: from the kill to the first acknowledgement of an attempt
	// sent after it (through a survivor).
	FirstOK time.Duration
	// P50After, P99After: latency (first attempt to acknowledgement,
	// retries included) of the writes in flight at some time in the
	// takeoverWindow after the kill (acknowledged after the kill, issued
	// before its end); Max the longest.
	P50After, P99After, MaxAfter time.Duration
	Failed                       int64 // failed attempts (all retried)
	Replayed                     int64 // log entries the survivors reported replaying
	Acked                        int64 // acknowledged writes in the run
	Keys                         int   // keys checked in the backend
	Lost                         int   // keys whose backend value is older than their last acknowledged one
	NewOwners                    int   // survivors holding the table's lease at the end

	p50, p99 time.Duration // of every acknowledged write's latency
}

// ackTimes is one acknowledged write: its first attempt, its last (the
// acknowledged one) and the acknowledgement.
type ackTimes struct{ start, last, end time.Time }

// seqClient is one take-over client: its keys' last acknowledged and
// last attempted sequence numbers, its acknowledgements.
type seqClient struct {
	acked  map[string]int64
	acks   []ackTimes
	failed int64
}

func (r *runner) runTakeover(ctx context.Context, x float64) (res Result, err error) {
	tg, bt, err := r.bankTarget(ctx, "run the take-over experiment")
	if err != nil {
		return res, err
	}
	st, err := tg.open(ctx, stackSpec{server: serverNemo, policy: cache.PolicyNemo, mode: enum.Partitioned, maxBytes: 64 << 20, replicas: 3})
	if err != nil {
		return res, err
	}
	ps := st.(*procStack)
	defer func() {
		if ps != nil {
			err = errors.Join(err, ps.close())
		}
	}()
	run := fmt.Sprintf("%x-%d", time.Now().UnixNano()&0xffffff, int(x))
	l, err := r.startTakeoverLoad(ctx, bt, ps, run)
	if err != nil {
		return res, err
	}
	defer l.close()
	owner, err := l.findOwner(ps)
	if err != nil {
		return res, err
	}
	l.alive[owner].Store(false)
	killed := time.Now()
	ps.nemos[owner].kill()
	leaseTaken, err := l.waitTakeover(ps, owner, killed)
	if err != nil {
		return res, err
	}
	time.Sleep(time.Second) // the acknowledgements of the take-over's first writes
	l.close()
	ts := l.stats(ps, owner, killed, leaseTaken)
	res.Ops, res.Aborts, res.Elapsed = ts.Acked, ts.Failed, time.Since(l.began)
	res.P50, res.P99 = ts.p50, ts.p99
	res.Replicas, res.Owners = len(ps.frontends), ts.NewOwners
	res.Takeover = ts
	if ts.FirstOK < 0 {
		return res, fmt.Errorf("no write issued after the kill of replica %d was acknowledged", owner)
	}
	// Drain the survivors (the new owner writes the table back), then
	// check every acknowledged write in the backend.
	cerr := ps.close()
	ps = nil
	if cerr != nil {
		return res, cerr
	}
	return res, l.checkAcked(ctx, bt, run, owner, ts)
}

// takeoverLoad is the take-over experiment's writers: sc.Workers clients
// upserting increasing sequence numbers through the live replicas in
// turn.
type takeoverLoad struct {
	writers []seqWriter
	alive   []atomic.Bool
	clients []*seqClient
	began   time.Time
	measure time.Duration
	stop    context.CancelFunc
	wg      sync.WaitGroup
	closers []func() error
}

// startTakeoverLoad opens a writer through each of ps's replicas and
// starts the clients.
func (r *runner) startTakeoverLoad(ctx context.Context, bt bankTarget, ps *procStack, run string) (*takeoverLoad, error) {
	n := len(ps.frontends)
	sc := *r.o.Scale
	l := &takeoverLoad{writers: make([]seqWriter, n), alive: make([]atomic.Bool, n), clients: make([]*seqClient, sc.Workers), measure: sc.Measure}
	for i, addr := range ps.frontends {
		w, closeW, err := bt.seqWriter(ctx, addr, run, &ps.sent)
		if err != nil {
			l.closeWriters()
			return nil, err
		}
		l.closers = append(l.closers, closeW)
		l.writers[i] = w
		l.alive[i].Store(true)
	}
	wctx, stop := context.WithCancel(ctx)
	l.stop, l.began = stop, time.Now()
	var rr atomic.Uint64
	pick := func() seqWriter {
		for {
			if i := (rr.Add(1) - 1) % uint64(n); l.alive[i].Load() {
				return l.writers[i]
			}
		}
	}
	for g := range l.clients {
		c := &seqClient{acked: map[string]int64{}}
		l.clients[g] = c
		l.wg.Go(func() { c.run(wctx, rand.New(rand.NewPCG(r.o.Seed, uint64(g))), g, pick) })
	}
	return l, nil
}

// run upserts c's keys until ctx ends, each write retried until it is
// acknowledged.
func (c *seqClient) run(ctx context.Context, rng *rand.Rand, g int, pick func() seqWriter) {
	for seq := int64(1); ctx.Err() == nil; seq++ {
		key := fmt.Sprintf("c%02d-%03d", g, rng.IntN(takeoverKeys))
		start := time.Now()
		for {
			last := time.Now()
			actx, cancel := context.WithTimeout(ctx, takeoverAttempt)
			err := pick().upsert(actx, key, seq)
			cancel()
			if err == nil {
				c.acked[key] = seq
				c.acks = append(c.acks, ackTimes{start, last, time.Now()})
				break
			}
			if ctx.Err() != nil {
				return // in flight at the end: applied or not
			}
			c.failed++
			time.Sleep(takeoverBackoff)
		}
	}
}

// close stops the clients and waits for them (again: a no-op), then
// closes the writers.
func (l *takeoverLoad) close() {
	l.stop()
	l.wg.Wait()
	l.closeWriters()
}

func (l *takeoverLoad) closeWriters() {
	for _, c := range l.closers {
		_ = c() // the run's outcome is measured; a client's close has nothing to add
	}
	l.closers = nil
}

// findOwner waits until the writes have run a while, then for a replica
// that holds the table's lease.
func (l *takeoverLoad) findOwner(ps *procStack) (int, error) {
	for deadline := time.Now().Add(takeoverGiveUp); ; time.Sleep(50 * time.Millisecond) {
		if time.Since(l.began) >= max(l.measure, 2*time.Second) {
			for i, u := range ps.metricsURLs {
				m := map[string]float64{}
				if readMetrics(u, m) == nil && m["nemo_lease_held"] > 0 {
					return i, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return -1, errors.New("no replica holds the table's lease")
		}
	}
}

// waitTakeover waits for the window after the kill, and for a survivor
// to report the table's lease: the clients' slices are read only after
// they stop, so it polls the survivors' lease. It returns when the lease
// was first seen taken.
func (l *takeoverLoad) waitTakeover(ps *procStack, owner int, killed time.Time) (time.Duration, error) {
	leaseTaken := time.Duration(-1)
	for leaseTaken < 0 || time.Since(killed) < takeoverWindow {
		if leaseTaken < 0 && takenOver(ps, owner) {
			leaseTaken = time.Since(killed)
		}
		if time.Since(killed) > takeoverGiveUp {
			return 0, fmt.Errorf("no surviving replica took the table within %v of the kill of replica %d", takeoverGiveUp, owner)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return leaseTaken, nil
}

// stats sums the stopped clients' acknowledgements around the kill.
func (l *takeoverLoad) stats(ps *procStack, owner int, killed time.Time, leaseTaken time.Duration) *TakeoverStats {
	ts := &TakeoverStats{LeaseTTL: takeoverLeaseTTL, LeaseTaken: leaseTaken, FirstOK: -1}
	var all, after []time.Duration
	for _, c := range l.clients {
		ts.Failed += c.failed
		for _, a := range c.acks {
			all = append(all, a.end.Sub(a.start))
			if d := a.end.Sub(killed); !a.last.Before(killed) && (ts.FirstOK < 0 || d < ts.FirstOK) {
				ts.FirstOK = d
			}
			if a.end.After(killed) && a.start.Before(killed.Add(takeoverWindow)) {
				after = append(after, a.end.Sub(a.start))
			}
		}
	}
	slices.Sort(all)
	slices.Sort(after)
	ts.Acked = int64(len(all))
	ts.p50, ts.p99 = quantile(all, 0.5), quantile(all, 0.99)
	if len(after) > 0 {
		ts.P50After, ts.P99After, ts.MaxAfter = quantile(after, 0.5), quantile(after, 0.99), after[len(after)-1]
	}
	for i, c := range ps.nemos {
		if i != owner {
			ts.Replayed += c.replayed.Load()
			m := map[string]float64{}
			if readMetrics(ps.metricsURLs[i], m) == nil && m["nemo_lease_held"] > 0 {
				ts.NewOwners++
			}
		}
	}
	return ts
}

// checkAcked reads every key's last acknowledged write back from the
// backend: one older there was lost.
func (l *takeoverLoad) checkAcked(ctx context.Context, bt bankTarget, run string, owner int, ts *TakeoverStats) error {
	var keys []string
	want := map[string]int64{}
	for _, c := range l.clients {
		for k, v := range c.acked {
			keys, want[k] = append(keys, k), v
		}
	}
	got, err := bt.seqRead(ctx, run, keys)
	if err != nil {
		return fmt.Errorf("reading the keys back: %w", err)
	}
	ts.Keys = len(keys)
	var lost []string
	for _, k := range keys {
		if got[k] < want[k] {
			lost = append(lost, fmt.Sprintf("%s: %d, acknowledged %d", k, got[k], want[k]))
		}
	}
	ts.Lost = len(lost)
	if len(lost) > 0 {
		return fmt.Errorf("ACKNOWLEDGED WRITES LOST after the kill of replica %d: %d of %d keys older in the backend than their last acknowledged write (%v)",
			owner, len(lost), len(keys), lost[:min(len(lost), 5)])
	}
	return nil
}

// takenOver reports whether a replica other than the killed one holds
// the table's lease.
func takenOver(ps *procStack, killed int) bool {
	for i, u := range ps.metricsURLs {
		m := map[string]float64{}
		if i != killed && readMetrics(u, m) == nil && m["nemo_lease_held"] > 0 {
			return true
		}
	}
	return false
}
