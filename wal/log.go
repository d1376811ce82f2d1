package wal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/nemocache/nemo/internal/invariants"
	"github.com/nemocache/nemo/internal/obs"
)

// Log is an open write-ahead log. Its methods are safe for concurrent use.
type Log struct {
	opts Options
	fs   FS
	log  *slog.Logger

	// writeMu serializes everything that touches segment files after
	// Open: commits, rotation, checkpoint truncation, Replay, Reset, Close.
	writeMu    sync.Mutex
	segs       []segment
	cur        File  // last segment, open for writing
	off        int64 // end of the durable data in cur
	capacity   int64 // size of cur
	next       uint64
	dirtyEnd   int64 // end of bytes a failed commit may have left past off
	mustRotate bool  // a failed rotation may have left the next segment's file behind
	// promised is the highest LSN a Checkpoint call said the store holds
	// everything below (its record may not be durable yet).
	promised   uint64
	wantRotate bool // a checkpoint asked for a new segment (if there is room)
	// recycling: the current segment's file was (or may have been) cut
	// to nothing to become the next segment, and still has its old name
	// (space.go); nothing may be written before the recycle completes.
	recycling  bool
	lastCommit uint64 // LSN of the last commit marker in the log, 0 if none
	closedW    bool
	buf        []byte

	// mu guards the state that Err and Close read without writeMu.
	mu     sync.Mutex
	err    error
	closed bool

	durableNext atomic.Uint64
	// seqNext is one past the last LSN handed out to a batch being
	// written (>= durableNext); advanced, guarded by mu, is closed (and
	// replaced) whenever durableNext moves or the log fails, for
	// WaitDurable.
	seqNext  atomic.Uint64
	advanced chan struct{}
	lastCkpt atomic.Uint64
	stats    struct {
		commits, batches, bytes, checkpoints atomic.Uint64
		// fsync times each fsync; group counts the commits each
		// write+fsync round made durable.
		fsync, group *obs.Histogram
	}
	segBytes atomic.Int64 // capacity of the current segment
	spaceLow atomic.Bool  // see Stats.SpaceLow

	// Group commit: Appends hand requests to the writer goroutine.
	reqs    chan *request
	quit    chan struct{}
	stopped chan struct{}
}

// request is one Append (or one checkpoint record) waiting to be written.
type request struct {
	txnID uint64
	recs  []Data
	// isCkpt marks a checkpoint record carrying ckpt instead of a
	// transaction.
	isCkpt bool
	ckpt   uint64
	lsn    uint64 // set by commit: the commit (or checkpoint) record's LSN
	done   chan error
	// sequenced, when set (AppendEarly), is closed once lsn is set and
	// the batch has room in the segment, just before it is written.
	sequenced chan struct{}
	// group and synced are set by commit, for Append's span: how many
	// commits the batch held and how long its fsync took.
	group  int
	synced time.Duration
}

// slowFsync is the fsync time past which the log warns (as etcd does): the
// volume is too slow for the commits waiting on it.
const slowFsync = time.Second

// groupBounds are the buckets of the commits-per-fsync histogram.
var groupBounds = []int64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

// maxBatch bounds how many requests share one write, which bounds the
// write buffer and the latency of the first request in a batch.
const maxBatch = 1024

// Append logs recs (a transaction's data records, opaque to the log)
// followed by a commit marker for txnID, and returns the commit marker's
// LSN once an fsync covering all of them has succeeded; the records get
// the LSNs just below it. recs is not modified. ctx bounds the wait to enter the log only: once a request is in
// a batch being written, Append waits for the fsync, because returning early
// would let the caller abort a transaction that replay later applies.
func (l *Log) Append(ctx context.Context, txnID uint64, recs []Data) (uint64, error) {
	if err := validate(recs); err != nil {
		return 0, err
	}
	if err := sending(ctx); err != nil {
		return 0, err
	}
	req := &request{txnID: txnID, recs: recs}
	_, span := obs.StartChild(ctx, "wal fsync", trace.SpanKindInternal)
	err := l.submit(ctx, req)
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("nemo.wal.records", len(recs)), attribute.Int("nemo.wal.commits_per_sync", req.group),
			attribute.Float64("nemo.wal.fsync_seconds", req.synced.Seconds()))
	}
	obs.EndSpan(span, err)
	if err != nil {
		return 0, err
	}
	return req.lsn, nil
}

// sending is an append's check before it may enter the log: ctx has not
// ended. Once in a batch, the append is written whatever ctx says; a
// caller whose request may be answered at a deadline of its own marks the
// request as sending a write before it appends (txn: internal/deadline),
// so that its answer waits for the append's outcome.
func sending(ctx context.Context) error {
	return ctx.Err()
}

// AppendEarly is Append for early lock release: it returns as soon as the
// records and their commit marker have their LSNs in a batch the writer
// has made room for and is about to write and fsync, with the commit
// marker's LSN and a channel that receives the batch's outcome (nil once
// an fsync covers it). The commit's place in the log is fixed then: every
// commit with a lower LSN is in this batch or an earlier one, so it is
// durable no later than this one, and a caller that waits for the outcome
// (or WaitDurable(lsn)) before acknowledging acknowledges nothing a crash
// can take back. An error returned here means nothing was sequenced, as
// with Append. With NoGroupCommit there is no writer to overlap with:
// it returns after the fsync, the outcome already in the channel.
func (l *Log) AppendEarly(ctx context.Context, txnID uint64, recs []Data) (uint64, <-chan error, error) {
	if err := validate(recs); err != nil {
		return 0, nil, err
	}
	if err := sending(ctx); err != nil {
		return 0, nil, err
	}
	req := &request{txnID: txnID, recs: recs}
	if l.opts.NoGroupCommit {
		if err := l.submit(ctx, req); err != nil {
			return 0, nil, err
		}
		done := make(chan error, 1)
		done <- nil
		return req.lsn, done, nil
	}
	if err := l.Err(); err != nil {
		return 0, nil, err
	}
	req.done, req.sequenced = make(chan error, 1), make(chan struct{})
	select {
	case l.reqs <- req:
	case <-ctx.Done():
		return 0, nil, ctx.Err()
	case <-l.quit:
		return 0, nil, ErrClosed
	}
	// Once in a batch the request is written whatever ctx says (see
	// Append), so the wait below does not watch ctx.
	select {
	case <-req.sequenced:
		return req.lsn, req.done, nil
	case err := <-req.done:
		// Written already, or failed. Both channels may have been ready
		// (select picks either): a request that was sequenced gets its
		// LSN and its outcome through the channel, as if the select had
		// picked sequenced; an error return means it never was.
		done := make(chan error, 1)
		done <- err
		select {
		case <-req.sequenced:
			return req.lsn, done, nil
		default:
		}
		if err != nil {
			return 0, nil, err
		}
		return req.lsn, done, nil
	}
}

// SequencedLSN returns the last LSN handed out to a batch being written or
// written (0 if none): a commit whose LSN is at most this has its place in
// the log, durable or not yet.
func (l *Log) SequencedLSN() uint64 { return l.seqNext.Load() - 1 }

// WaitDurable waits until every record up to lsn is durable, the log fails
// (its error), or ctx ends. After a Reset the LSNs of the failed batch are
// handed out again, so a caller that may wait on an LSN of a failed batch
// must not Reset the log (txn's early lock release does not).
func (l *Log) WaitDurable(ctx context.Context, lsn uint64) error {
	for {
		l.mu.Lock()
		ch, err := l.advanced, l.err
		l.mu.Unlock()
		if l.durableNext.Load() > lsn {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// wake tells WaitDurable callers to look again.
func (l *Log) wake() {
	l.mu.Lock()
	close(l.advanced)
	l.advanced = make(chan struct{})
	l.mu.Unlock()
}

// validate checks recs before they are handed to the writer: data types
// only, and frames within maxPayload.
func validate(recs []Data) error {
	for i, d := range recs {
		if !isDataType(d.Type) {
			return fmt.Errorf("%w: record %d has type %d; a data record's type is 1 to %d but %d (commit) and %d (checkpoint)",
				ErrInvalidRecord, i, d.Type, maxDataType, typeCommit, typeCheckpoint)
		}
		// The LSN and transaction ID are assigned later; count them at
		// their widest.
		if n := payloadSize(&frame{typ: d.Type, lsn: math.MaxUint64, id: math.MaxUint64, body: d.Body}); n > maxPayload {
			return fmt.Errorf("%w: record %d is %d bytes, the maximum is %d", ErrInvalidRecord, i, n, maxPayload)
		}
	}
	return nil
}

// submit runs req through the writer goroutine, or directly under writeMu
// without group commit.
func (l *Log) submit(ctx context.Context, req *request) error {
	if err := l.Err(); err != nil {
		return err
	}
	if l.opts.NoGroupCommit {
		l.writeMu.Lock()
		defer l.writeMu.Unlock()
		return l.commit([]*request{req})
	}
	req.done = make(chan error, 1)
	select {
	case l.reqs <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-l.quit:
		return ErrClosed
	}
	return <-req.done
}

// run is the group-commit writer: it takes one request, sweeps up every
// request already waiting, and writes and fsyncs them together. Appenders
// that arrive during an fsync queue up and form the next batch, so the batch
// size adapts to load with no timer.
func (l *Log) run() {
	defer close(l.stopped)
	batch := make([]*request, 0, maxBatch)
	for {
		select {
		case r := <-l.reqs:
			batch = append(batch[:0], r)
		case <-l.quit:
			return
		}
	sweep:
		for len(batch) < maxBatch {
			select {
			case r := <-l.reqs:
				batch = append(batch, r)
			default:
				break sweep
			}
		}
		l.writeMu.Lock()
		err := l.commit(batch)
		l.writeMu.Unlock()
		for _, r := range batch {
			r.done <- err
		}
	}
}

// commit writes batch as one write and one fsync. writeMu must be held.
// LSNs are only consumed if the fsync succeeds; on failure the log goes
// sticky-failed and every request in the batch gets the error.
func (l *Log) commit(batch []*request) error {
	if l.closedW {
		return ErrClosed
	}
	if err := l.Err(); err != nil {
		return err
	}
	buf, lsn, commits := l.encode(batch)
	if invariants.Enabled {
		l.assertBatch(buf, lsn)
	}
	if cap(buf) <= 4*windowSize { // do not pin one huge transaction's buffer
		l.buf = buf
	}
	// A batch of checkpoint records alone may use the segment's reserve
	// (space.go); a batch with commits may not.
	covers := l.lastCkpt.Load()
	for _, r := range batch {
		if r.isCkpt {
			covers = max(covers, r.ckpt)
		}
	}
	if err := l.makeRoom(int64(len(buf)), commits == 0, covers); err != nil {
		if errors.Is(err, ErrNoSpace) {
			return err // nothing was written: the log is not failed
		}
		return l.fail(err)
	}
	if lsn > l.seqNext.Load() { // only the writer stores; after a Reset LSNs are handed out again
		l.seqNext.Store(lsn)
	}
	for _, r := range batch {
		if r.sequenced != nil {
			close(r.sequenced)
		}
	}
	synced, err := l.writeSync(buf, commits)
	if err != nil {
		return err
	}
	l.published(batch, buf, lsn, commits, synced)
	return nil
}

// encode frames batch into l.buf's storage from LSN l.next on, giving each
// request its LSN; it returns the frames, the next LSN after them and the
// number of commits among them.
func (l *Log) encode(batch []*request) (buf []byte, lsn uint64, commits int) {
	buf, lsn = l.buf[:0], l.next
	for _, r := range batch {
		if r.isCkpt {
			buf = appendFrame(buf, &frame{typ: typeCheckpoint, lsn: lsn, id: r.ckpt})
			r.lsn = lsn
			lsn++
			continue
		}
		for _, d := range r.recs {
			buf = appendFrame(buf, &frame{typ: d.Type, lsn: lsn, id: r.txnID, body: d.Body})
			lsn++
		}
		buf = appendFrame(buf, &frame{typ: typeCommit, lsn: lsn, id: r.txnID})
		r.lsn = lsn
		lsn++
		commits++
	}
	return buf, lsn, commits
}

// writeSync writes buf at l.off in the current segment and fsyncs it
// (unless NoSync), warning of a slow fsync; an error fails the log.
func (l *Log) writeSync(buf []byte, commits int) (time.Duration, error) {
	n, err := l.cur.WriteAt(buf, l.off)
	if err == nil && n < len(buf) {
		err = fmt.Errorf("short write of %d of %d bytes", n, len(buf))
	}
	if err != nil {
		l.dirtyEnd = l.off + int64(len(buf))
		return 0, l.fail(fmt.Errorf("%w: write %s at offset %d: %w", ErrSync, l.curName(), l.off, err))
	}
	if l.opts.NoSync {
		return 0, nil
	}
	start := time.Now()
	err = l.cur.Sync()
	synced := time.Since(start)
	l.stats.fsync.ObserveDuration(synced)
	if synced > slowFsync {
		l.log.Warn("wal: slow fsync", "took", synced, "segment", l.curName(), "bytes", len(buf), "commits", commits)
	}
	if err != nil {
		l.dirtyEnd = l.off + int64(len(buf))
		return 0, l.fail(fmt.Errorf("%w: fsync %s: %w", ErrSync, l.curName(), err))
	}
	return synced, nil
}

// published records a batch that is durable: the log's end and last
// commit and checkpoint, the durable LSN (waking its waiters), the stats,
// and each request's group size and fsync time.
func (l *Log) published(batch []*request, buf []byte, lsn uint64, commits int, synced time.Duration) {
	l.off += int64(len(buf))
	l.next = lsn
	for _, r := range batch {
		switch {
		case !r.isCkpt:
			l.lastCommit = r.lsn
		case r.ckpt > l.lastCkpt.Load():
			l.lastCkpt.Store(r.ckpt)
		}
		if r.isCkpt {
			l.stats.checkpoints.Add(1)
		}
	}
	l.durableNext.Store(lsn)
	l.wake()
	l.stats.commits.Add(uint64(commits))
	l.stats.batches.Add(1)
	l.stats.bytes.Add(uint64(len(buf)))
	l.stats.group.Observe(int64(commits))
	for _, r := range batch {
		r.group, r.synced = commits, synced
	}
}

func (l *Log) curName() string { return l.segs[len(l.segs)-1].name }

// assertBatch asserts the log's framing for a batch about to be written
// at l.off (internal/invariants; writeMu held): it continues the log
// right after the last durable record (LSN order, no gap: its first LSN
// is the durable next one, and the segment's name is not above it), it
// starts on a frame boundary, and it is whole aligned frames, one per
// LSN it takes up to next.
func (l *Log) assertBatch(buf []byte, next uint64) {
	if d := l.durableNext.Load(); l.next != d || l.segs[len(l.segs)-1].first > l.next || next < l.next {
		panic(invariants.Errorf("wal: batch of LSNs [%d, %d) after durable next %d in segment %s", l.next, next, d, l.curName()))
	}
	if l.off%frameAlign != 0 {
		panic(invariants.Errorf("wal: batch at offset %d of %s, not a frame boundary", l.off, l.curName()))
	}
	frames, err := countFrames(buf)
	if err != nil || frames != next-l.next {
		panic(invariants.Errorf("wal: batch of %d bytes holds %d frames for %d LSNs: %v", len(buf), frames, next-l.next, err))
	}
}

// makeRoom makes sure n more bytes fit in the current segment, rotating
// to a new one named after the batch's first LSN if not. A batch never
// spans segments, so neither does a transaction. Commits leave the last
// ckptReserve bytes of a segment to checkpoint records (ckptOnly), so a
// checkpoint never needs a new segment. covers is the checkpoint LSN
// that will hold once the batch is written: when nothing in the log is
// at or above it and the volume has no room for a new segment, the
// current one is recycled (space.go). An ErrNoSpace error left the log
// as it was.
func (l *Log) makeRoom(n int64, ckptOnly bool, covers uint64) error {
	need, limit := n+ckptReserve, l.capacity-ckptReserve
	if ckptOnly {
		need, limit = n, l.capacity
	}
	if !l.mustRotate && l.off+n <= limit {
		if !l.wantRotate || ckptOnly {
			return nil
		}
		// An early rotation (Checkpoint): without room for a new
		// segment the batch stays in this one.
		err := l.rotate(need, covers)
		if err == nil || !errors.Is(err, ErrNoSpace) || l.mustRotate {
			return err
		}
		l.wantRotate = false
		return nil
	}
	if !l.mustRotate && l.off == 0 {
		// An empty segment grows rather than rotating: a new segment
		// would have the same name.
		size := l.segmentSize(need)
		if err := l.cur.Allocate(size); err != nil {
			return l.noSpace(fmt.Errorf("preallocate %s to %d bytes: %w", l.curName(), size, err))
		}
		l.setCapacity(size)
		return nil
	}
	return l.rotate(need, covers)
}

// rotate starts a new segment of at least need bytes named after the
// next LSN.
func (l *Log) rotate(need int64, covers uint64) error {
	if l.recycling {
		return l.recycle(need)
	}
	// From here until success the file of the next segment may exist, so
	// a later batch must not go into the old segment: its LSNs would
	// precede that file's name.
	l.mustRotate = true
	seg := segment{first: l.next, name: segmentName(l.next)}
	size := l.segmentSize(need)
	f, left, err := l.createSegment(seg, size)
	if err != nil {
		// Without a file left behind the old segment may take later
		// batches that fit.
		l.mustRotate = left
		if errors.Is(err, syscall.ENOSPC) && l.coveredBy(covers) {
			return l.recycle(need)
		}
		return l.noSpace(fmt.Errorf("rotate: %w", err))
	}
	if err := l.cur.Close(); err != nil {
		// The old segment is fully synced; a close error loses nothing.
		l.log.Warn("wal: close segment", "segment", l.curName(), "err", err)
	}
	l.segs = append(l.segs, seg)
	l.cur, l.off = f, 0
	l.setCapacity(size)
	l.mustRotate, l.wantRotate = false, false
	return nil
}

// fail makes err sticky and returns it.
func (l *Log) fail(err error) error {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	close(l.advanced)
	l.advanced = make(chan struct{})
	l.mu.Unlock()
	l.log.Error("wal: log failed; appends are refused until Reset or reopen", "err", err)
	return err
}

// Err returns the error that failed the log, or nil.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Reset clears a sticky failure so Appends are accepted again. It first
// overwrites with zeros whatever the failed commit may have written past the
// last durable frame and syncs that, so a transaction that was never
// acknowledged cannot reappear on replay. If that fails the log stays
// failed.
func (l *Log) Reset() error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.closedW {
		return ErrClosed
	}
	if l.Err() == nil {
		return nil
	}
	if err := l.undoFailedWrite(); err != nil {
		return err
	}
	l.mu.Lock()
	l.err = nil
	l.mu.Unlock()
	l.log.Info("wal: reset after failure", "next_lsn", l.next)
	return nil
}

func (l *Log) undoFailedWrite() error {
	if l.dirtyEnd <= l.off {
		return nil
	}
	zeros := make([]byte, min(l.dirtyEnd-l.off, windowSize))
	for off := l.off; off < l.dirtyEnd; {
		n := min(int64(len(zeros)), l.dirtyEnd-off)
		if _, err := l.cur.WriteAt(zeros[:n], off); err != nil {
			return fmt.Errorf("%w: reset: zero %s at offset %d: %w", ErrSync, l.curName(), off, err)
		}
		off += n
	}
	if err := l.cur.Sync(); err != nil {
		return fmt.Errorf("%w: reset: fsync %s: %w", ErrSync, l.curName(), err)
	}
	l.dirtyEnd = 0
	return nil
}

// Checkpoint records that every record with an LSN below lsn is in the
// store, syncs that record, then removes the segments all of whose records
// are below lsn. lsn must not exceed NextLSN. The caller must have flushed
// every transaction whose commit LSN is below lsn; NextLSN read before the
// flush is the usual choice. A checkpoint that would cover no commit not
// already covered writes nothing. The record goes into the current
// segment's reserve when the segment is otherwise full, so a checkpoint
// needs no new space (space.go).
func (l *Log) Checkpoint(lsn uint64) error {
	if next := l.NextLSN(); lsn > next {
		return fmt.Errorf("wal: checkpoint LSN %d is beyond the next LSN %d", lsn, next)
	}
	if last := l.LastCheckpoint(); lsn <= last {
		if lsn < last {
			return fmt.Errorf("wal: checkpoint LSN %d is below the last checkpoint %d", lsn, last)
		}
		return nil
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.closedW {
		return ErrClosed
	}
	if err := l.Err(); err != nil {
		return err
	}
	l.promised = max(l.promised, lsn)
	if l.coveredBy(l.lastCkpt.Load()) {
		// No commit at or above the last checkpoint: a new record would
		// say nothing new (and an idle log would grow by one record per
		// checkpoint).
		return l.removeBelow(l.lastCkpt.Load())
	}
	// Written here rather than through the group-commit writer, so that
	// the batch holds the checkpoint record alone and may use the
	// reserve.
	if err := l.commit([]*request{{isCkpt: true, ckpt: lsn}}); err != nil {
		return err
	}
	if l.off > max(l.capacity/historyShare, minHistory) {
		// A restart reads the whole segment, history below the
		// checkpoint included: go on in a new one.
		if !l.coveredBy(lsn) {
			l.wantRotate = true // at the next commit; the next checkpoint drops this one
			return l.removeBelow(lsn)
		}
		// Nothing in the log is needed any more: the new segment starts
		// with this checkpoint, and the old ones go now.
		l.mustRotate = true
		err := l.commit([]*request{{isCkpt: true, ckpt: lsn}})
		if err == nil {
			return l.removeBelow(l.segs[len(l.segs)-1].first)
		}
		if !errors.Is(err, ErrNoSpace) {
			return err
		}
	}
	return l.removeBelow(lsn)
}

// A checkpoint moves the log to a new segment once the current one is
// more than 1/historyShare full (and holds more than minHistory bytes),
// so a restart soon after reads little of what checkpoints already
// covered (2 MiB of a 64 MiB segment) at the cost of rotating that much
// sooner.
const (
	historyShare = 32
	minHistory   = 1 << 20
)

// coveredBy reports whether every commit in the log is below ckpt (or
// there is none): the store has every transaction the log holds.
// writeMu held.
func (l *Log) coveredBy(ckpt uint64) bool { return l.lastCommit < ckpt || l.lastCommit == 0 }

// removeBelow deletes, oldest first, the segments whose successor starts at
// or below lsn, so what remains is always a contiguous run. writeMu held.
func (l *Log) removeBelow(lsn uint64) error {
	if invariants.Enabled {
		// The one durability rule's half here (doc.go, "When a write is
		// done"): no commit at or above the LSN a caller promised to be
		// in the store (Checkpoint) leaves the log.
		if p := max(l.promised, l.lastCkpt.Load()); lsn > p && !l.coveredBy(p) {
			panic(invariants.Errorf("wal: removing segments below LSN %d, beyond the checkpoint %d, with a commit at %d", lsn, p, l.lastCommit))
		}
	}
	n := 0
	for n+1 < len(l.segs) && l.segs[n+1].first <= lsn {
		if err := l.fs.Remove(l.path(l.segs[n].name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			l.segs = l.segs[n:]
			return fmt.Errorf("wal: remove %s: %w", l.segs[0].name, err)
		}
		n++
	}
	if n == 0 {
		return nil
	}
	l.segs = l.segs[n:]
	if err := l.fs.SyncDir(l.opts.Dir); err != nil {
		return fmt.Errorf("wal: sync directory %s: %w", l.opts.Dir, err)
	}
	return nil
}

// LastCheckpoint returns the LSN of the latest durable checkpoint, 0 if none.
func (l *Log) LastCheckpoint() uint64 { return l.lastCkpt.Load() }

// NextLSN returns one past the last durable LSN: every record below it is on
// disk, and the next Append's records get LSNs at or above it.
func (l *Log) NextLSN() uint64 { return l.durableNext.Load() }

// Replay calls fn, in LSN order, for every committed transaction whose
// commit LSN is at least fromLSN (0 means the last checkpoint), with copies
// of its data records, type and body as appended. Transactions without a
// commit marker are never passed. Replay reads only durable data and can be
// repeated; it blocks Appends while it runs, so call it before appending,
// and fn must not call back into the log. An error from fn stops Replay and
// is returned.
func (l *Log) Replay(fromLSN uint64, fn func(txnID uint64, recs []Data) error) error {
	return l.replay(fromLSN, func(txnID uint64, recs []Data, _ uint64) error { return fn(txnID, recs) })
}

// replay is Replay, telling fn each transaction's commit LSN too.
func (l *Log) replay(fromLSN uint64, fn func(txnID uint64, recs []Data, commitLSN uint64) error) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.closedW {
		return ErrClosed
	}
	if fromLSN == 0 {
		fromLSN = l.lastCkpt.Load()
	}
	emit := func(txnID uint64, recs []Data, commitLSN uint64) error {
		if commitLSN < fromLSN {
			return nil
		}
		if recs == nil {
			recs = []Data{}
		}
		return fn(txnID, recs, commitLSN)
	}
	for i, seg := range l.segs {
		if i+1 < len(l.segs) && l.segs[i+1].first <= fromLSN {
			continue // every record in seg is below fromLSN
		}
		if err := l.replaySegment(seg, i == len(l.segs)-1, emit); err != nil {
			return err
		}
	}
	return nil
}

func (l *Log) replaySegment(seg segment, last bool, emit func(uint64, []Data, uint64) error) error {
	f, size := l.cur, l.off
	if !last {
		var err error
		if f, err = l.fs.OpenFile(l.path(seg.name), os.O_RDONLY, 0); err != nil {
			return fmt.Errorf("wal: replay: open %s: %w", seg.name, err)
		}
		defer f.Close()
		if size, err = f.Size(); err != nil {
			return fmt.Errorf("wal: replay: stat %s: %w", seg.name, err)
		}
	}
	res, err := walk(newWindow(f, size), seg, emit)
	if err != nil {
		return err
	}
	if res.cause != nil || res.end != res.stop {
		// Open checked this segment; it changed under us.
		return fmt.Errorf("%w: %s: offset %d: damaged since open", ErrCorrupt, seg.name, res.stop)
	}
	return nil
}

// Stats are cumulative counters, for metrics, and the state of the log's
// space.
type Stats struct {
	Commits  uint64        // acknowledged Appends
	Batches  uint64        // write+fsync rounds (Commits/Batches is the group size)
	Bytes    uint64        // bytes written, framing included
	SyncTime time.Duration // total time spent in fsync
	// Fsyncs is the fsync latency histogram (none with NoSync);
	// GroupSizes counts the commits of each write+fsync round.
	Fsyncs, GroupSizes obs.HistogramSnapshot
	Checkpoints        uint64 // checkpoint records written
	// SegmentBytes is the preallocated size of the segment being written.
	SegmentBytes int64
	// SpaceLow says the volume is short of space: the last segment was
	// preallocated smaller than Options.SegmentSize to fit, or the last
	// attempt to create or extend one found no space. A full-size segment
	// clears it.
	SpaceLow bool
}

// Stats returns the log's counters.
func (l *Log) Stats() Stats {
	st := Stats{
		Commits:      l.stats.commits.Load(),
		Batches:      l.stats.batches.Load(),
		Bytes:        l.stats.bytes.Load(),
		Checkpoints:  l.stats.checkpoints.Load(),
		Fsyncs:       l.stats.fsync.Snapshot(),
		GroupSizes:   l.stats.group.Snapshot(),
		SegmentBytes: l.segBytes.Load(),
		SpaceLow:     l.spaceLow.Load(),
	}
	st.SyncTime = time.Duration(st.Fsyncs.Raw)
	return st
}

// Usage is how much the log has written and how much room it has: what a
// checkpointer asks after every commit.
type Usage struct {
	Commits      uint64 // as Stats.Commits
	Bytes        uint64 // as Stats.Bytes
	SegmentBytes int64  // as Stats.SegmentBytes
	SpaceLow     bool   // as Stats.SpaceLow
}

// Usage returns the log's usage: four atomic loads, where Stats also
// copies its histograms.
func (l *Log) Usage() Usage {
	return Usage{Commits: l.stats.commits.Load(), Bytes: l.stats.bytes.Load(), SegmentBytes: l.segBytes.Load(), SpaceLow: l.spaceLow.Load()}
}

// Close stops accepting Appends, waits for the batch being written, and
// closes the current segment. Without NoSync everything acknowledged is
// already durable; with it, Close syncs. After a failure it first tries to
// erase the unacknowledged bytes, as Reset does.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	if !l.opts.NoGroupCommit {
		close(l.quit)
		<-l.stopped
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.closedW = true
	var errs []error
	if l.Err() != nil {
		if err := l.undoFailedWrite(); err != nil {
			errs = append(errs, err)
		}
	} else if l.opts.NoSync {
		if err := l.cur.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("wal: close: fsync %s: %w", l.curName(), err))
		}
	}
	if err := l.cur.Close(); err != nil {
		errs = append(errs, fmt.Errorf("wal: close %s: %w", l.curName(), err))
	}
	return errors.Join(errs...)
}
