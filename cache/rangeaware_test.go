package cache

import (
	"fmt"
	"strings"
	"testing"
)

// Eviction by runs (Options.EvictRun): records linked by sealed gaps are
// one CLOCK unit, kept whole while read and evicted whole once cold, so a
// cold stretch of a scanned range leaves one hole with the gap bits around
// it right (expect runs Check, which verifies them against the store).
func TestEvictRunRules(t *testing.T) {
	runRules(t, []ruleCase{
		{name: "a run read since the last pass stays whole and banks a chance, then goes whole", store: "a=1 b=2 c=3",
			state: `"" T g1 | a=1 R g0 r | b=2 R g0 | c=3 R g1`,
			op: func(e *env) {
				e.evict(0)   // a was read: the run stays, each record banks a chance
				e.evict(0)   // not read since: each spends it
				e.evict(198) // cold: all three go
			},
			want: `"" T g1`},
		{name: "a cold run between read ones goes as a unit: one hole, the gaps around it right", store: "a=1 b=2 c=3 d=4 e=5 f=6",
			state: `"" T g1 | a=1 R g0 r | b=2 R g0 | c=3 R g0 | d=4 R g0 | e=5 R g0 r | f=6 R g1`,
			tweak: func(o *Options) { o.EvictRun = 2 }, // runs [a b] [c d] [e f]
			op:    func(e *env) { e.evict(132) },
			want:  `"" T g1 | a=1 R g0 | b=2 R g1 | e=5 R g0 | f=6 R g1`},
		{name: "the same records one by one punch a hole after every unread record", store: "a=1 b=2 c=3 d=4 e=5 f=6",
			state: `"" T g1 | a=1 R g0 r | b=2 R g0 | c=3 R g0 r | d=4 R g0 | e=5 R g0 r | f=6 R g1`,
			tweak: func(o *Options) { o.EvictRun = 1 },
			op:    func(e *env) { e.evict(198) },
			want:  `"" T g1 | a=1 R g1 | c=3 R g1 | e=5 R g1`},
		{name: "a batch is extended to the end of the run it stops in", store: "a=1 b=2 c=3",
			state: `"" T g1 | a=1 R g0 | b=2 R g1 | c=3 R g1`,
			tweak: func(o *Options) { o.EvictBatch = 1 },
			op: func(e *env) {
				e.evict(0)   // the head alone
				e.evict(132) // a, and b with it
			},
			want: `"" T g1 | c=3 R g1`},
		{name: "a dirty record in a cold run is written back and goes with it", store: "a=1 b=old",
			state: `"" T g1 | a=1 R g0 | b=new R g1 d`,
			op:    func(e *env) { e.evict(66 + 68) },
			want:  `"" T g1`, reqs: "upsert:1"},
		{name: "a locked record stays; the rest of its cold run goes", store: "a=1 b=2 c=3",
			state: `"" T g1 | a=1 R g0 | b=2 R g0 | c=3 R g1`,
			op: func(e *env) {
				sp, _ := e.b.space(testKS)
				o := &Owner{ID: 1}
				sp.mu.RLock()
				pin(sp, e.recLocked(sp, "b"), o)
				sp.mu.RUnlock()
				e.evict(132)
				e.b.Release(o)
			},
			want: `"" T g1 | b=2 R g1`},
		{name: "records with unknown gaps are runs of one: plain second chance", store: "a=1 b=2",
			state: `"" T g1 | a=1 R g1 r | b=2 R g1`,
			op:    func(e *env) { e.evict(66) },
			want:  `"" T g1 | a=1 R g1`},
	})
}

// A range fetch into a full buffer does not flush out a hot point record:
// the range admission filter (Options.RangeAdmitSlots) answers the first
// scan of a cold range from the store without admitting it; the second is
// admitted, cold (no ref bit), and the evictor takes it, as one run,
// before the point record that was read.
func TestRangeFetchKeepsHotPointRecord(t *testing.T) {
	val := strings.Repeat("v", 100)
	var store strings.Builder
	fmt.Fprintf(&store, "p=%s ", val)
	for i := range 16 {
		fmt.Fprintf(&store, "q%02d=%s ", i, val)
	}
	var want []string
	for i := range 100 {
		fmt.Fprintf(&store, "k%03d=%s ", i, val)
		want = append(want, fmt.Sprintf("k%03d=%s", i, val))
	}
	e := newEnv(t, PolicyNemo, store.String(), "", func(o *Options) { o.MaxBytes = 2000 })
	e.get("p", val, true) // miss: admitted
	e.get("p", val, true) // hit: the ref bit
	for i := 0; e.b.used.Load() < e.b.low(); i++ {
		e.get(fmt.Sprintf("q%02d", i), val, true)
	}
	used := e.b.used.Load()
	all := strings.Join(want, " ")

	e.scan("k", "l", 0, all, "") // first sight: answered, not admitted
	if got := e.b.Stats().RangeFiltered; got != 1 {
		t.Errorf("RangeFiltered = %d after the first scan, want 1", got)
	}
	if got := e.b.used.Load(); got != used {
		t.Errorf("resident bytes %d after the first scan, want %d (nothing admitted)", got, used)
	}

	e.scan("k", "l", 0, all, "") // second sight: admitted
	if got := e.b.Stats().RangeFiltered; got != 1 {
		t.Errorf("RangeFiltered = %d after the second scan, want still 1", got)
	}
	if e.b.used.Load() <= e.b.opts.MaxBytes {
		t.Fatalf("resident bytes %d after the second scan: the range was not admitted", e.b.used.Load())
	}
	e.b.EvictUntil(e.ctx, e.b.low())
	recs, err := e.b.Records(testKS, []byte("p"), []byte("q"))
	if err != nil || len(recs) != 1 {
		t.Fatalf("Records(p): %v %v: the hot point record was evicted", recs, err)
	}
	if got := e.b.used.Load(); got > e.b.low() {
		t.Errorf("resident bytes %d after EvictUntil, want at most %d", got, e.b.low())
	}
	e.check()
}

// The background evictor turns each hand at most once per round, so a run
// read since the last pass keeps its banked chances until a later round;
// EvictUntil, asked for a target, turns it until it gets there.
func TestEvictRoundTurnsTheHandOnce(t *testing.T) {
	runRules(t, []ruleCase{
		{name: "one turn per round: the cold record goes, the read run stays", store: "a=1 b=2 c=3",
			state: `"" T g1 | a=1 R g0 r | b=2 R g1 | c=3 R g1`,
			op: func(e *env) {
				if got := e.b.evictUntil(e.ctx, 0, true); got != 66 {
					t.Errorf("evictUntil(0, one turn) freed %d, want 66 (c)", got)
				}
			},
			want: `"" T g1 | a=1 R g0 | b=2 R g1`},
		{name: "EvictUntil turns until it reaches its target", store: "a=1 b=2 c=3",
			state: `"" T g1 | a=1 R g0 r | b=2 R g1 | c=3 R g1`,
			op: func(e *env) {
				if got := e.b.EvictUntil(e.ctx, 0); got != 198 {
					t.Errorf("EvictUntil(0) freed %d, want 198 (everything)", got)
				}
			},
			want: `"" T g1`},
	})
}
