package txn

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
)

// TestScripts runs the interleaving scripts in testdata/ (datadriven
// format; run with -rewrite to regenerate the expected output after a
// deliberate change). Commands:
//
//	new [pcl=SIZE] [budget=B]  fresh store, buffer and engine (nextkey unless pcl)
//	seed K[=V]...              write straight to the store (the buffer knows nothing)
//	put K[=V]...               Engine.Upsert (committed, dirty in the buffer)
//	warm START END             Engine.Scan, to cache a range
//	read K                     Engine.Get (lock-free)
//	begin T [ro]               start transaction T (ro: read-only, reading a snapshot)
//	get|getx T K               Txn.Get / Txn.GetForUpdate
//	scan T START END [limit=N] Txn.Scan of [START, END) ("-" = unbounded)
//	insert|update|upsert T K V, delete T K
//	commit T, abort T
//	OP ... async               run OP while the gate holds store reads; prints
//	                           "blocked" once the op waits on the store
//	arm [range] / release      hold store reads (only range reads) / let go
//	await T                    the result of T's async op
//	down / up                  store outage on / off
//	locks [START END]          buffered records with bits and lock holders
//	pcl                        the partition lock table
//	flush, evict, check        Engine.Flush, evict everything evictable, Buffer.Check
//
// Keys are decimal integers, encoded as 8-byte big-endian.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/scripts", func(t *testing.T, path string) {
		s := &script{t: t}
		s.reset(Options{}, 0)
		datadriven.RunTest(t, path, s.run)
	})
}

type script struct {
	t     *testing.T
	v     *env
	txns  map[string]*Txn
	names map[uint64]string
	async map[string]chan string
}

func (s *script) reset(opts Options, budget int64) {
	// NO_WAIT: a script runs one step at a time, so a lock request that
	// waited would wait for a step that never comes; it fails at once and
	// the dumps show who was in the way.
	opts.LockWait = -1
	// Workers off: eviction and write-back only happen when a script says
	// so, which keeps the lock and bit dumps deterministic.
	s.v = newEnv(s.t, cache.Options{DisableWorkers: true, MaxBytes: budget, MaxKeyBytes: 64}, opts)
	s.txns = map[string]*Txn{}
	s.names = map[uint64]string{}
	s.async = map[string]chan string{}
}

func (s *script) key(t *testing.T, a string) []byte {
	if a == "-" {
		return nil
	}
	n, err := strconv.Atoi(a)
	if err != nil {
		t.Fatalf("bad key %q", a)
	}
	return k(n)
}

// args are the positional words of a command (datadriven's CmdArgs keys).
func args(td *datadriven.TestData) []string {
	var out []string
	for _, a := range td.CmdArgs {
		if len(a.Vals) == 0 && a.Key != "async" && a.Key != "ro" && a.Key != "range" {
			out = append(out, a.Key)
		}
	}
	return out
}

func (s *script) txn(t *testing.T, name string) *Txn {
	x, ok := s.txns[name]
	if !ok {
		t.Fatalf("no transaction %q", name)
	}
	return x
}

func (s *script) run(t *testing.T, td *datadriven.TestData) string {
	ctx := context.Background()
	a := args(td)
	e := s.v.e
	switch td.Cmd {
	case "new":
		var opts Options
		if td.HasArg("pcl") {
			opts.Phantom = PCL
			td.ScanArgs(t, "pcl", &opts.PCLPartitionSize)
		}
		var budget int64
		if td.HasArg("budget") {
			td.ScanArgs(t, "budget", &budget)
		}
		s.reset(opts, budget)
		return ""
	case "seed", "put":
		for _, ca := range td.CmdArgs {
			val := "v" + ca.Key
			if len(ca.Vals) > 0 {
				val = ca.Vals[0]
			}
			var err error
			if td.Cmd == "seed" {
				_, err = s.v.st.Upsert(ctx, ks, adapters.Puts([]adapters.Record{{Key: s.key(t, ca.Key), Value: []byte(val)}}))
			} else {
				err = e.Upsert(ctx, ks, s.key(t, ca.Key), []byte(val))
			}
			if err != nil {
				return s.describe(err)
			}
		}
		return ""
	case "warm":
		recs, _, err := e.Scan(ctx, ks, s.key(t, a[0]), s.key(t, a[1]), 0, ReadSerializable)
		if err != nil {
			return s.describe(err)
		}
		return fmtRecs(recs, nil)
	case "read":
		v, ok, err := e.Get(ctx, ks, s.key(t, a[0]), ReadLatest)
		return fmtGet(v, ok, err, s)
	case "begin":
		x, err := e.Begin(td.HasArg("ro"))
		if err != nil {
			return s.describe(err)
		}
		s.txns[a[0]] = x
		s.names[x.ID()] = a[0]
		return ""
	case "arm":
		s.v.gate.arm(td.HasArg("range"))
		return ""
	case "release":
		s.v.gate.open()
		return ""
	case "await":
		ch, ok := s.async[a[0]]
		if !ok {
			t.Fatalf("no async op of %s", a[0])
		}
		delete(s.async, a[0])
		select {
		case out := <-ch:
			return out
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not finish", a[0])
		}
	case "down", "up":
		s.v.fault.SetDown(td.Cmd == "down")
		return ""
	case "locks":
		var lo, hi []byte
		if len(a) == 2 {
			lo, hi = s.key(t, a[0]), s.key(t, a[1])
		}
		return s.locks(t, lo, hi)
	case "pcl":
		return s.pclDump()
	case "flush":
		return s.describe(e.Flush(ctx))
	case "evict":
		s.v.e.EvictUntil(ctx, 0)
		return ""
	case "check":
		if n := e.Stats().Live; n != 0 {
			return fmt.Sprintf("%d transactions live", n)
		}
		if err := s.v.buf.Check(ctx); err != nil {
			return err.Error()
		}
		return "ok"
	}
	// Transaction operations.
	x := s.txn(t, a[0])
	op := func() string { return s.txnOp(t, td.Cmd, x, a[1:], td) }
	if !td.HasArg("async") {
		return op()
	}
	ch := make(chan string, 1)
	s.async[a[0]] = ch
	go func() { ch <- op() }()
	select {
	case <-s.v.gate.entered:
		return "blocked"
	case out := <-ch:
		delete(s.async, a[0])
		return out
	case <-time.After(10 * time.Second):
		t.Fatalf("async %s neither finished nor reached the store", td.Cmd)
	}
	return ""
}

func (s *script) txnOp(t *testing.T, cmd string, x *Txn, a []string, td *datadriven.TestData) string {
	ctx := context.Background()
	switch cmd {
	case "get", "getx":
		read := x.Get
		if cmd == "getx" {
			read = x.GetForUpdate
		}
		v, ok, err := read(ctx, ks, s.key(t, a[0]))
		return s.after(x, fmtGet(v, ok, err, s))
	case "scan":
		limit := 0
		if td.HasArg("limit") {
			td.ScanArgs(t, "limit", &limit)
		}
		recs, next, err := x.Scan(ctx, ks, s.key(t, a[0]), s.key(t, a[1]), limit)
		if err != nil {
			return s.after(x, s.describe(err))
		}
		return fmtRecs(recs, next)
	case "insert", "update", "upsert":
		f := map[string]func(context.Context, adapters.Keyspace, []byte, []byte) error{
			"insert": x.Insert, "update": x.Update, "upsert": x.Upsert,
		}[cmd]
		return s.after(x, s.describe(f(ctx, ks, s.key(t, a[0]), []byte(a[1]))))
	case "delete":
		existed, err := x.Delete(ctx, ks, s.key(t, a[0]))
		if err != nil {
			return s.after(x, s.describe(err))
		}
		return fmt.Sprintf("existed=%v", existed)
	case "commit":
		return s.describe(x.Commit(ctx))
	case "abort":
		x.Abort()
		return ""
	}
	t.Fatalf("unknown command %q", cmd)
	return ""
}

// after appends the transaction's state when an operation failed, so the
// scripts show that a NO_WAIT conflict aborts the requester.
func (s *script) after(x *Txn, out string) string {
	x.mu.Lock()
	st := x.state
	x.mu.Unlock()
	if st == aborted && !strings.HasPrefix(out, "aborted") {
		return out + " (" + s.names[x.ID()] + " aborted)"
	}
	return out
}

func (s *script) describe(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrAborted):
		cause := "client"
		switch {
		case errors.Is(err, ErrConflict):
			cause = "conflict"
		case errors.Is(err, ErrIdleTimeout):
			cause = "idle timeout"
		}
		return "aborted (" + cause + ")"
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.Is(err, ErrExists):
		return "exists"
	case errors.Is(err, ErrNotFound):
		return "not found"
	case errors.Is(err, ErrReadOnly):
		return "read-only"
	case errors.Is(err, ErrDone):
		return "done"
	case errors.Is(err, adapters.ErrUnavailable):
		return "unavailable"
	}
	return "error: " + err.Error()
}

func fmtGet(v []byte, ok bool, err error, s *script) string {
	switch {
	case err != nil:
		return s.describe(err)
	case !ok:
		return "absent"
	}
	return string(v)
}

func fmtRecs(recs []adapters.Record, next []byte) string {
	var b strings.Builder
	for i, r := range recs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", keyName(r.Key), r.Value)
	}
	if len(recs) == 0 {
		b.WriteString("(empty)")
	}
	if next != nil {
		fmt.Fprintf(&b, " next=%s", keyName(next))
	}
	return b.String()
}

func (s *script) who(ids ...uint64) string {
	var ns []string
	for _, id := range ids {
		if id == 0 {
			continue
		}
		n, ok := s.names[id]
		if !ok {
			n = fmt.Sprintf("#%d", id)
		}
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return strings.Join(ns, ",")
}

func (s *script) locks(t *testing.T, lo, hi []byte) string {
	infos, err := s.v.buf.Records(ks, lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, li := range infos {
		fmt.Fprintf(&b, "%s %s gap=%d", keyName(li.Key), li.Kind, b2i(li.Gap))
		if li.Dirty {
			b.WriteString(" dirty")
		}
		if li.RowX != 0 {
			fmt.Fprintf(&b, " row:X(%s)", s.who(li.RowX))
		}
		if len(li.RowS) > 0 {
			fmt.Fprintf(&b, " row:S(%s)", s.who(li.RowS...))
		}
		if li.GapX != 0 {
			fmt.Fprintf(&b, " next:X(%s)", s.who(li.GapX))
		}
		if len(li.GapS) > 0 {
			fmt.Fprintf(&b, " next:S(%s)", s.who(li.GapS...))
		}
		if li.Pinned > 0 {
			fmt.Fprintf(&b, " pinned=%d", li.Pinned)
		}
		b.WriteByte('\n')
	}
	if b.Len() == 0 {
		return "(empty)"
	}
	return b.String()
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

func (s *script) pclDump() string {
	p := s.v.e.pcl
	if p == nil {
		return "(not pcl)"
	}
	var lines []string
	for i := range p.stripes {
		st := &p.stripes[i]
		st.mu.Lock()
		for key, l := range st.locks {
			part := fmt.Sprint(key.p)
			if key.p == wholeKeyspace {
				part = "keyspace"
			}
			line := "partition " + part
			if len(l.s) > 0 {
				line += " S(" + s.who(slices.Collect(maps.Keys(l.s))...) + ")"
			}
			if len(l.ix) > 0 {
				line += " IX(" + s.who(slices.Collect(maps.Keys(l.ix))...) + ")"
			}
			lines = append(lines, line)
		}
		st.mu.Unlock()
	}
	if len(lines) == 0 {
		return "(empty)"
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
