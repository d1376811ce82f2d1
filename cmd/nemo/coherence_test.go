package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
)

// The coherence tests run three real nemo processes in coherence mode
// shared over one Azurite / one Datastore emulator, plus a client that
// writes the backend directly, all through the real SDKs, and check what
// shared mode promises other writers, each property a subtest of
// TestBinaryCoherenceSharedAzure and of TestBinaryCoherenceSharedDatastore
// (per backend), named after it:
//
//  1. ConcurrentInsertsOfOneKeyHaveOneWinner: of concurrent inserts of one
//     key (from every replica and the direct writer at once) exactly one
//     succeeds, the others are refused as already existing;
//  2. conditional writes are checked against the store:
//     IfMatchHonouredAtEveryReplicaIffUnchanged (Azure): If-Match with an
//     ETag obtained at one replica (or directly) is honoured at another iff
//     nothing wrote the entity in between, for updates and deletes;
//     IfMatchReadModifyWriteLosesNoUpdate (Azure: If-Match loops) and
//     TransactionalReadModifyWriteLosesNoUpdate (Datastore:
//     RunInTransaction): read-modify-write increments of one counter run
//     from every replica at once lose no update;
//  3. RandomWorkloadKeepsEveryAcknowledgedWrite: a random workload (point
//     writes, conditional writes, atomic pairs of writes,
//     read-modify-writes) over 20 colliding keys in 2 partitions, in 4 rounds: no
//     acknowledged write is lost (after each round every key's value in the
//     store is an acknowledged write not followed by a later acknowledged
//     write of that key, per the ops' start/end times), every value read
//     through a replica is one someone wrote to that key, and max_staleness
//     + slack after the writers stopped every replica reads exactly what
//     the store holds;
//  4. ReadsNoStalerThanMaxStaleness: reads through each replica are never
//     staler than max_staleness (+ slack) while the direct writer changes a
//     key every 100 ms;
//  5. TableCreatedElsewhereAppearsWithinMaxStaleness (Azure),
//     NamespaceCreatedElsewhereAppearsWithinMaxStaleness (Datastore): a
//     table / namespace+kind created directly in the backend appears at
//     every replica within max_staleness (+ slack), even after the replica
//     answered "not found" for it;
//  6. NoWriteBackConflictsAndCleanDrain, last: no replica counts a
//     write-back conflict or writes conflicts.jsonl, and all drain with exit
//     status 0.
//
// NEMO_COHERENCE_STEPS sets the random operations per workload goroutine
// (default 800); NEMO_COHERENCE_SEED fixes the seed (logged); on failure,
// NEMO_COHERENCE_LOGDIR keeps each replica's full debug log there.

const (
	cohStaleness = time.Second
	cohSlack     = 300 * time.Millisecond
)

// Outcomes of an operation.
const (
	pairUpsert = iota
	pairInsert
	pairUpdate
	pairDelete
)

const (
	stRefused   = "refused" // an atomic batch was refused as a whole: nothing written
	stOK        = "ok"
	stExists    = "exists"       // 409 EntityAlreadyExists / AlreadyExists
	stPrecond   = "precondition" // 412
	stNotFound  = "notfound"     // 404 / NotFound / ErrNoSuchEntity
	stAborted   = "aborted"      // transaction gave up: nothing written
	stAmbiguous = "ambiguous"    // anything else: the write may have landed
)

func cohSteps() int {
	if s := os.Getenv("NEMO_COHERENCE_STEPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err == nil && n > 0 {
			return n
		}
	}
	return 800
}

func cohSeed(t *testing.T) uint64 { return envSeed(t, "NEMO_COHERENCE_SEED") }

// cohKV is one client of the backend (through a nemo or directly), over
// string keys "pN/kNN" holding one string property V.
type cohKV interface {
	name() string
	get(ctx context.Context, key string) (val, etag string, err error)
	query(ctx context.Context, key string) (val string, err error) // the key through a query, not a point read
	// all reads every key of the table (Azure) or kind (Datastore)
	// through one query, followed to its end: key → value.
	all(ctx context.Context) (map[string]string, error)
	// timer times the client's queries (nil: not timed).
	timer() *rpcTimer
	insert(ctx context.Context, key, val string) (etag string, err error)
	upsert(ctx context.Context, key, val string) (etag string, err error)
	update(ctx context.Context, key, val, etag string) (string, error) // etag "" = unconditional
	del(ctx context.Context, key, etag string) error                   // etag "" = unconditional
	// rmw reads key and writes val in one transaction (Datastore) or
	// conditionally on the read's ETag (Azure).
	rmw(ctx context.Context, key string, f func(old string, found bool) string) (string, error)
	// pair writes two keys of one partition atomically (Azure: one
	// entity group transaction; Datastore: one transaction): key1 is
	// upserted to val1; key2 per mode: pairUpsert, pairInsert (must be
	// absent), pairUpdate (must exist; Azure: If-Match etag2 unless
	// empty), pairDelete (Azure: If-Match etag2 unless empty).
	pair(ctx context.Context, key1, val1, key2, val2 string, mode int, etag2 string) error
	classify(err error) string
}

// ---- harness ----

type cohEnv struct {
	procs  []*proc
	dirs   []string
	direct func() cohKV
	newKV  func(p int, label string) cohKV // p = -1: direct
	m      *model
	// partitioned: the replicas run coherence.mode partitioned, which
	// takes no writer outside nemo: the phases write through the
	// replicas only, and read the store only after every replica has
	// flushed (its owner's writes are in its log and buffer until then).
	partitioned bool
}

// writers are the clients of a phase that writes: two per replica, and
// the direct writer unless the replicas run partitioned.
func (e *cohEnv) writers() []cohKV {
	var clients []cohKV
	if !e.partitioned {
		clients = append(clients, e.newKV(-1, "direct"))
	}
	for i := range e.procs {
		clients = append(clients, e.newKV(i, fmt.Sprintf("r%da", i)), e.newKV(i, fmt.Sprintf("r%db", i)))
	}
	return clients
}

// store is a direct reader of the store, which holds every acknowledged
// write once it returns: in partitioned mode it flushes every replica
// first (POST /debug/flush).
func (e *cohEnv) store(t *testing.T) cohKV {
	t.Helper()
	if e.partitioned {
		for _, p := range e.procs {
			p.flush(t)
		}
	}
	return e.direct()
}

// setup is the client a phase's initial writes go through: the direct
// one, or in partitioned mode the first replica.
func (e *cohEnv) setup() cohKV {
	if e.partitioned {
		return e.newKV(0, "r0")
	}
	return e.direct()
}

func (e *cohEnv) allClients() []cohKV {
	var out []cohKV
	for i := range e.procs {
		out = append(out, e.newKV(i, fmt.Sprintf("r%d", i)))
	}
	return out
}

func startCoherenceNemos(t *testing.T, env []string) ([]*proc, []string) {
	var procs []*proc
	var dirs []string
	for range 3 {
		d := t.TempDir()
		p := startNemo(t, d, append([]string{"NEMO_COHERENCE_MODE=shared",
			"NEMO_COHERENCE_MAX_STALENESS=" + cohStaleness.String()}, env...)...)
		procs = append(procs, p)
		dirs = append(dirs, d)
	}
	for _, p := range procs {
		p.waitReady(t)
	}
	logOnFailure(t, "NEMO_COHERENCE_LOGDIR", 40, func() []*proc { return procs })
	return procs, dirs
}

// opTimeout is how long a client of the coherence tests waits for one
// operation; past it the outcome is unknown (and the model says so). It
// must outlast nemo's own request deadline, or the client gives up on
// answers nemo is still bound to give (TestBinaryCoherenceSharedDatastore
// raises both in front of Firestore). No test of this package runs in
// parallel, so a test may set it for its own run.
var opTimeout = 20 * time.Second

func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}

// phaseInsertRace is assertion 1: every client inserts each of n fresh keys
// at once; exactly one wins, the rest get "already exists", the store and
// every replica then hold the winner's value. Anything else from a loser
// (Datastore ABORTED, Azure 503) fails: the store said who won, and a
// replica that refused its caller's insert has seen the winner.
func (e *cohEnv) phaseInsertRace(t *testing.T, n int) {
	clients := e.writers()
	for k := range n {
		key := fmt.Sprintf("ins/k%02d", k)
		start := make(chan struct{})
		type res struct {
			c   cohKV
			val string
			st  string
			err error
		}
		out := make(chan res, len(clients))
		for i, c := range clients {
			go func() {
				val := fmt.Sprintf("%s-ins%d-%d", c.name(), k, i)
				<-start
				ctx, cancel := opCtx()
				defer cancel()
				_, err := c.insert(ctx, key, val)
				out <- res{c, val, c.classify(err), err}
			}()
		}
		close(start)
		var winners []string
		for range clients {
			r := <-out
			e.m.count(r.c.name(), "race-insert", r.st)
			switch r.st {
			case stOK:
				winners = append(winners, r.val)
			case stExists:
			default:
				t.Errorf("insert race %s: %s got %s: %v", key, r.c.name(), r.st, r.err)
			}
		}
		if len(winners) != 1 {
			t.Errorf("insert race %s: %d inserts succeeded (%q), want exactly 1", key, len(winners), winners)
			continue
		}
		store := e.store(t)
		ctx, cancel := opCtx()
		got, _, err := store.get(ctx, key)
		cancel()
		if err != nil || got != winners[0] {
			t.Errorf("insert race %s: the store holds %q (%v), want the winner's %q", key, got, err, winners[0])
		}
		for _, c := range e.allClients() {
			ctx, cancel := opCtx()
			got, _, err := c.get(ctx, key)
			cancel()
			if err != nil || got != winners[0] {
				t.Errorf("insert race %s: replica %s reads %q (%v) right after refusing its insert, want the winner's %q", key, c.name(), got, err, winners[0])
			}
		}
	}
}

// phaseCounter is the lost-update check: each goroutine (two per replica
// and one direct) increments one counter per times with read-modify-write;
// the final count is the number of increments acknowledged.
func (e *cohEnv) phaseCounter(t *testing.T, times int) {
	key := "cnt/c"
	ctx, cancel := opCtx()
	if _, err := e.setup().upsert(ctx, key, "0"); err != nil {
		t.Fatal(err)
	}
	cancel()
	clients := e.writers()
	var mu sync.Mutex
	acked, ambiguous := 0, 0
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range times {
				for attempt := 0; ; attempt++ {
					ctx, cancel := opCtx()
					_, err := c.rmw(ctx, key, func(old string, found bool) string {
						n, _ := strconv.Atoi(old)
						return strconv.Itoa(n + 1)
					})
					cancel()
					st := c.classify(err)
					e.m.count(c.name(), "counter", st)
					mu.Lock()
					switch st {
					case stOK:
						acked++
					case stAmbiguous:
						ambiguous++
						t.Logf("counter increment via %s: %v", c.name(), err)
					}
					mu.Unlock()
					if st == stOK || st == stAmbiguous || attempt > 200 {
						break
					}
					time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	store := e.store(t)
	ctx, cancel = opCtx()
	defer cancel()
	got, _, err := store.get(ctx, key)
	n, _ := strconv.Atoi(got)
	if err != nil || n < acked || n > acked+ambiguous {
		t.Errorf("counter: the store holds %q (%v) after %d acknowledged increments (%d ambiguous): lost or phantom updates", got, err, acked, ambiguous)
	}
	t.Logf("counter: %d increments acknowledged of %d, store holds %s", acked, len(clients)*times, got)
}

// phaseRandom is assertion 3: random operations over 20 colliding keys
// (two partitions) by two goroutines per replica and one direct writer,
// with one reader polling through all replicas, in rounds. After each
// round, once everyone has stopped, every key is read directly and checked
// against the model; then, max_staleness + slack later, every replica must
// read (point read and query) exactly what the store holds.
func (e *cohEnv) phaseRandom(t *testing.T, seed uint64, steps, rounds int) {
	t.Logf("random: %d steps per goroutine (NEMO_COHERENCE_STEPS)", steps)
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = fmt.Sprintf("p%d/k%02d", i/10, i)
	}
	workers := e.writers()
	rngs := make([]*rand.Rand, len(workers))
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(seed, uint64(i)))
	}
	readerRng := rand.New(rand.NewPCG(seed, 1000))
	per := max(1, steps/rounds)
	for round := range rounds {
		var wg sync.WaitGroup
		for wi, c := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rngs[wi]
				for i := range per {
					e.randomOp(rng, c, keys[rng.IntN(len(keys))], fmt.Sprintf("%s-%d", c.name(), round*per+i))
				}
			}()
		}
		stop := make(chan struct{})
		readerDone := make(chan struct{})
		go func() {
			defer close(readerDone)
			readers := e.allClients()
			rng := readerRng
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := readers[rng.IntN(len(readers))]
				key := keys[rng.IntN(len(keys))]
				ctx, cancel := opCtx()
				var val string
				var err error
				op := "read-get"
				s := time.Now()
				if rng.IntN(3) == 0 {
					op = "read-query"
					val, err = c.query(ctx, key)
				} else {
					val, _, err = c.get(ctx, key)
				}
				cancel()
				st := c.classify(err)
				e.m.count("reader", op, st)
				if st == stOK {
					e.m.read(c.name(), op, key, val, s)
					e.m.mu.Lock()
					ok := e.m.attempted[key][val]
					e.m.mu.Unlock()
					if !ok {
						e.m.violation("%s via %s: %s reads %q, which no one ever wrote to it", op, c.name(), key, val)
					}
				} else if st != stNotFound {
					e.m.violation("%s via %s of %s: %v", op, c.name(), key, err)
				}
			}
		}()
		wg.Wait()
		close(stop)
		<-readerDone
		quiet := time.Now()
		bad := e.m.checkReads()
		for i, b := range bad {
			if i == 10 {
				t.Errorf("round %d: ... and %d more bad reads", round, len(bad)-10)
				break
			}
			t.Errorf("round %d: %s", round, b)
		}
		e.checkKeys(t, fmt.Sprintf("round %d", round), keys, quiet)
	}
	e.reportViolations(t)
}

// checkKeys reads every key directly and checks it against the model, then
// waits until max_staleness + slack after quiet (when the writers stopped)
// and requires every replica to read what the store holds.
func (e *cohEnv) checkKeys(t *testing.T, label string, keys []string, quiet time.Time) {
	direct := e.store(t)
	store := map[string]string{}
	for _, key := range keys {
		ctx, cancel := opCtx()
		val, _, err := direct.get(ctx, key)
		cancel()
		st := direct.classify(err)
		if st != stOK && st != stNotFound {
			t.Errorf("%s: direct read of %s: %v", label, key, err)
			continue
		}
		if st == stOK {
			store[key] = val
		}
		if err := e.m.checkFinal(key, val, st == stOK); err != nil {
			t.Errorf("%s: %v", label, err)
		}
	}
	time.Sleep(time.Until(quiet.Add(cohStaleness + cohSlack)))
	for _, c := range e.allClients() {
		for _, key := range keys {
			want, found := store[key]
			ctx, cancel := opCtx()
			got, _, err := c.get(ctx, key)
			qgot, qerr := c.query(ctx, key)
			cancel()
			for _, r := range []struct {
				op  string
				got string
				err error
			}{{"get", got, err}, {"query", qgot, qerr}} {
				st := c.classify(r.err)
				switch {
				case st != stOK && st != stNotFound:
					t.Errorf("%s: %s via %s of %s: %v", label, r.op, c.name(), key, r.err)
				case found && (st != stOK || r.got != want):
					t.Errorf("%s: %v after the writers stopped, %s via %s of %s answers %q (%s), the store holds %q",
						label, cohStaleness+cohSlack, r.op, c.name(), key, r.got, st, want)
				case !found && st != stNotFound:
					t.Errorf("%s: %v after the writers stopped, %s via %s of %s answers %q, the store has no such entity",
						label, cohStaleness+cohSlack, r.op, c.name(), key, r.got)
				}
			}
		}
	}
}

// randomOp runs one random operation of c on key and records it.
func (e *cohEnv) randomOp(rng *rand.Rand, c cohKV, key, val string) {
	ctx, cancel := opCtx()
	defer cancel()
	m := e.m
	began := time.Now()
	defer func() { m.took(c.name(), time.Since(began)) }()
	r := rng.IntN(100)
	var op string
	var etag string
	var err error
	w := write{client: c.name(), key: key, val: val}
	switch {
	case r < 25:
		op = "get"
		var got string
		s := time.Now()
		got, etag, err = c.get(ctx, key)
		if err == nil {
			m.read(c.name(), op, key, got, s)
			m.mu.Lock()
			ok := m.attempted[key][got]
			m.mu.Unlock()
			if !ok {
				m.violation("get via %s: %s reads %q, which no one ever wrote to it", c.name(), key, got)
			}
			m.setETag(key, etag)
		}
		m.count(c.name(), op, c.classify(err))
		if st := c.classify(err); st != stOK && st != stNotFound {
			m.violation("get via %s of %s: %v", c.name(), key, err)
		}
		return
	case r < 40:
		op = "insert"
		m.attempt(key, val)
		w.start = time.Now()
		etag, err = c.insert(ctx, key, val)
	case r < 55:
		op = "upsert"
		m.attempt(key, val)
		w.start = time.Now()
		etag, err = c.upsert(ctx, key, val)
	case r < 75:
		op = "update"
		cond := ""
		if rng.IntN(4) != 0 {
			if cond = m.etag(key); cond != "" {
				op = "update-ifmatch"
			}
		}
		m.attempt(key, val)
		w.start = time.Now()
		etag, err = c.update(ctx, key, val, cond)
	case r < 88:
		op = "delete"
		cond := ""
		if rng.IntN(2) == 0 {
			if cond = m.etag(key); cond != "" {
				op = "delete-ifmatch"
			}
		}
		w.del, w.val = true, ""
		w.start = time.Now()
		err = c.del(ctx, key, cond)
	case r >= 94:
		mode := rng.IntN(4)
		op = []string{"pair-upsert", "pair-insert", "pair-update", "pair-delete"}[mode]
		pk, _ := splitKey(key)
		key2 := key
		for key2 == key {
			key2 = fmt.Sprintf("%s/k%02d", pk, rng.IntN(10)+10*int(pk[1]-'0'))
		}
		cond := ""
		if rng.IntN(2) == 0 {
			cond = m.etag(key2)
		}
		v1, v2 := val+"a", val+"b"
		m.attempt(key, v1)
		m.attempt(key2, v2)
		w2 := write{client: c.name(), key: key2, val: v2, del: mode == pairDelete}
		if w2.del {
			w2.val = ""
		}
		w.val, w.start = v1, time.Now()
		err = c.pair(ctx, key, v1, key2, v2, mode, cond)
		w.end = time.Now()
		w2.start, w2.end = w.start, w.end
		m.wrote()
		st := c.classify(err)
		m.count(c.name(), op, st)
		switch st {
		case stExists, stPrecond, stNotFound, stRefused, stAborted:
			m.refuse(key, v1)
			m.refuse(key2, v2)
		case stOK:
			m.record(w)
			m.record(w2)
		case stAmbiguous:
			w.ambiguous, w2.ambiguous = true, true
			m.record(w)
			m.record(w2)
			m.unanswered(ctx, "%s via %s of %s and %s: no definite answer: %v", op, c.name(), key, key2, err)
		}
		return
	default:
		op = "rmw"
		m.attempt(key, val)
		w.start = time.Now()
		etag, err = c.rmw(ctx, key, func(string, bool) string { return val })
	}
	w.end = time.Now()
	m.wrote()
	st := c.classify(err)
	m.count(c.name(), op, st)
	switch st {
	case stExists, stPrecond, stNotFound, stRefused, stAborted:
		if !w.del {
			m.refuse(key, val)
		}
	case stOK:
		m.record(w)
		m.setETag(key, etag)
	case stAmbiguous:
		w.ambiguous = true
		m.record(w)
		m.unanswered(ctx, "%s via %s of %s: no definite answer: %v", op, c.name(), key, err)
	}
}

// phaseStaleness is assertion 4: the direct writer changes one key every
// 100 ms; one reader per replica polls it (point reads and queries); every
// value read must not have been superseded (by a write acknowledged) more
// than max_staleness + slack before the read started.
func (e *cohEnv) phaseStaleness(t *testing.T, d time.Duration) {
	key := "stale/s"
	direct := e.direct()
	type wr struct {
		val        string
		start, end time.Time
	}
	var mu sync.Mutex
	var hist []wr
	index := map[string]int{}
	put := func(i int) {
		val := fmt.Sprintf("direct-stale-%d", i)
		ctx, cancel := opCtx()
		defer cancel()
		s := time.Now()
		if _, err := direct.upsert(ctx, key, val); err != nil {
			t.Errorf("staleness: direct write: %v", err)
			return
		}
		mu.Lock()
		index[val] = len(hist)
		hist = append(hist, wr{val, s, time.Now()})
		mu.Unlock()
	}
	put(0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	type read struct {
		client, op, val string
		start           time.Time
	}
	var reads []read
	var readErrs []string
	for _, c := range e.allClients() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := opCtx()
				s := time.Now()
				var val string
				var err error
				op := "get"
				if i%3 == 2 {
					op = "query"
					val, err = c.query(ctx, key)
				} else {
					val, _, err = c.get(ctx, key)
				}
				cancel()
				mu.Lock()
				if err != nil {
					readErrs = append(readErrs, fmt.Sprintf("%s %s: %v", c.name(), op, err))
				} else {
					reads = append(reads, read{c.name(), op, val, s})
				}
				mu.Unlock()
				time.Sleep(15 * time.Millisecond)
			}
		}()
	}
	deadline := time.Now().Add(d)
	for i := 1; time.Now().Before(deadline); i++ {
		time.Sleep(100 * time.Millisecond)
		put(i)
	}
	close(stop)
	wg.Wait()
	for _, s := range readErrs {
		t.Errorf("staleness read: %s", s)
	}
	var worst time.Duration
	bad := 0
	for _, r := range reads {
		i, ok := index[r.val]
		if !ok {
			t.Errorf("staleness: %s %s read %q, which the direct writer never wrote", r.client, r.op, r.val)
			continue
		}
		if i+1 >= len(hist) {
			continue
		}
		// The value was certainly gone once the next write was acknowledged.
		age := r.start.Sub(hist[i+1].end)
		if age > worst {
			worst = age
		}
		if age > cohStaleness+cohSlack {
			bad++
			if bad <= 10 {
				t.Errorf("staleness: %s %s started at %s read %q, superseded by %q acknowledged at %s: %v stale (bound %v + %v slack)",
					r.client, r.op, e.m.rel(r.start), r.val, hist[i+1].val, e.m.rel(hist[i+1].end), age.Round(time.Millisecond), cohStaleness, cohSlack)
			}
		}
	}
	t.Logf("staleness: %d direct writes, %d reads through the replicas, worst staleness %v, %d over the bound",
		len(hist), len(reads), worst.Round(time.Millisecond), bad)
}

// waitSeen polls f through every replica until it succeeds and requires
// that to happen within max_staleness + slack of created.
func (e *cohEnv) waitSeen(t *testing.T, what string, created time.Time, f func(c cohKV) error) {
	var wg sync.WaitGroup
	for _, c := range e.allClients() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			var attempt time.Time
			for time.Since(created) < 10*time.Second {
				attempt = time.Now()
				if err = f(c); err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			// When the first read that saw it was sent: every read sent
			// after created + max_staleness must see it.
			took := attempt.Sub(created)
			if err != nil {
				t.Errorf("%s: replica %s never saw it: %v", what, c.name(), err)
			} else if took > cohStaleness+cohSlack {
				t.Errorf("%s: replica %s saw it %v after it was created (bound %v + %v slack)", what, c.name(), took.Round(time.Millisecond), cohStaleness, cohSlack)
			} else {
				t.Logf("%s: replica %s saw it after %v", what, c.name(), took.Round(time.Millisecond))
			}
		}()
	}
	wg.Wait()
}

// reportViolations fails t with the violations the model recorded since
// the last call (the random workload's reads and ambiguous writes), and if
// more than maxGaveUpShare of its writes since then ended at their
// client's own deadline (each is logged).
func (e *cohEnv) reportViolations(t *testing.T) {
	e.m.mu.Lock()
	bad := e.m.bad
	e.m.bad = nil
	gaveUp, writes := e.m.gaveUp, e.m.writesDone
	e.m.gaveUp, e.m.writesDone = nil, 0
	e.m.mu.Unlock()
	for _, s := range gaveUp {
		t.Logf("the client gave up at its deadline (%v): %s", opTimeout, s)
	}
	if float64(len(gaveUp)) > maxGaveUpShare*float64(writes) {
		t.Errorf("%d of %d writes ended at their client's deadline (%v) without an answer, more than %.0f %%",
			len(gaveUp), writes, opTimeout, 100*maxGaveUpShare)
	}
	for i, s := range bad {
		if i == 20 {
			t.Errorf("... and %d more violations", len(bad)-20)
			break
		}
		t.Error(s)
	}
}

// finish is assertion 6 and the drain: no replica counted a write-back
// conflict, all exit 0, none wrote conflicts.jsonl.
func (e *cohEnv) finish(t *testing.T) {
	e.reportViolations(t)
	t.Logf("operations by client and outcome:")
	e.m.summary(t)
	re := regexp.MustCompile(`(?m)^nemo_cache_writeback_conflicts_total (\S+)$`)
	for i, p := range e.procs {
		_, metrics := p.get("/metrics")
		mm := re.FindStringSubmatch(metrics)
		if mm == nil || mm[1] != "0" {
			t.Errorf("replica r%d: nemo_cache_writeback_conflicts_total = %v, want 0", i, mm)
		}
	}
	drain(t, e.procs...)
	for i, d := range e.dirs {
		if b, err := os.ReadFile(filepath.Join(d, "conflicts.jsonl")); err == nil {
			t.Errorf("replica r%d wrote a conflicts file in shared mode:\n%s", i, b)
		}
	}
}

// ---- the tests ----

// TestBinaryCoherenceSharedAzure checks shared mode's promises in front of
// Azurite, one subtest per property, on one cluster of three replicas (the
// subtests use disjoint keys and tables, so each also runs alone with
// -run; the last, the drain, ends the cluster).
func TestBinaryCoherenceSharedAzure(t *testing.T) {
	url := aztest.Azurite(t)
	seed := cohSeed(t)
	conn := aztest.ConnectionString(url, aztest.Key)
	procs, dirs := startCoherenceNemos(t, []string{"NEMO_BACKEND_TYPE=aztable", "NEMO_BACKEND_AZTABLE_CONNECTION_STRING=" + conn})
	directSvc := azService(t, conn)
	table := aztest.TableName("coh")
	ctx := context.Background()
	if _, err := directSvc.CreateTable(ctx, table, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = directSvc.DeleteTable(context.Background(), table, nil) })
	svcs := make([]*aztables.ServiceClient, len(procs))
	for i, p := range procs {
		svcs[i] = azNemoService(t, p)
	}
	e := &cohEnv{procs: procs, dirs: dirs, m: newModel()}
	e.newKV = func(p int, label string) cohKV {
		if p < 0 {
			return &cohAzKV{label, directSvc.NewClient(table)}
		}
		return &cohAzKV{label, svcs[p].NewClient(table)}
	}
	e.direct = func() cohKV { return e.newKV(-1, "direct") }

	t.Run("ConcurrentInsertsOfOneKeyHaveOneWinner", func(t *testing.T) { e.phaseInsertRace(t, 20) })
	t.Run("IfMatchHonouredAtEveryReplicaIffUnchanged", func(t *testing.T) { azIfMatchPhase(t, e) })
	t.Run("IfMatchReadModifyWriteLosesNoUpdate", func(t *testing.T) { e.phaseCounter(t, 4) })
	t.Run("RandomWorkloadKeepsEveryAcknowledgedWrite", func(t *testing.T) { e.phaseRandom(t, seed, cohSteps(), 4) })
	t.Run("ReadsNoStalerThanMaxStaleness", func(t *testing.T) { e.phaseStaleness(t, 3*time.Second) })
	t.Run("TableCreatedElsewhereAppearsWithinMaxStaleness", func(t *testing.T) {
		fresh := aztest.TableName("cohnew")
		for i, svc := range svcs {
			ctx, cancel := opCtx()
			_, err := svc.NewClient(fresh).GetEntity(ctx, "p", "x", nil)
			cancel()
			if (&cohAzKV{}).classify(err) != stNotFound {
				t.Errorf("replica r%d reads from table %s before it exists: %v", i, fresh, err)
			}
		}
		if _, err := directSvc.CreateTable(ctx, fresh, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = directSvc.DeleteTable(context.Background(), fresh, nil) })
		if _, err := directSvc.NewClient(fresh).AddEntity(ctx, cohAzEntity("p/x", "made-elsewhere"), nil); err != nil {
			t.Fatal(err)
		}
		created := time.Now()
		e.waitSeen(t, "table "+fresh+" created in Azurite", created, func(c cohKV) error {
			a := &cohAzKV{c.name(), svcs[c.name()[1]-'0'].NewClient(fresh)}
			ctx, cancel := opCtx()
			defer cancel()
			if v, _, err := a.get(ctx, "p/x"); err != nil || v != "made-elsewhere" {
				return fmt.Errorf("get: %q %v", v, err)
			}
			if v, err := a.query(ctx, "p/x"); err != nil || v != "made-elsewhere" {
				return fmt.Errorf("query: %q %v", v, err)
			}
			found := false
			pager := svcs[c.name()[1]-'0'].NewListTablesPager(nil)
			for pager.More() {
				page, err := pager.NextPage(ctx)
				if err != nil {
					return err
				}
				for _, tb := range page.Tables {
					found = found || *tb.Name == fresh
				}
			}
			if !found {
				return errors.New("not in the table list")
			}
			return nil
		})
	})
	t.Run("NoWriteBackConflictsAndCleanDrain", e.finish)
}

// azIfMatchPhase is assertion 2 for Azure: for each ordered pair of
// replicas X ≠ Y (Z the third), an ETag read at X is honoured at Y, and a
// stale one refused; an ETag returned by a write at Y is honoured at X; an
// ETag read directly from Azurite is honoured at a replica; a write by the
// direct writer in between makes each of them stale, for updates and
// deletes.
func azIfMatchPhase(t *testing.T, e *cohEnv) {
	d := e.direct()
	n := len(e.procs)
	expect := func(step string, want string, err error, c cohKV) {
		t.Helper()
		st := c.classify(err)
		e.m.count(c.name(), "ifmatch-phase", st)
		if st != want {
			t.Errorf("If-Match %s: got %s (%v), want %s", step, st, err, want)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for x := range n {
		for y := range n {
			if x == y {
				continue
			}
			z := 3 - x - y
			X, Y, Z := e.newKV(x, fmt.Sprintf("r%d", x)), e.newKV(y, fmt.Sprintf("r%d", y)), e.newKV(z, fmt.Sprintf("r%d", z))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			key := fmt.Sprintf("im/u%d%d", x, y)
			v := func(s string) string { return fmt.Sprintf("%s-%s", key, s) }
			_, err := d.insert(ctx, key, v("0"))
			must(err)
			_, eX, err := X.get(ctx, key)
			must(err)
			eY1, err := Y.update(ctx, key, v("1"), eX)
			expect(fmt.Sprintf("update at r%d with the ETag read at r%d", y, x), stOK, err, Y)
			_, err = Z.update(ctx, key, v("2"), eX)
			expect(fmt.Sprintf("update at r%d with r%d's ETag, stale after r%d's update", z, x, y), stPrecond, err, Z)
			_, err = X.update(ctx, key, v("2b"), eX)
			expect(fmt.Sprintf("update at r%d with its own read's ETag, stale after r%d's update", x, y), stPrecond, err, X)
			eX3, err := X.update(ctx, key, v("3"), eY1)
			expect(fmt.Sprintf("update at r%d with the ETag r%d's update returned", x, y), stOK, err, X)
			if eX3 == "" { // refused above: take the store's current ETag instead
				_, eX3, err = d.get(ctx, key)
				must(err)
			}
			_, err = d.upsert(ctx, key, v("4"))
			must(err)
			_, err = Y.update(ctx, key, v("5"), eX3)
			expect(fmt.Sprintf("update at r%d with r%d's update's ETag, stale after a direct write", y, x), stPrecond, err, Y)
			_, eD, err := d.get(ctx, key)
			must(err)
			_, err = Z.update(ctx, key, v("6"), eD)
			expect(fmt.Sprintf("update at r%d with the ETag read directly from Azurite", z), stOK, err, Z)
			if got, _, err := d.get(ctx, key); err != nil || got != v("6") {
				t.Errorf("If-Match %s: Azurite holds %q (%v), want %q", key, got, err, v("6"))
			}
			// An ETag a replica serves is Azurite's own: the direct
			// writer can use it.
			key = fmt.Sprintf("im/r%d%d", x, y)
			_, err = d.insert(ctx, key, v("0"))
			must(err)
			_, eX, err = X.get(ctx, key)
			must(err)
			_, err = d.update(ctx, key, v("1"), eX)
			expect(fmt.Sprintf("update directly in Azurite with the ETag read at r%d", x), stOK, err, d)

			// Deletes.
			key = fmt.Sprintf("im/d%d%d", x, y)
			_, err = d.insert(ctx, key, v("0"))
			must(err)
			_, eX, err = X.get(ctx, key)
			must(err)
			_, err = d.upsert(ctx, key, v("1"))
			must(err)
			err = Y.del(ctx, key, eX)
			expect(fmt.Sprintf("delete at r%d with r%d's ETag, stale after a direct write", y, x), stPrecond, err, Y)
			_, eZ, err := Z.get(ctx, key)
			must(err)
			err = Y.del(ctx, key, eZ)
			expect(fmt.Sprintf("delete at r%d with the ETag read at r%d", y, z), stOK, err, Y)
			err = X.del(ctx, key, eZ)
			expect(fmt.Sprintf("delete at r%d of what r%d deleted", x, y), stNotFound, err, X)
			if _, _, err := d.get(ctx, key); d.classify(err) != stNotFound {
				t.Errorf("If-Match %s: Azurite still has it after the delete (%v)", key, err)
			}
			// Insert, then delete with the insert's ETag elsewhere.
			eI, err := X.insert(ctx, key, v("7"))
			expect(fmt.Sprintf("re-insert at r%d after the delete", x), stOK, err, X)
			err = Y.del(ctx, key, eI)
			expect(fmt.Sprintf("delete at r%d with the ETag r%d's insert returned", y, x), stOK, err, Y)
			cancel()
		}
	}
}

// TestBinaryCoherenceSharedDatastore checks shared mode's promises in
// front of each Datastore backend (the legacy Datastore emulator and the
// Firestore emulator in Datastore mode), one subtest per property, on one
// cluster of three replicas per backend, as TestBinaryCoherenceSharedAzure.
// In front of Firestore the random workload runs a quarter of the steps
// unless NEMO_COHERENCE_STEPS says otherwise: its emulator locks what a
// read-write transaction reads and resolves every deadlock by a 2 s lock
// timeout, so the same contention takes about four times as long.
func TestBinaryCoherenceSharedDatastore(t *testing.T) {
	for _, b := range dsBackendEnvs() {
		t.Run(b.name, func(t *testing.T) {
			steps := cohSteps()
			var env []string
			if b.name == "firestore" {
				if os.Getenv("NEMO_COHERENCE_STEPS") == "" {
					steps /= 4
				}
				// Three replicas and the direct writer contend for one
				// key, and each deadlock costs a 2 s lock timeout: a
				// write can wait longer than the 5 s default request
				// deadline, whose DEADLINE_EXCEEDED the model must
				// count as an unknown outcome. The clients wait longer
				// than that deadline: a client that gave up at 20 s saw
				// no answer to writes nemo was still retrying through
				// lock timeouts (so did the direct writer, talking to the
				// emulator itself). nemo's own request deadline is longer
				// still, so that every call ends by the client's deadline
				// (which nemo sees, and runs no transaction it cannot
				// finish before) rather than by nemo's: with 30 s against
				// the clients' 40 s, a write queued behind its replica's
				// other writers of the key for 20 s had its last commit
				// in flight at nemo's deadline in a loaded CI run, an
				// unknown outcome while its client still waited. (A
				// commit already sent now runs to the client's deadline
				// whatever nemo's own, internal/deadline; the lock waits
				// and the transaction's runs before it still end at
				// nemo's.) Writes whose client gives up are bounded by
				// reportViolations.
				env = append(env, "NEMO_LISTEN_REQUEST_TIMEOUT=60s")
				defer func(d time.Duration) { opTimeout = d }(opTimeout)
				opTimeout = 40 * time.Second
			}
			coherenceDatastore(t, b.host(t), steps, env...)
		})
	}
}

func coherenceDatastore(t *testing.T, emu string, steps int, env ...string) {
	seed := cohSeed(t)
	project := dstest.Project(t)
	procs, dirs := startCoherenceNemos(t, append([]string{"NEMO_BACKEND_TYPE=datastore", "NEMO_BACKEND_DATASTORE_PROJECT=" + project,
		"NEMO_BACKEND_DATASTORE_EMULATOR_HOST=" + emu}, env...))
	ns := fmt.Sprintf("coh%08x", rand.Uint32())
	direct := dsClient(t, project, emu)
	clients := make([]*datastore.Client, len(procs))
	for i, p := range procs {
		_, addr := frontendAddrs(t, p)
		clients[i] = dsClient(t, project, addr)
	}
	e := &cohEnv{procs: procs, dirs: dirs, m: newModel()}
	e.newKV = func(p int, label string) cohKV {
		if p < 0 {
			return &cohDsKV{label: label, c: direct, ns: ns, kind: "C"}
		}
		return &cohDsKV{label: label, c: clients[p], ns: ns, kind: "C"}
	}
	e.direct = func() cohKV { return e.newKV(-1, "direct") }

	t.Run("ConcurrentInsertsOfOneKeyHaveOneWinner", func(t *testing.T) { e.phaseInsertRace(t, 20) })
	t.Run("TransactionalReadModifyWriteLosesNoUpdate", func(t *testing.T) { e.phaseCounter(t, 5) })
	t.Run("RandomWorkloadKeepsEveryAcknowledgedWrite", func(t *testing.T) { e.phaseRandom(t, seed, steps, 4) })
	t.Run("ReadsNoStalerThanMaxStaleness", func(t *testing.T) { e.phaseStaleness(t, 3*time.Second) })
	t.Run("NamespaceCreatedElsewhereAppearsWithinMaxStaleness", func(t *testing.T) {
		fresh := ns + "new"
		for i := range clients {
			c := &cohDsKV{label: fmt.Sprintf("r%d", i), c: clients[i], ns: fresh, kind: "Fresh"}
			ctx, cancel := opCtx()
			_, _, err := c.get(ctx, "x")
			_, qerr := c.query(ctx, "x")
			cancel()
			if c.classify(err) != stNotFound || c.classify(qerr) != stNotFound {
				t.Errorf("replica r%d reads from namespace %s before it exists: %v / %v", i, fresh, err, qerr)
			}
		}
		dc := &cohDsKV{label: "direct", c: direct, ns: fresh, kind: "Fresh"}
		ctx, cancel := opCtx()
		if _, err := dc.upsert(ctx, "x", "made-elsewhere"); err != nil {
			t.Fatal(err)
		}
		cancel()
		created := time.Now()
		e.waitSeen(t, "kind Fresh in new namespace "+fresh, created, func(c cohKV) error {
			r := &cohDsKV{label: c.name(), c: clients[c.name()[1]-'0'], ns: fresh, kind: "Fresh"}
			ctx, cancel := opCtx()
			defer cancel()
			if v, _, err := r.get(ctx, "x"); err != nil || v != "made-elsewhere" {
				return fmt.Errorf("get: %q %v", v, err)
			}
			if v, err := r.query(ctx, "x"); err != nil || v != "made-elsewhere" {
				return fmt.Errorf("query: %q %v", v, err)
			}
			return nil
		})
	})
	t.Run("NoWriteBackConflictsAndCleanDrain", e.finish)
}

// TestBinaryCoherencePartitioned runs the coherence checks that take no
// writer outside nemo against three replicas in coherence.mode
// partitioned (max_staleness 1s, the shared tests' bound), in front of
// Azurite and the Datastore emulator: the insert race (one winner), the
// read-modify-write counter (no lost update), and the random workload
// over 20 colliding keys through all three replicas, whose every read is
// checked by the model against the staleness bound and whose final state,
// after every replica flushed, is checked in the store and then through
// every replica. Whichever replica writes a table first owns it; the
// others forward to it. The drain ends with no write-back conflict.
func TestBinaryCoherencePartitioned(t *testing.T) {
	staleness := "NEMO_COHERENCE_MAX_STALENESS=" + cohStaleness.String()
	start := func(t *testing.T, be partitionedBackend) *cohEnv {
		var procs []*proc
		var dirs []string
		for range 3 {
			d := t.TempDir()
			procs, dirs = append(procs, startReplicaIn(t, d, be, peerSecret, freeAddr(t), staleness)), append(dirs, d)
		}
		logOnFailure(t, "NEMO_COHERENCE_LOGDIR", 40, func() []*proc { return procs })
		return &cohEnv{procs: procs, dirs: dirs, m: newModel(), partitioned: true}
	}
	t.Run("azure", func(t *testing.T) {
		conn, directSvc, table := azuriteTable(t, "cohp")
		e := start(t, partitionedBackend{env: []string{"NEMO_BACKEND_TYPE=aztable", "NEMO_BACKEND_AZTABLE_CONNECTION_STRING=" + conn}, keyspace: table})
		svcs := make([]*aztables.ServiceClient, len(e.procs))
		for i, p := range e.procs {
			svcs[i] = azNemoService(t, p)
		}
		e.newKV = func(p int, label string) cohKV {
			if p < 0 {
				return &cohAzKV{label, directSvc.NewClient(table)}
			}
			return &cohAzKV{label, svcs[p].NewClient(table)}
		}
		e.direct = func() cohKV { return e.newKV(-1, "direct") }
		t.Run("ConcurrentInsertsOfOneKeyHaveOneWinner", func(t *testing.T) { e.phaseInsertRace(t, 10) })
		t.Run("IfMatchReadModifyWriteLosesNoUpdate", func(t *testing.T) { e.phaseCounter(t, 4) })
		t.Run("RandomWorkloadKeepsEveryAcknowledgedWrite", func(t *testing.T) { e.phaseRandom(t, cohSeed(t), cohSteps(), 4) })
		t.Run("NoWriteBackConflictsAndCleanDrain", e.finish)
	})
	for _, b := range dsBackendEnvs() {
		t.Run(b.name, func(t *testing.T) { coherencePartitionedDatastore(t, b, start) })
	}
}

// coherencePartitionedDatastore is TestBinaryCoherencePartitioned in front
// of a Datastore emulator. In front of Firestore the random workload runs
// a quarter of the steps unless NEMO_COHERENCE_STEPS says otherwise (its
// emulator takes about four times as long per transaction; see
// TestBinaryCoherenceSharedDatastore).
func coherencePartitionedDatastore(t *testing.T, b dsBackendEnv, start func(*testing.T, partitionedBackend) *cohEnv) {
	emu, project := b.host(t), dstest.Project(t)
	steps := cohSteps()
	if b.name == "firestore" && os.Getenv("NEMO_COHERENCE_STEPS") == "" {
		steps /= 4
	}
	e := start(t, partitionedBackend{env: []string{"NEMO_BACKEND_TYPE=datastore", "NEMO_BACKEND_DATASTORE_PROJECT=" + project,
		"NEMO_BACKEND_DATASTORE_EMULATOR_HOST=" + emu}})
	ns := fmt.Sprintf("cohp%08x", rand.Uint32())
	direct := dsClient(t, project, emu)
	clients := make([]*datastore.Client, len(e.procs))
	for i, p := range e.procs {
		_, addr := frontendAddrs(t, p)
		clients[i] = dsClient(t, project, addr)
	}
	e.newKV = func(p int, label string) cohKV {
		if p < 0 {
			return &cohDsKV{label: label, c: direct, ns: ns, kind: "C"}
		}
		return &cohDsKV{label: label, c: clients[p], ns: ns, kind: "C"}
	}
	e.direct = func() cohKV { return e.newKV(-1, "direct") }
	t.Run("ConcurrentInsertsOfOneKeyHaveOneWinner", func(t *testing.T) { e.phaseInsertRace(t, 10) })
	t.Run("TransactionalReadModifyWriteLosesNoUpdate", func(t *testing.T) { e.phaseCounter(t, 5) })
	t.Run("RandomWorkloadKeepsEveryAcknowledgedWrite", func(t *testing.T) { e.phaseRandom(t, cohSeed(t), steps, 4) })
	t.Run("NoWriteBackConflictsAndCleanDrain", e.finish)
}
