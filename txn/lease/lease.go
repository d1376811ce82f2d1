package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nemocache/nemo/adapters"
)

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
	// Addr is the holder's peer address ("" when it has none).
	Addr string
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
	// Addr is the host:port of this node's peer listener, written in
	// every lease record it holds so that other replicas find it (Owner);
	// "" when it has none.
	Addr string
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
	if o.Addr != "" {
		if host, port, err := net.SplitHostPort(o.Addr); err != nil || host == "" || port == "" {
			bad("addr %q is not a host:port", o.Addr)
		}
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
	// Releases counts leases Close or Release released.
	Releases uint64
	// Adoptions counts lease writes whose answer was lost (or that were
	// refused because an earlier one's was) found applied by reading the
	// record: the lease was kept. Drops counts held leases dropped
	// because their record named another holder.
	Adoptions, Drops uint64
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
	// unsure are the renewals sent since version was known whose
	// answers never came: one of them may have made the record's
	// current version.
	unsure []sent

	// Another node's record as we watch it.
	seenVersion adapters.Version
	seenAt      time.Time

	// What the record said when this node, not holding the lease, last
	// read it (owner, if known), and Hold's refusal if it named another
	// node's live lease (lastErr): answered from memory until retryAt.
	known   bool
	owner   Owner
	lastErr error
	retryAt time.Time
}

// sent is a lease write whose answer never came: its Expiry names it (no
// two of a lease's renewals carry the same one), start is our monotonic
// time just before it was sent.
type sent struct{ expiry, start time.Time }

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

	acquisitions, takeovers, renewals, renewalFailures, releases, adoptions, drops, calls atomic.Uint64
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
	l, err := m.leaseLocked(ks)
	if err == nil && l.held {
		err = m.validLocked(l, now)
		m.mu.Unlock()
		return err
	}
	m.mu.Unlock()
	if err != nil {
		return err
	}
	return m.acquire(ctx, l)
}

// leaseLocked returns this node's view of the lease of ks, made on first
// use; ErrClosed after Close, and an adapters.ErrInvalid for a keyspace
// the codec has no lease for. m.mu is held.
func (m *Manager) leaseLocked(ks adapters.Keyspace) (*lease, error) {
	if m.closed {
		return nil, ErrClosed
	}
	if l := m.leases[ks]; l != nil {
		return l, nil
	}
	lks, key := m.opts.Codec.Keyspace(ks), m.opts.Codec.Key(ks)
	if lks == "" || len(key) == 0 {
		return nil, fmt.Errorf("lease: keyspace %q cannot be leased with this codec: %w", ks, adapters.ErrInvalid)
	}
	l := &lease{ks: ks, lks: lks, key: key}
	m.leases[ks] = l
	return l, nil
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
		Adoptions:       m.adoptions.Load(),
		Drops:           m.drops.Load(),
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
	l.lastErr, l.known = nil, false
	if errors.Is(err, ErrHeld) {
		// Read again after retryEvery, or when the holder's lease may
		// be taken over, whichever is first.
		l.lastErr, l.retryAt = err, now.Add(m.retryEvery)
		if !l.seenAt.IsZero() && l.seenAt.Add(m.ttl).Before(l.retryAt) {
			l.retryAt = l.seenAt.Add(m.ttl)
		}
		if he := (*HeldError)(nil); errors.As(err, &he) {
			l.owner, l.known = Owner{Holder: he.Holder, Addr: he.Addr, Epoch: he.Epoch, Live: true}, true
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
	var last error  // what the last round ended with
	var from string // the holder a takeover write of ours took it from
	for range maxAcquireRounds {
		if err := m.ensureKeyspace(ctx, l.lks); err != nil {
			return err
		}
		cur, ver, exists, err := m.read(ctx, l)
		if err != nil {
			return err
		}
		now := m.opts.Now()
		next := adapters.LeaseRecord{Holder: m.opts.Holder, Addr: m.opts.Addr}
		expect := adapters.Expect{Kind: adapters.ExpectVersion, Version: ver}
		switch {
		case !exists:
			next.Epoch, from = 1, ""
			expect = adapters.Expect{Kind: adapters.ExpectAbsent}
		case cur.Holder == m.opts.Holder:
			// A restart of this node, or our own acquire write whose
			// answer was lost: renew it, keeping its epoch.
			next.Epoch = cur.Epoch
		case cur.Holder == "":
			next.Epoch, from = cur.Epoch+1, ""
		default:
			m.mu.Lock()
			waited := m.watchLocked(l, ver, now)
			m.mu.Unlock()
			held := &HeldError{Keyspace: l.ks, Holder: cur.Holder, Epoch: cur.Epoch, Expiry: cur.Expiry, Addr: cur.Addr}
			if waited < m.ttl {
				return held
			}
			next.Epoch, from, last = cur.Epoch+1, cur.Holder, held
		}
		renewStart := m.opts.Now()
		next.Expiry = nextExpiry(renewStart, m.ttl, cur.Expiry)
		v, err := m.writeOne(ctx, l, next, expect)
		if errors.Is(err, adapters.ErrConflict) {
			continue // another node won: read again and report
		}
		if err != nil {
			if ctx.Err() != nil || !errors.Is(err, adapters.ErrUnavailable) {
				return err
			}
			// No answer: the write may have been applied. Read the
			// record again rather than guess.
			last = err
			continue
		}
		takeover := from != ""
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
				"keyspace", l.ks, "from", from, "epoch", next.Epoch)
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

// watchLocked notes that another node's record of l was at version ver at
// now, and returns how long that version has stayed unchanged since this
// node first saw it (on its own clock). m.mu is held.
func (m *Manager) watchLocked(l *lease, ver adapters.Version, now time.Time) time.Duration {
	if l.seenAt.IsZero() || l.seenVersion != ver {
		l.seenVersion, l.seenAt = ver, now
	}
	return now.Sub(l.seenAt)
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
func (m *Manager) read(ctx context.Context, l *lease) (adapters.LeaseRecord, adapters.Version, bool, error) {
	m.calls.Add(1)
	recs, err := m.opts.Store.Get(ctx, l.lks, [][]byte{l.key})
	if err != nil {
		return adapters.LeaseRecord{}, "", false, fmt.Errorf("lease: read the lease of %q: %w", l.ks, err)
	}
	if len(recs) != 1 {
		return adapters.LeaseRecord{}, "", false, fmt.Errorf("lease: the store answered %d records for the lease of %q", len(recs), l.ks)
	}
	cur, err := m.decode(l, recs[0])
	return cur.rec, cur.version, cur.exists, err
}

// writeOne writes rec as l's record if expect holds and returns its new
// version; a refusal is an adapters.ErrConflict.
func (m *Manager) writeOne(ctx context.Context, l *lease, rec adapters.LeaseRecord, expect adapters.Expect) (adapters.Version, error) {
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

// Bounds of one renewal or release of a group.
const (
	// maxWriteRounds: the first write, and again at once for a lease
	// found still ours after its write was refused or went unanswered.
	maxWriteRounds = 3
	// settleReads: attempts to read the records that settle a round.
	settleReads = 3
	// maxUnsure: unanswered writes remembered per lease (the oldest is
	// forgotten first; forgetting one only shortens a validity).
	maxUnsure = 16
)

// writeGroup renews (or with release, releases) the held leases of one
// group, one Upsert call per round with ExpectVersion of our last version.
// A write refused or unanswered is settled by reading the record, never by
// guessing: a record still ours (our Holder and epoch) whose version moved
// was changed by one of our own writes whose answer was lost, so we adopt
// it and write again at once; only another holder's record drops the
// lease. It returns the errors of a release.
func (m *Manager) writeGroup(ctx context.Context, g []*lease, release bool) error {
	for _, l := range g {
		l.op.Lock()
		defer l.op.Unlock()
	}
	var errs []error
	for round := 1; len(g) > 0; round++ {
		g, errs = m.writeRound(ctx, g, release, round == maxWriteRounds)
	}
	return errors.Join(errs...)
}

// writeRound sends one round of g's writes and settles the ones that were
// not confirmed. It returns the leases to write again, and (for a release
// whose last round this is) what could not be released.
func (m *Manager) writeRound(ctx context.Context, g []*lease, release, last bool) (again []*lease, errs []error) {
	start := m.opts.Now()
	live, writes, recs := m.prepare(g, start, release)
	if len(live) == 0 {
		return nil, nil
	}
	vers, err := m.upsert(ctx, live[0].lks, writes, release)
	refused := map[int]bool{}
	if ce := (*adapters.ConflictError)(nil); errors.As(err, &ce) {
		for _, c := range ce.Conflicts {
			refused[c.Index] = true
		}
		err = nil
	}
	var open []*lease // refused or unanswered
	why := map[*lease]error{}
	m.mu.Lock()
	for i, l := range live {
		switch {
		case refused[i]:
			why[l] = errors.New("refused: the record's version is not the one we last wrote")
		case err != nil:
			why[l] = err
		case i >= len(vers) || vers[i] == "":
			why[l] = errors.New("the store reported no version")
		default:
			m.confirmLocked(l, vers[i], recs[i].Expiry, start, release)
			continue
		}
		open = append(open, l)
	}
	m.mu.Unlock()
	if len(open) == 0 {
		return nil, nil
	}
	back, rerr := m.readRecords(ctx, open, release)
	if rerr != nil && !release && m.ctx.Err() != nil {
		return nil, nil // renewal is stopping: Close settles by its release
	}
	now := m.opts.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range open {
		if rerr != nil {
			errs = append(errs, m.unsettledLocked(l, now, release, fmt.Errorf("%w; reading the record to settle it: %w", why[l], rerr)))
			continue
		}
		retry, err := m.settleLocked(l, back[l], why[l], start, now, release, last)
		if retry {
			again = append(again, l)
		}
		errs = append(errs, err)
	}
	return again, errs
}

// settleLocked decides, by the record cur read back, what became of l's
// write of the round sent at start that was refused or unanswered (why):
// still ours (adopted if a write of ours changed it; written again unless
// this round's renewal is what changed it, or this is the last round),
// released by our release, or another holder's (dropped). m.mu is held.
func (m *Manager) settleLocked(l *lease, cur readBack, why error, start, now time.Time, release, last bool) (again bool, err error) {
	switch {
	case cur.exists && cur.rec.Holder == m.opts.Holder && cur.rec.Epoch == l.epoch:
		if cur.version != l.version && m.adoptLocked(l, cur, start) && !release {
			return false, nil // this round's renewal was applied
		}
		if last {
			return false, m.unsettledLocked(l, now, release, fmt.Errorf("%w; still ours after %d writes", why, maxWriteRounds))
		}
		return true, nil
	case release && cur.exists && cur.rec.Holder == "" && cur.rec.Epoch == l.epoch:
		// Our release was applied; its answer was lost.
		m.confirmLocked(l, cur.version, cur.rec.Expiry, start, true)
		return false, nil
	}
	m.dropLocked(l, cur, release)
	return false, nil
}

// prepare builds the round's writes for the held leases of g, noting each
// as unsure until its answer comes. m.mu is taken.
func (m *Manager) prepare(g []*lease, start time.Time, release bool) ([]*lease, []adapters.Write, []adapters.LeaseRecord) {
	var live []*lease
	var writes []adapters.Write
	var recs []adapters.LeaseRecord
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range g {
		if !l.held {
			continue
		}
		rec := adapters.LeaseRecord{Holder: m.opts.Holder, Epoch: l.epoch, Expiry: nextExpiry(start, m.ttl, l.expiry), Addr: m.opts.Addr}
		if release {
			rec.Holder, rec.Addr, rec.Expiry = "", "", start.Round(0).UTC().Truncate(time.Millisecond)
		}
		val, err := m.opts.Codec.Encode(l.ks, rec)
		if err != nil { // cannot happen with a record we wrote before
			m.log.Error("lease: cannot encode a lease record", "keyspace", l.ks, "err", err)
			continue
		}
		if !release {
			// Every renewal carries an Expiry later than any before
			// it, so the record read back names the write that made it.
			l.expiry = rec.Expiry
			if len(l.unsure) == maxUnsure {
				l.unsure = slices.Delete(l.unsure, 0, 1)
			}
			l.unsure = append(l.unsure, sent{expiry: rec.Expiry, start: start})
		}
		live = append(live, l)
		recs = append(recs, rec)
		writes = append(writes, adapters.Write{Key: l.key, Value: val, Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: l.version}})
	}
	return live, writes, recs
}

// callCtx bounds one store call of a renewal by TTL/3 and asks the store
// for a single attempt (adapters.WithSingleAttempt): the round settles a
// failed or unanswered call itself, at once, by reading the record and
// writing again, where a store's own retries would sleep their backoffs
// out of the lease's margin (two lost answers of a write and two of the
// read that settles it cost an Azure adapter 1.3-2.1 s of pauses, more
// than the 1.4 s a 3 s TTL leaves between renewals). A release runs on its
// caller's context, with the store's retries.
func (m *Manager) callCtx(ctx context.Context, release bool) (context.Context, context.CancelFunc) {
	if release {
		return ctx, func() {}
	}
	return context.WithTimeout(adapters.WithSingleAttempt(ctx), m.ttl/3)
}

func (m *Manager) upsert(ctx context.Context, lks adapters.Keyspace, writes []adapters.Write, release bool) ([]adapters.Version, error) {
	cctx, cancel := m.callCtx(ctx, release)
	defer cancel()
	m.calls.Add(1)
	return m.opts.Store.Upsert(cctx, lks, writes)
}

// readBack is a lease record as read back to settle a write.
type readBack struct {
	rec     adapters.LeaseRecord
	version adapters.Version
	exists  bool
}

// readRecords reads the records of ls (one lease keyspace) in one call,
// up to settleReads times until one succeeds.
func (m *Manager) readRecords(ctx context.Context, ls []*lease, release bool) (map[*lease]readBack, error) {
	keys := make([][]byte, len(ls))
	for i, l := range ls {
		keys[i] = l.key
	}
	var err error
	for range settleReads {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var recs []adapters.Record
		recs, err = m.get(ctx, ls[0].lks, keys, release)
		if err != nil {
			continue
		}
		if len(recs) != len(ls) {
			return nil, fmt.Errorf("lease: the store answered %d records for %d keys", len(recs), len(ls))
		}
		out := make(map[*lease]readBack, len(ls))
		for i, l := range ls {
			s, err := m.decode(l, recs[i])
			if err != nil {
				return nil, err
			}
			out[l] = s
		}
		return out, nil
	}
	return nil, err
}

func (m *Manager) get(ctx context.Context, lks adapters.Keyspace, keys [][]byte, release bool) ([]adapters.Record, error) {
	cctx, cancel := m.callCtx(ctx, release)
	defer cancel()
	m.calls.Add(1)
	return m.opts.Store.Get(cctx, lks, keys)
}

// confirmLocked records a write of l the store confirmed (or that reading
// it back showed applied), sent at start. m.mu is held.
func (m *Manager) confirmLocked(l *lease, v adapters.Version, expiry, start time.Time, release bool) {
	l.unsure = l.unsure[:0]
	if release {
		l.held, l.epoch, l.version = false, 0, ""
		m.releases.Add(1)
		m.log.Info("lease released", "keyspace", l.ks)
		return
	}
	l.version = v
	if until := start.Add(m.validFor); until.After(l.validUntil) {
		l.validUntil = until
	}
	l.expiry = laterOf(l.expiry, expiry)
	m.renewals.Add(1)
	if l.failing || l.lapsed {
		m.log.Info("lease renewal recovered", "keyspace", l.ks, "epoch", l.epoch, "was_lapsed", l.lapsed)
		l.failing, l.lapsed = false, false
	}
}

// adoptLocked takes cur, a record of ours whose version is not the one we
// last knew, as ours: one of our renewals whose answer was lost made it.
// That write is known by its Expiry, and the lease is valid from when it
// was sent, as if its answer had come; a write we no longer remember
// gives no new validity. It reports whether the write was the one sent at
// start (this round's). m.mu is held.
func (m *Manager) adoptLocked(l *lease, cur readBack, start time.Time) (thisRound bool) {
	m.adoptions.Add(1)
	from := time.Time{}
	for _, s := range l.unsure {
		if s.expiry.Equal(cur.rec.Expiry) {
			from = s.start
			break
		}
	}
	m.log.Debug("lease write settled by reading the record: a renewal of ours was applied and its answer lost; lease kept",
		"keyspace", l.ks, "epoch", l.epoch, "this_round", from.Equal(start))
	if from.IsZero() {
		l.unsure = l.unsure[:0]
		l.version = cur.version
		l.expiry = laterOf(l.expiry, cur.rec.Expiry)
		return false
	}
	m.confirmLocked(l, cur.version, cur.rec.Expiry, from, false)
	return from.Equal(start)
}

// dropLocked drops l, whose record cur is not ours: another node took it
// (or it is gone). m.mu is held.
func (m *Manager) dropLocked(l *lease, cur readBack, release bool) {
	l.held, l.epoch, l.version = false, 0, ""
	l.unsure = l.unsure[:0]
	by, epoch := "(none: the record is gone)", uint64(0)
	if cur.exists {
		by, epoch = cur.rec.Holder, cur.rec.Epoch
	}
	if release {
		m.log.Info("lease was taken by another node before its release", "keyspace", l.ks, "held_by", by, "epoch", epoch)
		return
	}
	m.renewalFailures.Add(1)
	m.drops.Add(1)
	m.log.Warn("lease renewal refused: the record names another holder; lease dropped", "keyspace", l.ks,
		"held_by", by, "epoch", epoch)
}

// unsettledLocked records a write of l whose outcome stays unknown (the
// record could not be read, or our writes kept missing it). A renewal
// keeps the lease, which stays valid until its deadline; a release reports
// err. m.mu is held.
func (m *Manager) unsettledLocked(l *lease, now time.Time, release bool, err error) error {
	if release {
		l.held = false
		return fmt.Errorf("lease: release the lease of %q: %w", l.ks, err)
	}
	m.renewalFailures.Add(1)
	if l.failing {
		return nil
	}
	l.failing = true
	if left := l.validUntil.Sub(now); left > 0 {
		m.log.Warn("lease renewal failing; the lease stays valid until its deadline", "keyspace", l.ks,
			"epoch", l.epoch, "valid_for", left.Round(time.Millisecond), "err", err)
	} else {
		m.log.Warn("lease renewal failing and the lease has lapsed: writes of the keyspace are refused until a renewal succeeds",
			"keyspace", l.ks, "epoch", l.epoch, "lapsed_for", (-left).Round(time.Millisecond), "err", err)
	}
	return nil
}

// decode reads rec as l's lease record.
func (m *Manager) decode(l *lease, rec adapters.Record) (readBack, error) {
	if rec.Value == nil {
		return readBack{}, nil
	}
	r, err := m.opts.Codec.Decode(rec.Value)
	if err != nil {
		return readBack{}, fmt.Errorf("lease: the lease record of %q is unreadable: %w", l.ks, err)
	}
	if rec.Version == "" {
		return readBack{}, fmt.Errorf("lease: the store reported no version for the lease of %q", l.ks)
	}
	return readBack{rec: r, version: rec.Version, exists: true}, nil
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
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

// Release gives up this node's lease on ks as Close does for all (Holder
// "", same epoch), so that another node takes it at once: how a rebalance
// hands one keyspace over. The caller must have stopped acknowledging
// writes of ks and written back its buffered ones first. A release refused
// or unanswered is settled by reading the record, as Close's are; one
// that stays unsettled is reported, and the lease is no longer held here
// either way. Releasing a lease this node does not hold does nothing; a
// later Hold acquires it again (epoch+1 unless another node took it
// meanwhile). Release returns ErrClosed after Close.
func (m *Manager) Release(ctx context.Context, ks adapters.Keyspace) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	l := m.leases[ks]
	m.mu.Unlock()
	if l == nil {
		return nil
	}
	return m.writeGroup(ctx, []*lease{l}, true)
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
