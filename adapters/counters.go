package adapters

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Op names one Store operation; it indexes Stats.
type Op int

// The Store operations, in Stats order.
const (
	OpGet Op = iota
	OpGetRange
	OpUpsert
	OpDelete
	// OpWriteAtomic is AtomicWriter.WriteAtomic.
	OpWriteAtomic
	numOps
)

var opNames = [numOps]string{"get", "get_range", "upsert", "delete", "write_atomic"}

// String returns the metric label of o ("get", "get_range", "upsert",
// "delete", "write_atomic").
func (o Op) String() string {
	if o < 0 || o >= numOps {
		return "unknown"
	}
	return opNames[o]
}

// OpStats are the counters of one operation.
//
//   - Requests: calls made.
//   - Keys: keys asked for by Get and Delete, mutations handed to
//     WriteAtomic.
//   - Records: records returned (Get: values found; GetRange: records) or
//     written by a successful Upsert or WriteAtomic (its upserts and
//     deletes alike).
//   - BytesSent: key and value bytes handed to the backend (range bounds for
//     GetRange), counted whether or not the call succeeds.
//   - BytesReceived: key and value bytes returned (Get returns values only).
//   - Errors: calls that returned an error.
type OpStats struct {
	Requests, Keys, Records, BytesSent, BytesReceived, Errors uint64
}

func (s *OpStats) add(o OpStats) {
	s.Requests += o.Requests
	s.Keys += o.Keys
	s.Records += o.Records
	s.BytesSent += o.BytesSent
	s.BytesReceived += o.BytesReceived
	s.Errors += o.Errors
}

// Stats holds one OpStats per operation, indexed by Op.
type Stats [numOps]OpStats

// Total sums the counters of every operation.
func (s Stats) Total() OpStats {
	var t OpStats
	for _, o := range s {
		t.add(o)
	}
	return t
}

// opCounters is the live, atomically updated form of OpStats.
type opCounters struct {
	requests, keys, records, sent, received, errors atomic.Uint64
}

func (c *opCounters) record(keys, records, sent, received uint64, err error) {
	c.requests.Add(1)
	c.keys.Add(keys)
	c.records.Add(records)
	c.sent.Add(sent)
	c.received.Add(received)
	if err != nil {
		c.errors.Add(1)
	}
}

// Counted wraps a Store and counts every call made through it. It is safe
// for concurrent use; counting costs a few atomic adds per call. Made by
// CountLogged, it also logs every failed call (see failureLog).
type Counted struct {
	inner Store
	ops   [numOps]opCounters
	log   *failureLog // nil: failures are counted, not logged
}

var (
	_ AtomicWriter   = (*Counted)(nil)
	_ Stamper        = (*Counted)(nil)
	_ SnapshotReader = (*Counted)(nil)
)

// Count returns s wrapped in a fresh set of counters.
func Count(s Store) *Counted { return &Counted{inner: s} }

// CountLogged is Count, and every failed call is logged on log with its
// operation, keyspace, the backend's status and message when it gave one
// (ServiceStatusOf) and the error, at most failureLogBurst lines per
// operation every failureLogWindow (the lines held back are counted in
// the next one). A refused precondition and a call the caller cancelled
// are logged at level info, every other failure at warn.
func CountLogged(s Store, log *slog.Logger) *Counted {
	return &Counted{inner: s, log: &failureLog{log: log}}
}

// The failure log's rate: per operation, at most failureLogBurst lines in
// each failureLogWindow.
const (
	failureLogBurst  = 10
	failureLogWindow = 10 * time.Second
)

// failureLog logs failed calls, rate-limited per operation.
type failureLog struct {
	log *slog.Logger
	mu  sync.Mutex
	win [numOps]struct {
		start            time.Time
		logged, withheld int
	}
}

// failed logs one failed call of op on ks (c.log may be nil).
func (c *Counted) failed(ctx context.Context, op Op, ks Keyspace, n int, err error) {
	l := c.log
	if l == nil || err == nil {
		return
	}
	now := time.Now()
	l.mu.Lock()
	w := &l.win[op]
	if now.Sub(w.start) >= failureLogWindow {
		w.start, w.logged = now, 0
	}
	withheld := 0
	if w.logged >= failureLogBurst {
		w.withheld++
		l.mu.Unlock()
		return
	}
	w.logged++
	withheld, w.withheld = w.withheld, 0
	l.mu.Unlock()
	level, msg := slog.LevelWarn, "remote call failed"
	switch {
	case errors.Is(err, ErrConflict):
		level, msg = slog.LevelInfo, "remote call refused: a precondition does not hold"
	case errors.Is(err, context.Canceled):
		level, msg = slog.LevelInfo, "remote call cancelled by its caller"
	}
	attrs := []slog.Attr{slog.String("op", op.String()), slog.String("keyspace", string(ks)), slog.Int("keys", n)}
	if code, m, ok := ServiceStatusOf(err); ok {
		attrs = append(attrs, slog.String("status", code), slog.String("message", m))
	}
	attrs = append(attrs, slog.String("err", err.Error()))
	if withheld > 0 {
		attrs = append(attrs, slog.Int("withheld_since_last", withheld))
	}
	l.log.LogAttrs(ctx, level, msg, attrs...)
}

// Unwrap returns the wrapped Store.
func (c *Counted) Unwrap() Store { return c.inner }

// Stats returns a snapshot of the counters. Each counter is read atomically
// but not all together, so a snapshot taken during traffic may split a call
// (its request counted, its bytes not yet); that is fine for metrics.
func (c *Counted) Stats() Stats {
	var s Stats
	for i := range c.ops {
		o := &c.ops[i]
		s[i] = OpStats{
			Requests:      o.requests.Load(),
			Keys:          o.keys.Load(),
			Records:       o.records.Load(),
			BytesSent:     o.sent.Load(),
			BytesReceived: o.received.Load(),
			Errors:        o.errors.Load(),
		}
	}
	return s
}

// Reset sets every counter to zero (between benchmark phases).
func (c *Counted) Reset() {
	for i := range c.ops {
		o := &c.ops[i]
		for _, v := range []*atomic.Uint64{&o.requests, &o.keys, &o.records, &o.sent, &o.received, &o.errors} {
			v.Store(0)
		}
	}
}

// Get implements Store.
func (c *Counted) Get(ctx context.Context, ks Keyspace, keys [][]byte) ([]Record, error) {
	return c.get(ctx, ks, keys, c.inner.Get)
}

// get counts a Get made by read (the store's, or a snapshot's).
func (c *Counted) get(ctx context.Context, ks Keyspace, keys [][]byte, read func(context.Context, Keyspace, [][]byte) ([]Record, error)) ([]Record, error) {
	recs, err := read(ctx, ks, keys)
	var found, recv uint64
	for _, r := range recs {
		if r.Value != nil {
			found++
			recv += uint64(len(r.Value))
		}
	}
	c.ops[OpGet].record(uint64(len(keys)), found, keyBytes(keys), recv, err)
	c.failed(ctx, OpGet, ks, len(keys), err)
	return recs, err
}

// GetRange implements Store.
func (c *Counted) GetRange(ctx context.Context, ks Keyspace, start, end []byte, limit int) ([]Record, bool, error) {
	recs, more, err := c.inner.GetRange(ctx, ks, start, end, limit)
	c.countRange(ctx, ks, start, end, recs, err)
	return recs, more, err
}

// countRange counts one range read (the store's, or a snapshot's).
func (c *Counted) countRange(ctx context.Context, ks Keyspace, start, end []byte, recs []Record, err error) {
	c.ops[OpGetRange].record(0, uint64(len(recs)), uint64(len(start)+len(end)), recordBytes(recs), err)
	c.failed(ctx, OpGetRange, ks, 0, err)
}

// Upsert implements Store.
func (c *Counted) Upsert(ctx context.Context, ks Keyspace, writes []Write) ([]Version, error) {
	vers, err := c.inner.Upsert(ctx, ks, writes)
	var written uint64
	if err == nil {
		written = uint64(len(writes))
	}
	c.ops[OpUpsert].record(0, written, writeBytes(writes), 0, err)
	c.failed(ctx, OpUpsert, ks, len(writes), err)
	return vers, err
}

// Delete implements Store.
func (c *Counted) Delete(ctx context.Context, ks Keyspace, writes []Write) error {
	err := c.inner.Delete(ctx, ks, writes)
	c.ops[OpDelete].record(uint64(len(writes)), 0, writeBytes(writes), 0, err)
	c.failed(ctx, OpDelete, ks, len(writes), err)
	return err
}

// WriteAtomic implements AtomicWriter when the wrapped store does; when it
// does not, the call fails with an error matching errors.ErrUnsupported
// (counted as a request and an error).
func (c *Counted) WriteAtomic(ctx context.Context, ks Keyspace, ms []Mutation) ([]Version, error) {
	var vers []Version
	var err error
	if aw, ok := c.inner.(AtomicWriter); ok {
		vers, err = aw.WriteAtomic(ctx, ks, ms)
	} else {
		err = fmt.Errorf("adapters: %T has no atomic writes: %w", c.inner, errors.ErrUnsupported)
	}
	var written, sent uint64
	if err == nil {
		written = uint64(len(ms))
	}
	for _, m := range ms {
		sent += uint64(len(m.Key) + len(m.Value))
	}
	c.ops[OpWriteAtomic].record(uint64(len(ms)), written, sent, 0, err)
	c.failed(ctx, OpWriteAtomic, ks, len(ms), err)
	return vers, err
}

// Snapshot forwards to the wrapped store's SnapshotReader; its reads are
// counted (and logged) as Get and GetRange, except a range read the
// snapshot cannot make. Over a store without snapshots it fails with an
// error matching errors.ErrUnsupported.
func (c *Counted) Snapshot() (Snapshot, error) {
	sr, ok := c.inner.(SnapshotReader)
	if !ok {
		return nil, fmt.Errorf("adapters: %T has no snapshots: %w", c.inner, errors.ErrUnsupported)
	}
	s, err := sr.Snapshot()
	if err != nil {
		return nil, err
	}
	return countedSnapshot{s, c}, nil
}

// countedSnapshot counts a snapshot's reads in its Counted.
type countedSnapshot struct {
	Snapshot
	c *Counted
}

func (s countedSnapshot) Get(ctx context.Context, ks Keyspace, keys [][]byte) ([]Record, error) {
	return s.c.get(ctx, ks, keys, s.Snapshot.Get)
}

// GetRange counts a range read of the snapshot, unless the snapshot
// cannot make one (errors.ErrUnsupported): the caller reads otherwise,
// and nothing failed.
func (s countedSnapshot) GetRange(ctx context.Context, ks Keyspace, start, end []byte, limit int) ([]Record, bool, error) {
	recs, more, err := s.Snapshot.GetRange(ctx, ks, start, end, limit)
	if !errors.Is(err, errors.ErrUnsupported) {
		s.c.countRange(ctx, ks, start, end, recs, err)
	}
	return recs, more, err
}

// Stamped forwards to the wrapped store's Stamper (it is not counted: it
// sends nothing); when the wrapped store has none, it fails with an error
// matching errors.ErrUnsupported.
func (c *Counted) Stamped(value []byte, v Version) ([]byte, error) {
	if st, ok := c.inner.(Stamper); ok {
		return st.Stamped(value, v)
	}
	return nil, fmt.Errorf("adapters: %T has no stamps: %w", c.inner, errors.ErrUnsupported)
}

func writeBytes(ws []Write) uint64 {
	var n uint64
	for _, w := range ws {
		n += uint64(len(w.Key) + len(w.Value))
	}
	return n
}

func keyBytes(keys [][]byte) uint64 {
	var n uint64
	for _, k := range keys {
		n += uint64(len(k))
	}
	return n
}

func recordBytes(recs []Record) uint64 {
	var n uint64
	for _, r := range recs {
		n += uint64(len(r.Key) + len(r.Value))
	}
	return n
}

// CreateKeyspace forwards to the wrapped store's KeyspaceAdmin, or returns
// ErrNoKeyspaceAdmin. Keyspace administration is not counted.
func (c *Counted) CreateKeyspace(ctx context.Context, ks Keyspace) error {
	if a, ok := c.inner.(KeyspaceAdmin); ok {
		return a.CreateKeyspace(ctx, ks)
	}
	return ErrNoKeyspaceAdmin
}

// ListKeyspaces forwards to the wrapped store's KeyspaceLister, or returns
// ErrNoKeyspaceLister. Listings are not counted.
func (c *Counted) ListKeyspaces(ctx context.Context, prefix string) ([]Keyspace, error) {
	if l, ok := c.inner.(KeyspaceLister); ok {
		return l.ListKeyspaces(ctx, prefix)
	}
	return nil, ErrNoKeyspaceLister
}

// DropKeyspace forwards to the wrapped store's KeyspaceAdmin, or returns
// ErrNoKeyspaceAdmin.
func (c *Counted) DropKeyspace(ctx context.Context, ks Keyspace) error {
	if a, ok := c.inner.(KeyspaceAdmin); ok {
		return a.DropKeyspace(ctx, ks)
	}
	return ErrNoKeyspaceAdmin
}
