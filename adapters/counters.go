package adapters

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/nemocache/nemo/internal/obs"
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

// spanNames name the span of each operation's calls.
var spanNames = [numOps]string{"remote get", "remote get_range", "remote upsert", "remote delete", "remote write_atomic"}

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

// opCounters is the live, atomically updated form of OpStats, with the
// calls' latency.
type opCounters struct {
	requests, keys, records, sent, received, errors atomic.Uint64
	latency                                         *obs.Histogram
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

// Counted wraps a Store and counts every call made through it, times it
// (a latency histogram per operation), notes it on the client request the
// context carries (obs.NoteRemote), and, in a traced request, gives it a
// child span named "remote <op>" with its keyspace. Made by CountLogged,
// it also logs every failed call (see failureLog). It is safe for
// concurrent use; counting costs a few atomic adds per call.
type Counted struct {
	inner Store
	ops   [numOps]opCounters
	log   *failureLog // nil: failures are counted, not logged
	watch atomic.Pointer[func(error)]
}

var (
	_ AtomicWriter     = (*Counted)(nil)
	_ Stamper          = (*Counted)(nil)
	_ SnapshotReader   = (*Counted)(nil)
	_ SnapshotAtReader = (*Counted)(nil)
)

// Count returns s wrapped in a fresh set of counters.
func Count(s Store) *Counted {
	c := &Counted{inner: s}
	for i := range c.ops {
		c.ops[i].latency = obs.NewDurationHistogram()
	}
	return c
}

// CountLogged is Count, and every failed call is logged on log with its
// operation, keyspace, the backend's status and message when it gave one
// (ServiceStatusOf) and the error, at most failureLogBurst lines per
// operation every failureLogWindow (the lines held back are counted in
// the next one). A refused precondition and a call the caller cancelled
// are logged at level info, every other failure at warn.
func CountLogged(s Store, log *slog.Logger) *Counted {
	c := Count(s)
	c.log = &failureLog{log: log}
	return c
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

// failed logs one failed call of op on ks naming n keys (c.log may be
// nil).
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
	if w.logged >= failureLogBurst {
		w.withheld++
		l.mu.Unlock()
		return
	}
	w.logged++
	withheld := w.withheld
	w.withheld = 0
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

// begin starts a call of op to keyspace ks: it notes the call on the
// request ctx carries and starts its span when the request is traced.
func (c *Counted) begin(ctx context.Context, op Op, ks Keyspace) (context.Context, trace.Span, time.Time) {
	obs.NoteRemote(ctx)
	ctx, span := obs.StartChild(ctx, spanNames[op], trace.SpanKindClient)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("nemo.keyspace", string(ks)))
	}
	return ctx, span, time.Now()
}

// end records the call's latency, ends its span, logs its failure (a
// call of op on ks naming n keys) and tells the watcher its outcome.
func (c *Counted) end(ctx context.Context, op Op, ks Keyspace, n int, span trace.Span, start time.Time, err error) {
	c.ops[op].latency.Since(start)
	obs.EndSpan(span, err)
	c.failed(ctx, op, ks, n, err)
	if w := c.watch.Load(); w != nil {
		(*w)(err)
	}
}

// Watch makes fn hear the outcome of every call made through c from now
// on, nil for a success, in the caller's goroutine as the call returns
// (the node's backend health follows them). fn must be quick.
func (c *Counted) Watch(fn func(err error)) { c.watch.Store(&fn) }

// Latency returns the latency histogram of op's calls.
func (c *Counted) Latency(op Op) obs.HistogramSnapshot { return c.ops[op].latency.Snapshot() }

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
		o.latency.Reset()
	}
}

// Get implements Store.
func (c *Counted) Get(ctx context.Context, ks Keyspace, keys [][]byte) ([]Record, error) {
	return c.get(ctx, ks, keys, c.inner.Get)
}

// get counts a Get made by read (the store's, or a snapshot's).
func (c *Counted) get(ctx context.Context, ks Keyspace, keys [][]byte, read func(context.Context, Keyspace, [][]byte) ([]Record, error)) ([]Record, error) {
	ctx, span, start := c.begin(ctx, OpGet, ks)
	recs, err := read(ctx, ks, keys)
	c.end(ctx, OpGet, ks, len(keys), span, start, err)
	var found, recv uint64
	for _, r := range recs {
		if r.Value != nil {
			found++
			recv += uint64(len(r.Value))
		}
	}
	c.ops[OpGet].record(uint64(len(keys)), found, keyBytes(keys), recv, err)
	return recs, err
}

// GetRange implements Store.
func (c *Counted) GetRange(ctx context.Context, ks Keyspace, start, end []byte, limit int) ([]Record, bool, error) {
	return c.getRange(ctx, ks, start, end, limit, c.inner.GetRange)
}

// getRange counts a GetRange made by read (the store's, or a snapshot's),
// unless read could not make it (errors.ErrUnsupported: the caller reads
// otherwise, and nothing failed).
func (c *Counted) getRange(ctx context.Context, ks Keyspace, start, end []byte, limit int,
	read func(context.Context, Keyspace, []byte, []byte, int) ([]Record, bool, error)) ([]Record, bool, error) {
	ctx, span, began := c.begin(ctx, OpGetRange, ks)
	recs, more, err := read(ctx, ks, start, end, limit)
	if errors.Is(err, errors.ErrUnsupported) {
		obs.EndSpan(span, nil)
		return nil, false, err
	}
	c.end(ctx, OpGetRange, ks, 0, span, began, err)
	c.ops[OpGetRange].record(0, uint64(len(recs)), uint64(len(start)+len(end)), recordBytes(recs), err)
	return recs, more, err
}

// Upsert implements Store.
func (c *Counted) Upsert(ctx context.Context, ks Keyspace, writes []Write) ([]Version, error) {
	ctx, span, start := c.begin(ctx, OpUpsert, ks)
	vers, err := c.inner.Upsert(ctx, ks, writes)
	c.end(ctx, OpUpsert, ks, len(writes), span, start, err)
	var written uint64
	if err == nil {
		written = uint64(len(writes))
	}
	c.ops[OpUpsert].record(0, written, writeBytes(writes), 0, err)
	return vers, err
}

// Delete implements Store.
func (c *Counted) Delete(ctx context.Context, ks Keyspace, writes []Write) error {
	ctx, span, start := c.begin(ctx, OpDelete, ks)
	err := c.inner.Delete(ctx, ks, writes)
	c.end(ctx, OpDelete, ks, len(writes), span, start, err)
	c.ops[OpDelete].record(uint64(len(writes)), 0, writeBytes(writes), 0, err)
	return err
}

// WriteAtomic implements AtomicWriter when the wrapped store does; when it
// does not, the call fails with an error matching errors.ErrUnsupported
// (counted as a request and an error).
func (c *Counted) WriteAtomic(ctx context.Context, ks Keyspace, ms []Mutation) ([]Version, error) {
	var vers []Version
	var err error
	ctx, span, start := c.begin(ctx, OpWriteAtomic, ks)
	if aw, ok := c.inner.(AtomicWriter); ok {
		vers, err = aw.WriteAtomic(ctx, ks, ms)
	} else {
		err = fmt.Errorf("adapters: %T has no atomic writes: %w", c.inner, errors.ErrUnsupported)
	}
	c.end(ctx, OpWriteAtomic, ks, len(ms), span, start, err)
	var written, sent uint64
	if err == nil {
		written = uint64(len(ms))
	}
	for _, m := range ms {
		sent += uint64(len(m.Key) + len(m.Value))
	}
	c.ops[OpWriteAtomic].record(uint64(len(ms)), written, sent, 0, err)
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

// SnapshotAt forwards to the wrapped store's SnapshotAtReader, as
// Snapshot does to its SnapshotReader.
func (c *Counted) SnapshotAt(at time.Time) (Snapshot, error) {
	sr, ok := c.inner.(SnapshotAtReader)
	if !ok {
		return nil, fmt.Errorf("adapters: %T reads no past moments: %w", c.inner, errors.ErrUnsupported)
	}
	s, err := sr.SnapshotAt(at)
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

func (s countedSnapshot) GetRange(ctx context.Context, ks Keyspace, start, end []byte, limit int) ([]Record, bool, error) {
	return s.c.getRange(ctx, ks, start, end, limit, s.Snapshot.GetRange)
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
