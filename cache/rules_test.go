package cache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/fault"
)

// Rule tests: each builds an exact buffer state, performs one operation and
// asserts the resulting records (kind, gap, dirty and ref bits, values) and
// the exact store requests the operation made.

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

type ruleCase struct {
	name   string
	policy Policy // "" = nemo
	store  string
	state  string
	tweak  func(*Options)
	op     func(e *env)
	want   string // resulting records
	reqs   string // store requests made by op
}

func runRules(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var tw []func(*Options)
			if c.tweak != nil {
				tw = append(tw, c.tweak)
			}
			e := newEnv(t, c.policy, c.store, c.state, tw...)
			c.op(e)
			e.expect(c.want, c.reqs)
		})
	}
}

// fullBudget leaves room for the head fence and nothing else: with one
// record loaded the buffer is over budget.
func fullBudget(o *Options) { o.MaxBytes = 80 }

func TestSearchRules(t *testing.T) {
	runRules(t, []ruleCase{
		{name: "regular record is a hit", store: "a=1", state: `a=1 R g1`,
			op:   func(e *env) { e.get("a", "1", true) },
			want: `"" T g1 | a=1 R g1 r`},
		{name: "tombstone is absent", state: `a T g1`,
			op:   func(e *env) { e.get("a", "", false) },
			want: `"" T g1 | a T g1 r`},
		{name: "sealed gap is a negative hit touching both framing records", store: "a=1 c=3", state: `a=1 R g0 | c=3 R g1`,
			op:   func(e *env) { e.get("b", "", false) },
			want: `"" T g1 | a=1 R g0 r | c=3 R g1 r`},
		{name: "sealed head gap", store: "c=3", state: `"" T g0 | c=3 R g1`,
			op:   func(e *env) { e.get("b", "", false) },
			want: `"" T g0 r | c=3 R g1 r`},
		{name: "sealed gap after the last record", store: "a=1", state: `a=1 R g0`,
			op:   func(e *env) { e.get("z", "", false) },
			want: `"" T g1 | a=1 R g0 r`},
		{name: "miss admits the record clean, gap inherited", store: "a=1 b=2 c=3", state: `a=1 R g1 | c=3 R g0`,
			op:   func(e *env) { e.get("b", "2", true) },
			want: `"" T g1 | a=1 R g1 | b=2 R g1 | c=3 R g0`, reqs: "get:1"},
		{name: "miss on an absent key admits a tombstone that answers next time", store: "a=1", state: `a=1 R g1`,
			op:   func(e *env) { e.get("b", "", false); e.get("b", "", false) },
			want: `"" T g1 | a=1 R g1 | b T g1 r`, reqs: "get:1"},
		{name: "present empty value is a hit", store: "a=",
			op:   func(e *env) { e.get("a", "", true); e.get("a", "", true) },
			want: `"" T g1 | a= R g1 r`, reqs: "get:1"},
		{name: "miss over budget bypasses", store: "a=1 b=2", state: `a=1 R g1`, tweak: fullBudget,
			op: func(e *env) {
				e.get("b", "2", true)
				e.get("b", "2", true)
				if n := e.b.Stats().AdmitBypass; n != 2 {
					e.t.Errorf("AdmitBypass %d, want 2", n)
				}
			},
			want: `"" T g1 | a=1 R g1`, reqs: "get:2"},
		{name: "record policy: hit", policy: PolicyRecord, store: "a=1", state: `a=1 R g1`,
			op:   func(e *env) { e.get("a", "1", true) },
			want: `"" T g1 | a=1 R g1 r`},
		{name: "record policy: negative lookups always go to the store", policy: PolicyRecord, store: "a=1", state: `a=1 R g1`,
			op:   func(e *env) { e.get("b", "", false); e.get("b", "", false) },
			want: `"" T g1 | a=1 R g1`, reqs: "get:2"},
		{name: "record policy: a dirty delete answers absent", policy: PolicyRecord, store: "a=1", state: `a T g1 d`,
			op:   func(e *env) { e.get("a", "", false) },
			want: `"" T g1 | a T g1 d r`},
		{name: "none policy: every lookup goes to the store", policy: PolicyNone, store: "a=1",
			op:   func(e *env) { e.get("a", "1", true); e.get("a", "1", true); e.get("b", "", false) },
			want: `"" T g1`, reqs: "get:3"},
	})
}

func TestScanRules(t *testing.T) {
	runRules(t, []ruleCase{
		{name: "sealed range is answered from the buffer", store: "a=1 b=2", state: `"" T g0 | a=1 R g0 | b=2 R g0 | c T g0`,
			op:   func(e *env) { e.scan("", "", 0, "a=1 b=2", "") },
			want: `"" T g0 r | a=1 R g0 r | b=2 R g0 r | c T g0 r`},
		{name: "records at or past end are not visited", store: "a=1 b=2", state: `"" T g0 | a=1 R g0 | b=2 R g0 | c T g0`,
			op:   func(e *env) { e.scan("a", "b", 0, "a=1", "") },
			want: `"" T g0 | a=1 R g0 r | b=2 R g0 | c T g0`},
		{name: "holes are coalesced into one fetch; buffered records kept", store: "a=1 b=2 c=3 e=5 f=6 g=7",
			state: `"" T g0 | a=1 R g1 | c=3 R g0 | e=5 R g1 | g=7 R g0`,
			op:    func(e *env) { e.scan("a", "g", 0, "a=1 b=2 c=3 e=5 f=6", "") },
			want:  `"" T g0 | a=1 R g0 r | b=2 R g0 | c=3 R g0 r | e=5 R g0 r | f=6 R g0 | g=7 R g0`,
			reqs:  "get_range:1"},
		{name: "hole before the first record: start fenced with a tombstone", store: "b=2 d=4", state: `d=4 R g0`,
			op: func(e *env) {
				e.scan("a", "e", 0, "b=2 d=4", "")
				e.get("aa", "", false) // the fence's sealed gap answers
			},
			want: `"" T g1 | a T g0 r | b=2 R g0 r | d=4 R g0 r`, reqs: "get_range:1"},
		{name: "no fence when the store has the start key", store: "a=1 d=4", state: `d=4 R g0`,
			op:   func(e *env) { e.scan("a", "e", 0, "a=1 d=4", "") },
			want: `"" T g1 | a=1 R g0 | d=4 R g0 r`, reqs: "get_range:1"},
		{name: "hole to the end bound: end fenced, last gap left unknown", store: "a=1 b=2 d=4", state: `"" T g0 | a=1 R g1`,
			op:   func(e *env) { e.scan("a", "c", 0, "a=1 b=2", "") },
			want: `"" T g0 | a=1 R g0 r | b=2 R g0 | c T g1`, reqs: "get_range:1"},
		{name: "the end key is fetched inclusively and admitted", store: "a=1 b=2 c=3 d=4", state: `"" T g0 | a=1 R g1`,
			op:   func(e *env) { e.scan("a", "c", 0, "a=1 b=2", "") },
			want: `"" T g0 | a=1 R g0 r | b=2 R g0 | c=3 R g1`, reqs: "get_range:1"},
		{name: "unbounded scan seals to the end of the keyspace", store: "a=1 b=2 d=4", state: `"" T g0 | a=1 R g1`,
			op: func(e *env) {
				e.scan("a", "", 0, "a=1 b=2 d=4", "")
				e.get("z", "", false)
			},
			want: `"" T g0 | a=1 R g0 r | b=2 R g0 | d=4 R g0 r`, reqs: "get_range:1"},
		{name: "empty buffer: one fetch, then range hits", store: "a=1 b=2",
			op: func(e *env) {
				e.scan("", "", 0, "a=1 b=2", "")
				e.scan("", "", 0, "a=1 b=2", "")
			},
			want: `"" T g0 r | a=1 R g0 r | b=2 R g0 r`, reqs: "get_range:1"},
		{name: "buffered records take precedence over fetched ones", store: "a=1 b=old c=3 d=4",
			state: `b=new R g1 d | c T g1 d`,
			op:    func(e *env) { e.scan("a", "e", 0, "a=1 b=new d=4", "") },
			want:  `"" T g1 | a=1 R g0 | b=new R g0 d r | c T g0 d r | d=4 R g0 | e T g1`, reqs: "get_range:1"},
		{name: "limit: fetch bounded, next cursor, gap after the last fetched record unknown", store: "a=1 b=2 c=3 d=4 e=5",
			op:   func(e *env) { e.scan("", "", 2, "a=1 b=2", "b\x00") },
			want: `"" T g0 r | a=1 R g0 | b=2 R g1`, reqs: "get_range:1"},
		{name: "limit reached inside the buffer is a range hit", store: "a=1 b=2 c=3", state: `"" T g0 | a=1 R g0 | b=2 R g0 | c=3 R g1`,
			op:   func(e *env) { e.scan("", "", 2, "a=1 b=2", "b\x00") },
			want: `"" T g0 r | a=1 R g0 r | b=2 R g0 r | c=3 R g1`},
		{name: "a cursor at end is no cursor", store: "a=1 b=2", state: `"" T g0 | a=1 R g0 | b=2 R g0`,
			op:   func(e *env) { e.scan("", "a\x00", 1, "a=1", "") },
			want: `"" T g0 r | a=1 R g0 r | b=2 R g0`},
		{name: "over budget: answered, nothing admitted", store: "a=1 b=2", state: `"" T g0 | a=1 R g1`, tweak: fullBudget,
			op: func(e *env) {
				e.scan("a", "", 0, "a=1 b=2", "")
				e.scan("a", "", 0, "a=1 b=2", "")
			},
			want: `"" T g0 | a=1 R g1 r`, reqs: "get_range:2"},
		{name: "record policy: every range goes to the store, dirty records overlaid", policy: PolicyRecord,
			store: "a=1 b=old c=3", state: `a=1 R g1 | b=new R g1 d | c T g1 d`,
			op: func(e *env) {
				e.scan("", "", 0, "a=1 b=new", "")
				e.scan("a", "b\x00", 0, "a=1 b=new", "")
			},
			want: `"" T g1 r | a=1 R g1 r | b=new R g1 d r | c T g1 d r`, reqs: "get_range:2"},
		{name: "none policy: pass-through with the store's cursor", policy: PolicyNone, store: "a=1 b=2",
			op: func(e *env) {
				e.scan("", "", 1, "a=1", "a\x00")
				e.scan("a\x00", "", 1, "b=2", "")
			},
			want: `"" T g1`, reqs: "get_range:2"},
	})
}

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

func TestWriteRules(t *testing.T) {
	runRules(t, []ruleCase{
		{name: "update in place keeps gap 0", store: "a=1", state: `"" T g0 | a=1 R g0`,
			op:   func(e *env) { e.apply(put("a", "2")) },
			want: `"" T g0 | a=2 R g0 d`},
		{name: "update in place keeps gap 1 and the ref bit", store: "a=1", state: `a=1 R g1 r`,
			op:   func(e *env) { e.apply(put("a", "2")) },
			want: `"" T g1 | a=2 R g1 d r`},
		{name: "write over a tombstone", state: `a T g0`,
			op:   func(e *env) { e.apply(put("a", "2")) },
			want: `"" T g1 | a=2 R g0 d`},
		{name: "new records inherit their predecessor's gap bit", store: "a=1 c=3", state: `a=1 R g0 | c=3 R g1`,
			op:   func(e *env) { e.apply(put("b", "2"), put("d", "4")) },
			want: `"" T g1 | a=1 R g0 | b=2 R g0 d | c=3 R g1 | d=4 R g1 d`},
		{name: "delete of a record: dirty tombstone keeps the gap", store: "a=1", state: `a=1 R g0`,
			op:   func(e *env) { e.apply(del("a")) },
			want: `"" T g1 | a T g0 d`},
		{name: "delete in a sealed gap does nothing", store: "a=1", state: `a=1 R g0`,
			op:   func(e *env) { e.apply(del("b")) },
			want: `"" T g1 | a=1 R g0`},
		{name: "delete in an unknown gap: dirty tombstone", store: "a=1", state: `a=1 R g1`,
			op:   func(e *env) { e.apply(del("b")) },
			want: `"" T g1 | a=1 R g1 | b T g1 d`},
		{name: "delete of a clean tombstone does nothing", state: `a T g1`,
			op:   func(e *env) { e.apply(del("a")) },
			want: `"" T g1 | a T g1`},
		{name: "rewrite of a dirty tombstone", state: `a T g0 d`,
			op:   func(e *env) { e.apply(put("a", "3")) },
			want: `"" T g1 | a=3 R g0 d`},
		{name: "a batch applies in order", store: "b=0",
			op:   func(e *env) { e.apply(put("a", "1"), del("a"), del("b"), put("b", "2")) },
			want: `"" T g1 | a T g1 d | b=2 R g1 d`},
		{name: "writes are never refused over budget", store: "a=1", state: `a=1 R g1`, tweak: fullBudget,
			op: func(e *env) {
				e.apply(put("b", "2"), put("c", "3"))
				if u := e.b.Stats().UsedBytes; u != 64+3*66 {
					e.t.Errorf("UsedBytes %d, want %d", u, 64+3*66)
				}
			},
			want: `"" T g1 | a=1 R g1 | b=2 R g1 d | c=3 R g1 d`},
		{name: "record policy: delete of an unbuffered key is a dirty tombstone", policy: PolicyRecord, store: "a=1", state: `a=1 R g1`,
			op:   func(e *env) { e.apply(del("b")) },
			want: `"" T g1 | a=1 R g1 | b T g1 d`},
		{name: "none policy: write-through", policy: PolicyNone, store: "b=2",
			op: func(e *env) {
				e.apply(put("a", "1"), del("b"))
				if got := dumpStore(e.t, e.raw, testKS); got != "a=1" {
					e.t.Errorf("store %s", got)
				}
			},
			want: `"" T g1`, reqs: "upsert:1 delete:1"},
		{name: "none policy: a batch's last write per key wins", policy: PolicyNone, store: "a=0",
			op: func(e *env) {
				e.apply(del("a"), put("a", "1"), put("b", "1"), del("b"))
				if got := dumpStore(e.t, e.raw, testKS); got != "a=1" {
					e.t.Errorf("store %s, want a=1", got)
				}
			},
			want: `"" T g1`, reqs: "upsert:1 delete:1"},
	})
}

// mutate makes a conditional write through the lock API (condWrite) and
// asserts its error.
func (e *env) mutate(w Write, c Cond, want error) {
	e.t.Helper()
	if err := condWrite(e.ctx, e.b, testKS, w, c); !errors.Is(err, want) || (want == nil && err != nil) {
		e.t.Fatalf("condWrite(%s): %v, want %v", w.Key, err, want)
	}
}

func TestConditionalWriteRules(t *testing.T) {
	runRules(t, []ruleCase{
		{name: "insert into a sealed gap needs no fetch", store: "a=1", state: `a=1 R g0`,
			op:   func(e *env) { e.mutate(put("b", "2"), MustNotExist, nil) },
			want: `"" T g1 | a=1 R g0 | b=2 R g0 d`},
		{name: "insert over a tombstone", state: `a T g1`,
			op:   func(e *env) { e.mutate(put("a", "2"), MustNotExist, nil) },
			want: `"" T g1 | a=2 R g1 d`},
		{name: "insert over a record fails and changes nothing but the ref bit", store: "a=1", state: `a=1 R g1`,
			op:   func(e *env) { e.mutate(put("a", "2"), MustNotExist, ErrExists) },
			want: `"" T g1 | a=1 R g1 r`},
		{name: "insert in an unknown gap fetches once", state: ``,
			op:   func(e *env) { e.mutate(put("a", "1"), MustNotExist, nil) },
			want: `"" T g1 | a=1 R g1 d`, reqs: "get:1"},
		{name: "insert in an unknown gap of a stored key fails and admits what it fetched", store: "a=1",
			op:   func(e *env) { e.mutate(put("a", "2"), MustNotExist, ErrExists) },
			want: `"" T g1 | a=1 R g1`, reqs: "get:1"},
		{name: "update of a tombstone fails", state: `a T g1`,
			op:   func(e *env) { e.mutate(put("a", "2"), MustExist, ErrNotFound) },
			want: `"" T g1 | a T g1`},
		{name: "update in a sealed gap fails without a fetch (the lock's anchor stays, a tombstone)", state: `"" T g0`,
			op:   func(e *env) { e.mutate(put("a", "2"), MustExist, ErrNotFound) },
			want: `"" T g0 | a T g0`},
		{name: "update in an unknown gap of a stored key", store: "a=1",
			op:   func(e *env) { e.mutate(put("a", "2"), MustExist, nil) },
			want: `"" T g1 | a=2 R g1 d`, reqs: "get:1"},
		{name: "update of a buffered record", store: "a=1", state: `a=1 R g0`,
			op:   func(e *env) { e.mutate(put("a", "2"), MustExist, nil) },
			want: `"" T g1 | a=2 R g0 d r`},
		{name: "record policy: insert of an absent key admits no tombstone", policy: PolicyRecord,
			op:   func(e *env) { e.mutate(put("a", "1"), MustNotExist, nil) },
			want: `"" T g1 | a=1 R g1 d`, reqs: "get:1"},
		{name: "none policy: conditional writes check the store", policy: PolicyNone, store: "a=1",
			op: func(e *env) {
				e.mutate(put("a", "2"), MustNotExist, ErrExists)
				e.mutate(put("a", "2"), MustExist, nil)
				e.mutate(put("b", "2"), MustExist, ErrNotFound)
				if got := dumpStore(e.t, e.raw, testKS); got != "a=2" {
					e.t.Errorf("store %s", got)
				}
			},
			want: `"" T g1`, reqs: "get:3 upsert:1"},
		{name: "a failed fetch changes nothing", store: "a=1",
			op: func(e *env) {
				e.fs.SetFailNext(adapters.OpGet, 1)
				err := condWrite(e.ctx, e.b, testKS, put("a", "2"), MustExist)
				if !isStoreErr(err) || !errors.Is(err, fault.ErrInjected) {
					e.t.Fatalf("condWrite: %v, want a store error", err)
				}
			},
			want: `"" T g1`, reqs: "get:1"},
	})
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

func (e *env) evict(wantFreed int64) {
	e.t.Helper()
	freed, err := e.b.EvictStep(e.ctx, testKS)
	if err != nil || freed != wantFreed {
		e.t.Fatalf("EvictStep = %d %v, want %d", freed, err, wantFreed)
	}
}

// perRecord makes cases run with runs of one (EvictRun 1): each record is
// its own CLOCK unit, the rules these cases state record by record. Runs of
// sealed records are TestEvictRunRules'.
func perRecord(cases []ruleCase) []ruleCase {
	for i := range cases {
		tw := cases[i].tweak
		cases[i].tweak = func(o *Options) {
			o.EvictRun = 1
			if tw != nil {
				tw(o)
			}
		}
	}
	return cases
}

func TestEvictRules(t *testing.T) {
	runRules(t, perRecord([]ruleCase{
		{name: "ref bit is a second chance; removing a regular record opens the predecessor's gap", store: "a=1 b=2",
			state: `"" T g0 | a=1 R g0 r | b=2 R g0`,
			op:    func(e *env) { e.evict(66) },
			want:  `"" T g0 | a=1 R g1`},
		{name: "the second pass removes what the first spared", store: "a=1 b=2",
			state: `"" T g0 | a=1 R g0 r | b=2 R g0`,
			op:    func(e *env) { e.evict(66); e.evict(66) },
			want:  `"" T g1`},
		{name: "clean tombstone g0 after predecessor g0: gap stays sealed", store: "a=1 c=3",
			state: `"" T g0 | a=1 R g0 r | b T g0 | c=3 R g0 r`,
			op:    func(e *env) { e.evict(65) },
			want:  `"" T g0 | a=1 R g0 | c=3 R g0`},
		{name: "clean tombstone g1 after predecessor g0: gap opens", store: "a=1 c=3",
			state: `"" T g0 | a=1 R g0 r | b T g1 | c=3 R g0 r`,
			op:    func(e *env) { e.evict(65) },
			want:  `"" T g0 | a=1 R g1 | c=3 R g0`},
		{name: "clean tombstone g0 after predecessor g1: gap stays open", store: "a=1 c=3",
			state: `"" T g0 | a=1 R g1 r | b T g0 | c=3 R g0 r`,
			op:    func(e *env) { e.evict(65) },
			want:  `"" T g0 | a=1 R g1 | c=3 R g0`},
		{name: "dirty victims are written back, then removed", store: "a=old b=2 c=3",
			state: `"" T g0 | a=new R g0 d | b T g0 d | c=3 R g0 r`,
			op: func(e *env) {
				e.evict(68 + 65)
				if got := dumpStore(e.t, e.raw, testKS); got != "a=new c=3" {
					e.t.Errorf("store %s", got)
				}
			},
			want: `"" T g1 | c=3 R g0`, reqs: "upsert:1 delete:1"},
		{name: "a victim written during its write-back stays, dirty", store: "a=1",
			state: `a=1 R g1 d`,
			op: func(e *env) {
				e.hooks.after(adapters.OpUpsert, func() { e.apply(put("a", "2")) })
				e.evict(-1) // a stays; the write-back gave it the store's version ("2") as its base
				if got := dumpStore(e.t, e.raw, testKS); got != "a=1" {
					e.t.Errorf("store %s", got)
				}
			},
			want: `"" T g1 | a=2 R g1 d`, reqs: "upsert:1"},
		{name: "a failed write-back keeps the record dirty", state: `a=1 R g1 d`,
			op: func(e *env) {
				e.fs.SetFailNext(adapters.OpUpsert, 1)
				if freed, err := e.b.EvictStep(e.ctx, testKS); freed != 0 || !isStoreErr(err) {
					e.t.Fatalf("EvictStep = %d %v, want a store error", freed, err)
				}
			},
			want: `"" T g1 | a=1 R g1 d`, reqs: "upsert:1"},
		{name: "locked, pinned and head records are never evicted", store: "a=1 b=2 c=3",
			state: `"" T g1 | a=1 R g1 r | b=2 R g1 | c=3 R g1`,
			op: func(e *env) {
				sp, _ := e.b.space(testKS)
				o := &Owner{ID: 1}
				sp.mu.RLock()
				if err := grant(sp, e.recLocked(sp, "a"), o, ModeX, false); err != nil {
					e.t.Fatal(err)
				}
				pin(sp, e.recLocked(sp, "b"), o)
				sp.mu.RUnlock()
				e.evict(66)
				e.evict(0)
				e.b.Release(o)
			},
			want: `"" T g1 | a=1 R g1 r | b=2 R g1`},
		{name: "unheld sentinels are removed, referenced or not", store: "a=1 c=3",
			state: `"" T g0 | a=1 R g0 r | b S g0 r | c=3 R g0 r`,
			op:    func(e *env) { e.evict(65) },
			want:  `"" T g0 | a=1 R g1 | c=3 R g0`},
		{name: "the hand advances in batches and wraps around", store: "a=1 b=2 c=3",
			state: `"" T g0 | a=1 R g0 r | b=2 R g0 r | c=3 R g0 r`,
			tweak: func(o *Options) { o.EvictBatch = 2 },
			op:    func(e *env) { e.evict(0); e.evict(0); e.evict(66) },
			want:  `"" T g1 | b=2 R g0 | c=3 R g0`},
		{name: "flush writes back without evicting; clean tombstones stay", store: "a=1 b=2",
			state: `a=9 R g1 d | b T g1 d`,
			op: func(e *env) {
				if err := e.b.Flush(e.ctx); err != nil {
					e.t.Fatal(err)
				}
			},
			want: `"" T g1 | a=9 R g1 | b T g1`, reqs: "upsert:1 delete:1"},
		{name: "record policy: a written-back tombstone is dropped", policy: PolicyRecord, store: "a=1",
			state: `a T g1 d`,
			op: func(e *env) {
				if err := e.b.Flush(e.ctx); err != nil {
					e.t.Fatal(err)
				}
			},
			want: `"" T g1`, reqs: "delete:1"},
		{name: "write-back is split into WriteBatch-sized calls", state: `a=1 R g1 d | b=2 R g1 d | c=3 R g1 d`,
			tweak: func(o *Options) { o.WriteBatch = 2 },
			op: func(e *env) {
				if err := e.b.Flush(e.ctx); err != nil {
					e.t.Fatal(err)
				}
			},
			want: `"" T g1 | a=1 R g1 | b=2 R g1 | c=3 R g1`, reqs: "upsert:2"},
	}))
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
	freed := e.b.EvictUntil(e.ctx, head)
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
		start := time.Now()
		e.get("x", "1", true)
		if d := time.Since(start); d < 40*time.Millisecond {
			t.Fatalf("Get returned after %v, before AdmitWait", d)
		}
		if st := e.b.Stats(); st.AdmitBypass != 1 || st.Admitted != 0 {
			t.Fatalf("bypass %d admitted %d", st.AdmitBypass, st.Admitted)
		}
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
		e.b.EvictUntil(e.ctx, 0)
		if got := dump(t, e.b, testKS); got != `"" T g1 r | a=new R g1` {
			t.Errorf("written back during the fetch: %s, want it kept clean", got)
		}
		if e.b.Stats().EvictDeferred == 0 {
			t.Error("eviction was not deferred")
		}
	})
	e.scan("", "", 0, "a=new c=3", "")
	e.expect(`"" T g0 r | a=new R g0 | c=3 R g0`, "get_range:1 upsert:1")
	e.b.EvictUntil(e.ctx, 0) // no fetch in flight: everything may go
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
		e.b.EvictUntil(e.ctx, 0)
	})
	e.get("a", "old", true) // linearized before the commit: the fetch's answer
	e.get("a", "new", true) // the record stayed: the newer value, from the buffer
}

// TestScanRacingEvictionOfCoverageBound: when the record that ends a scan's
// coverage is evicted during the fetch, the gap before it must not be
// sealed: it now runs past what the fetch saw.
func TestScanRacingEvictionOfCoverageBound(t *testing.T) {
	e := newEnv(t, PolicyNemo, "a=1 b=2 c=3", `"" T g0 | a=1 R g1 | c=3 R g0`)
	e.hooks.after(adapters.OpGetRange, func() { e.b.EvictUntil(e.ctx, 0) })
	e.scan("a", "d", 0, "a=1 b=2 c=3", "")
	e.expect(`"" T g1 | b=2 R g1`, "get_range:1")
	e.get("c", "3", true)
}
