package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/storetest"
)

const ks adapters.Keyspace = "t"

// newStore wraps a fresh embedded store, counted so tests can see which
// calls reached the backend.
func newStore(t *testing.T, cfg Config) (*Store, *adapters.Counted) {
	t.Helper()
	e, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	c := adapters.Count(e)
	return New(c, cfg), c
}

func batch(prefix string, n int) []adapters.Record {
	recs := make([]adapters.Record, n)
	for i := range recs {
		recs[i] = adapters.Record{Key: fmt.Appendf(nil, "%s%02d", prefix, i), Value: []byte("v")}
	}
	return recs
}

func keysOf(recs []adapters.Record) [][]byte {
	keys := make([][]byte, len(recs))
	for i, r := range recs {
		keys[i] = r.Key
	}
	return keys
}

// calls runs each operation once and returns their errors by name.
func calls(ctx context.Context, s adapters.Store) map[string]error {
	errs := map[string]error{}
	_, errs["get"] = s.Get(ctx, ks, [][]byte{[]byte("k")})
	_, _, errs["get_range"] = s.GetRange(ctx, ks, nil, nil, 0)
	_, errs["upsert"] = s.Upsert(ctx, ks, adapters.Puts(batch("k", 2)))
	errs["delete"] = s.Delete(ctx, ks, storetest.Deletes([][]byte{[]byte("k00")}))
	return errs
}

func isInjected(err error) bool {
	return errors.Is(err, ErrInjected) && errors.Is(err, adapters.ErrUnavailable)
}

func TestNoFaultsPassesThrough(t *testing.T) {
	s, c := newStore(t, Config{})
	for name, err := range calls(context.Background(), s) {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if got, _ := storetest.Values(s.Get(context.Background(), ks, [][]byte{[]byte("k01")})); string(got[0]) != "v" {
		t.Fatalf("write did not reach the backend: %q", got)
	}
	if s.Unwrap() != adapters.Store(c) || c.Stats().Total().Requests != 5 {
		t.Fatalf("inner saw %d requests, want 5", c.Stats().Total().Requests)
	}
}

func TestLatencyAndCancel(t *testing.T) {
	s, c := newStore(t, Config{Default: OpConfig{Latency: 30 * time.Millisecond}})
	start := time.Now()
	if _, err := s.Get(context.Background(), ks, [][]byte{[]byte("k")}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("call took %v, want >= 30ms", d)
	}

	s.SetConfig(Config{Default: OpConfig{Latency: time.Hour}})
	c.Reset()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start = time.Now()
	_, err := s.Upsert(ctx, ks, adapters.Puts(batch("k", 1)))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cancel took %v to interrupt the delay", d)
	}
	if n := c.Stats().Total().Requests; n != 0 {
		t.Fatalf("cancelled call reached the backend (%d requests)", n)
	}
}

// TestDelaysDrawn checks jitter and slow calls through the plan itself,
// which is exact where wall-clock timing would be flaky.
func TestDelaysDrawn(t *testing.T) {
	const lat, jit, slow = 10 * time.Millisecond, 5 * time.Millisecond, time.Second
	s := New(nil, Config{Seed: 7, Ops: map[adapters.Op]OpConfig{
		adapters.OpGet: {Latency: lat, Jitter: jit, SlowRate: 0.25, SlowDelay: slow},
	}})
	const n = 4000
	slowCalls, distinct := 0, map[time.Duration]bool{}
	for range n {
		p, err := s.decide(adapters.OpGet, 1)
		if err != nil || p.fail {
			t.Fatalf("unexpected failure: %v %+v", err, p)
		}
		d := p.delay
		if d >= slow {
			slowCalls++
			d -= slow
		}
		if d < lat || d >= lat+jit {
			t.Fatalf("delay %v outside [%v, %v)", d, lat, lat+jit)
		}
		distinct[d] = true
	}
	if slowCalls < n/4-200 || slowCalls > n/4+200 {
		t.Errorf("%d of %d calls slow, want about %d", slowCalls, n, n/4)
	}
	if len(distinct) < n/2 {
		t.Errorf("only %d distinct jittered delays in %d calls", len(distinct), n)
	}
	// Operations without an override use Default (here: nothing).
	if p, _ := s.decide(adapters.OpDelete, 1); p != (plan{}) {
		t.Errorf("delete got plan %+v from an empty Default", p)
	}
}

func TestErrorRate(t *testing.T) {
	s, c := newStore(t, Config{Seed: 1, Default: OpConfig{ErrorRate: 0.3}})
	const n = 1000
	failed := 0
	for range n {
		_, err := s.Get(context.Background(), ks, [][]byte{[]byte("k")})
		switch {
		case err == nil:
		case isInjected(err):
			failed++
		default:
			t.Fatalf("unexpected error %v", err)
		}
	}
	if failed < 240 || failed > 360 {
		t.Fatalf("%d of %d failed, want about 300", failed, n)
	}
	if got := c.Stats()[adapters.OpGet].Requests; got != uint64(n-failed) {
		t.Fatalf("backend saw %d requests, want %d (failed calls must not reach it)", got, n-failed)
	}

	s.SetConfig(Config{Default: OpConfig{ErrorRate: 1}})
	for name, err := range calls(context.Background(), s) {
		if !isInjected(err) {
			t.Errorf("%s with ErrorRate 1: %v", name, err)
		}
	}
}

func TestSeedReproducible(t *testing.T) {
	run := func(seed uint64) string {
		s := New(nil, Config{Seed: seed, Default: OpConfig{ErrorRate: 0.5, Jitter: time.Second}})
		out := ""
		for range 64 {
			p, _ := s.decide(adapters.OpGet, 1)
			out += fmt.Sprintf("%v/%d ", p.fail, p.delay)
		}
		return out
	}
	if first, again := run(42), run(42); first != again {
		t.Fatal("same seed gave different faults")
	}
	if run(42) == run(43) {
		t.Fatal("different seeds gave identical faults")
	}
}

// TestPartialUpsert checks that a partial failure leaves exactly a prefix of
// the batch in the store, and that truly partial prefixes occur.
func TestPartialUpsert(t *testing.T) {
	s, _ := newStore(t, Config{Seed: 3, Ops: map[adapters.Op]OpConfig{adapters.OpUpsert: {ErrorRate: 1, PartialRate: 1}}})
	ctx := context.Background()
	const size = 8
	seen := map[int]bool{}
	for trial := range 40 {
		recs := batch(fmt.Sprintf("u%02d/", trial), size)
		_, err := s.Upsert(ctx, ks, adapters.Puts(recs))
		if !isInjected(err) {
			t.Fatalf("trial %d: err = %v", trial, err)
		}
		got, err := storetest.Values(s.Unwrap().Get(ctx, ks, keysOf(recs)))
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for k < size && got[k] != nil {
			k++
		}
		for i := k; i < size; i++ {
			if got[i] != nil {
				t.Fatalf("trial %d: record %d written after a gap at %d: not a prefix", trial, i, k)
			}
		}
		if k == 0 {
			t.Fatalf("trial %d: partial failure applied nothing", trial)
		}
		seen[k] = true
	}
	partial := 0
	for k := range seen {
		if k < size {
			partial++
		}
	}
	if partial < 3 {
		t.Fatalf("prefix lengths seen %v: want several strictly partial ones", seen)
	}
}

func TestPartialDelete(t *testing.T) {
	s, _ := newStore(t, Config{Seed: 5})
	ctx := context.Background()
	recs := batch("d", 10)
	if _, err := s.Upsert(ctx, ks, adapters.Puts(recs)); err != nil {
		t.Fatal(err)
	}
	s.SetConfig(Config{Seed: 5, Ops: map[adapters.Op]OpConfig{adapters.OpDelete: {ErrorRate: 1, PartialRate: 1}}})
	for range 50 {
		if err := s.Delete(ctx, ks, storetest.Deletes(keysOf(recs))); !isInjected(err) {
			t.Fatalf("err = %v", err)
		}
		got, _ := storetest.Values(s.Unwrap().Get(ctx, ks, keysOf(recs)))
		k := 0
		for k < len(got) && got[k] == nil {
			k++
		}
		if k == 0 {
			t.Fatal("partial delete removed nothing")
		}
		for i := k; i < len(got); i++ {
			if got[i] == nil {
				t.Fatalf("key %d deleted after a kept key at %d: not a prefix", i, k)
			}
		}
		if k < len(recs) {
			return // saw a strictly partial delete with the right shape
		}
		if _, err := s.Unwrap().Upsert(ctx, ks, adapters.Puts(recs)); err != nil { // restore and retry
			t.Fatal(err)
		}
	}
	t.Fatal("50 partial deletes all removed the whole batch")
}

func TestDown(t *testing.T) {
	s, c := newStore(t, Config{Default: OpConfig{Latency: time.Hour}})
	s.SetDown(true)
	start := time.Now()
	for name, err := range calls(context.Background(), s) {
		if !isInjected(err) {
			t.Errorf("%s while down: %v", name, err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("outage did not fail fast: %v", d)
	}
	if n := c.Stats().Total().Requests; n != 0 {
		t.Fatalf("%d requests reached the backend during an outage", n)
	}
	s.SetDown(false)
	s.SetConfig(Config{})
	for name, err := range calls(context.Background(), s) {
		if err != nil {
			t.Errorf("%s after outage: %v", name, err)
		}
	}
}

func TestFailNext(t *testing.T) {
	s, c := newStore(t, Config{})
	s.SetFailNext(adapters.OpUpsert, 2)
	ctx := context.Background()
	for i := range 2 {
		if _, err := s.Upsert(ctx, ks, adapters.Puts(batch("f", 1))); !isInjected(err) {
			t.Fatalf("call %d: %v", i, err)
		}
		if _, err := s.Get(ctx, ks, [][]byte{[]byte("f00")}); err != nil {
			t.Fatalf("other op affected: %v", err)
		}
	}
	if _, err := s.Upsert(ctx, ks, adapters.Puts(batch("f", 1))); err != nil {
		t.Fatalf("third call: %v", err)
	}
	if got := c.Stats()[adapters.OpUpsert].Requests; got != 1 {
		t.Fatalf("backend saw %d upserts, want 1", got)
	}
	s.SetFailNext(adapters.OpDelete, 5)
	s.SetFailNext(adapters.OpDelete, 0)
	if err := s.Delete(ctx, ks, storetest.Deletes([][]byte{[]byte("f00")})); err != nil {
		t.Fatalf("cleared fail-next still failed: %v", err)
	}
}

// TestLoseNext: a write whose reply is lost was applied whole, its
// preconditions checked; a read whose reply is lost fails; then calls
// answer again.
func TestLoseNext(t *testing.T) {
	s, c := newStore(t, Config{})
	ctx := context.Background()
	s.SetLoseNext(adapters.OpUpsert, 1)
	if _, err := s.Upsert(ctx, ks, adapters.Puts(batch("l", 3))); !isInjected(err) || !errors.Is(err, adapters.ErrUnavailable) {
		t.Fatalf("lost upsert: %v", err)
	}
	recs, err := s.Get(ctx, ks, [][]byte{[]byte("l00"), []byte("l02")})
	if err != nil || recs[0].Value == nil || recs[1].Value == nil {
		t.Fatalf("after a lost reply the writes are not all applied: %v %v", recs, err)
	}
	// The precondition of a write whose reply is lost still holds it back.
	s.SetLoseNext(adapters.OpUpsert, 1)
	w := adapters.Write{Key: []byte("l00"), Value: []byte("w"), Expect: adapters.Expect{Kind: adapters.ExpectAbsent}}
	if _, err := s.Upsert(ctx, ks, []adapters.Write{w}); !isInjected(err) {
		t.Fatalf("lost refused upsert: %v", err)
	}
	if recs, _ := s.Get(ctx, ks, [][]byte{[]byte("l00")}); string(recs[0].Value) != "v" {
		t.Fatalf("a refused write was applied: %q", recs[0].Value)
	}
	s.SetLoseNext(adapters.OpDelete, 1)
	if err := s.Delete(ctx, ks, storetest.Deletes([][]byte{[]byte("l01")})); !isInjected(err) {
		t.Fatalf("lost delete: %v", err)
	}
	s.SetLoseNext(adapters.OpGet, 1)
	if _, err := s.Get(ctx, ks, [][]byte{[]byte("l01")}); !isInjected(err) {
		t.Fatalf("lost get: %v", err)
	}
	if recs, err := s.Get(ctx, ks, [][]byte{[]byte("l01")}); err != nil || recs[0].Value != nil {
		t.Fatalf("after a lost delete: %v %v", recs, err)
	}
	if got := c.Stats()[adapters.OpUpsert].Requests; got != 2 {
		t.Fatalf("backend saw %d upserts, want 2", got)
	}
}

// TestConcurrentReconfigure changes the plan while calls run; for -race.
func TestConcurrentReconfigure(t *testing.T) {
	s, _ := newStore(t, Config{})
	ctx := context.Background()
	var writers sync.WaitGroup
	for w := range 3 {
		writers.Go(func() {
			for i := range 100 {
				_, err := s.Upsert(ctx, ks, adapters.Puts(batch(fmt.Sprintf("c%d/%d/", w, i), 3)))
				if err != nil && !isInjected(err) {
					t.Error(err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { writers.Wait(); close(done) }()
	for i := 0; ; i++ {
		select {
		case <-done:
			return
		default:
		}
		s.SetConfig(Config{Seed: uint64(i), Default: OpConfig{ErrorRate: 0.5, PartialRate: 0.5, Jitter: time.Microsecond}})
		s.SetFailNext(adapters.OpUpsert, 1)
		s.SetDown(i%2 == 0)
	}
}

// TestPartialFailureHidesConflicts: a partially applied call fails as a
// whole without an answer, even when a write of the applied prefix was
// refused: a ConflictError would claim every other write was applied.
func TestPartialFailureHidesConflicts(t *testing.T) {
	s, _ := newStore(t, Config{Seed: 3, Ops: map[adapters.Op]OpConfig{
		adapters.OpUpsert: {ErrorRate: 1, PartialRate: 1}, adapters.OpDelete: {ErrorRate: 1, PartialRate: 1}}})
	ctx := context.Background()
	if _, err := s.Unwrap().Upsert(ctx, ks, adapters.Puts(batch("c/", 4))); err != nil {
		t.Fatal(err)
	}
	absent := adapters.Expect{Kind: adapters.ExpectAbsent}
	for trial := range 20 {
		ws := adapters.Puts(batch("c/", 4)) // every one conflicts
		for i := range ws {
			ws[i].Expect = absent
		}
		if _, err := s.Upsert(ctx, ks, ws); !isInjected(err) || errors.Is(err, adapters.ErrConflict) {
			t.Fatalf("trial %d upsert: %v, want the injected failure and no conflict", trial, err)
		}
		dels := storetest.Deletes(keysOf(batch("c/", 4)))
		for i := range dels {
			dels[i].Expect = absent
		}
		if err := s.Delete(ctx, ks, dels); !isInjected(err) || errors.Is(err, adapters.ErrConflict) {
			t.Fatalf("trial %d delete: %v, want the injected failure and no conflict", trial, err)
		}
	}
}

func atomicGroup(prefix string, n int) []adapters.Mutation {
	ms := make([]adapters.Mutation, n)
	for i, r := range batch(prefix, n) {
		ms[i] = adapters.Mutation{Write: adapters.Write{Key: r.Key, Value: r.Value}}
	}
	return ms
}

// TestWriteAtomicFaults: WriteAtomic passes through, fails like a write,
// and a failure applies all of the group or none of it, never a part.
func TestWriteAtomicFaults(t *testing.T) {
	ctx := context.Background()
	s, c := newStore(t, Config{})
	vers, err := s.WriteAtomic(ctx, ks, atomicGroup("a", 3))
	if err != nil || len(vers) != 3 || vers[0] == "" {
		t.Fatalf("no faults: %q %v", vers, err)
	}
	present := func(prefix string, n int) int {
		t.Helper()
		vals, err := storetest.Values(c.Get(ctx, ks, keysOf(batch(prefix, n))))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, v := range vals {
			if v != nil {
				got++
			}
		}
		return got
	}

	// Errors without partial effects apply nothing.
	s.SetConfig(Config{Seed: 3, Ops: map[adapters.Op]OpConfig{adapters.OpWriteAtomic: {ErrorRate: 1}}})
	if _, err := s.WriteAtomic(ctx, ks, atomicGroup("b", 5)); !isInjected(err) {
		t.Fatalf("ErrorRate 1: %v", err)
	}
	if n := present("b", 5); n != 0 {
		t.Fatalf("a failed group applied %d of 5", n)
	}
	// Partial failures apply the whole group (the reply was lost).
	for i := range 10 {
		s.SetConfig(Config{Seed: uint64(i), Ops: map[adapters.Op]OpConfig{adapters.OpWriteAtomic: {ErrorRate: 1, PartialRate: 1}}})
		prefix := fmt.Sprintf("c%d-", i)
		if _, err := s.WriteAtomic(ctx, ks, atomicGroup(prefix, 7)); !isInjected(err) {
			t.Fatalf("PartialRate 1: %v", err)
		}
		if n := present(prefix, 7); n != 7 {
			t.Fatalf("seed %d: a partially failed group applied %d of 7", i, n)
		}
	}
	// A refused group behind a lost reply is still just the error.
	refused := atomicGroup("a", 1)
	refused[0].Expect = adapters.Expect{Kind: adapters.ExpectAbsent}
	if _, err := s.WriteAtomic(ctx, ks, refused); !isInjected(err) {
		t.Fatalf("lost reply of a refused group: %v", err)
	}

	s.SetConfig(Config{})
	s.SetFailNext(adapters.OpWriteAtomic, 1)
	if _, err := s.WriteAtomic(ctx, ks, atomicGroup("d", 2)); !isInjected(err) {
		t.Fatalf("fail-next: %v", err)
	}
	if _, err := s.WriteAtomic(ctx, ks, atomicGroup("d", 2)); err != nil {
		t.Fatalf("after fail-next: %v", err)
	}
	s.SetDown(true)
	if _, err := s.WriteAtomic(ctx, ks, atomicGroup("e", 2)); !isInjected(err) {
		t.Fatalf("down: %v", err)
	}
	s.SetDown(false)
	if st := c.Stats()[adapters.OpWriteAtomic]; st.Requests != 1+10+1+1 {
		t.Fatalf("%d WriteAtomic calls reached the store, want 13", st.Requests)
	}
	// The embedded store keeps no stamps in its values.
	if _, err := s.Stamped([]byte("v"), "1"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Stamped over the embedded store: %v", err)
	}
}

// plainStore is an adapters.Store with nothing optional.
type plainStore struct{ adapters.Store }

func TestWriteAtomicUnsupported(t *testing.T) {
	inner, _ := newStore(t, Config{})
	s := New(plainStore{inner}, Config{})
	if _, err := s.WriteAtomic(context.Background(), ks, atomicGroup("a", 1)); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("WriteAtomic over a store without it: %v", err)
	}
}

// snapStore gives a store snapshots (of the present, whatever the moment
// asked for) and records the moments asked for.
type snapStore struct {
	adapters.Store
	mu    sync.Mutex
	asked []time.Time
	reads int
}

func (s *snapStore) Snapshot() (adapters.Snapshot, error) { return s.SnapshotAt(time.Time{}) }

func (s *snapStore) SnapshotAt(at time.Time) (adapters.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, at)
	return snapshotOf{s}, nil
}

type snapshotOf struct{ s *snapStore }

func (v snapshotOf) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	v.s.mu.Lock()
	v.s.reads++
	v.s.mu.Unlock()
	return v.s.Store.Get(ctx, ks, keys)
}

func (v snapshotOf) GetRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	v.s.mu.Lock()
	v.s.reads++
	v.s.mu.Unlock()
	return v.s.Store.GetRange(ctx, ks, start, end, limit)
}

func (snapshotOf) Close() {}

// TestSnapshotsForwarded: the wrapper forwards the wrapped store's
// snapshots, a past moment's included, and injects its faults into their
// reads. It used to hide them, so with backend.fault on, nemo in front of
// Datastore read a read_time read's answer from the present and checked a
// read-only transaction's reads at commit instead of reading a snapshot.
func TestSnapshotsForwarded(t *testing.T) {
	plain, _ := newStore(t, Config{})
	if _, err := plain.Snapshot(); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Snapshot over a store without snapshots: %v", err)
	}
	if _, err := plain.SnapshotAt(time.Now()); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("SnapshotAt over a store without past moments: %v", err)
	}
	ctx := context.Background()
	if _, err := plain.Upsert(ctx, ks, adapters.Puts(batch("s", 2))); err != nil {
		t.Fatal(err)
	}
	inner := &snapStore{Store: plain.Unwrap()}
	s := New(inner, Config{})
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, open := range []func() (adapters.Snapshot, error){s.Snapshot, func() (adapters.Snapshot, error) { return s.SnapshotAt(at) }} {
		sn, err := open()
		if err != nil {
			t.Fatal(err)
		}
		recs, err := sn.Get(ctx, ks, [][]byte{[]byte("s00"), []byte("s01")})
		if err != nil || len(recs) != 2 || recs[0].Value == nil {
			t.Fatalf("snapshot get: %+v %v", recs, err)
		}
		s.SetFailNext(adapters.OpGet, 1)
		s.SetFailNext(adapters.OpGetRange, 1)
		before := inner.reads
		if _, err := sn.Get(ctx, ks, [][]byte{[]byte("s00")}); !isInjected(err) {
			t.Fatalf("snapshot get with a fault due: %v", err)
		}
		if _, _, err := sn.GetRange(ctx, ks, nil, nil, 0); !isInjected(err) {
			t.Fatalf("snapshot range read with a fault due: %v", err)
		}
		s.SetDown(true)
		if _, _, err := sn.GetRange(ctx, ks, nil, nil, 0); !errors.Is(err, adapters.ErrUnavailable) {
			t.Fatalf("snapshot range read while down: %v", err)
		}
		s.SetDown(false)
		if inner.reads != before {
			t.Fatalf("faulted snapshot reads reached the store (%d reads)", inner.reads-before)
		}
		if recs, _, err := sn.GetRange(ctx, ks, nil, nil, 0); err != nil || len(recs) != 2 {
			t.Fatalf("snapshot range read: %+v %v", recs, err)
		}
		sn.Close()
	}
	if len(inner.asked) != 2 || !inner.asked[0].IsZero() || !inner.asked[1].Equal(at) {
		t.Fatalf("the wrapped store was asked for snapshots at %v", inner.asked)
	}
}
