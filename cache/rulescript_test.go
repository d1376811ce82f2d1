package cache

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/fault"
)

// TestRules runs the rule scripts in testdata/rules (datadriven format;
// run with -rewrite to regenerate the expected output after a deliberate
// change). Each case builds an exact buffer state over a counted,
// hookable, fault-injecting embedded store (env), performs operations and
// shows their answers, the resulting records (kind, gap, dirty and ref
// bits, values) and the exact store requests made. Commands:
//
//	new [policy=record|none] [max-bytes=N|full] [evict-run=N] [evict-batch=N] [write-batch=N] [write-par=N]
//	    a fresh buffer (policy nemo unless given; full leaves room for the
//	    head fence alone); input lines "store: a=1 b=2" (the store's
//	    records; a value V*N is N copies of V) and "state: ..." (the
//	    buffer's records, as state prints them); the starting state is
//	    Checked unless it holds sentinels, and the request counters reset
//	get K                          Buffer.Get: K=V, or K absent
//	scan START END [limit=N]       Buffer.Scan ("-": unbounded): records and cursor
//	apply K=V -K ...               Buffer.Apply of puts and deletes, in order
//	insert|update K=V              a write through the lock API (condWrite),
//	                               MustNotExist / MustExist
//	evict [times=N]                Buffer.EvictStep (N times): bytes freed
//	evict-until N [one-turn]       Buffer.EvictUntil, or one turn of the hand
//	flush                          Buffer.Flush
//	lock K, pin K, release         X-lock or pin K for one owner; release it all
//	after OP apply K=V -K ...      apply inside the next store call OP (get,
//	                               get_range, upsert, delete), once it returned
//	fail OP                        the next store call OP fails
//	stats NAME...                  fields of Buffer.Stats
//	store                          the store's records
//	state                          the records, and the requests since the last
//	                               state or new; then Check (the test fails if it
//	                               fails) and the counters reset
//
// Keys print as fmtKey prints them (Go-quoted unless plain); values longer
// than 32 bytes of one repeated byte print as V*N.
func TestRules(t *testing.T) {
	datadriven.Walk(t, "testdata/rules", func(t *testing.T, path string) {
		s := &ruleScript{}
		datadriven.RunTest(t, path, s.run)
	})
}

type ruleScript struct {
	e *env
	o *Owner // the owner lock and pin take locks for
}

// words are a command's arguments as written, key=value pairs whole.
func words(td *datadriven.TestData) []string {
	var out []string
	for _, a := range td.CmdArgs {
		if len(a.Vals) == 0 {
			out = append(out, a.Key)
		} else {
			out = append(out, a.Key+"="+strings.Join(a.Vals, ","))
		}
	}
	return out
}

func (s *ruleScript) run(t *testing.T, td *datadriven.TestData) string {
	if td.Cmd == "new" {
		s.e = newRuleEnv(t, td)
		s.o = &Owner{ID: 1}
		return ""
	}
	if s.e == nil {
		t.Fatalf("%s: %s before new", td.Pos, td.Cmd)
	}
	e, w := s.e, words(td)
	switch td.Cmd {
	case "get":
		key := parseKey(t, w[0])
		v, ok, err := e.b.Get(e.ctx, testKS, key)
		switch {
		case err != nil:
			return describe(err)
		case !ok:
			return fmtKey(key) + " absent"
		case v == nil:
			return fmtKey(key) + " present with a nil value"
		}
		return fmtKey(key) + "=" + fmtVal(v)
	case "scan":
		return s.scan(t, td, w)
	case "apply":
		return describe(e.b.Apply(e.ctx, testKS, parseWrites(t, w)))
	case "insert", "update":
		cond := map[string]Cond{"insert": MustNotExist, "update": MustExist}[td.Cmd]
		return describe(condWrite(e.ctx, e.b, testKS, parseWrites(t, w)[0], cond))
	case "evict":
		return s.evict(td)
	case "evict-until":
		target, err := strconv.ParseInt(w[0], 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", td.Pos, err)
		}
		return fmt.Sprintf("freed %d", evictWith(e.ctx, e.b.newEviction(target, td.HasArg("one-turn"))))
	case "flush":
		return describe(flushAll(e.ctx, e.b))
	case "lock", "pin":
		sp, err := e.b.space(testKS)
		if err != nil {
			t.Fatal(err)
		}
		sp.mu.RLock()
		defer sp.mu.RUnlock()
		r := e.recLocked(sp, w[0])
		if td.Cmd == "pin" {
			pin(sp, r, s.o)
			return ""
		}
		return describe(grant(sp, r, s.o, ModeX, false))
	case "release":
		e.b.Release(s.o)
		return ""
	case "after":
		if len(w) < 2 || w[1] != "apply" {
			t.Fatalf("%s: after OP apply WRITES...", td.Pos)
		}
		ws := parseWrites(t, w[2:])
		e.hooks.after(parseOp(t, w[0]), func() {
			if err := e.b.Apply(e.ctx, testKS, ws); err != nil {
				t.Errorf("%s: Apply inside the store call: %v", td.Pos, err)
			}
		})
		return ""
	case "fail":
		e.fs.SetFailNext(parseOp(t, w[0]), 1)
		return ""
	case "stats":
		st := reflect.ValueOf(e.b.Stats())
		var out []string
		for _, name := range w {
			f := st.FieldByName(name)
			if !f.IsValid() {
				t.Fatalf("%s: no Stats field %q", td.Pos, name)
			}
			out = append(out, fmt.Sprintf("%s=%v", name, f.Interface()))
		}
		return strings.Join(out, " ")
	case "store":
		return dumpStore(t, e.raw, testKS)
	case "state":
		requests := reqs(e.cnt.Stats())
		if requests == "" {
			requests = "none"
		}
		state := dump(t, e.b, testKS)
		e.check()
		e.cnt.Reset()
		return state + "\nrequests: " + requests
	}
	t.Fatalf("%s: unknown command %q", td.Pos, td.Cmd)
	return ""
}

// newRuleEnv is the env a new command describes.
func newRuleEnv(t *testing.T, td *datadriven.TestData) *env {
	policy := PolicyNemo
	var store, state string
	for _, line := range strings.Split(td.Input, "\n") {
		switch k, v, _ := strings.Cut(line, ":"); k {
		case "store":
			store = expandValues(strings.TrimSpace(v))
		case "state":
			state = strings.TrimSpace(v)
		case "":
		default:
			t.Fatalf("%s: bad new input line %q", td.Pos, line)
		}
	}
	var tweaks []func(*Options)
	for _, a := range td.CmdArgs {
		val := ""
		if len(a.Vals) > 0 {
			val = a.Vals[0]
		}
		n, _ := strconv.Atoi(val)
		switch a.Key {
		case "policy":
			policy = map[string]Policy{"record": PolicyRecord, "none": PolicyNone}[val]
			if policy == "" {
				t.Fatalf("%s: bad policy %q", td.Pos, val)
			}
		case "max-bytes":
			if val == "full" {
				n = 80 // the head fence's 64 bytes and nothing else: one record is over
			}
			tweaks = append(tweaks, func(o *Options) { o.MaxBytes = int64(n) })
		case "evict-run":
			tweaks = append(tweaks, func(o *Options) { o.EvictRun = n })
		case "evict-batch":
			tweaks = append(tweaks, func(o *Options) { o.EvictBatch = n })
		case "write-batch":
			tweaks = append(tweaks, func(o *Options) { o.WriteBatch = n })
		case "write-par":
			tweaks = append(tweaks, func(o *Options) { o.WriteBackParallelism = n })
		default:
			t.Fatalf("%s: bad new argument %q", td.Pos, a.Key)
		}
	}
	return newEnv(t, policy, store, state, tweaks...)
}

func (s *ruleScript) scan(t *testing.T, td *datadriven.TestData, w []string) string {
	var lo, hi []byte
	if w[0] != "-" {
		lo = parseKey(t, w[0])
	}
	if w[1] != "-" {
		hi = parseKey(t, w[1])
	}
	limit := 0
	td.MaybeScanArgs(t, "limit", &limit)
	recs, next, err := s.e.b.Scan(s.e.ctx, testKS, lo, hi, limit)
	if err != nil {
		return describe(err)
	}
	out := dumpRecs(recs)
	if len(recs) == 0 {
		out = "(none)"
	}
	if next != nil {
		out += " next " + strconv.Quote(string(next))
	}
	return out
}

// evict runs EvictStep, times=N times in a row: "freed F (N times)" when
// each freed as much.
func (s *ruleScript) evict(td *datadriven.TestData) string {
	times := 1
	td.MaybeScanArgs(s.e.t, "times", &times)
	var out []string
	for range times {
		freed, err := evictStep(s.e.ctx, s.e.b, testKS)
		step := fmt.Sprintf("%d", freed)
		if err != nil {
			step += ": " + describe(err)
		}
		out = append(out, step)
	}
	if times > 1 && slices.Equal(out, slices.Repeat(out[:1], times)) {
		return fmt.Sprintf("freed %s (%d times)", out[0], times)
	}
	return "freed " + strings.Join(out, ", ")
}

// parseWrites reads K=V as a put and -K as a delete.
func parseWrites(t *testing.T, w []string) []Write {
	var ws []Write
	for _, a := range w {
		if k, ok := strings.CutPrefix(a, "-"); ok {
			ws = append(ws, Write{Key: parseKey(t, k), Delete: true})
			continue
		}
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			t.Fatalf("bad write %q: K=V or -K", a)
		}
		ws = append(ws, Write{Key: parseKey(t, k), Value: []byte(v)})
	}
	return ws
}

func parseOp(t *testing.T, name string) adapters.Op {
	for op := adapters.OpGet; op <= adapters.OpDelete; op++ {
		if op.String() == name {
			return op
		}
	}
	t.Fatalf("unknown store operation %q", name)
	return 0
}

// describe names an operation's outcome: ok, exists, not found, store
// error (injected: fault injection's, wrapped as a store failure), or the
// error itself.
func describe(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrExists):
		return "exists"
	case errors.Is(err, ErrNotFound):
		return "not found"
	case isStoreErr(err) && errors.Is(err, fault.ErrInjected):
		return "store error (injected)"
	case isStoreErr(err):
		return "store error"
	}
	return "error: " + err.Error()
}

// expandValues expands V*N in a store spec's values to N copies of V.
func expandValues(spec string) string {
	f := strings.Fields(spec)
	for i, kv := range f {
		k, v, _ := strings.Cut(kv, "=")
		if rep, count, ok := strings.Cut(v, "*"); ok {
			if n, err := strconv.Atoi(count); err == nil {
				f[i] = k + "=" + strings.Repeat(rep, n)
			}
		}
	}
	return strings.Join(f, " ")
}

// fmtVal prints a value, one over 32 bytes of one repeated byte as V*N.
func fmtVal(v []byte) string {
	if len(v) > 32 && strings.Count(string(v), string(v[:1])) == len(v) {
		return fmt.Sprintf("%c*%d", v[0], len(v))
	}
	return string(v)
}
