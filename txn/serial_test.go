package txn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/wal"
)

// The serializability checker. Every committed transaction records what it
// read from others (key -> the version it saw, or absent; a scan of [a, b)
// reads every key of the finite key universe in [a, b), which is how
// predicate reads enter the graph) and what it wrote (each write a unique
// version named after the writer). A shared logical clock ticks after each
// read returns and in the commit log's Append, which runs while the
// committing transaction holds all its locks; so a key's versions are
// ordered by their writers' Append ticks, and under strict 2PL a read must
// return the last version appended before its tick (a snapshot read: one
// no newer than its tick and no older than the last version whose commit
// returned before the snapshot began). The checker verifies
// that, then builds the dependency graph (ww: consecutive versions; wr:
// writer -> reader; rw: reader -> writer of the next version after the one
// read) and requires it to be acyclic.

type readObs struct {
	key int
	val string // "" = absent
	at  uint64
}

type txnHistory struct {
	id     uint64
	reads  []readObs
	writes map[int]bool // key -> present after the write (false: deleted)
	append uint64       // clock tick of the commit log append; 0 = none
	// A read-only transaction reading a snapshot takes no locks: it must
	// read one consistent state (no dependency cycle), no version from
	// after its read, and no version older than one whose commit had
	// returned before it began (begin: a tick taken before Begin).
	snapshot bool
	begin    uint64
	done     uint64 // clock tick after Commit returned
	// seq is a writer's place in install order, or a snapshot's: the
	// last commit it must see (Txn.seq). A snapshot must read, for every
	// key, exactly the last version installed up to its seq.
	seq uint64
}

// history collects committed transactions; txn 0 is the initial state.
type history struct {
	clock   atomic.Uint64
	mu      sync.Mutex
	appends map[uint64]uint64 // txn id -> append tick
	txns    []*txnHistory
}

func newHistory(initial []int) *history {
	h := &history{appends: map[uint64]uint64{}}
	init := &txnHistory{writes: map[int]bool{}}
	for _, key := range initial {
		init.writes[key] = true
	}
	h.txns = append(h.txns, init)
	return h
}

// Append implements CommitLog: it stamps the commit.
func (h *history) Append(_ context.Context, id uint64, _ []Change) error {
	tick := h.clock.Add(1)
	h.mu.Lock()
	h.appends[id] = tick
	h.mu.Unlock()
	return nil
}

func (h *history) committed(x *txnHistory) {
	h.mu.Lock()
	defer h.mu.Unlock()
	x.append = h.appends[x.id]
	h.txns = append(h.txns, x)
}

func versionName(id uint64, key int) string { return fmt.Sprintf("%d:%d", id, key) }

// check returns every violation found; keys is the key universe size.
func (h *history) check(keys int) []string {
	var bad []string
	byID := map[uint64]*txnHistory{}
	for _, x := range h.txns {
		byID[x.id] = x
	}
	// Version order per key: the initial state, then writers by tick.
	order := make([][]*txnHistory, keys)
	for key := range order {
		order[key] = []*txnHistory{h.txns[0]}
		var ws []*txnHistory
		for _, x := range h.txns[1:] {
			if _, ok := x.writes[key]; ok {
				ws = append(ws, x)
			}
		}
		sort.Slice(ws, func(i, j int) bool { return ws[i].append < ws[j].append })
		order[key] = append(order[key], ws...)
	}
	present := func(x *txnHistory, key int) bool { return x.writes[key] }
	edges := map[uint64]map[uint64]string{}
	edge := func(from, to uint64, why string) {
		if from == to {
			return
		}
		if edges[from] == nil {
			edges[from] = map[uint64]string{}
		}
		edges[from][to] = why
	}
	for key, vs := range order {
		for i := 1; i < len(vs); i++ {
			edge(vs[i-1].id, vs[i].id, fmt.Sprintf("ww on %d", key))
		}
	}
	for _, x := range h.txns[1:] {
		for _, r := range x.reads {
			vs := order[r.key]
			hi := 0 // the last version appended before the read
			for i := 1; i < len(vs) && vs[i].append < r.at; i++ {
				hi = i
			}
			lo := hi // the oldest version the read may return
			if x.snapshot {
				lo = 0
				for i := 1; i <= hi; i++ {
					if vs[i].seq <= x.seq {
						lo = i
					}
				}
				for i := lo + 1; i < len(vs); i++ {
					if vs[i].done != 0 && vs[i].done < x.begin {
						bad = append(bad, fmt.Sprintf("txn %d's snapshot misses %s, committed before it began", x.id, versionName(vs[i].id, r.key)))
					}
				}
				hi = lo
			}
			pos := -1
			if r.val == "" {
				for i := hi; i >= lo; i-- {
					if !present(vs[i], r.key) {
						pos = i
						break
					}
				}
				if pos < 0 {
					bad = append(bad, fmt.Sprintf("txn %d read %d as absent, but the latest version before it is %s", x.id, r.key, versionName(vs[hi].id, r.key)))
					continue
				}
			} else {
				id, _ := strconv.ParseUint(strings.Split(r.val, ":")[0], 10, 64)
				w, ok := byID[id]
				switch {
				case !ok:
					bad = append(bad, fmt.Sprintf("txn %d read %d = %s, written by no committed transaction", x.id, r.key, r.val))
					continue
				case !present(w, r.key) || r.val != versionName(w.id, r.key):
					bad = append(bad, fmt.Sprintf("txn %d read %d = %s, which txn %d did not leave", x.id, r.key, r.val, id))
					continue
				}
				for i, v := range vs {
					if v == w {
						pos = i
					}
				}
				if pos < lo || pos > hi {
					bad = append(bad, fmt.Sprintf("txn %d read %d = %s, but the latest version before it is %s (oldest allowed %s)", x.id, r.key, r.val, versionName(vs[hi].id, r.key), versionName(vs[lo].id, r.key)))
				}
			}
			edge(vs[pos].id, x.id, fmt.Sprintf("wr on %d", r.key))
			if pos+1 < len(vs) {
				edge(x.id, vs[pos+1].id, fmt.Sprintf("rw on %d", r.key))
			}
		}
	}
	if cycle := findCycle(edges); cycle != "" {
		bad = append(bad, "dependency cycle: "+cycle)
	}
	return bad
}

// findCycle returns a description of one cycle, or "".
func findCycle(edges map[uint64]map[uint64]string) string {
	const (
		white = iota
		grey
		black
	)
	color := map[uint64]int{}
	var stack []uint64
	var found string
	var visit func(n uint64) bool
	visit = func(n uint64) bool {
		color[n] = grey
		stack = append(stack, n)
		succ := make([]uint64, 0, len(edges[n]))
		for m := range edges[n] {
			succ = append(succ, m)
		}
		sort.Slice(succ, func(i, j int) bool { return succ[i] < succ[j] })
		for _, m := range succ {
			switch color[m] {
			case grey:
				var b strings.Builder
				i := len(stack) - 1
				for stack[i] != m {
					i--
				}
				for ; i < len(stack); i++ {
					next := m
					if i+1 < len(stack) {
						next = stack[i+1]
					}
					fmt.Fprintf(&b, "T%d -%s-> ", stack[i], edges[stack[i]][next])
				}
				fmt.Fprintf(&b, "T%d", m)
				found = b.String()
				return true
			case white:
				if visit(m) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
		return false
	}
	nodes := make([]uint64, 0, len(edges))
	for n := range edges {
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i] < nodes[j] })
	for _, n := range nodes {
		if color[n] == white && visit(n) {
			return found
		}
	}
	return ""
}

// The checker must catch the anomalies it is there for.
func TestCheckerFindsAnomalies(t *testing.T) {
	// Write skew: both read x=0 and y=1 initially, T1 writes x, T2 writes y.
	skew := newHistory([]int{0, 1})
	skew.txns = append(skew.txns,
		&txnHistory{id: 1, reads: []readObs{{0, "0:0", 1}, {1, "0:1", 2}}, writes: map[int]bool{0: true}, append: 5},
		&txnHistory{id: 2, reads: []readObs{{0, "0:0", 3}, {1, "0:1", 4}}, writes: map[int]bool{1: true}, append: 6})
	if bad := skew.check(2); len(bad) != 1 || !strings.Contains(bad[0], "cycle") {
		t.Errorf("write skew: %q, want one dependency cycle", bad)
	}
	// Lost update: both read x initially and overwrite it.
	lost := newHistory([]int{0})
	lost.txns = append(lost.txns,
		&txnHistory{id: 1, reads: []readObs{{0, "0:0", 1}}, writes: map[int]bool{0: true}, append: 3},
		&txnHistory{id: 2, reads: []readObs{{0, "0:0", 2}}, writes: map[int]bool{0: true}, append: 4})
	if bad := lost.check(1); len(bad) != 1 || !strings.Contains(bad[0], "cycle") {
		t.Errorf("lost update: %q, want one dependency cycle", bad)
	}
	// A phantom: T1 scans [0, 2) and sees nothing, T2 inserts 1, T1's second
	// scan sees it.
	ph := newHistory(nil)
	ph.txns = append(ph.txns,
		&txnHistory{id: 1, reads: []readObs{{0, "", 1}, {1, "", 1}, {1, "2:1", 4}}, writes: map[int]bool{}, append: 0},
		&txnHistory{id: 2, writes: map[int]bool{1: true}, append: 2})
	if bad := ph.check(2); len(bad) == 0 {
		t.Error("phantom read not reported")
	}
	// A read of an aborted (never committed) version, and a stale read.
	dirty := newHistory([]int{0})
	dirty.txns = append(dirty.txns,
		&txnHistory{id: 1, reads: []readObs{{0, "9:0", 1}}, writes: map[int]bool{}},
		&txnHistory{id: 2, writes: map[int]bool{0: true}, append: 2},
		&txnHistory{id: 3, reads: []readObs{{0, "0:0", 3}}, writes: map[int]bool{}})
	if bad := dirty.check(1); len(bad) != 2 {
		t.Errorf("dirty and stale reads: %q, want two reports", bad)
	}
	// And a serial history is fine.
	ok := newHistory([]int{0})
	ok.txns = append(ok.txns,
		&txnHistory{id: 1, reads: []readObs{{0, "0:0", 1}}, writes: map[int]bool{0: true}, append: 2},
		&txnHistory{id: 2, reads: []readObs{{0, "1:0", 3}, {1, "", 3}}, writes: map[int]bool{1: true}, append: 4})
	if bad := ok.check(2); len(bad) != 0 {
		t.Errorf("serial history: %q", bad)
	}
}

// TestSerializable runs random concurrent transactions (point reads,
// locking reads, scans, upserts, inserts, updates, deletes; read-only and
// read-write) and checks the committed history with the checker above.
func TestSerializable(t *testing.T) {
	for _, ph := range []Phantom{NextKey, PCL} {
		for _, pol := range []cache.Policy{cache.PolicyNemo, cache.PolicyRecord, cache.PolicyNone} {
			t.Run(string(ph)+"/"+string(pol), func(t *testing.T) { serializable(t, ph, pol, false) })
		}
		t.Run(string(ph)+"/nemo/early", func(t *testing.T) { serializable(t, ph, cache.PolicyNemo, true) })
	}
}

// earlyHistory is the history's commit log over a real WAL, for early lock
// release: a commit is stamped once the WAL has sequenced it, before its
// locks go (as Append stamps it before they go without early release).
type earlyHistory struct {
	h *history
	walLog
}

func (e earlyHistory) Append(ctx context.Context, id uint64, cs []Change) error {
	if err := e.walLog.Append(ctx, id, cs); err != nil {
		return err
	}
	return e.h.Append(ctx, id, cs)
}

func (e earlyHistory) AppendEarly(ctx context.Context, id uint64, cs []Change) (uint64, <-chan error, error) {
	lsn, durable, err := e.walLog.AppendEarly(ctx, id, cs)
	if err == nil {
		err = e.h.Append(ctx, id, cs)
	}
	return lsn, durable, err
}

// serializable runs the checker; early runs the engine with early lock
// release over a WAL.
func serializable(t *testing.T, ph Phantom, pol cache.Policy, early bool) {
	ctx := context.Background()
	const keys, workers, perWorker = 48, 8, 250
	var initial []int
	for key := 0; key < keys; key += 3 {
		initial = append(initial, key)
	}
	h := newHistory(initial)
	var log CommitLog = h
	if early {
		wo := wal.Options{Dir: t.TempDir()}
		wo.Logger = quiet
		l, err := wal.Open(wo)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		log = earlyHistory{h, walLog{l}}
	}
	v := newEnv(t,
		cache.Options{Policy: pol, MaxBytes: 20 * (64 + 16), MaxKeyBytes: 64, AdmitWait: time.Millisecond},
		Options{Phantom: ph, PCLPartitionSize: 4, Log: log, EarlyRelease: early})
	for _, key := range initial {
		if err := v.e.Upsert(ctx, ks, k(key), []byte(versionName(0, key))); err != nil {
			t.Fatal(err)
		}
	}
	h.clock.Store(0) // the seeding commits are the initial state
	var aborted atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w)+seedShift(t), 3))
			for i := 0; i < perWorker && !t.Failed(); i++ {
				rec, err := randomTxn(ctx, v.e, h, rng, keys)
				switch {
				case err == nil:
					h.committed(rec)
				case errors.Is(err, ErrConflict):
					aborted.Add(1)
				default:
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	bad := h.check(keys)
	for i, b := range bad {
		if i == 10 {
			t.Errorf("... and %d more", len(bad)-10)
			break
		}
		t.Error(b)
	}
	var reads, writes int
	for _, x := range h.txns {
		reads += len(x.reads)
		writes += len(x.writes)
	}
	t.Logf("%s: %d committed (%d reads, %d writes), %d aborted by conflicts", ph, len(h.txns)-1, reads, writes, aborted.Load())
	if len(h.txns) < workers*perWorker/4 {
		t.Fatalf("only %d of %d transactions committed", len(h.txns)-1, workers*perWorker)
	}
}

func randomTxn(ctx context.Context, e *Engine, h *history, rng *rand.Rand, keys int) (*txnHistory, error) {
	readOnly := rng.IntN(4) == 0
	begin := h.clock.Add(1)
	x, err := e.Begin(readOnly)
	if err != nil {
		return nil, err
	}
	defer x.Abort() // no-op after Commit
	rec := &txnHistory{id: x.ID(), writes: map[int]bool{}, snapshot: x.snapshot, begin: begin, seq: x.seq}
	read := func(key int, val []byte, ok bool, at uint64) {
		if _, mine := rec.writes[key]; mine {
			return // reads of its own writes are not dependencies
		}
		o := readObs{key: key, at: at}
		if ok {
			o.val = string(val)
		}
		rec.reads = append(rec.reads, o)
	}
	for n := 1 + rng.IntN(4); n > 0; n-- {
		key := rng.IntN(keys)
		op := rng.IntN(8)
		if readOnly {
			op = rng.IntN(2)
		}
		switch op {
		case 0, 2: // point read; locking read in a read-write transaction
			get := x.Get
			if op == 2 {
				get = x.GetForUpdate
			}
			val, ok, err := get(ctx, ks, k(key))
			if err != nil {
				return nil, err
			}
			read(key, val, ok, h.clock.Add(1))
		case 1: // scan: a predicate read over every key in [key, end)
			end := min(key+1+rng.IntN(6), keys)
			recs, _, err := x.Scan(ctx, ks, k(key), k(end), 0)
			if err != nil {
				return nil, err
			}
			at := h.clock.Add(1)
			got := map[int][]byte{}
			for _, r := range recs {
				got[int(binary.BigEndian.Uint64(r.Key))] = r.Value
			}
			for kk := key; kk < end; kk++ {
				val, ok := got[kk]
				read(kk, val, ok, at)
			}
		case 3, 4:
			if err := x.Upsert(ctx, ks, k(key), []byte(versionName(rec.id, key))); err != nil {
				return nil, err
			}
			rec.writes[key] = true
		case 5:
			err := x.Insert(ctx, ks, k(key), []byte(versionName(rec.id, key)))
			if err == nil {
				rec.writes[key] = true
			} else if !errors.Is(err, ErrExists) {
				return nil, err
			}
		case 6:
			err := x.Update(ctx, ks, k(key), []byte(versionName(rec.id, key)))
			if err == nil {
				rec.writes[key] = true
			} else if !errors.Is(err, ErrNotFound) {
				return nil, err
			}
		case 7:
			if _, err := x.Delete(ctx, ks, k(key)); err != nil {
				return nil, err
			}
			rec.writes[key] = false
		}
	}
	if err := x.Commit(ctx); err != nil {
		return nil, err
	}
	rec.done = h.clock.Add(1)
	if !rec.snapshot {
		rec.seq = x.seq
	}
	return rec, nil
}
