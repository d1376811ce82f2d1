package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nemocache/nemo/adapters"
)

// Record is one lease record as the store holds it.
type Record struct {
	// Holder is the node holding the lease; "" when it was released.
	Holder string
	// Epoch grows by one each time the lease passes to another node.
	Epoch uint64
	// Expiry is the holder's wall-clock deadline, for messages only.
	Expiry time.Time
}

// Errors of Hold, compared with errors.Is.
var (
	// ErrHeld: another node holds the lease (see HeldError).
	ErrHeld = errors.New("lease: held by another node")
	// ErrLost: this node's lease lapsed and has not been renewed since.
	ErrLost = errors.New("lease: lapsed without renewal")
	// ErrClosed: the Manager was closed.
	ErrClosed = errors.New("lease: manager closed")
)

// HeldError reports that another node holds the lease of Keyspace.
// errors.Is(err, ErrHeld) holds.
type HeldError struct {
	Keyspace adapters.Keyspace
	Holder   string
	Epoch    uint64
	// Expiry is the holder's own deadline, by its wall clock.
	Expiry time.Time
}

func (e *HeldError) Error() string {
	until := "no stated time"
	if !e.Expiry.IsZero() {
		until = e.Expiry.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("lease: keyspace %q is held by node %q (epoch %d) until %s by that node's clock, unless it renews it",
		e.Keyspace, e.Holder, e.Epoch, until)
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// Defaults and bounds of Options.TTL.
const (
	DefaultTTL = 15 * time.Second
	MinTTL     = time.Second
)

// Options configure New. The zero value of a field means its default: call
// EnsureDefaults to fill them in, then Validate (New does both).
type Options struct {
	// Store holds the leases (the backend itself).
	Store adapters.Store
	// Codec says where the lease of a keyspace lives in Store.
	Codec Codec
	// Holder is this node's identity: stable across its restarts, and
	// never shared by two live nodes.
	Holder string
	// TTL is how long a lease lives without renewal. Default 15s, at
	// least 1s.
	TTL    time.Duration
	Logger *slog.Logger
	// Now reads the clock (tests). Default time.Now; durations are taken
	// from its monotonic readings.
	Now func() time.Time

	// manualRenew turns off the renewal goroutine; tests call renewAll.
	manualRenew bool
}

// EnsureDefaults fills in the zero fields.
func (o *Options) EnsureDefaults() {
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate reports every invalid field.
func (o Options) Validate() error {
	var errs []error
	bad := func(f string, args ...any) { errs = append(errs, fmt.Errorf("lease: "+f, args...)) }
	if o.Store == nil {
		bad("no store")
	}
	if o.Codec == nil {
		bad("no codec")
	}
	if o.Holder == "" {
		bad("empty holder: a node needs a stable identity")
	}
	if o.TTL != 0 && o.TTL < MinTTL {
		bad("ttl %v is below %v", o.TTL, MinTTL)
	}
	return errors.Join(errs...)
}

// Stats are a Manager's counters.
type Stats struct {
	// Held is how many leases this node holds now (valid or lapsed).
	Held int
	// Acquisitions counts successful acquire writes (takeovers and
	// same-Holder restarts included); Takeovers those that took a lease
	// from another node whose version had stayed unchanged for a TTL.
	Acquisitions, Takeovers uint64
	// Renewals counts renewed leases; RenewalFailures leases whose
	// renewal failed (refusals, which drop the lease, included).
	Renewals, RenewalFailures uint64
	// Releases counts leases Close released.
	Releases uint64
	// StoreCalls counts every call made to the store.
	StoreCalls uint64
}

// lease is this node's view of the lease of one keyspace.
type lease struct {
	ks  adapters.Keyspace
	lks adapters.Keyspace // where its record lives
	key []byte

	op sync.Mutex // serializes store calls about this lease

	// Guarded by Manager.mu.
	held       bool
	epoch      uint64
	version    adapters.Version // of our last successful write
	validUntil time.Time        // monotonic
	expiry     time.Time        // the Expiry we last wrote (wall)
	failing    bool             // renewal failing (logged)
	lapsed     bool             // lapse logged

	// Another node's record as we watch it.
	seenVersion adapters.Version
	seenAt      time.Time

	// The last refusal, answered from memory until retryAt.
	lastErr error
	retryAt time.Time
}

// Manager holds the leases of one node. Safe for concurrent use.
type Manager struct {
	opts       Options
	ttl        time.Duration
	validFor   time.Duration // TTL - TTL/5
	retryEvery time.Duration // how long a refusal is answered from memory
	log        *slog.Logger

	adminMu sync.Mutex
	created map[adapters.Keyspace]bool // lease keyspaces made to exist

	mu     sync.Mutex
	leases map[adapters.Keyspace]*lease
	closed bool

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	done   chan struct{} // closed when the renewer has stopped

	acquisitions, takeovers, renewals, renewalFailures, releases, calls atomic.Uint64
}

// New returns a Manager and starts its renewal goroutine. It sends no
// request.
func New(opts Options) (*Manager, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	m := &Manager{
		opts:       opts,
		ttl:        opts.TTL,
		validFor:   opts.TTL - opts.TTL/5,
		retryEvery: opts.TTL / 15,
		log:        opts.Logger.With("holder", opts.Holder),
		created:    map[adapters.Keyspace]bool{},
		leases:     map[adapters.Keyspace]*lease{},
		done:       make(chan struct{}),
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if opts.manualRenew {
		close(m.done)
	} else {
		go m.renewLoop()
	}
	return m, nil
}

// Hold returns nil if this node holds a valid lease on ks, acquiring it
// on first use (see the package documentation for the rules). Otherwise
// it returns a *HeldError (another node holds it), an error wrapping
// ErrLost (our lease lapsed), ErrClosed, or the store's error.
func (m *Manager) Hold(ctx context.Context, ks adapters.Keyspace) error {
	now := m.opts.Now()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	l := m.leases[ks]
	if l != nil && l.held {
		err := m.validLocked(l, now)
		m.mu.Unlock()
		return err
	}
	if l == nil {
		lks, key := m.opts.Codec.Keyspace(ks), m.opts.Codec.Key(ks)
		if lks == "" || len(key) == 0 {
			m.mu.Unlock()
			return fmt.Errorf("lease: keyspace %q cannot be leased with this codec: %w", ks, adapters.ErrInvalid)
		}
		l = &lease{ks: ks, lks: lks, key: key}
		m.leases[ks] = l
	}
	m.mu.Unlock()
	return m.acquire(ctx, l)
}

// validLocked says whether held lease l is valid at now. m.mu is held.
func (m *Manager) validLocked(l *lease, now time.Time) error {
	if now.Before(l.validUntil) {
		return nil
	}
	if !l.lapsed {
		l.lapsed = true
		m.log.Warn("lease lapsed: renewal has not succeeded in time; refusing to act as the keyspace's only writer",
			"keyspace", l.ks, "epoch", l.epoch)
	}
	return fmt.Errorf("lease: keyspace %q: %w", l.ks, ErrLost)
}

// Epoch returns the epoch of the lease this node holds on ks (valid or
// lapsed), 0 if it holds none.
func (m *Manager) Epoch(ks adapters.Keyspace) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.leases[ks]; l != nil && l.held {
		return l.epoch
	}
	return 0
}

// Stats returns the Manager's counters.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	held := 0
	for _, l := range m.leases {
		if l.held {
			held++
		}
	}
	m.mu.Unlock()
	return Stats{
		Held:            held,
		Acquisitions:    m.acquisitions.Load(),
		Takeovers:       m.takeovers.Load(),
		Renewals:        m.renewals.Load(),
		RenewalFailures: m.renewalFailures.Load(),
		Releases:        m.releases.Load(),
		StoreCalls:      m.calls.Load(),
	}
}

// acquire runs the acquire rules for l, one caller at a time.
func (m *Manager) acquire(ctx context.Context, l *lease) error {
	l.op.Lock()
	defer l.op.Unlock()
	now := m.opts.Now()
	m.mu.Lock()
	switch {
	case m.closed:
		m.mu.Unlock()
		return ErrClosed
	case l.held: // another caller acquired it meanwhile
		err := m.validLocked(l, now)
		m.mu.Unlock()
		return err
	case l.lastErr != nil && now.Before(l.retryAt):
		err := l.lastErr
		m.mu.Unlock()
		return err
	}
	m.mu.Unlock()
	err := m.tryAcquire(ctx, l)
	m.mu.Lock()
	l.lastErr = nil
	if errors.Is(err, ErrHeld) {
		// Read again after retryEvery, or when the holder's lease may
		// be taken over, whichever is first.
		l.lastErr, l.retryAt = err, now.Add(m.retryEvery)
		if !l.seenAt.IsZero() && l.seenAt.Add(m.ttl).Before(l.retryAt) {
			l.retryAt = l.seenAt.Add(m.ttl)
		}
	}
	m.mu.Unlock()
	return err
}

// maxAcquireRounds bounds how often one acquire reads the record again
// after a refused write.
const maxAcquireRounds = 3

// tryAcquire reads the record and acts by the rules. l.op is held.
func (m *Manager) tryAcquire(ctx context.Context, l *lease) error {
	var last *HeldError
	for range maxAcquireRounds {
		if err := m.ensureKeyspace(ctx, l.lks); err != nil {
			return err
		}
		cur, ver, exists, err := m.read(ctx, l)
		if err != nil {
			return err
		}
		now := m.opts.Now()
		next := Record{Holder: m.opts.Holder}
		expect := adapters.Expect{Kind: adapters.ExpectVersion, Version: ver}
		takeover := false
		switch {
		case !exists:
			next.Epoch = 1
			expect = adapters.Expect{Kind: adapters.ExpectAbsent}
		case cur.Holder == m.opts.Holder:
			next.Epoch = cur.Epoch
		case cur.Holder == "":
			next.Epoch = cur.Epoch + 1
		default:
			m.mu.Lock()
			if l.seenAt.IsZero() || l.seenVersion != ver {
				l.seenVersion, l.seenAt = ver, now
			}
			waited := now.Sub(l.seenAt)
			m.mu.Unlock()
			last = &HeldError{Keyspace: l.ks, Holder: cur.Holder, Epoch: cur.Epoch, Expiry: cur.Expiry}
			if waited < m.ttl {
				return last
			}
			next.Epoch = cur.Epoch + 1
			takeover = true
		}
		renewStart := m.opts.Now()
		next.Expiry = nextExpiry(renewStart, m.ttl, cur.Expiry)
		v, err := m.writeOne(ctx, l, next, expect)
		if errors.Is(err, adapters.ErrConflict) {
			continue // another node won: read again and report
		}
		if err != nil {
			return err
		}
		m.acquisitions.Add(1)
		if takeover {
			m.takeovers.Add(1)
		}
		m.mu.Lock()
		l.held, l.epoch, l.version = true, next.Epoch, v
		l.validUntil, l.expiry = renewStart.Add(m.validFor), next.Expiry
		l.failing, l.lapsed = false, false
		l.seenVersion, l.seenAt = "", time.Time{}
		err = m.validLocked(l, m.opts.Now())
		m.mu.Unlock()
		if takeover {
			m.log.Warn("lease taken over from a node whose lease was not renewed for a whole TTL",
				"keyspace", l.ks, "from", cur.Holder, "epoch", next.Epoch)
		} else {
			m.log.Info("lease acquired", "keyspace", l.ks, "epoch", next.Epoch)
		}
		return err
	}
	if last != nil {
		return last
	}
	return fmt.Errorf("lease: keyspace %q: lost the race for its lease %d times: %w", l.ks, maxAcquireRounds, ErrHeld)
}

// nextExpiry is the Expiry of a write sent at now (monotonic): TTL later by
// the wall clock, at millisecond precision (every backend keeps it), and
// strictly later than prev, the Expiry the record holds now, so that the
// write changes the record (Datastore keeps the version of an entity
// rewritten unchanged).
func nextExpiry(now time.Time, ttl time.Duration, prev time.Time) time.Time {
	exp := now.Round(0).UTC().Add(ttl).Truncate(time.Millisecond)
	if !exp.After(prev) {
		exp = prev.UTC().Truncate(time.Millisecond).Add(time.Millisecond)
	}
	return exp
}

// ensureKeyspace makes the lease keyspace exist, once per Manager, when
// the store has explicit keyspaces.
func (m *Manager) ensureKeyspace(ctx context.Context, lks adapters.Keyspace) error {
	m.adminMu.Lock()
	defer m.adminMu.Unlock()
	if m.created[lks] {
		return nil
	}
	if a, ok := m.opts.Store.(adapters.KeyspaceAdmin); ok {
		m.calls.Add(1)
		err := a.CreateKeyspace(ctx, lks)
		if err != nil && !errors.Is(err, adapters.ErrNoKeyspaceAdmin) {
			return fmt.Errorf("lease: create lease keyspace %q: %w", lks, err)
		}
	}
	m.created[lks] = true
	return nil
}

// read returns the lease record of l, its version and whether it exists.
func (m *Manager) read(ctx context.Context, l *lease) (Record, adapters.Version, bool, error) {
	m.calls.Add(1)
	recs, err := m.opts.Store.Get(ctx, l.lks, [][]byte{l.key})
	if err != nil {
		return Record{}, "", false, fmt.Errorf("lease: read the lease of %q: %w", l.ks, err)
	}
	if len(recs) != 1 || recs[0].Value == nil {
		return Record{}, "", false, nil
	}
	rec, err := m.opts.Codec.Decode(recs[0].Value)
	if err != nil {
		return Record{}, "", false, fmt.Errorf("lease: the lease record of %q is unreadable: %w", l.ks, err)
	}
	if recs[0].Version == "" {
		return Record{}, "", false, fmt.Errorf("lease: the store reported no version for the lease of %q", l.ks)
	}
	return rec, recs[0].Version, true, nil
}

// writeOne writes rec as l's record if expect holds and returns its new
// version; a refusal is an adapters.ErrConflict.
func (m *Manager) writeOne(ctx context.Context, l *lease, rec Record, expect adapters.Expect) (adapters.Version, error) {
	val, err := m.opts.Codec.Encode(l.ks, rec)
	if err != nil {
		return "", fmt.Errorf("lease: encode the lease of %q: %w", l.ks, err)
	}
	m.calls.Add(1)
	vers, err := m.opts.Store.Upsert(ctx, l.lks, []adapters.Write{{Key: l.key, Value: val, Expect: expect}})
	if err != nil {
		return "", fmt.Errorf("lease: write the lease of %q: %w", l.ks, err)
	}
	if len(vers) != 1 || vers[0] == "" {
		return "", fmt.Errorf("lease: the store reported no version for the lease of %q", l.ks)
	}
	return vers[0], nil
}

// --- renewal and release ---

func (m *Manager) renewLoop() {
	defer close(m.done)
	t := time.NewTicker(m.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
			m.renewAll(m.ctx)
		}
	}
}

// groups returns the leases (held ones only, if heldOnly), grouped by
// lease keyspace and sorted by keyspace within a group: the order their
// op locks are taken in.
func (m *Manager) groups(heldOnly bool) [][]*lease {
	m.mu.Lock()
	var ls []*lease
	for _, l := range m.leases {
		if l.held || !heldOnly {
			ls = append(ls, l)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(ls, func(a, b *lease) int { return cmp.Or(cmp.Compare(a.lks, b.lks), cmp.Compare(a.ks, b.ks)) })
	var out [][]*lease
	for i := 0; i < len(ls); {
		j := i + 1
		for j < len(ls) && ls[j].lks == ls[i].lks {
			j++
		}
		out = append(out, ls[i:j])
		i = j
	}
	return out
}

// renewAll renews every held lease: one Upsert per lease keyspace.
func (m *Manager) renewAll(ctx context.Context) {
	for _, g := range m.groups(true) {
		if ctx.Err() != nil {
			return
		}
		m.writeGroup(ctx, g, false)
	}
}

// writeGroup renews (or with release, releases) the held leases of one
// group in one Upsert call, with ExpectVersion of our last version.
func (m *Manager) writeGroup(ctx context.Context, g []*lease, release bool) error {
	for _, l := range g {
		l.op.Lock()
		defer l.op.Unlock()
	}
	renewStart := m.opts.Now()
	var live []*lease
	var writes []adapters.Write
	var recs []Record
	m.mu.Lock()
	for _, l := range g {
		if !l.held {
			continue
		}
		rec := Record{Holder: m.opts.Holder, Epoch: l.epoch, Expiry: nextExpiry(renewStart, m.ttl, l.expiry)}
		if release {
			rec.Holder, rec.Expiry = "", renewStart.Round(0).UTC().Truncate(time.Millisecond)
		}
		val, err := m.opts.Codec.Encode(l.ks, rec)
		if err != nil { // cannot happen with a record we wrote before
			m.log.Error("lease: cannot encode a lease record", "keyspace", l.ks, "err", err)
			continue
		}
		live = append(live, l)
		recs = append(recs, rec)
		writes = append(writes, adapters.Write{Key: l.key, Value: val, Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: l.version}})
	}
	m.mu.Unlock()
	if len(live) == 0 {
		return nil
	}
	if !release {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.ttl/3)
		defer cancel()
	}
	m.calls.Add(1)
	vers, err := m.opts.Store.Upsert(ctx, live[0].lks, writes)
	refused := map[int]bool{}
	var ce *adapters.ConflictError
	if errors.As(err, &ce) {
		for _, c := range ce.Conflicts {
			refused[c.Index] = true
		}
		err = nil
	}
	now := m.opts.Now()
	var failed []error
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, l := range live {
		switch {
		case refused[i]: // another node took it
			l.held, l.epoch, l.version = false, 0, ""
			if release {
				m.log.Info("lease was taken by another node before its release", "keyspace", l.ks)
				continue
			}
			m.renewalFailures.Add(1)
			m.log.Warn("lease renewal refused: another node took the lease; dropped", "keyspace", l.ks)
		case err != nil || i >= len(vers) || vers[i] == "":
			if err == nil {
				err = errors.New("the store reported no version")
			}
			if release {
				l.held = false
				failed = append(failed, fmt.Errorf("lease: release the lease of %q: %w", l.ks, err))
				continue
			}
			m.renewalFailures.Add(1)
			if !l.failing {
				l.failing = true
				m.log.Warn("lease renewal failing; the lease stays valid until its deadline", "keyspace", l.ks,
					"valid_for", l.validUntil.Sub(now).Round(time.Millisecond), "err", err)
			}
		default:
			if release {
				l.held, l.epoch, l.version = false, 0, ""
				m.releases.Add(1)
				m.log.Info("lease released", "keyspace", l.ks)
				continue
			}
			l.version, l.expiry, l.validUntil = vers[i], recs[i].Expiry, renewStart.Add(m.validFor)
			m.renewals.Add(1)
			if l.failing || l.lapsed {
				m.log.Info("lease renewal recovered", "keyspace", l.ks, "was_lapsed", l.lapsed)
				l.failing, l.lapsed = false, false
			}
		}
	}
	return errors.Join(failed...)
}

// Stop stops renewal without releasing anything: the leases lapse one TTL
// after their last renewal. It is for a node that stops with acknowledged
// writes not yet in the store (they stay in its WAL): releasing would let
// another node take the keyspace at once. Later Holds return ErrClosed.
func (m *Manager) Stop() { m.stop() }

// stop ends renewal once; it reports whether this call did.
func (m *Manager) stop() bool {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return false
	}
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	<-m.done
	return true
}

// Close stops renewal and releases every lease this node holds (Holder
// "", same epoch), so another node can take it at once. The caller must
// have stopped acknowledging writes of those keyspaces first. Later Holds
// return ErrClosed.
func (m *Manager) Close(ctx context.Context) error {
	if !m.stop() {
		return nil
	}
	var errs []error
	for _, g := range m.groups(false) {
		if err := m.writeGroup(ctx, g, true); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
