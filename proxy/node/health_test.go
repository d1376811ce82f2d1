package node

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct{ t atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.t.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.t.Add(int64(d)) }

// TestHealthRule plays the readiness rule on a fake clock: the backend is
// down only once no call has succeeded for downAfter (10 s) and the last
// downFailures (3) failed; one failure, or many within less than 10 s, or
// a success among them, does not flip it; calls that ended with their own
// context say nothing; an answered refusal counts as a success; it is up
// again after upSuccesses (3) successes in a row.
func TestHealthRule(t *testing.T) {
	var clock fakeClock
	clock.t.Store(time.Unix(1000, 0).UnixNano())
	h := newHealth(nil, quiet)
	defer h.close()
	h.now = clock.now
	h.lastOK = clock.now()
	down := fmt.Errorf("connection refused: %w", adapters.ErrUnavailable)
	expect := func(step string, up bool) {
		t.Helper()
		if h.Up() != up {
			t.Fatalf("%s: up %v, want %v", step, h.Up(), up)
		}
	}

	h.observe(down)
	expect("one failure", true)
	clock.advance(30 * time.Second)
	h.observe(down)
	expect("a second failure 30 s after the last success", true)
	h.observe(nil)
	clock.advance(9 * time.Second)
	for range 5 {
		h.observe(down)
	}
	expect("five failures 9 s after a success", true)
	h.observe(fmt.Errorf("a client gave up: %w", context.Canceled))
	h.observe(fmt.Errorf("the request's deadline: %w", context.DeadlineExceeded))
	h.observe(adapters.ErrClosed)
	expect("calls that ended with their own context", true)
	clock.advance(time.Second)
	h.observe(&adapters.ConflictError{})
	clock.advance(9 * time.Second)
	h.observe(down)
	h.observe(down)
	expect("a refused precondition (the backend answered) 9 s before", true)
	h.observe(down)
	clock.advance(time.Second)
	h.observe(fmt.Errorf("403: %w", adapters.ErrAccessDenied))
	expect("10 s without a success, the last 4 failed", false)

	h.observe(nil)
	h.observe(nil)
	expect("two successes", false)
	h.observe(down)
	h.observe(nil)
	h.observe(nil)
	expect("a failure among the successes", false)
	h.observe(errors.Join(adapters.ErrAborted))
	expect("three successes in a row", true)
}

// pingFunc is an adapters.Pinger.
type pingFunc func(context.Context) error

func (f pingFunc) Ping(ctx context.Context) error { return f(ctx) }

// TestHealthProbes: with no calls, the backend is probed about every
// probeIdle (2 s), not more often; a probe's failure counts; close stops
// the probes and cancels the one in flight, whose outcome is not counted.
func TestHealthProbes(t *testing.T) {
	var pings atomic.Int32
	inFlight := make(chan struct{}, 10)
	h := newHealth(pingFunc(func(ctx context.Context) error {
		if pings.Add(1) <= 2 {
			return adapters.ErrUnavailable
		}
		inFlight <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}), quiet)
	began := time.Now()
	select {
	case <-inFlight:
	case <-time.After(4*probeIdle + time.Second):
		t.Fatalf("%d probes in %v, want 3 by 3 probe intervals", pings.Load(), 4*probeIdle+time.Second)
	}
	took := time.Since(began)
	if took < 3*probeIdle-probeIdle/2 {
		t.Errorf("3 probes after %v, want about one every %v", took, probeIdle)
	}
	h.mu.Lock()
	failures := h.failures
	h.mu.Unlock()
	if failures != 2 {
		t.Errorf("%d failures counted, want the 2 failed probes", failures)
	}
	h.close()
	if h.failures != 2 || len(inFlight) != 0 {
		t.Errorf("after close: %d failures, %d probes started, want the cancelled probe uncounted", h.failures, len(inFlight))
	}
}
