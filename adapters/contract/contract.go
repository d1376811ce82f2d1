package contract

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Config is what the contract injects. Probabilities are in [0, 1]; the
// zero value injects nothing.
type Config struct {
	// Seed seeds the generator: same seed and same calls, same answers.
	Seed uint64
	// ShortRate is the probability that a query batch (Datastore) or page
	// (Azure) is cut short; below 1, so that every query ends.
	ShortRate float64
	// EmptyRate is the probability that a batch or page cut short is
	// empty.
	EmptyRate float64
	// DeferRate is the probability that each key of a Datastore Lookup is
	// answered as deferred (one key of each Lookup is always answered).
	DeferRate float64
	// ErrorRate is the probability that a call fails before it reaches
	// the backend: Azure 503 ServerBusy or 500 OperationTimedOut,
	// Datastore UNAVAILABLE or (where the service gives it) ABORTED.
	ErrorRate float64
	// LostRate is the probability that a call reaches the backend, which
	// carries it out, and its answer is replaced by an error: Azure 500
	// OperationTimedOut, Datastore UNAVAILABLE.
	LostRate float64
	// DefiniteWrites: writes fail only with the errors the services
	// document as not applied (Azure 503 ServerBusy, Datastore ABORTED)
	// and never lose their replies.
	DefiniteWrites bool
}

// Standard is the plan the test suites run nemo under (and
// backend.contract's defaults): half the batches and pages cut short, a
// fifth of those empty, a third of the keys of a Lookup deferred, and one
// call in fifty failing before the backend and one in fifty after it.
func Standard(seed uint64) Config {
	return Config{Seed: seed, ShortRate: 0.5, EmptyRate: 0.2, DeferRate: 0.3, ErrorRate: 0.02, LostRate: 0.02}
}

// ErrInvalid is wrapped by the error Validate returns.
var ErrInvalid = errors.New("contract: invalid configuration")

// Validate reports a rate outside [0, 1].
func (c Config) Validate() error {
	var errs []error
	for _, r := range []struct {
		name string
		v    float64
	}{{"ShortRate", c.ShortRate}, {"EmptyRate", c.EmptyRate}, {"DeferRate", c.DeferRate}, {"ErrorRate", c.ErrorRate}, {"LostRate", c.LostRate}} {
		if !(r.v >= 0 && r.v <= 1) {
			errs = append(errs, fmt.Errorf("%w: %s must be a probability in [0, 1], got %v", ErrInvalid, r.name, r.v))
		}
	}
	if c.ShortRate == 1 {
		// A batch holding one result can only be cut to an empty one.
		errs = append(errs, fmt.Errorf("%w: ShortRate must be below 1, or a query whose next batch holds one result would never end", ErrInvalid))
	}
	return errors.Join(errs...)
}

// Stats counts what the contract injected.
type Stats struct {
	// Calls is every call that went through the contract.
	Calls uint64
	// Cut is the batches and pages cut short; Empty, those of them that
	// were empty.
	Cut, Empty uint64
	// Probes is the extra queries made to find a cut's cursor.
	Probes uint64
	// Deferred is the keys answered as deferred.
	Deferred uint64
	// Failed is the calls failed before they reached the backend; Lost,
	// those whose answers were lost after the backend carried them out.
	Failed, Lost uint64
	// Ambiguous is the writes that failed with an error that does not
	// say whether they were applied (lost, or failed before with the
	// same error a lost one gets): what a client may see as the
	// service's ambiguity.
	Ambiguous uint64
}

// Contract injects what Config says into calls to a backend: see
// Interceptor (Datastore) and Transport (Azure).
type Contract struct {
	mu   sync.Mutex // guards cfg, rng and lose; rand.Rand is not concurrency-safe
	cfg  Config
	rng  *rand.Rand
	lose int // LoseNext: writes whose replies are lost regardless of rates

	calls, cut, empty, probes, deferred, failed, lost, ambiguous atomic.Uint64

	// readOnly: the ids of the backend's read-only transactions in
	// progress (Datastore), whose calls are never aborted for contention.
	readOnly sync.Map
}

// New returns a Contract injecting what cfg says; cfg must be valid.
func New(cfg Config) *Contract {
	c := &Contract{}
	c.SetConfig(cfg)
	return c
}

// SetConfig replaces the plan and reseeds the generator from cfg.Seed. It
// may be called while calls are in flight.
func (c *Contract) SetConfig(cfg Config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfg = cfg
	c.rng = rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x6a09e667f3bcc909))
}

// LoseNext makes the next n writes (a Datastore Commit; an Azure request
// other than a GET) reach the backend and then lose their replies,
// whatever the rates and DefiniteWrites say.
func (c *Contract) LoseNext(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lose = max(n, 0)
}

// Stats returns the counters.
func (c *Contract) Stats() Stats {
	return Stats{Calls: c.calls.Load(), Cut: c.cut.Load(), Empty: c.empty.Load(), Probes: c.probes.Load(),
		Deferred: c.deferred.Load(), Failed: c.failed.Load(), Lost: c.lost.Load(), Ambiguous: c.ambiguous.Load()}
}

// fate is what happens to one call, decided before it is made.
type fate uint8

const (
	pass fate = iota
	failBefore
	loseAfter
)

// decide draws a call's fate. write says the call changes the backend.
// With failBefore, safe says to fail with the error the service documents
// as "not applied" (Azure 503 ServerBusy, Datastore ABORTED where it gives
// it); a write under DefiniteWrites always does.
func (c *Contract) decide(write bool) (f fate, safe bool) {
	c.calls.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if write && c.lose > 0 {
		c.lose--
		return loseAfter, false
	}
	cfg := c.cfg
	switch {
	case cfg.ErrorRate > 0 && c.rng.Float64() < cfg.ErrorRate:
		return failBefore, write && cfg.DefiniteWrites || c.rng.IntN(2) == 0
	case cfg.LostRate > 0 && c.rng.Float64() < cfg.LostRate && !(write && cfg.DefiniteWrites):
		return loseAfter, false
	}
	return pass, false
}

// cutAt decides whether a batch of skipped results followed by results
// is cut short, and where: at is how many of those positions the cut
// batch keeps, fewer than all. A cut that keeps no result falls inside the
// skipped results or right after them; any other keeps every skipped
// result and at least one result.
func (c *Contract) cutAt(skipped, results int) (at int, ok bool) {
	n := skipped + results
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg := c.cfg
	if n == 0 || cfg.ShortRate == 0 || c.rng.Float64() >= cfg.ShortRate {
		return 0, false
	}
	if results == 0 {
		return c.rng.IntN(skipped), true
	}
	if results == 1 || cfg.EmptyRate > 0 && c.rng.Float64() < cfg.EmptyRate {
		// No result: a cut anywhere in the skipped results, or right
		// after them.
		return c.rng.IntN(skipped + 1), true
	}
	return skipped + 1 + c.rng.IntN(results-1), true
}

// pageCut decides whether an Azure page asked to hold up to top entities
// is cut short: empty, or a smaller top in [1, top).
func (c *Contract) pageCut(top int) (newTop int, empty, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg := c.cfg
	if cfg.ShortRate == 0 || c.rng.Float64() >= cfg.ShortRate {
		return top, false, false
	}
	if top <= 1 || cfg.EmptyRate > 0 && c.rng.Float64() < cfg.EmptyRate {
		return 0, true, true
	}
	return 1 + c.rng.IntN(top-1), false, true
}

// deferKeys picks which of n keys of a Lookup to defer (never all).
func (c *Contract) deferKeys(n int) []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	rate := c.cfg.DeferRate
	if n == 0 || rate == 0 {
		return nil
	}
	out := make([]bool, n)
	count := 0
	for i := range out {
		if c.rng.Float64() < rate {
			out[i] = true
			count++
		}
	}
	if count == n {
		out[c.rng.IntN(n)] = false
	}
	return out
}
