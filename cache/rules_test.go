package cache

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/fault"
)

// Rule tests: each builds an exact buffer state, performs operations and
// asserts the resulting records (kind, gap, dirty and ref bits, values) and
// the exact store requests made. Most are scripts in testdata/rules
// (TestRules, rulescript_test.go); the tests here need what a script does
// not say: a check made inside a store call, background workers and their
// timing, or state built in bulk.

// env is one buffer over a counted, hookable, fault-injecting embedded store:
// Buffer → Counted → hookStore → fault.Store → embedded.
type env struct {
	t     *testing.T
	ctx   context.Context
	b     *Buffer
	cnt   *adapters.Counted
	hooks *hookStore
	fs    *fault.Store
	raw   *embedded.Store
}

// newEnv fills the store from spec ("a=1 b=2"), opens keyspace "t" with the
// given state, and resets the counters.
func newEnv(t *testing.T, p Policy, store, state string, tweak ...func(*Options)) *env {
	t.Helper()
	raw := openEmbedded(t)
	if recs := parseStore(t, store); len(recs) > 0 {
		if _, err := raw.Upsert(context.Background(), testKS, adapters.Puts(recs)); err != nil {
			t.Fatal(err)
		}
	}
	fs := fault.New(raw, fault.Config{})
	hooks := &hookStore{Store: fs, unversioned: true}
	cnt := adapters.Count(hooks)
	opts := Options{Policy: p, MaxBytes: 1 << 20, RecordOverhead: 64, MaxKeyBytes: 16, DisableWorkers: true, Logger: quietLog}
	for _, f := range tweak {
		f(&opts)
	}
	b, err := New(cnt, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	b.OpenKeyspace(testKS)
	loadState(t, b, testKS, state)
	e := &env{t: t, ctx: context.Background(), b: b, cnt: cnt, hooks: hooks, fs: fs, raw: raw}
	if !strings.Contains(state, " S") {
		e.check() // the starting state itself must be sound (Check rejects sentinels)
	}
	cnt.Reset()
	return e
}

// check runs the invariant checker with faults off. Its store reads are
// counted, so expect reads the counters first.
func (e *env) check() {
	e.t.Helper()
	e.fs.SetDown(false)
	if err := e.b.Check(e.ctx); err != nil {
		e.t.Fatalf("Check: %v\nstate: %s", err, dump(e.t, e.b, testKS))
	}
}

// expect asserts the keyspace's records and the requests made since the
// counters were last reset, then runs Check.
func (e *env) expect(state, requests string) {
	e.t.Helper()
	gotReqs := reqs(e.cnt.Stats())
	if got := dump(e.t, e.b, testKS); got != state {
		e.t.Errorf("state\n got  %s\n want %s", got, state)
	}
	if gotReqs != requests {
		e.t.Errorf("requests %q, want %q", gotReqs, requests)
	}
	e.check()
}

// expectState asserts the keyspace's records, then runs Check.
func (e *env) expectState(state string) {
	e.t.Helper()
	if got := dump(e.t, e.b, testKS); got != state {
		e.t.Errorf("state\n got  %s\n want %s", got, state)
	}
	e.check()
}

func (e *env) get(key, want string, wantOK bool) {
	e.t.Helper()
	v, ok, err := e.b.Get(e.ctx, testKS, []byte(key))
	if err != nil || ok != wantOK || string(v) != want || (ok && v == nil) {
		e.t.Fatalf("Get(%q) = %q %v %v, want %q %v", key, v, ok, err, want, wantOK)
	}
}

// scanArgs: "" for a nil bound.
func bound(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

func (e *env) scan(start, end string, limit int, want, wantNext string) {
	e.t.Helper()
	recs, next, err := e.b.Scan(e.ctx, testKS, bound(start), bound(end), limit)
	if err != nil {
		e.t.Fatalf("Scan: %v", err)
	}
	if got := dumpRecs(recs); got != want || string(next) != wantNext {
		e.t.Fatalf("Scan(%q, %q, %d) = %s next %q, want %s next %q", start, end, limit, got, next, want, wantNext)
	}
}

func (e *env) apply(ws ...Write) {
	e.t.Helper()
	if err := e.b.Apply(e.ctx, testKS, ws); err != nil {
		e.t.Fatalf("Apply: %v", err)
	}
}

func put(k, v string) Write { return Write{Key: []byte(k), Value: []byte(v)} }
func del(k string) Write    { return Write{Key: []byte(k), Delete: true} }

func TestScanPagesConcatenate(t *testing.T) {
	e := newEnv(t, PolicyNemo, "a=1 b=2 c=3 d=4 e=5", "")
	e.scan("", "", 2, "a=1 b=2", "b\x00")
	e.scan("b\x00", "", 2, "c=3 d=4", "d\x00")
	e.scan("d\x00", "", 2, "e=5", "")
	if got := reqs(e.cnt.Stats()); got != "get_range:3" {
		t.Fatalf("requests %s", got)
	}
	e.cnt.Reset()
	// Paging again walks the same pages from the buffer alone.
	e.scan("", "", 2, "a=1 b=2", "b\x00")
	e.scan("b\x00", "", 2, "c=3 d=4", "d\x00")
	e.scan("d\x00", "", 2, "e=5", "")
	if got := reqs(e.cnt.Stats()); got != "" {
		t.Fatalf("second walk made requests %s", got)
	}
	e.check()
}

// recLocked returns the record at key; the caller holds the latch.
func (e *env) recLocked(s *keyspace, key string) *record {
	e.t.Helper()
	r, ok := s.tree.Get(s.probe([]byte(key)))
	if !ok {
		e.t.Fatalf("no record %q", key)
	}
	return r
}

// TestEvictUntilSweepsReferencedRecords: a scan sets the ref bit of every
// record it visits; EvictUntil must still reach its target by clearing them
// all on one rotation of the hand and evicting on the next.
func TestEvictUntilSweepsReferencedRecords(t *testing.T) {
	var store strings.Builder
	for i := range 300 {
		fmt.Fprintf(&store, "k%03d=v ", i)
	}
	e := newEnv(t, PolicyNemo, store.String(), "", func(o *Options) { o.EvictBatch = 8 })
	for range 2 { // the first scan admits, the second touches every record
		if _, _, err := e.b.Scan(e.ctx, testKS, nil, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	head := int64(64)
	freed := evictUntil(e.ctx, e.b, head)
	if u := e.b.Stats().UsedBytes; u != head || freed != 300*(4+1+64) {
		t.Fatalf("EvictUntil freed %d, %d bytes left; want everything but the head", freed, u)
	}
	e.expect(`"" T g1 r`, "get_range:1")
}

func TestBudgetRules(t *testing.T) {
	t.Run("admission overshoots by at most one record, then bypasses", func(t *testing.T) {
		e := newEnv(t, PolicyNemo, "a=1 b=2 c=3 d=4", "", func(o *Options) { o.MaxBytes = 200 })
		for _, k := range []string{"a", "b", "c", "d"} {
			e.get(k, k2v(k), true)
		}
		st := e.b.Stats()
		if st.UsedBytes != 64+3*66 || st.AdmitBypass != 1 || st.Admitted != 3 {
			t.Fatalf("used %d bypass %d admitted %d", st.UsedBytes, st.AdmitBypass, st.Admitted)
		}
		e.expect(`"" T g1 | a=1 R g1 | b=2 R g1 | c=3 R g1`, "get:4")
	})
	t.Run("admission waits AdmitWait for room, then bypasses", func(t *testing.T) {
		e := newEnv(t, PolicyNemo, "x=1", `a=1 R g1 d | b=2 R g1 d`, func(o *Options) {
			o.MaxBytes = 100
			o.DisableWorkers = false
			o.AdmitWait = 40 * time.Millisecond
		})
		e.fs.SetFailNext(adapters.OpUpsert, 1<<20) // dirty records cannot be written back
		stopWriteBack := startWriteBack(e.b)       // the engine's, which eviction asks to write them
		defer stopWriteBack()
		start := time.Now()
		e.get("x", "1", true)
		if d := time.Since(start); d < 40*time.Millisecond {
			t.Fatalf("Get returned after %v, before AdmitWait", d)
		}
		if st := e.b.Stats(); st.AdmitBypass != 1 || st.Admitted != 0 {
			t.Fatalf("bypass %d admitted %d", st.AdmitBypass, st.Admitted)
		}
		stopWriteBack()
		_ = e.b.Close()
		e.fs.SetFailNext(adapters.OpUpsert, 0)
		if d := dump(t, e.b, testKS); d != `"" T g1 | a=1 R g1 d | b=2 R g1 d` {
			t.Fatalf("state %s", d)
		}
		e.check()
	})
	t.Run("admission waits for the evictor to make room", func(t *testing.T) {
		e := newEnv(t, PolicyNemo, "a=1 b=2 x=1", `a=1 R g1 | b=2 R g1`, func(o *Options) {
			o.MaxBytes = 100
			o.DisableWorkers = false
			o.AdmitWait = 10 * time.Second
		})
		start := time.Now()
		e.get("x", "1", true)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Get took %v", d)
		}
		if st := e.b.Stats(); st.AdmitBypass != 0 || st.Admitted != 1 || st.Evictions == 0 {
			t.Fatalf("bypass %d admitted %d evictions %d", st.AdmitBypass, st.Admitted, st.Evictions)
		}
		_ = e.b.Close()
		e.check()
	})
}

func k2v(k string) string { return string(rune('1' + k[0] - 'a')) }

// TestScanRacingWriteBackAndEviction: a write-back that lands while a
// scan's fetch is in flight (the fetch read the older value) cannot evict
// the record until the fetch is done, so the scan returns the newer value
// from the buffer; once no fetch is in flight the record can go.
func TestScanRacingWriteBackAndEviction(t *testing.T) {
	e := newEnv(t, PolicyNemo, "a=old c=3", `a=new R g1 d`)
	e.hooks.after(adapters.OpGetRange, func() {
		evictUntil(e.ctx, e.b, 0)
		if got := dump(t, e.b, testKS); got != `"" T g1 r | a=new R g1` {
			t.Errorf("written back during the fetch: %s, want it kept clean", got)
		}
		if e.b.Stats().EvictDeferred == 0 {
			t.Error("eviction was not deferred")
		}
	})
	e.scan("", "", 0, "a=new c=3", "")
	e.expect(`"" T g0 r | a=new R g0 | c=3 R g0`, "get_range:1 upsert:1")
	evictUntil(e.ctx, e.b, 0) // no fetch in flight: everything may go
	e.expectState(`"" T g1 r`)
}

// TestScanRacingReleaseOfWrittenBackTombstone: under the record policy a
// deleted key written back while a transaction holds a lock on it stays
// as a clean tombstone until the lock goes (see disposable). When that
// happens while a scan's fetch is in flight (the fetch read the value
// from before the delete), the tombstone must outlive the fetch, as a
// written-back record must: otherwise the scan returns the deleted value.
func TestScanRacingReleaseOfWrittenBackTombstone(t *testing.T) {
	e := newEnv(t, PolicyRecord, "a=old", `a T g1 d`)
	o := &Owner{ID: 1}
	if _, ok, _, err := e.b.LockKey(e.ctx, testKS, []byte("a"), o, ModeS); err != nil || ok {
		t.Fatalf("LockKey of the deleted key: %v %v", ok, err)
	}
	e.hooks.after(adapters.OpGetRange, func() {
		if err := flushAll(e.ctx, e.b); err != nil {
			t.Error(err)
		}
		e.b.Release(o)
	})
	e.scan("", "", 0, "", "")
	e.expectState(`"" T g1 r | a T g1 r`)
	e.get("a", "", false)
	evictUntil(e.ctx, e.b, 0) // no fetch in flight: the tombstone may go
	e.expectState(`"" T g1 r`)
}

// TestPointMissRacingWriteBackAndEviction: the same for a Get miss, whose
// fetch must not admit (or return) a value older than one written back and
// evicted meanwhile.
func TestPointMissRacingWriteBackAndEviction(t *testing.T) {
	e := newEnv(t, PolicyNemo, "a=old", `"" T g1`)
	e.hooks.after(adapters.OpGet, func() {
		// While the fetch is in flight: a commit, its write-back, and an
		// eviction attempt.
		e.apply(put("a", "new"))
		evictUntil(e.ctx, e.b, 0)
	})
	e.get("a", "old", true) // linearized before the commit: the fetch's answer
	e.get("a", "new", true) // the record stayed: the newer value, from the buffer
}

// TestScanRacingEvictionOfCoverageBound: when the record that ends a scan's
// coverage is evicted during the fetch, the gap before it must not be
// sealed: it now runs past what the fetch saw.
func TestScanRacingEvictionOfCoverageBound(t *testing.T) {
	e := newEnv(t, PolicyNemo, "a=1 b=2 c=3", `"" T g0 | a=1 R g1 | c=3 R g0`)
	e.hooks.after(adapters.OpGetRange, func() { evictUntil(e.ctx, e.b, 0) })
	e.scan("a", "d", 0, "a=1 b=2 c=3", "")
	e.expect(`"" T g1 | b=2 R g1`, "get_range:1")
	e.get("c", "3", true)
}
