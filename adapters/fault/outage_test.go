package fault

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/testenv"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func isTimeout(err error) bool {
	return errors.Is(err, ErrInjected) && errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, adapters.ErrUnavailable)
}

func TestErrorKinds(t *testing.T) {
	s, _ := newStore(t, Config{Default: OpConfig{ErrorRate: 1, Error: Timeout}})
	for name, err := range calls(context.Background(), s) {
		if !isTimeout(err) {
			t.Errorf("%s: %v, want an injected timeout", name, err)
		}
	}
	s.SetConfig(Config{Default: OpConfig{ErrorRate: 1}})
	for name, err := range calls(context.Background(), s) {
		if !isInjected(err) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v, want injected unavailability", name, err)
		}
	}
	if Timeout.String() != "timeout" || Unavailable.String() != "unavailable" {
		t.Errorf("kind names %q %q", Timeout, Unavailable)
	}
}

// TestOutageSchedule: down for For at the end of every Every, and during
// each window; nothing reaches the backend then, and calls succeed between.
func TestOutageSchedule(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	s, c := newStore(t, Config{Now: clock.Now, Outages: Outages{
		Every: 10 * time.Second, For: 3 * time.Second, Error: Timeout,
		Windows: []Window{{Start: 100 * time.Second, Duration: 20 * time.Second}},
	}})
	ctx := context.Background()
	get := func() error { _, err := s.Get(ctx, ks, [][]byte{[]byte("k")}); return err }
	for _, tc := range []struct {
		at   time.Duration // since the store was made
		down bool
	}{
		{0, false}, {6 * time.Second, false}, {7 * time.Second, true}, {9 * time.Second, true},
		{10 * time.Second, false}, {16900 * time.Millisecond, false}, {17 * time.Second, true},
		{100 * time.Second, true}, {112 * time.Second, true}, {119 * time.Second, true}, {120 * time.Second, false},
	} {
		clock.mu.Lock()
		clock.now = time.Unix(1000, 0).Add(tc.at)
		clock.mu.Unlock()
		before := c.Stats()[adapters.OpGet].Requests
		err := get()
		reached := c.Stats()[adapters.OpGet].Requests > before
		switch {
		case tc.down && (!isTimeout(err) || reached):
			t.Errorf("at %v: %v (reached the backend: %v), want an injected timeout", tc.at, err, reached)
		case !tc.down && err != nil:
			t.Errorf("at %v: %v, want the backend's answer", tc.at, err)
		}
	}
	// Keyspace administration is down too.
	clock.add(-clock.Now().Sub(time.Unix(1000, 0)) + 8*time.Second)
	if err := s.CreateKeyspace(ctx, ks); !isTimeout(err) {
		t.Errorf("create keyspace during an outage: %v", err)
	}
}

// TestHung: a hung store blocks every call until its context ends; SetHung
// (false) releases blocked calls with unavailability; Stop releases them
// for good.
func TestHung(t *testing.T) {
	s, c := newStore(t, Config{Hung: true})
	start := time.Now() // before the deadline is set: it counts from here at the latest
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := s.Get(ctx, ks, [][]byte{[]byte("k")})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrInjected) || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("hung get: %v after %v", err, time.Since(start))
	}
	if err := s.CreateKeyspace(ctx, ks); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung create keyspace: %v", err)
	}

	s.SetConfig(Config{})
	s.SetHung(true)
	done := make(chan error, 1)
	go func() { _, err := s.Upsert(context.Background(), ks, adapters.Puts(batch("h", 1))); done <- err }()
	testenv.WaitFor(t, 10*time.Second, "the upsert to hang", func() bool { return s.Hanging() == 1 })
	s.SetHung(false)
	if err := <-done; !isInjected(err) {
		t.Fatalf("upsert released by SetHung(false): %v", err)
	}
	if _, err := s.Upsert(context.Background(), ks, adapters.Puts(batch("h", 1))); err != nil {
		t.Fatalf("upsert after the hang: %v", err)
	}

	s.SetHung(true)
	go func() { _, err := s.Get(context.Background(), ks, [][]byte{[]byte("h00")}); done <- err }()
	testenv.WaitFor(t, 10*time.Second, "the get to hang", func() bool { return s.Hanging() == 1 })
	s.Stop()
	if err := <-done; !errors.Is(err, adapters.ErrClosed) {
		t.Fatalf("get released by Stop: %v", err)
	}
	if n := s.Hanging(); n != 0 {
		t.Fatalf("%d calls still counted as hanging after Stop released them", n)
	}
	if _, err := s.Get(context.Background(), ks, [][]byte{[]byte("h00")}); !errors.Is(err, adapters.ErrClosed) {
		t.Fatalf("get after Stop while hung: %v", err)
	}
	s.SetHung(false)
	if _, err := s.Get(context.Background(), ks, [][]byte{[]byte("h00")}); err != nil {
		t.Fatalf("get after Stop, not hung: %v", err)
	}
	if n := c.Stats()[adapters.OpUpsert].Requests; n != 1 {
		t.Fatalf("%d upserts reached the backend, want 1", n)
	}
}

// TestHangingOutage: with Outages.Hang a call in an outage window blocks
// until the window ends (then fails) or its context does.
func TestHangingOutage(t *testing.T) {
	s, c := newStore(t, Config{Outages: Outages{Windows: []Window{{Start: 0, Duration: 150 * time.Millisecond}}, Hang: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.Get(ctx, ks, [][]byte{[]byte("k")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get with a short deadline: %v", err)
	}
	_, err := s.Get(context.Background(), ks, [][]byte{[]byte("k")})
	if !isInjected(err) || time.Since(s.start) < 150*time.Millisecond {
		t.Fatalf("get at %v: %v, want it held until the window ended at 150ms", time.Since(s.start), err)
	}
	if _, err := s.Get(context.Background(), ks, [][]byte{[]byte("k")}); err != nil {
		t.Fatalf("get after the window: %v", err)
	}
	if n := c.Stats().Total().Requests; n != 1 {
		t.Fatalf("%d requests reached the backend, want 1", n)
	}
}
