package blog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nemocache/nemo/adapters"
)

// request is one Append waiting in the queue or in a batch.
type request struct {
	data []byte
	// wake receives once: when the request is done, or when it is made
	// the leader.
	wake chan struct{}
	// Guarded by Log.mu until wake is signalled.
	taken bool // in a batch: written whatever its caller's ctx says
	lead  bool // made the leader by the one before
	// Set by the leader before it signals wake.
	done bool
	seq  uint64
	err  error
}

// Append makes data durable as the next entry and returns its seq.
// Concurrent Appends are group-committed: the first to find no batch being
// written leads, and takes every Append queued (up to Options.MaxBatch) as
// one batch; Appends that arrive meanwhile form the next, which the first
// of them leads. A batch is one atomic call (adapters.AtomicWriter) that
// writes the fence, conditioned on the version this Log last wrote, with
// Last the batch's last seq, and the batch's entries (each absent before),
// split into parts of at most Limits.RecordBytes; a batch over
// Limits.CallRecords or Limits.CallBytes takes several calls, in seq order
// (an entry never straddles two). An entry that alone passes a call's
// limits is refused with adapters.ErrInvalid and never sent.
//
// A call refused or unanswered is settled by reading the fence, never by
// guessing: our Token with Last at the call's last seq means it was
// applied; our Token with Last as we left it means it was not, and it is
// sent again; another Open's fence means the log was fenced (a
// *FencedError, errors.Is ErrFenced), and then the Append's outcome is
// unknown (errors.Is adapters.ErrUnknownOutcome too) unless that fence's
// Last is below the call's first seq, or the entry at that seq holds
// another owner's data, either of which proves it never landed. A
// fence that cannot be read leaves the call's outcome unknown: its Appends
// fail with an error matching ErrUnsettled and adapters.ErrUnknownOutcome.
// Fenced or unsettled, the Log stops: every later Append fails at once.
//
// ctx bounds only the wait to enter a batch: once in one, the entry is
// written whatever ctx says (returning early would let the caller abort a
// commit the next owner replays), each store call bounded by
// Options.CallTimeout. data must not change until Append returns.
func (l *Log) Append(ctx context.Context, data []byte) (uint64, error) {
	start := time.Now()
	seq, err := l.append(ctx, data)
	l.st.latency.Since(start)
	if err != nil {
		l.st.failed.Add(1)
	}
	return seq, err
}

func (l *Log) append(ctx context.Context, data []byte) (uint64, error) {
	if err := l.fits(len(data)); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	r := &request{data: data, wake: make(chan struct{}, 1)}
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return 0, err
	}
	l.queue = append(l.queue, r)
	lead := !l.leading
	l.leading = true
	l.mu.Unlock()
	if !lead {
		select {
		case l.grew <- struct{}{}:
		default:
		}
		if !l.await(ctx, r) {
			return 0, ctx.Err()
		}
		lead = r.lead
	}
	if lead {
		l.lead(r)
	}
	return r.seq, r.err
}

// fits refuses at once data that cannot fit one call by count or size
// alone (the exact check, on the encoded parts, is made in the batch).
func (l *Log) fits(n int) error {
	parts := max(1, (n+l.lim.RecordBytes-1)/l.lim.RecordBytes)
	if 1+parts > l.lim.CallRecords || l.fenceMax+n > l.lim.CallBytes {
		return fmt.Errorf("blog: an entry of %d bytes (%d parts) does not fit one call of the log of %q (%d records, %d bytes): %w",
			n, parts, l.ks, l.lim.CallRecords, l.lim.CallBytes, adapters.ErrInvalid)
	}
	return nil
}

// MaxEntryBytes is the most data an entry is sure to fit in this log: its
// parts and the fence fit one call, counted at a seq as wide as 2^50 (a
// codec may spell small seqs in fewer bytes, so a few bytes more may fit
// at small seqs). An entry that does not fit is refused with
// adapters.ErrInvalid. It is computed on first use, by bisection.
func (l *Log) MaxEntryBytes() int {
	l.maxOnce.Do(func() {
		// The largest n whose encoding fits, by bisection over
		// [0, CallBytes]: the encoding grows with n.
		lo, hi := -1, l.lim.CallBytes
		for lo < hi {
			mid := lo + (hi-lo+1)/2
			if l.fits(mid) == nil && l.encodedFits(mid) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		l.maxEntry = max(lo, 0)
	})
	return l.maxEntry
}

// encodedFits reports whether an entry of n bytes, encoded at a wide seq,
// fits one call with the fence.
func (l *Log) encodedFits(n int) bool {
	ms, size, err := l.encode(1<<50, make([]byte, n))
	return err == nil && 1+len(ms) <= l.lim.CallRecords && l.fenceMax+size <= l.lim.CallBytes
}

// await waits until r is done or made the leader. It returns false when
// ctx ended while r was still only queued: r is withdrawn, nothing sent.
func (l *Log) await(ctx context.Context, r *request) bool {
	select {
	case <-r.wake:
		return true
	case <-ctx.Done():
	}
	l.mu.Lock()
	if !r.taken && !r.lead {
		l.queue = slices.DeleteFunc(l.queue, func(q *request) bool { return q == r })
		l.mu.Unlock()
		return false
	}
	l.mu.Unlock()
	<-r.wake // in a batch: wait for its outcome; or made the leader
	return true
}

// lead writes batches until me is done, then hands the lead to the first
// Append queued, if any.
func (l *Log) lead(me *request) {
	for !me.done {
		l.writeMu.Lock()
		l.gather()
		l.mu.Lock()
		n := min(len(l.queue), l.o.MaxBatch)
		batch := l.queue[:n:n]
		l.queue = slices.Clone(l.queue[n:])
		for _, r := range batch {
			r.taken = true
		}
		sticky := l.err
		l.mu.Unlock()
		if sticky != nil {
			for _, r := range batch {
				l.finish(r, 0, sticky)
			}
		} else {
			l.writeBatch(batch)
		}
		l.writeMu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		for _, r := range l.queue {
			r.taken = true
			l.finish(r, 0, l.err)
		}
		l.queue = nil
	}
	if len(l.queue) == 0 {
		l.leading = false
		return
	}
	next := l.queue[0]
	next.lead = true
	next.wake <- struct{}{}
}

// SetPending tells the log how many appends its user expects soon: the
// transactions that have touched the log's keyspace and not yet ended,
// those already appending included. Before a group commit takes its
// batch it waits, at most Options.GatherWait and an append call's recent
// duration, for the queue to hold that many (gather), so that
// writers held by a lock the last batch released, or between their
// writes and their commit, join this batch instead of paying a call of
// their own. Without it (or with GatherWait negative) a batch takes what
// is queued.
func (l *Log) SetPending(pending func() int) { l.pending.Store(&pending) }

// gather waits for the appends the user expects (SetPending), briefly.
func (l *Log) gather() {
	p := l.pending.Load()
	if p == nil || l.o.GatherWait < 0 {
		return
	}
	wait := min(l.o.GatherWait, time.Duration(l.callNanos.Load()))
	if wait <= 0 {
		return
	}
	var timer *time.Timer
	for {
		want := min((*p)(), l.o.MaxBatch)
		l.mu.Lock()
		have := len(l.queue)
		l.mu.Unlock()
		if have >= want {
			break
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		select {
		case <-l.grew:
		case <-timer.C:
			return
		}
	}
}

// noteCall folds one append call's duration into the moving average
// gather holds its wait to (weight 1/8; the first call seeds it). Its
// callers hold writeMu, so the load and store do not race.
func (l *Log) noteCall(d time.Duration) {
	old := l.callNanos.Load()
	if old == 0 {
		l.callNanos.Store(int64(d))
		return
	}
	l.callNanos.Store(old + (int64(d)-old)/8)
}

// finish answers r.
func (l *Log) finish(r *request, seq uint64, err error) {
	r.seq, r.err, r.done = seq, err, true
	r.wake <- struct{}{}
}

// call is one atomic call of a batch: consecutive entries first..last.
type call struct {
	reqs        []*request
	first, last uint64
	ms          []adapters.Mutation // the entries' parts; the fence goes first
	bytes       int
	held        []held
}

// writeBatch writes batch (writeMu held) and answers every request in it.
func (l *Log) writeBatch(batch []*request) {
	calls := l.plan(batch)
	l.st.batches.Add(1)
	l.st.group.Observe(int64(len(batch)))
	var failed error
	for _, c := range calls {
		if failed != nil {
			for _, r := range c.reqs {
				l.finish(r, 0, failed)
			}
			continue
		}
		if err := l.writeCall(c); err != nil {
			for _, r := range c.reqs {
				l.finish(r, 0, err)
			}
			failed = l.Err()
			if failed == nil {
				failed = fmt.Errorf("blog: entry not sent, since a call before it in its batch failed (%v): %w", err, adapters.ErrUnavailable)
			}
			continue
		}
		l.present = append(l.present, c.held...)
		for i, r := range c.reqs {
			l.st.appends.Add(1)
			l.st.bytes.Add(uint64(len(r.data)))
			l.finish(r, c.first+uint64(i), nil)
		}
	}
}

// plan numbers the batch's entries from the fence's Last, encodes their
// parts and cuts the batch into calls within the limits. An entry that
// cannot be encoded, or that alone passes a call's limits, is answered
// with the error and takes no seq.
func (l *Log) plan(batch []*request) []*call {
	var calls []*call
	cur := &call{}
	next := l.fence.Last + 1
	for _, r := range batch {
		ms, n, err := l.encode(next, r.data)
		if err == nil && (1+len(ms) > l.lim.CallRecords || l.fenceMax+n > l.lim.CallBytes) {
			err = fmt.Errorf("blog: an entry of %d bytes takes %d records and %d bytes, more than one call of the log of %q holds (%d records, %d bytes): %w",
				len(r.data), len(ms), n, l.ks, l.lim.CallRecords, l.lim.CallBytes, adapters.ErrInvalid)
		}
		if err != nil {
			l.finish(r, 0, err)
			continue
		}
		if len(cur.reqs) > 0 && (1+len(cur.ms)+len(ms) > l.lim.CallRecords || l.fenceMax+cur.bytes+n > l.lim.CallBytes) {
			calls = append(calls, cur)
			cur = &call{}
		}
		if len(cur.reqs) == 0 {
			cur.first = next
		}
		cur.reqs = append(cur.reqs, r)
		cur.ms = append(cur.ms, ms...)
		cur.bytes += n
		cur.held = append(cur.held, held{seq: next, parts: len(ms)})
		cur.last = next
		next++
	}
	if len(cur.reqs) > 0 {
		calls = append(calls, cur)
	}
	return calls
}

// encode returns the mutations that write data as entry seq (one per
// part, each expecting its key absent) and their bytes.
func (l *Log) encode(seq uint64, data []byte) ([]adapters.Mutation, int, error) {
	parts := max(1, (len(data)+l.lim.RecordBytes-1)/l.lim.RecordBytes)
	ms := make([]adapters.Mutation, parts)
	n := 0
	for p := range parts {
		chunk := data[min(len(data), p*l.lim.RecordBytes):min(len(data), (p+1)*l.lim.RecordBytes)]
		key := l.o.Codec.EntryKey(l.ks, seq, p)
		if key == nil {
			return nil, 0, fmt.Errorf("blog: entry %d part %d is out of the codec's range: %w", seq, p, adapters.ErrInvalid)
		}
		v, err := l.o.Codec.EncodeEntry(l.ks, seq, p, chunk)
		if err != nil {
			return nil, 0, fmt.Errorf("blog: encode entry %d part %d: %w", seq, p, err)
		}
		ms[p] = adapters.Mutation{Write: adapters.Write{Key: key, Value: v, Expect: adapters.Expect{Kind: adapters.ExpectAbsent}}}
		n += len(key) + len(v)
	}
	return ms, n, nil
}

// writeCall sends c (writeMu held) until it is applied, or fails.
func (l *Log) writeCall(c *call) error {
	var last error
	for range maxRounds {
		f := l.fence
		f.Last = c.last
		fv, err := l.o.Codec.EncodeFence(l.ks, f)
		if err != nil {
			return fmt.Errorf("blog: encode the fence of %q: %w", l.ks, err)
		}
		ms := make([]adapters.Mutation, 0, 1+len(c.ms))
		ms = append(ms, adapters.Mutation{Write: adapters.Write{Key: l.fenceKey, Value: fv,
			Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: l.version}}})
		ms = append(ms, c.ms...)
		l.st.calls.Add(1)
		began := time.Now()
		vers, err := l.writeAtomic(ms)
		l.noteCall(time.Since(began))
		switch {
		case err == nil && len(vers) > 0 && vers[0] != "":
			l.setFence(f, vers[0])
			return nil
		case err == nil:
			err = errors.New("the store reported no version for the fence")
		case definite(err):
			return fmt.Errorf("blog: append entries %d..%d to the log of %q: %w", c.first, c.last, l.ks, err)
		case errors.Is(err, adapters.ErrAborted):
			last = err // nothing applied: send again
			continue
		}
		// Refused or unanswered: the fence says which.
		applied, serr := l.settle(c, err)
		if serr != nil {
			return serr
		}
		if applied {
			return nil
		}
		last = err
	}
	return fmt.Errorf("blog: entries %d..%d of the log of %q not appended after %d attempts (the last: %v): %w",
		c.first, c.last, l.ks, maxRounds, last, adapters.ErrUnavailable)
}

// writeAtomic makes one atomic call to the log keyspace.
func (l *Log) writeAtomic(ms []adapters.Mutation) ([]adapters.Version, error) {
	ctx, cancel := l.callCtx()
	defer cancel()
	l.st.storeCalls.Add(1)
	return l.aw.WriteAtomic(ctx, l.lks, ms)
}

// settle reads the fence after the call c, writing entries first..last,
// was refused or went unanswered (cause), and says whether it was
// applied. The fence is ours (our Token) at Last == last: applied, its
// version adopted; at the Last we left: not applied. Another Open's
// fence: a *FencedError, Unknown unless the call provably never landed:
// the fence's Last is below first (had it landed, the fence would have
// said last, and an Open keeps Last), or entry first holds another
// owner's data (an Open keeps the entries it finds, so had the call
// landed, entry first would be ours; the next owner appended its own
// there). An unreadable fence: an error matching ErrUnsettled and
// adapters.ErrUnknownOutcome. Both stop the Log.
func (l *Log) settle(c *call, cause error) (applied bool, err error) {
	first, last := c.first, c.last
	l.st.settles.Add(1)
	cur, ver, exists, rerr := l.readFenceRetrying()
	switch {
	case rerr != nil:
		l.fail(fmt.Errorf("blog: the log of %q: %w", l.ks, ErrUnsettled))
		return false, fmt.Errorf("blog: entries %d..%d of the log of %q: %w, %w (%v); reading the fence to settle it: %w",
			first, last, l.ks, ErrUnsettled, adapters.ErrUnknownOutcome, cause, rerr)
	case exists && cur.Epoch == l.fence.Epoch && cur.Token == l.fence.Token && cur.Last == last:
		l.log.Debug("backend log append settled by reading the fence: applied, its answer lost", "first", first, "last", last)
		l.setFence(cur, ver)
		return true, nil
	case exists && cur.Epoch == l.fence.Epoch && cur.Token == l.fence.Token && cur.Last == l.fence.Last:
		l.log.Debug("backend log append settled by reading the fence: not applied; sending it again", "first", first, "last", last, "cause", cause)
		l.version = ver
		return false, nil
	case exists && cur.Epoch == l.fence.Epoch && cur.Token == l.fence.Token:
		err := fmt.Errorf("%w: the fence of %q says last entry %d; this Log wrote %d and sent %d..%d",
			ErrCorrupt, l.ks, cur.Last, l.fence.Last, first, last)
		l.fail(err)
		return false, err
	}
	// Fenced. (A fence that is gone was deleted by hand: fenced too.)
	unknown := !exists || cur.Last >= first && !l.entryIsAnothers(c)
	l.fail(&FencedError{Keyspace: l.ks, Epoch: l.fence.Epoch, Found: cur})
	return false, &FencedError{Keyspace: l.ks, Epoch: l.fence.Epoch, Found: cur, Unknown: unknown}
}

// entryIsAnothers reports whether the store's entry at c's first seq
// (its first part) holds data other than c's first entry's: then c never
// landed. It reads the entry up to settleReads times, as the fence is
// read: one failed read must not leave unknown an outcome the store can
// tell. Absent (truncated) or unreadable, or the same data: false.
func (l *Log) entryIsAnothers(c *call) bool {
	if len(c.reqs) == 0 || len(c.ms) == 0 {
		return false
	}
	var recs []adapters.Record
	var err error
	for i := range settleReads {
		if i > 0 {
			time.Sleep(settleBackoff << (i - 1))
		}
		ctx, cancel := l.callCtx()
		l.st.storeCalls.Add(1)
		recs, err = l.o.Store.Get(ctx, l.lks, [][]byte{c.ms[0].Key})
		cancel()
		if err == nil {
			break
		}
	}
	if err != nil || len(recs) != 1 || recs[0].Value == nil {
		return false
	}
	seq, part, data, err := l.o.Codec.DecodeEntry(recs[0].Value)
	if err != nil || seq != c.first || part != 0 {
		return false
	}
	ours := c.reqs[0].data[:min(len(c.reqs[0].data), l.lim.RecordBytes)]
	return !bytes.Equal(data, ours)
}

// readFenceRetrying reads the fence, up to settleReads times.
func (l *Log) readFenceRetrying() (Fence, adapters.Version, bool, error) {
	var err error
	for i := range settleReads {
		if i > 0 {
			time.Sleep(settleBackoff << (i - 1))
		}
		ctx, cancel := l.callCtx()
		var f Fence
		var v adapters.Version
		var exists bool
		f, v, exists, err = l.getFence(ctx)
		cancel()
		if err == nil {
			return f, v, exists, nil
		}
	}
	return Fence{}, "", false, err
}
