package fault

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nemocache/nemo/adapters"
)

// ErrInjected marks every failure this package makes up; injected errors
// also wrap adapters.ErrUnavailable, which is what callers should react to.
var ErrInjected = errors.New("fault: injected failure")

// OpConfig describes the faults of one operation. Probabilities are in
// [0, 1]; zero values inject nothing.
type OpConfig struct {
	Latency time.Duration // added to every call
	Jitter  time.Duration // plus a uniform random delay in [0, Jitter)

	SlowRate  float64       // probability that a call is slow...
	SlowDelay time.Duration // ...by this much more

	// ErrorRate is the probability that a call fails (after its delay).
	ErrorRate float64
	// PartialRate is, for a failing Upsert or Delete, the probability that
	// a prefix of the batch is applied before the error is returned. The
	// prefix length is uniform in [1, len(batch)]; the full length models
	// a write that landed but whose reply was lost. WriteAtomic is atomic,
	// so for it no prefix is applied: with this probability the whole
	// group is (a reply lost), else nothing.
	PartialRate float64
}

// Config is the whole fault plan.
type Config struct {
	Seed    uint64                   // seeds the generator; same seed, same faults
	Default OpConfig                 // for operations not in Ops
	Ops     map[adapters.Op]OpConfig // per-operation overrides
}

func (c *Config) op(op adapters.Op) OpConfig {
	if oc, ok := c.Ops[op]; ok {
		return oc
	}
	return c.Default
}

// Store is an adapters.Store that injects faults into calls to its inner
// Store. Safe for concurrent use; runs are reproducible when calls are
// made from one goroutine.
type Store struct {
	inner adapters.Store
	down  atomic.Bool

	mu       sync.Mutex // guards the fields below; rand.Rand is not concurrency-safe
	cfg      Config
	rng      *rand.Rand
	failNext map[adapters.Op]int
}

var (
	_ adapters.Store        = (*Store)(nil)
	_ adapters.AtomicWriter = (*Store)(nil)
	_ adapters.Stamper      = (*Store)(nil)
)

// New wraps inner with the faults described by cfg.
func New(inner adapters.Store, cfg Config) *Store {
	s := &Store{inner: inner, failNext: map[adapters.Op]int{}}
	s.SetConfig(cfg)
	return s
}

// Unwrap returns the wrapped Store.
func (s *Store) Unwrap() adapters.Store { return s.inner }

// SetConfig replaces the fault plan and reseeds the generator from
// cfg.Seed. It may be called while other calls are in flight.
func (s *Store) SetConfig(cfg Config) {
	cfg.Ops = maps.Clone(cfg.Ops) // the caller may keep mutating its map
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg = cfg
	s.rng = rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
}

// SetDown starts (true) or ends (false) a full outage: while down, every
// call fails at once with adapters.ErrUnavailable and reaches nothing.
func (s *Store) SetDown(down bool) { s.down.Store(down) }

// SetFailNext makes the next n calls of op fail at once, without delay or
// partial effects, regardless of probabilities; n <= 0 clears it.
func (s *Store) SetFailNext(op adapters.Op, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext[op] = max(n, 0)
}

// plan is what happens to one call, decided before it runs.
type plan struct {
	delay  time.Duration
	fail   bool
	prefix int // records applied before failing (Upsert/Delete), 0 = none
}

// decide draws the plan of a call of op over a batch of n records or keys,
// or returns the error of an immediate failure.
func (s *Store) decide(op adapters.Op, n int) (plan, error) {
	if s.down.Load() {
		return plan{}, injected(op, "outage")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failNext[op] > 0 {
		s.failNext[op]--
		return plan{}, injected(op, "fail-next")
	}
	c := s.cfg.op(op)
	p := plan{delay: c.Latency}
	if c.Jitter > 0 {
		p.delay += time.Duration(s.rng.Int64N(int64(c.Jitter)))
	}
	if c.SlowRate > 0 && s.rng.Float64() < c.SlowRate {
		p.delay += c.SlowDelay
	}
	if c.ErrorRate > 0 && s.rng.Float64() < c.ErrorRate {
		p.fail = true
		partialOp := op == adapters.OpUpsert || op == adapters.OpDelete || op == adapters.OpWriteAtomic
		if partialOp && n > 0 && c.PartialRate > 0 && s.rng.Float64() < c.PartialRate {
			p.prefix = 1 + s.rng.IntN(n)
		}
	}
	return p, nil
}

// begin decides the plan and serves its delay; a cancelled ctx cuts the
// delay short.
func (s *Store) begin(ctx context.Context, op adapters.Op, n int) (plan, error) {
	p, err := s.decide(op, n)
	if err != nil || p.delay <= 0 {
		return p, err
	}
	t := time.NewTimer(p.delay)
	defer t.Stop()
	select {
	case <-t.C:
		return p, nil
	case <-ctx.Done():
		return p, ctx.Err()
	}
}

func injected(op adapters.Op, why string) error {
	return fmt.Errorf("%w (%s, %s): %w", ErrInjected, op, why, adapters.ErrUnavailable)
}

// Get implements adapters.Store.
func (s *Store) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	p, err := s.begin(ctx, adapters.OpGet, len(keys))
	if err != nil {
		return nil, err
	}
	if p.fail {
		return nil, injected(adapters.OpGet, "error")
	}
	return s.inner.Get(ctx, ks, keys)
}

// GetRange implements adapters.Store.
func (s *Store) GetRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	p, err := s.begin(ctx, adapters.OpGetRange, 0)
	if err != nil {
		return nil, false, err
	}
	if p.fail {
		return nil, false, injected(adapters.OpGetRange, "error")
	}
	return s.inner.GetRange(ctx, ks, start, end, limit)
}

// Upsert implements adapters.Store. A partial failure applies a prefix of
// the writes and reports no versions.
func (s *Store) Upsert(ctx context.Context, ks adapters.Keyspace, writes []adapters.Write) ([]adapters.Version, error) {
	p, err := s.begin(ctx, adapters.OpUpsert, len(writes))
	if err != nil {
		return nil, err
	}
	if !p.fail {
		return s.inner.Upsert(ctx, ks, writes)
	}
	if p.prefix > 0 {
		// Whatever the prefix's outcome (a refused precondition
		// included), the call as a whole failed without an answer: the
		// caller cannot know what was applied.
		if _, err := s.inner.Upsert(ctx, ks, writes[:p.prefix]); err != nil && !errors.Is(err, adapters.ErrConflict) {
			return nil, err
		}
		return nil, injected(adapters.OpUpsert, fmt.Sprintf("partial, %d of %d applied", p.prefix, len(writes)))
	}
	return nil, injected(adapters.OpUpsert, "error")
}

// Delete implements adapters.Store.
func (s *Store) Delete(ctx context.Context, ks adapters.Keyspace, writes []adapters.Write) error {
	p, err := s.begin(ctx, adapters.OpDelete, len(writes))
	if err != nil {
		return err
	}
	if !p.fail {
		return s.inner.Delete(ctx, ks, writes)
	}
	if p.prefix > 0 {
		if err := s.inner.Delete(ctx, ks, writes[:p.prefix]); err != nil && !errors.Is(err, adapters.ErrConflict) {
			return err
		}
		return injected(adapters.OpDelete, fmt.Sprintf("partial, %d of %d applied", p.prefix, len(writes)))
	}
	return injected(adapters.OpDelete, "error")
}

// WriteAtomic implements adapters.AtomicWriter when the wrapped store does
// (otherwise it fails with an error matching errors.ErrUnsupported, before
// any fault). Its faults are those of a write (Config.Ops[OpWriteAtomic]),
// but since the group is atomic a failure never applies part of it: a
// partial failure applies the whole group and then reports the error (the
// reply was lost), any other failure applies nothing.
func (s *Store) WriteAtomic(ctx context.Context, ks adapters.Keyspace, ms []adapters.Mutation) ([]adapters.Version, error) {
	aw, ok := s.inner.(adapters.AtomicWriter)
	if !ok {
		return nil, fmt.Errorf("fault: %T has no atomic writes: %w", s.inner, errors.ErrUnsupported)
	}
	p, err := s.begin(ctx, adapters.OpWriteAtomic, len(ms))
	if err != nil {
		return nil, err
	}
	if !p.fail {
		return aw.WriteAtomic(ctx, ks, ms)
	}
	if p.prefix > 0 {
		// As for Upsert: whatever the group's outcome (refused
		// included), the caller gets no answer.
		if _, err := aw.WriteAtomic(ctx, ks, ms); err != nil && !errors.Is(err, adapters.ErrConflict) {
			return nil, err
		}
		return nil, injected(adapters.OpWriteAtomic, "reply lost")
	}
	return nil, injected(adapters.OpWriteAtomic, "error")
}

// Stamped forwards to the wrapped store's adapters.Stamper (an error
// matching errors.ErrUnsupported if it has none). It reaches no backend,
// so no fault is injected.
func (s *Store) Stamped(value []byte, v adapters.Version) ([]byte, error) {
	st, ok := s.inner.(adapters.Stamper)
	if !ok {
		return nil, fmt.Errorf("fault: %T has no stamps: %w", s.inner, errors.ErrUnsupported)
	}
	return st.Stamped(value, v)
}

// CreateKeyspace forwards to the wrapped store's adapters.KeyspaceAdmin
// (adapters.ErrNoKeyspaceAdmin if it has none); an outage fails it.
func (s *Store) CreateKeyspace(ctx context.Context, ks adapters.Keyspace) error {
	a, err := s.admin("create keyspace")
	if err != nil {
		return err
	}
	return a.CreateKeyspace(ctx, ks)
}

// DropKeyspace forwards to the wrapped store's adapters.KeyspaceAdmin; an
// outage fails it.
func (s *Store) DropKeyspace(ctx context.Context, ks adapters.Keyspace) error {
	a, err := s.admin("drop keyspace")
	if err != nil {
		return err
	}
	return a.DropKeyspace(ctx, ks)
}

// ListKeyspaces forwards to the wrapped store's adapters.KeyspaceLister
// (adapters.ErrNoKeyspaceLister if it has none); an outage fails it.
func (s *Store) ListKeyspaces(ctx context.Context, prefix string) ([]adapters.Keyspace, error) {
	if s.down.Load() {
		return nil, fmt.Errorf("%w (list keyspaces, outage): %w", ErrInjected, adapters.ErrUnavailable)
	}
	l, ok := s.inner.(adapters.KeyspaceLister)
	if !ok {
		return nil, adapters.ErrNoKeyspaceLister
	}
	return l.ListKeyspaces(ctx, prefix)
}

func (s *Store) admin(what string) (adapters.KeyspaceAdmin, error) {
	if s.down.Load() {
		return nil, fmt.Errorf("%w (%s, outage): %w", ErrInjected, what, adapters.ErrUnavailable)
	}
	a, ok := s.inner.(adapters.KeyspaceAdmin)
	if !ok {
		return nil, adapters.ErrNoKeyspaceAdmin
	}
	return a, nil
}
