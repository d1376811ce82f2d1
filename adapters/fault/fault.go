package fault

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nemocache/nemo/adapters"
)

// ErrInjected marks every failure this package makes up; injected errors
// also wrap the error their ErrorKind names (adapters.ErrUnavailable unless
// told otherwise), which is what callers should react to.
var ErrInjected = errors.New("fault: injected failure")

// ErrorKind says which error an injected failure returns.
type ErrorKind uint8

const (
	// Unavailable (the default): the error wraps adapters.ErrUnavailable,
	// as from a backend that refused service or could not be reached.
	Unavailable ErrorKind = iota
	// Timeout: the error wraps context.DeadlineExceeded and not
	// ErrUnavailable, as from a call that ran out of time (the adapters
	// return their own timeouts that way).
	Timeout
)

// String returns "unavailable" or "timeout".
func (k ErrorKind) String() string {
	if k == Timeout {
		return "timeout"
	}
	return "unavailable"
}

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
	// Error is the error a call failing by ErrorRate returns.
	Error ErrorKind
}

// Outages are periods during which every call fails (or, with Hang,
// blocks), whatever the per-operation faults say. Times are offsets from
// the Store's creation.
type Outages struct {
	// Every and For make a periodic outage: up for Every-For, then down
	// for For, repeating (the first outage begins at Every-For). For must
	// be less than Every; zero values schedule none.
	Every, For time.Duration
	// Windows are further outages, each from its Start for its Duration.
	Windows []Window
	// Hang makes calls during an outage block until their context ends
	// (or the outage does: then they fail) instead of failing at once.
	Hang bool
	// Error is the error a call failing for an outage returns.
	Error ErrorKind
}

// Window is one scheduled outage: from Start (after the Store's creation)
// for Duration.
type Window struct{ Start, Duration time.Duration }

// at reports whether the backend is down at offset d from the Store's
// creation, and if so when (as an offset) the outage ends.
func (o Outages) at(d time.Duration) (down bool, end time.Duration) {
	if o.Every > 0 && o.For > 0 && d >= 0 {
		if phase := d % o.Every; phase >= o.Every-o.For {
			down, end = true, d-phase+o.Every
		}
	}
	for _, w := range o.Windows {
		if d >= w.Start && d < w.Start+w.Duration {
			down, end = true, max(end, w.Start+w.Duration)
		}
	}
	return down, end
}

// Config is the whole fault plan.
type Config struct {
	Seed    uint64                   // seeds the generator; same seed, same faults
	Default OpConfig                 // for operations not in Ops
	Ops     map[adapters.Op]OpConfig // per-operation overrides
	// Outages schedules periods when the backend is down.
	Outages Outages
	// Hung blocks every call until its context ends: a backend that
	// accepts requests and never answers (SetHung switches it too).
	Hung bool
	// Now is the clock outages are scheduled on; nil means time.Now.
	Now func() time.Time
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
	inner   adapters.Store
	down    atomic.Bool
	hanging atomic.Int64 // calls blocked in a hang now (Hanging)
	start   time.Time    // outages are scheduled from here

	mu       sync.Mutex // guards the fields below; rand.Rand is not concurrency-safe
	cfg      Config
	rng      *rand.Rand
	failNext map[adapters.Op]int
	loseNext map[adapters.Op]int
	hung     bool          // SetHung
	stopped  bool          // Stop: hangs end for good
	changed  chan struct{} // closed (and replaced) when a hang may have to end
}

var (
	_ adapters.Store        = (*Store)(nil)
	_ adapters.AtomicWriter = (*Store)(nil)
	_ adapters.Stamper      = (*Store)(nil)
	// A wrapper that hid these would turn a read-only transaction's
	// snapshot into reads checked at commit, and a read at a read_time
	// into a read of the present.
	_ adapters.SnapshotReader   = (*Store)(nil)
	_ adapters.SnapshotAtReader = (*Store)(nil)
	_ adapters.Pinger           = (*Store)(nil)
)

// New wraps inner with the faults described by cfg.
func New(inner adapters.Store, cfg Config) *Store {
	s := &Store{inner: inner, failNext: map[adapters.Op]int{}, loseNext: map[adapters.Op]int{}, changed: make(chan struct{})}
	s.SetConfig(cfg)
	s.start = s.now()
	return s
}

func (s *Store) now() time.Time {
	s.mu.Lock()
	now := s.cfg.Now
	s.mu.Unlock()
	if now == nil {
		return time.Now()
	}
	return now()
}

// notify wakes the calls that hang, so they look again at whether they
// still must (s.mu held).
func (s *Store) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Unwrap returns the wrapped Store.
func (s *Store) Unwrap() adapters.Store { return s.inner }

// SetConfig replaces the fault plan and reseeds the generator from
// cfg.Seed. It may be called while other calls are in flight.
func (s *Store) SetConfig(cfg Config) {
	cfg.Ops = maps.Clone(cfg.Ops) // the caller may keep mutating its map
	cfg.Outages.Windows = slices.Clone(cfg.Outages.Windows)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg = cfg
	s.rng = rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	s.notify()
}

// SetDown starts (true) or ends (false) a full outage: while down, every
// call fails at once with adapters.ErrUnavailable and reaches nothing.
func (s *Store) SetDown(down bool) { s.down.Store(down) }

// SetHung starts (true) or ends (false) a hang: while hung, every call
// blocks until its context ends; calls blocked when it ends fail with
// adapters.ErrUnavailable (their connection was reset).
func (s *Store) SetHung(hung bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hung = hung
	s.notify()
}

// Stop ends every hang now and for good: blocked calls, and calls that
// would block later, fail at once with adapters.ErrClosed. A node stops
// its fault store before it stops the buffer, whose background write-back
// may be blocked in a call with no deadline. The wrapped store is left
// open.
func (s *Store) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	s.notify()
}

// Hanging returns how many calls are blocked in a hang now (SetHung,
// Config.Hung, an outage window with Hang): what a test waits for to know
// a call has reached the hung backend.
func (s *Store) Hanging() int { return int(s.hanging.Load()) }

// SetFailNext makes the next n calls of op fail at once, without delay or
// partial effects, regardless of probabilities; n <= 0 clears it.
func (s *Store) SetFailNext(op adapters.Op, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext[op] = max(n, 0)
}

// SetLoseNext makes the next n calls of op lose their replies: a write is
// applied whole (its preconditions checked as usual) and then fails, as
// when the backend applied it and the answer never came back; a read
// fails. Without delay, regardless of probabilities; n <= 0 clears it.
func (s *Store) SetLoseNext(op adapters.Op, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loseNext[op] = max(n, 0)
}

// plan is what happens to one call, decided before it runs.
type plan struct {
	delay  time.Duration
	fail   bool
	kind   ErrorKind // of the failure
	prefix int       // records applied before failing (Upsert/Delete), 0 = none
}

// decide draws the plan of a call of op over a batch of n records or keys,
// or returns the error of an immediate failure.
func (s *Store) decide(op adapters.Op, n int) (plan, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failNext[op] > 0 {
		s.failNext[op]--
		return plan{}, injected(op.String(), "fail-next", Unavailable)
	}
	if s.loseNext[op] > 0 {
		s.loseNext[op]--
		return plan{fail: true, prefix: n}, nil
	}
	c := s.cfg.op(op)
	p := plan{delay: c.Latency, kind: c.Error}
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

// begin serves the outages and hangs, then decides the plan and serves its
// delay; a cancelled ctx cuts the delay short.
func (s *Store) begin(ctx context.Context, op adapters.Op, n int) (plan, error) {
	if err := s.outage(ctx, op.String()); err != nil {
		return plan{}, err
	}
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

// outage fails a call (what names it) while the store is down (SetDown, an
// outage window), or blocks it while the store hangs (SetHung,
// Config.Hung, an outage window with Hang) until its context ends or the
// hang does, and then fails it. It returns nil when the store is up.
func (s *Store) outage(ctx context.Context, what string) error {
	blocked := false
	defer func() {
		if blocked {
			s.hanging.Add(-1)
		}
	}()
	for {
		if s.down.Load() {
			return injected(what, "outage", Unavailable)
		}
		s.mu.Lock()
		stopped, changed := s.stopped, s.changed
		hung := s.hung || s.cfg.Hung
		o := s.cfg.Outages
		s.mu.Unlock()
		down, end := o.at(s.now().Sub(s.start))
		hangs := hung || down && o.Hang
		switch {
		case hangs && stopped:
			return fmt.Errorf("%w (%s, hung, stopped): %w", ErrInjected, what, adapters.ErrClosed)
		case hangs:
		case blocked:
			// The hang ended under the call: its connection was reset.
			return injected(what, "hang ended", Unavailable)
		case down:
			return injected(what, "outage", o.Error)
		default:
			return nil
		}
		if !blocked {
			blocked = true
			s.hanging.Add(1)
		}
		// An outage window with Hang is over at end; a hang, never.
		over := time.NewTimer(s.start.Add(end).Sub(s.now()))
		if hung {
			over.Stop()
		}
		select {
		case <-ctx.Done():
			over.Stop()
			return fmt.Errorf("%w (%s, hung): %w", ErrInjected, what, ctx.Err())
		case <-over.C:
			return injected(what, "hung until the outage ended", o.Error)
		case <-changed: // look again
			over.Stop()
		}
	}
}

// lost is the error of a write that reached the store (all of it or a
// prefix) and lost its reply: as the adapters report one,
// adapters.ErrUnknownOutcome (which matches ErrUnavailable), or a timeout.
func lost(what, why string, kind ErrorKind) error {
	if kind == Timeout {
		return injected(what, why, kind)
	}
	return fmt.Errorf("%w (%s, %s): %w", ErrInjected, what, why, adapters.ErrUnknownOutcome)
}

func injected(what, why string, kind ErrorKind) error {
	if kind == Timeout {
		return fmt.Errorf("%w (%s, %s): %w", ErrInjected, what, why, context.DeadlineExceeded)
	}
	return fmt.Errorf("%w (%s, %s): %w", ErrInjected, what, why, adapters.ErrUnavailable)
}

// Get implements adapters.Store.
func (s *Store) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	return s.get(ctx, ks, keys, s.inner.Get)
}

func (s *Store) get(ctx context.Context, ks adapters.Keyspace, keys [][]byte, read func(context.Context, adapters.Keyspace, [][]byte) ([]adapters.Record, error)) ([]adapters.Record, error) {
	p, err := s.begin(ctx, adapters.OpGet, len(keys))
	if err != nil {
		return nil, err
	}
	if p.fail {
		return nil, injected(adapters.OpGet.String(), "error", p.kind)
	}
	return read(ctx, ks, keys)
}

// GetRange implements adapters.Store.
func (s *Store) GetRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	return s.getRange(ctx, ks, start, end, limit, s.inner.GetRange)
}

func (s *Store) getRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int,
	read func(context.Context, adapters.Keyspace, []byte, []byte, int) ([]adapters.Record, bool, error)) ([]adapters.Record, bool, error) {
	p, err := s.begin(ctx, adapters.OpGetRange, 0)
	if err != nil {
		return nil, false, err
	}
	if p.fail {
		return nil, false, injected(adapters.OpGetRange.String(), "error", p.kind)
	}
	return read(ctx, ks, start, end, limit)
}

// Snapshot forwards to the wrapped store's adapters.SnapshotReader (an
// error matching errors.ErrUnsupported if it has none). The snapshot's
// reads meet the faults Get and GetRange meet.
func (s *Store) Snapshot() (adapters.Snapshot, error) {
	sr, ok := s.inner.(adapters.SnapshotReader)
	if !ok {
		return nil, fmt.Errorf("fault: %T has no snapshots: %w", s.inner, errors.ErrUnsupported)
	}
	sn, err := sr.Snapshot()
	if err != nil {
		return nil, err
	}
	return faultySnapshot{sn, s}, nil
}

// SnapshotAt forwards to the wrapped store's adapters.SnapshotAtReader, as
// Snapshot does to its SnapshotReader.
func (s *Store) SnapshotAt(at time.Time) (adapters.Snapshot, error) {
	sr, ok := s.inner.(adapters.SnapshotAtReader)
	if !ok {
		return nil, fmt.Errorf("fault: %T reads no past moments: %w", s.inner, errors.ErrUnsupported)
	}
	sn, err := sr.SnapshotAt(at)
	if err != nil {
		return nil, err
	}
	return faultySnapshot{sn, s}, nil
}

// faultySnapshot injects its Store's faults into a snapshot's reads.
type faultySnapshot struct {
	adapters.Snapshot
	s *Store
}

func (f faultySnapshot) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	return f.s.get(ctx, ks, keys, f.Snapshot.Get)
}

func (f faultySnapshot) GetRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	return f.s.getRange(ctx, ks, start, end, limit, f.Snapshot.GetRange)
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
		return nil, lost(adapters.OpUpsert.String(), fmt.Sprintf("partial, %d of %d applied", p.prefix, len(writes)), p.kind)
	}
	return nil, injected(adapters.OpUpsert.String(), "error", p.kind)
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
		return lost(adapters.OpDelete.String(), fmt.Sprintf("partial, %d of %d applied", p.prefix, len(writes)), p.kind)
	}
	return injected(adapters.OpDelete.String(), "error", p.kind)
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
		return nil, lost(adapters.OpWriteAtomic.String(), "reply lost", p.kind)
	}
	return nil, injected(adapters.OpWriteAtomic.String(), "error", p.kind)
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
// (adapters.ErrNoKeyspaceAdmin if it has none); an outage fails it and a
// hang blocks it, but no per-operation fault applies.
func (s *Store) CreateKeyspace(ctx context.Context, ks adapters.Keyspace) error {
	a, err := s.admin(ctx, "create keyspace")
	if err != nil {
		return err
	}
	return a.CreateKeyspace(ctx, ks)
}

// DropKeyspace forwards to the wrapped store's adapters.KeyspaceAdmin, with
// CreateKeyspace's faults.
func (s *Store) DropKeyspace(ctx context.Context, ks adapters.Keyspace) error {
	a, err := s.admin(ctx, "drop keyspace")
	if err != nil {
		return err
	}
	return a.DropKeyspace(ctx, ks)
}

// ListKeyspaces forwards to the wrapped store's adapters.KeyspaceLister
// (adapters.ErrNoKeyspaceLister if it has none); an outage fails it.
func (s *Store) ListKeyspaces(ctx context.Context, prefix string) ([]adapters.Keyspace, error) {
	if err := s.outage(ctx, "list keyspaces"); err != nil {
		return nil, err
	}
	l, ok := s.inner.(adapters.KeyspaceLister)
	if !ok {
		return nil, adapters.ErrNoKeyspaceLister
	}
	return l.ListKeyspaces(ctx, prefix)
}

func (s *Store) admin(ctx context.Context, what string) (adapters.KeyspaceAdmin, error) {
	if err := s.outage(ctx, what); err != nil {
		return nil, err
	}
	a, ok := s.inner.(adapters.KeyspaceAdmin)
	if !ok {
		return nil, adapters.ErrNoKeyspaceAdmin
	}
	return a, nil
}

// Ping forwards to the wrapped store's adapters.Pinger (nil if it has
// none: nothing to ask); an outage fails it and a hang blocks it, as they
// do every call, but no per-operation fault applies, so that a probe says
// whether the backend is down, not what one call drew.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.outage(ctx, "ping"); err != nil {
		return err
	}
	if p, ok := s.inner.(adapters.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}
