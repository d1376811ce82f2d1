package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/wal"
)

// The backend health rule (docs/operations.md, "Readiness"). Every call
// nemo makes to the backend counts (reads, write-back, write-through,
// leases), and so does a probe (adapters.Pinger: the start-up check's
// call) made while nothing else succeeds.
const (
	// probeIdle: a probe starts when no call has succeeded for this long,
	// and at most one starts in each such span (they may overlap).
	probeIdle = 2 * time.Second
	// probeTimeout bounds a probe: one the backend has not answered by
	// then failed. The start-up check has the same bound.
	probeTimeout = 10 * time.Second
	// The backend is down once no call or probe has succeeded for
	// downAfter and the last downFailures of them failed; so one failed
	// or slow call never flips it, while the probes go on succeeding.
	downAfter    = 10 * time.Second
	downFailures = 3
	// It is up again after upSuccesses successes in a row.
	upSuccesses = 3
)

// health follows whether the backend answers, with hysteresis: see the
// constants above. It hears the outcome of every call through the
// counters (observe) and probes the backend (pinger) while no call
// succeeds. Safe for concurrent use.
type health struct {
	pinger adapters.Pinger // nil: no probes (the embedded store, always up)
	log    *slog.Logger
	now    func() time.Time

	mu        sync.Mutex
	up        bool
	lastOK    time.Time // the last success (or when following began)
	changed   time.Time // when up last changed
	failures  int       // failures since the last success
	successes int       // successes in a row
	lastErr   error     // the last failure
	probed    time.Time // the last probe's start

	ctx    context.Context // ends at close: the probes stop
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newHealth starts following a backend reached through pinger (nil: the
// backend is local and always up), from the state up. Stop it with close.
func newHealth(pinger adapters.Pinger, log *slog.Logger) *health {
	h := &health{pinger: pinger, log: log, now: time.Now, up: true}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.lastOK, h.changed = h.now(), h.now()
	if pinger != nil {
		h.wg.Go(h.probeLoop)
	}
	return h
}

// Up reports whether the backend is up.
func (h *health) Up() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.up
}

// startDown marks the backend down from the start: the start-up check
// could not reach it (err), so it takes upSuccesses successes to be up.
func (h *health) startDown(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.up, h.changed = false, h.now()
	h.failures, h.successes, h.lastErr = downFailures, 0, err
}

// observe hears one call's outcome through the counters. A call the
// backend answered counts as a success, even with a refusal of the
// request itself (a precondition, an invalid request, contention); one
// it did not (unavailable, or a refused credential) as a failure. A call
// that ended with its own context, or with the store closed, says
// nothing about the backend: its caller's deadline may have been short
// (a probe, with its own bound, tells a hung backend).
func (h *health) observe(err error) {
	switch {
	case err == nil || errors.Is(err, adapters.ErrConflict) || errors.Is(err, adapters.ErrAborted):
		h.record(nil)
	case errors.Is(err, adapters.ErrUnavailable) || errors.Is(err, adapters.ErrAccessDenied):
		h.record(err)
	}
}

// record counts one success (err nil) or failure and changes the state
// when the rule says so.
func (h *health) record(err error) {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.lastOK, h.failures, h.lastErr = now, 0, nil
		h.successes++
		if !h.up && h.successes >= upSuccesses {
			h.log.Info("backend available again", "down_for", now.Sub(h.changed).Round(time.Millisecond).String(),
				"successes", h.successes)
			h.up, h.changed = true, now
		}
		return
	}
	h.failures++
	h.successes = 0
	h.lastErr = err
	if h.up && h.failures >= downFailures && now.Sub(h.lastOK) >= downAfter {
		h.log.Warn("backend unavailable: no call to it has succeeded for a while",
			"for", now.Sub(h.lastOK).Round(time.Millisecond).String(), "failures", h.failures, "err", err.Error())
		h.up, h.changed = false, now
	}
}

// probeLoop starts a probe whenever no call has succeeded for probeIdle,
// at most one per probeIdle, until close.
func (h *health) probeLoop() {
	tick := time.NewTicker(probeIdle / 4)
	defer tick.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-tick.C:
		}
		now := h.now()
		h.mu.Lock()
		due := now.Sub(h.lastOK) >= probeIdle && now.Sub(h.probed) >= probeIdle
		if due {
			h.probed = now
		}
		h.mu.Unlock()
		if due {
			h.wg.Go(h.probe)
		}
	}
}

// probe pings the backend once, within probeTimeout, and records the
// outcome; close cancels it, and then nothing is recorded.
func (h *health) probe() {
	ctx, cancel := context.WithTimeout(h.ctx, probeTimeout)
	defer cancel()
	err := h.pinger.Ping(ctx)
	if h.ctx.Err() != nil {
		return
	}
	if err != nil {
		h.log.Debug("backend probe failed", "err", err.Error())
	}
	h.record(err)
}

// close stops the probes and waits for them.
func (h *health) close() {
	h.cancel()
	h.wg.Wait()
}

// followsWAL says whether readiness follows the WAL (a node that
// acknowledges writes from its WAL: coherence exclusive with write-back)
// rather than the backend.
func followsWAL(cfg config.Config) bool { return TxnOptions(cfg, slog.Default()).WAL != nil }

// Ready reports whether the node can serve what clients ask of it, and if
// not why: a node with a WAL (coherence exclusive with write-back), which
// acknowledges writes without the backend, while the WAL takes commits
// ("wal full": an append found no space and no checkpoint could make
// room; "wal failed": a write or fsync failed); one without (coherence
// shared, write-through), which needs the backend for every write and
// miss, while the backend is up ("backend unavailable": see health).
func (n *Node) Ready() (bool, string) {
	if _, ok := n.Engine.WALStats(); ok {
		switch err := n.Engine.WALRefusing(); {
		case err == nil:
			return true, ""
		case errors.Is(err, wal.ErrNoSpace):
			return false, "wal full"
		default:
			return false, "wal failed"
		}
	}
	if !n.health.Up() {
		return false, "backend unavailable"
	}
	if n.peers != nil {
		// A peer that holds a live lease and has not been reachable for
		// longer than a dead holder's lease takes to pass: this node is
		// cut off from it and cannot serve the writes of its tables.
		if addr, since := n.peers.Unreachable(2*n.leaseTTL, peerRecent); addr != "" {
			return false, fmt.Sprintf("peer %s unreachable for %s", addr, time.Since(since).Round(time.Second))
		}
	}
	return true, ""
}

// peerRecent is how recently a call must have failed to reach a peer for
// Ready to count it: older failures are a route that has moved on.
const peerRecent = 10 * time.Second

// BackendUp reports whether the backend answers, by the rule of health
// (always, for the embedded store): nemo_backend_up.
func (n *Node) BackendUp() bool { return n.health.Up() }
