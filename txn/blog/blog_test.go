package blog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/internal/testenv"
)

// TestOpenAppendTruncate: entries appended are read back by the next
// Open, in seq order, until a truncation deletes those below its seq; the
// fence is rewritten at every Open and append, Last kept and advanced.
func TestOpenAppendTruncate(t *testing.T) {
	s := embeddedStore(t)
	o := options(s, RawCodec(logKS))
	ks := adapters.Keyspace("orders")
	a, entries := mustOpen(t, o, ks, 1, "node-a")
	if len(entries) != 0 || a.Last() != 0 {
		t.Fatalf("a new log holds %s, last %d", show(entries), a.Last())
	}
	for i := range 5 {
		if seq := mustAppend(t, a, fmt.Sprintf("c%d", i+1)); seq != uint64(i+1) {
			t.Fatalf("append %d got seq %d", i+1, seq)
		}
	}
	// Another keyspace's log is its own.
	other, _ := mustOpen(t, o, "customers", 1, "node-a")
	mustAppend(t, other, "x1")

	b, entries := mustOpen(t, o, ks, 2, "node-b")
	wantEntries(t, entries, 1, "c1", "c2", "c3", "c4", "c5")
	if b.Last() != 5 {
		t.Fatalf("last %d", b.Last())
	}
	if seq := mustAppend(t, b, "c6"); seq != 6 {
		t.Fatalf("first append of the new owner got seq %d", seq)
	}
	if err := b.Truncate(context.Background(), 4); err != nil {
		t.Fatal(err)
	}
	if err := b.Truncate(context.Background(), 8); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("truncate past the end: %v", err)
	}
	if st := b.Stats(); st.Truncated != 3 || st.Appends != 1 {
		t.Fatalf("stats %+v", st)
	}
	c, entries := mustOpen(t, o, ks, 3, "node-c")
	wantEntries(t, entries, 4, "c4", "c5", "c6")
	// Truncating everything leaves an empty log whose seqs go on.
	if err := c.Truncate(context.Background(), c.Last()+1); err != nil {
		t.Fatal(err)
	}
	d, entries := mustOpen(t, o, ks, 4, "node-d")
	wantEntries(t, entries, 7)
	if seq := mustAppend(t, d, "c7"); seq != 7 {
		t.Fatalf("seq %d after a full truncation", seq)
	}
	_, entries = mustOpen(t, o, "customers", 2, "node-b")
	wantEntries(t, entries, 1, "x1")

	// The stored fence is the documented one.
	recs, err := s.Get(context.Background(), logKS, [][]byte{RawCodec(logKS).FenceKey(ks)})
	if err != nil {
		t.Fatal(err)
	}
	f, err := RawCodec(logKS).DecodeFence(recs[0].Value)
	if err != nil || f.Epoch != 4 || f.Holder != "node-d" || f.Last != 7 || f.Token == 0 {
		t.Fatalf("stored fence %+v, %v", f, err)
	}
}

// TestSharedCounters: the Logs opened with one Options.Counters add up
// in it, a Log closed by a later Open's fence included; a Log opened
// without counts alone.
func TestSharedCounters(t *testing.T) {
	s := embeddedStore(t)
	o := options(s, RawCodec(logKS))
	o.Counters = NewCounters()
	a, _ := mustOpen(t, o, "orders", 1, "node-a")
	mustAppend(t, a, "a1")
	mustAppend(t, a, "a2")
	b, _ := mustOpen(t, o, "customers", 1, "node-a")
	mustAppend(t, b, "b1")
	alone, _ := mustOpen(t, options(s, RawCodec(logKS)), "items", 1, "node-a")
	mustAppend(t, alone, "i1")
	c, _ := mustOpen(t, o, "orders", 2, "node-a") // fences a out
	if err := c.Truncate(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	st := o.Counters.Stats()
	if st.Appends != 3 || st.Bytes != 6 || st.Truncated != 2 || st.Latency.Count != 3 || a.Stats().Appends != 3 {
		t.Fatalf("shared counters %+v, a's %+v", st, a.Stats())
	}
	if st := alone.Stats(); st.Appends != 1 {
		t.Fatalf("a Log with counters of its own: %+v", st)
	}
}

// TestOpenRefusals: a keyspace the codec has no log for, epoch 0, a store
// without atomic writes and an Open at a lower epoch than the fence's are
// refused.
func TestOpenRefusals(t *testing.T) {
	s := embeddedStore(t)
	o := options(s, RawCodec(logKS))
	ctx := context.Background()
	if _, _, err := Open(ctx, o, logKS, 1, "n"); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("the log keyspace itself: %v", err)
	}
	if _, _, err := Open(ctx, o, "t", 0, "n"); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("epoch 0: %v", err)
	}
	if _, _, err := Open(ctx, Options{Store: struct{ adapters.Store }{s}, Codec: RawCodec(logKS)}, "t", 1, "n"); err == nil ||
		!strings.Contains(err.Error(), "AtomicWriter") {
		t.Fatalf("a store without atomic writes: %v", err)
	}
	mustOpen(t, o, "t", 5, "node-b")
	_, _, err := Open(ctx, o, "t", 4, "node-a")
	var fe *FencedError
	if !errors.As(err, &fe) || fe.Found.Epoch != 5 || fe.Found.Holder != "node-b" || errors.Is(err, adapters.ErrUnknownOutcome) {
		t.Fatalf("open below the fence's epoch: %v", err)
	}
}

// TestFencing: once a later owner opened the log, the earlier one's next
// append is refused with ErrFenced (its outcome known: the new fence's
// Last is below it), the entries it was told were durable are the new
// owner's to replay, and every later append fails without a store call.
// An Open at the same epoch (a restart of the same node) fences the
// earlier Log too.
func TestFencing(t *testing.T) {
	s := embeddedStore(t)
	o := options(s, RawCodec(logKS))
	a, _ := mustOpen(t, o, "t", 1, "node-a")
	mustAppend(t, a, "a1")
	mustAppend(t, a, "a2")

	b, entries := mustOpen(t, o, "t", 2, "node-b")
	wantEntries(t, entries, 1, "a1", "a2")
	_, err := a.Append(context.Background(), []byte("a3"))
	var fe *FencedError
	if !errors.As(err, &fe) || fe.Found.Epoch != 2 || fe.Unknown || errors.Is(err, adapters.ErrUnknownOutcome) {
		t.Fatalf("append after the fence moved: %v", err)
	}
	calls := a.Stats().StoreCalls
	if _, err := a.Append(context.Background(), []byte("a4")); !errors.Is(err, ErrFenced) {
		t.Fatalf("second append: %v", err)
	}
	if err := a.Truncate(context.Background(), 2); !errors.Is(err, ErrFenced) {
		t.Fatalf("truncate of a fenced log: %v", err)
	}
	if a.Stats().StoreCalls != calls {
		t.Fatalf("a fenced Log made %d store calls", a.Stats().StoreCalls-calls)
	}

	// The same node restarting at its epoch fences its earlier Log.
	mustAppend(t, b, "b3")
	b2, entries := mustOpen(t, o, "t", 2, "node-b")
	wantEntries(t, entries, 1, "a1", "a2", "b3")
	if _, err := b.Append(context.Background(), []byte("b4")); !errors.Is(err, ErrFenced) {
		t.Fatalf("append of the earlier incarnation: %v", err)
	}
	mustAppend(t, b2, "b4")
	_, entries = mustOpen(t, o, "t", 3, "node-c")
	wantEntries(t, entries, 1, "a1", "a2", "b3", "b4")
}

// gated applies a WriteAtomic and then holds its answer until released,
// returning it lost (adapters.ErrUnknownOutcome): a reply in flight.
type gated struct {
	adapters.Store
	reached chan struct{}
	release chan struct{}
}

func (g *gated) WriteAtomic(ctx context.Context, ks adapters.Keyspace, ms []adapters.Mutation) ([]adapters.Version, error) {
	_, err := g.Store.(adapters.AtomicWriter).WriteAtomic(ctx, ks, ms)
	g.reached <- struct{}{}
	<-g.release
	if err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("gated: %w", adapters.ErrUnknownOutcome)
}

// TestAppendInFlightWhenTheFenceMoves: an append whose call is in flight
// while another owner opens the log either landed before the fence moved
// (the new owner reads it; the old Log, settling its lost answer, finds
// the log fenced and reports the outcome unknown) or did not (refused;
// the old Log reports it fenced, outcome known: not appended), never
// both, never lost after a nil.
func TestAppendInFlightWhenTheFenceMoves(t *testing.T) {
	t.Run("landed", func(t *testing.T) {
		s := embeddedStore(t)
		g := &gated{Store: s, reached: make(chan struct{}), release: make(chan struct{})}
		a, _ := mustOpen(t, options(s, RawCodec(logKS)), "t", 1, "node-a")
		a.aw = g // from now on, A's calls are held after they applied
		done := make(chan error)
		go func() { _, err := a.Append(context.Background(), []byte("a1")); done <- err }()
		<-g.reached
		_, entries := mustOpen(t, options(s, RawCodec(logKS)), "t", 2, "node-b")
		wantEntries(t, entries, 1, "a1")
		close(g.release)
		err := <-done
		if !errors.Is(err, ErrFenced) || !errors.Is(err, adapters.ErrUnknownOutcome) {
			t.Fatalf("append applied before the fence moved, answer lost: %v", err)
		}
	})
	t.Run("not landed", func(t *testing.T) {
		s := embeddedStore(t)
		f := fault.New(s, fault.Config{})
		a, _ := mustOpen(t, options(f, RawCodec(logKS)), "t", 1, "node-a")
		mustAppend(t, a, "a1")
		done := hungAppend(t, a, f, "a2")
		_, entries := mustOpen(t, options(s, RawCodec(logKS)), "t", 2, "node-b")
		wantEntries(t, entries, 1, "a1")
		// The hang ends: the call was never applied; the settling read
		// finds B's fence, whose Last (1) is below the call's seq (2).
		f.SetHung(false)
		err := <-done
		if !errors.Is(err, ErrFenced) || errors.Is(err, adapters.ErrUnknownOutcome) {
			t.Fatalf("append refused by the moved fence: %v", err)
		}
		_, entries = mustOpen(t, options(s, RawCodec(logKS)), "t", 3, "node-c")
		wantEntries(t, entries, 1, "a1")
	})
	// As above, but B appends before the hang ends: the fence's Last (2)
	// no longer proves the call absent; entry 2, B's "b2", does (had A's
	// call landed, B's Open would have kept it there), even when the
	// first reads of that entry fail.
	for _, fails := range []int{0, settleReads - 1} {
		t.Run(fmt.Sprintf("not landed, the next owner appended, %d entry reads failed", fails), func(t *testing.T) {
			s := embeddedStore(t)
			f := &failingEntryReads{Store: fault.New(s, fault.Config{}), key: RawCodec(logKS).EntryKey("t", 2, 0)}
			a, _ := mustOpen(t, options(f, RawCodec(logKS)), "t", 1, "node-a")
			mustAppend(t, a, "a1")
			done := hungAppend(t, a, f.Store, "a2")
			b, _ := mustOpen(t, options(s, RawCodec(logKS)), "t", 2, "node-b")
			mustAppend(t, b, "b2")
			f.left.Store(int32(fails))
			f.SetHung(false)
			err := <-done
			if !errors.Is(err, ErrFenced) || errors.Is(err, adapters.ErrUnknownOutcome) {
				t.Fatalf("append refused by the moved fence after the next owner appended: %v, want fenced and known not applied", err)
			}
			if left := f.left.Load(); left > 0 {
				t.Fatalf("%d of the entry's failing reads left unread", left)
			}
			_, entries := mustOpen(t, options(s, RawCodec(logKS)), "t", 3, "node-c")
			wantEntries(t, entries, 1, "a1", "b2")
		})
	}
}

// hungAppend appends data to a with f hung, once the append's call hangs
// there; the append's error comes on the channel once f lets go.
func hungAppend(t *testing.T, a *Log, f *fault.Store, data string) <-chan error {
	t.Helper()
	f.SetHung(true)
	done := make(chan error, 1)
	go func() { _, err := a.Append(context.Background(), []byte(data)); done <- err }()
	testenv.WaitFor(t, 10*time.Second, "the append's call to hang", func() bool { return f.Hanging() == 1 })
	return done
}

// failingEntryReads fails the next left reads of one key (an entry of the
// log) as unavailable.
type failingEntryReads struct {
	*fault.Store
	key  []byte
	left atomic.Int32
}

func (s *failingEntryReads) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	if len(keys) == 1 && bytes.Equal(keys[0], s.key) && s.left.Add(-1) >= 0 {
		return nil, fmt.Errorf("failingEntryReads: %w", adapters.ErrUnavailable)
	}
	return s.Store.Get(ctx, ks, keys)
}

// TestLostAnswers: a write applied whose answer is lost is settled by
// reading the fence, at Open, at append and at truncation, and the Log
// goes on; a write that failed unapplied is sent again; a fence that
// cannot be read leaves the append unsettled: its outcome unknown, the Log
// stopped until it is opened again, which reads what was applied.
func TestLostAnswers(t *testing.T) {
	s := embeddedStore(t)
	f := fault.New(s, fault.Config{})
	o := options(f, RawCodec(logKS))
	ctx := context.Background()

	f.SetLoseNext(adapters.OpWriteAtomic, 1)
	a, _ := mustOpen(t, o, "t", 1, "node-a")
	f.SetLoseNext(adapters.OpWriteAtomic, 1)
	if seq := mustAppend(t, a, "a1"); seq != 1 {
		t.Fatalf("seq %d", seq)
	}
	f.SetFailNext(adapters.OpWriteAtomic, 1)
	if seq := mustAppend(t, a, "a2"); seq != 2 {
		t.Fatalf("seq %d", seq)
	}
	mustAppend(t, a, "a3")
	f.SetLoseNext(adapters.OpWriteAtomic, 1)
	if err := a.Truncate(ctx, 2); err != nil {
		t.Fatalf("truncate, answer lost: %v", err)
	}
	// A truncation that failed unapplied is sent again.
	f.SetFailNext(adapters.OpWriteAtomic, 1)
	if err := a.Truncate(ctx, 3); err != nil {
		t.Fatalf("truncate, failed once: %v", err)
	}
	if st := a.Stats(); st.Settles != 4 || st.Appends != 3 || st.Truncated != 2 {
		t.Fatalf("stats %+v", st)
	}
	mustAppend(t, a, "a4")

	// Unsettled: the answer lost and the fence unreadable.
	f.SetLoseNext(adapters.OpWriteAtomic, 1)
	f.SetFailNext(adapters.OpGet, settleReads)
	_, err := a.Append(ctx, []byte("a5"))
	if !errors.Is(err, ErrUnsettled) || !errors.Is(err, adapters.ErrUnknownOutcome) {
		t.Fatalf("append unsettled: %v", err)
	}
	if _, err := a.Append(ctx, []byte("a6")); !errors.Is(err, ErrUnsettled) || errors.Is(err, adapters.ErrUnknownOutcome) {
		t.Fatalf("append after an unsettled one: %v", err)
	}
	// A refusal (which may be the adapter's own retry meeting its first
	// attempt) with the fence unreadable is unsettled too, outcome unknown.
	a3, _ := mustOpen(t, o, "t", 1, "node-a")
	a3.version += "stale" // the next call is refused
	f.SetFailNext(adapters.OpGet, settleReads)
	if _, err := a3.Append(ctx, []byte("a6")); !errors.Is(err, ErrUnsettled) || !errors.Is(err, adapters.ErrUnknownOutcome) {
		t.Fatalf("append refused, fence unreadable: %v", err)
	}
	// Opening again (this node, same epoch) reads what was applied.
	a2, entries := mustOpen(t, o, "t", 1, "node-a")
	wantEntries(t, entries, 3, "a3", "a4", "a5")
	mustAppend(t, a2, "a6")
}

// TestGroupCommit: concurrent appenders share calls: 64 appends behind a
// store call of 20 ms make far fewer than 64 calls, every one gets its own
// seq, and the next owner reads all of them back.
func TestGroupCommit(t *testing.T) {
	s := embeddedStore(t)
	f := fault.New(s, fault.Config{Ops: map[adapters.Op]fault.OpConfig{adapters.OpWriteAtomic: {Latency: 20 * time.Millisecond}}})
	a, _ := mustOpen(t, options(f, RawCodec(logKS)), "t", 1, "node-a")
	const n = 64
	seqs := make([]uint64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			seq, err := a.Append(context.Background(), fmt.Appendf(nil, "e%02d", i))
			if err != nil {
				t.Error(err)
			}
			seqs[i] = seq
		})
	}
	wg.Wait()
	st := a.Stats()
	t.Logf("%d concurrent appends: %d calls in %d batches; mean group %.1f", n, st.Calls, st.Batches, st.Group.Mean())
	if st.Appends != n || st.Calls > n/4 {
		t.Fatalf("stats %+v: %d appends made %d calls", st, n, st.Calls)
	}
	_, entries := mustOpen(t, options(s, RawCodec(logKS)), "t", 2, "node-b")
	if len(entries) != n {
		t.Fatalf("read back %d entries", len(entries))
	}
	for i, seq := range seqs {
		if string(entries[seq-1].Data) != fmt.Sprintf("e%02d", i) {
			t.Fatalf("append %d got seq %d, which holds %q", i, seq, entries[seq-1].Data)
		}
	}
}

// TestGather: a group commit waits for the appends its user says are
// coming (SetPending): four appenders arriving 3 ms apart behind a store
// call of 50 ms share one call, where without the hint the first goes
// alone; and when the hint promises more than come, the batch leaves
// after the wait's bound, not later.
func TestGather(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pending   int
		wantCalls uint64
	}{{"hinted", 4, 1}, {"unhinted", 0, 2}, {"overpromised", 9, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			s := embeddedStore(t)
			f := fault.New(s, fault.Config{Ops: map[adapters.Op]fault.OpConfig{adapters.OpWriteAtomic: {Latency: 50 * time.Millisecond}}})
			o := options(f, RawCodec(logKS))
			o.GatherWait = time.Second // held to the call's duration, ~50 ms
			a, _ := mustOpen(t, o, "t", 1, "node-a")
			mustAppend(t, a, "warm") // seeds the call duration
			if tc.pending > 0 {
				a.SetPending(func() int { return tc.pending })
			}
			before := a.Stats().Calls
			began := time.Now()
			var wg sync.WaitGroup
			for i := range 4 {
				time.Sleep(3 * time.Millisecond)
				wg.Go(func() {
					if _, err := a.Append(context.Background(), fmt.Appendf(nil, "e%d", i)); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			took := time.Since(began)
			calls := a.Stats().Calls - before
			t.Logf("4 appends: %d calls in %v", calls, took.Round(time.Millisecond))
			if calls != tc.wantCalls {
				t.Errorf("4 appends made %d calls, want %d", calls, tc.wantCalls)
			}
			if took > 500*time.Millisecond {
				t.Errorf("4 appends took %v: the wait is not held to the call's duration", took)
			}
			_, entries := mustOpen(t, options(s, RawCodec(logKS)), "t", 2, "node-b")
			if len(entries) != 5 {
				t.Fatalf("read back %d entries, want 5", len(entries))
			}
		})
	}
}

// TestAppendWithdrawn: an Append whose ctx ends while it waits for the
// batch in flight is withdrawn, not written; the next one takes its seq.
func TestAppendWithdrawn(t *testing.T) {
	s := embeddedStore(t)
	g := &gated{Store: s, reached: make(chan struct{}), release: make(chan struct{})}
	a, _ := mustOpen(t, options(s, RawCodec(logKS)), "t", 1, "node-a")
	a.aw = g
	first := make(chan error)
	go func() { _, err := a.Append(context.Background(), []byte("a1")); first <- err }()
	<-g.reached // a1's call applied, its answer held: a1 leads
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error)
	go func() { _, err := a.Append(ctx, []byte("gone")); second <- err }()
	testenv.WaitFor(t, 10*time.Second, "the second append to queue", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.queue) == 1
	})
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("withdrawn append: %v", err)
	}
	a.aw = s
	close(g.release)
	if err := <-first; err != nil { // the lost answer settles as applied
		t.Fatalf("first append: %v", err)
	}
	mustAppend(t, a, "a2")
	_, entries := mustOpen(t, options(s, RawCodec(logKS)), "t", 2, "node-b")
	wantEntries(t, entries, 1, "a1", "a2")
}

// TestSplitting: an entry over a record is split into parts and read back
// whole; a batch over a call's records or bytes takes several calls, each
// within the limits, no entry across two; an entry that alone passes a
// call's limits is refused with ErrInvalid before anything is sent, and
// the others of its batch go on.
func TestSplitting(t *testing.T) {
	lim := Limits{CallRecords: 5, CallBytes: 400, RecordBytes: 10}
	s := embeddedStore(t)
	w := &watched{Store: s, t: t, lim: lim}
	o := options(w, limited{RawCodec(logKS), lim})
	a, _ := mustOpen(t, o, "t", 1, "node-a")
	big := strings.Repeat("0123456789", 3) + "xy" // 4 parts
	mustAppend(t, a, big)
	mustAppend(t, a, "") // an empty entry is one empty part
	_, entries := mustOpen(t, options(s, RawCodec(logKS)), "t", 2, "node-b")
	wantEntries(t, entries, 1, big, "")

	// Too many parts for one call (5 parts and the fence): refused
	// without a call.
	a, _ = mustOpen(t, o, "t", 3, "node-a")
	if a.MaxEntryBytes() != 40 {
		t.Fatalf("max entry %d bytes, want 4 parts of 10", a.MaxEntryBytes())
	}
	calls := a.Stats().StoreCalls
	for _, n := range []int{41, 45} {
		if _, err := a.Append(context.Background(), make([]byte, n)); !errors.Is(err, adapters.ErrInvalid) {
			t.Fatalf("an entry of %d bytes: %v", n, err)
		}
	}
	if a.Stats().StoreCalls != calls {
		t.Fatal("a refused entry made a store call")
	}
	// Too many bytes: by the quick count (data alone), or only once
	// encoded (data, keys and headers): refused without a call either
	// way; the log goes on.
	lim2 := Limits{CallRecords: 100, CallBytes: 200, RecordBytes: 1000}
	x, _ := mustOpen(t, options(w, limited{RawCodec(logKS), lim2}), "x", 1, "node-a")
	w.lim = lim2
	calls = x.Stats().StoreCalls
	most := x.MaxEntryBytes()
	for _, n := range []int{200 - x.fenceMax + 1, most + 1} {
		if _, err := x.Append(context.Background(), make([]byte, n)); !errors.Is(err, adapters.ErrInvalid) {
			t.Fatalf("an entry of %d bytes (max %d): %v", n, most, err)
		}
	}
	if x.Stats().StoreCalls != calls {
		t.Fatal("a refused entry made a store call")
	}
	if _, err := x.Append(context.Background(), make([]byte, most)); err != nil {
		t.Fatalf("an entry of the most bytes: %v", err)
	}
	w.lim = lim

	// A batch of 12 entries of 2 parts each, written at once.
	a.writeMu.Lock() // hold the batch until all are queued
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			if _, err := a.Append(context.Background(), fmt.Appendf(nil, "entry-%02d-xyz", i)); err != nil {
				t.Error(err)
			}
		})
	}
	testenv.WaitFor(t, 10*time.Second, "12 appends to queue", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.queue) == 12
	})
	before := len(w.callSizes())
	a.writeMu.Unlock()
	wg.Wait()
	sizes := w.callSizes()[before:]
	// 2 entries (4 parts) and the fence per call: 6 calls.
	if len(sizes) != 6 {
		t.Fatalf("12 entries of 2 parts made calls of %v mutations", sizes)
	}
	for _, n := range sizes {
		if (n-1)%2 != 0 {
			t.Fatalf("a call of %d mutations splits an entry (%v)", n, sizes)
		}
	}
	_, entries = mustOpen(t, options(s, RawCodec(logKS)), "t", 4, "node-b")
	if len(entries) != 14 {
		t.Fatalf("read back %s", show(entries))
	}

	// Truncation deletes whole entries, within the limits too.
	b, _ := mustOpen(t, o, "t", 5, "node-b")
	if err := b.Truncate(context.Background(), 14); err != nil {
		t.Fatal(err)
	}
	_, entries = mustOpen(t, options(s, RawCodec(logKS)), "t", 6, "node-c")
	if len(entries) != 1 || entries[0].Seq != 14 {
		t.Fatalf("after truncation: %s", show(entries))
	}
}

// TestCorruptLog: Open refuses a log whose entries contradict the fence.
func TestCorruptLog(t *testing.T) {
	s := embeddedStore(t)
	c := RawCodec(logKS)
	a, _ := mustOpen(t, options(s, c), "t", 1, "node-a")
	mustAppend(t, a, "a1")
	// An entry past the fence's Last, written by hand.
	v, _ := c.EncodeEntry("t", 5, 0, []byte("x"))
	if _, err := s.Upsert(context.Background(), logKS, []adapters.Write{{Key: c.EntryKey("t", 5, 0), Value: v}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(context.Background(), options(s, c), "t", 2, "node-b"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open of a corrupt log: %v", err)
	}
}

// Pending lists the keyspaces whose logs hold entries, by the name each
// log's fence gives (its case kept), and not those truncated to nothing
// or never appended to.
func TestPending(t *testing.T) {
	ctx := context.Background()
	o := options(embeddedStore(t), RawCodec(logKS))
	if got, err := Pending(ctx, o, logKS); err != nil || len(got) != 0 {
		t.Fatalf("pending of no logs: %v %v", got, err)
	}
	full, _ := mustOpen(t, o, "Orders", 1, "n")
	emptied, _ := mustOpen(t, o, "emptied", 1, "n")
	mustOpen(t, o, "idle", 1, "n")
	mustAppend(t, full, "x")
	mustAppend(t, emptied, "y")
	if err := emptied.Truncate(ctx, emptied.Last()+1); err != nil {
		t.Fatal(err)
	}
	got, err := Pending(ctx, o, logKS)
	if err != nil || len(got) != 1 || got[0] != "Orders" {
		t.Fatalf("pending: %v %v, want [Orders]", got, err)
	}
}
