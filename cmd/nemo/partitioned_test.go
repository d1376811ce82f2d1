package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
)

// partitionedBackend is what the coherence partitioned scenario needs of
// a backend.
type partitionedBackend struct {
	env []string
	// keyspace is the lease keyspace the scenario writes.
	keyspace string
	// client is a counter client through the given nemo (nil: straight to
	// the backend).
	client func(p *proc) counterKV
	// exists reports whether err is the protocol's refusal of an insert
	// of an existing key.
	exists func(err error) bool
	// takeover bounds how long a replica may take to take the table over
	// after its owner's kill -9: a lease TTL, and the backend's own wait
	// for a transaction the dead owner left open (the Firestore emulator
	// holds its locks for 60 s).
	takeover time.Duration
}

// counterKV is a kv that can also increment a key atomically, with the
// protocol's own read-modify-write (an ETag-conditioned update, a
// transaction).
type counterKV interface {
	kv
	incr(ctx context.Context, key string) error
}

const (
	partitionedStaleness = 500 * time.Millisecond
	peerSecret           = "partitioned-test-secret-0123456789"
)

// TestBinaryPartitioned runs coherence.mode partitioned with three real
// nemo processes in front of Azurite, the Datastore emulator and the
// Firestore emulator, through the real SDKs:
//
//   - the first replica to write a table or namespace owns it (its lease);
//     the others forward their writes and transactions to it: an insert of
//     an existing key through any replica gets the service's own refusal;
//   - 3 x 40 atomic increments of one counter, one client per replica at
//     once (ETag-conditioned updates retried on 412; Datastore
//     transactions), end at exactly 120: forwarded transactions are
//     serializable with the owner's own;
//   - a replica that does not own the table reads the owner's writes not
//     yet in the store (write-back is held off: max_dirty_age 1h) within
//     the staleness bound;
//   - kill -9 of the owner: another replica takes the table over once the
//     lease lapses, replaying the owner's commit log from the backend: no
//     acknowledged write is lost;
//   - SIGTERM of the new owner: it flushes and releases, and the last
//     replica takes over at once, not a lease TTL later;
//   - a replica with the wrong peer secret is refused by the owner.
func TestBinaryPartitioned(t *testing.T) {
	t.Run("azure", func(t *testing.T) {
		conn, direct, name := azuriteTable(t, "part")
		partitionedScenario(t, partitionedBackend{
			env:      []string{"NEMO_BACKEND_TYPE=aztable", "NEMO_BACKEND_AZTABLE_CONNECTION_STRING=" + conn},
			keyspace: name,
			client: func(p *proc) counterKV {
				if p == nil {
					return azCounter{azKV{direct.NewClient(name)}}
				}
				return azCounter{azKV{nemoClient(t, p).NewClient(name)}}
			},
			exists: func(err error) bool {
				var re *azcore.ResponseError
				return errors.As(err, &re) && re.StatusCode == http.StatusConflict && re.ErrorCode == "EntityAlreadyExists"
			},
			takeover: 6 * leaseTTL,
		})
	})
	for name, host := range map[string]func(testing.TB) string{"datastore": dstest.Emulator, "firestore": dstest.FirestoreEmulator} {
		t.Run(name, func(t *testing.T) {
			emu := host(t)
			project := dstest.Project(t)
			takeover := 6 * leaseTTL
			if name == "firestore" {
				takeover = killPointWait(name)
			}
			partitionedScenario(t, partitionedBackend{
				takeover: takeover,
				env:      []string{"NEMO_BACKEND_TYPE=datastore", "NEMO_BACKEND_DATASTORE_PROJECT=" + project, "NEMO_BACKEND_DATASTORE_EMULATOR_HOST=" + emu},
				keyspace: "datastore/" + project + "//",
				client: func(p *proc) counterKV {
					if p == nil {
						return dsCounter{dsKV{dsClient(t, project, emu)}}
					}
					_, addr := frontendAddrs(t, p)
					return dsCounter{dsKV{dsClient(t, project, addr)}}
				},
				exists: func(err error) bool { return status.Code(err) == codes.AlreadyExists },
			})
		})
	}
}

// partitionedEnv is a partitioned replica's settings over be.
// NEMO_TEST_DURABILITY_ENV adds to them, as it does to the durability
// campaigns (e.g. the backend under the contract, losing answers).
func partitionedEnv(be partitionedBackend, secret string) []string {
	// Checkpoints every few seconds keep each table's log short, as the
	// default minute does in production over longer runs: a drain then
	// truncates a few entries, not every commit of the test (thousands, a
	// long transaction on a loaded Datastore emulator, during which the
	// lease renewals timed out and the drain lost its lease).
	return append([]string{"NEMO_COHERENCE_MODE=partitioned", "NEMO_WAL_LOCATION=backend", "NEMO_CACHE_MAX_DIRTY_AGE=5s",
		"NEMO_WAL_CHECKPOINT_INTERVAL=3s",
		"NEMO_COHERENCE_LEASE_TTL=" + leaseTTL.String(), "NEMO_COHERENCE_MAX_STALENESS=" + partitionedStaleness.String(),
		"NEMO_COHERENCE_PEER_SECRET=" + secret}, append(be.env, strings.Fields(os.Getenv("NEMO_TEST_DURABILITY_ENV"))...)...)
}

// startReplica starts one partitioned replica with its own peer listener.
// A replica still running when the test ends is drained, not killed, so
// that a failed test leaves no commit log for the next test's replicas to
// recover (after its table is gone).
func startReplica(t *testing.T, be partitionedBackend, secret string) *proc {
	t.Helper()
	return startReplicaAt(t, be, secret, freeAddr(t))
}

// startReplicaAt is startReplica with its peer listener at peerAddr and
// extra settings.
func startReplicaAt(t *testing.T, be partitionedBackend, secret, peerAddr string, extra ...string) *proc {
	t.Helper()
	return startReplicaIn(t, t.TempDir(), be, secret, peerAddr, extra...)
}

// startReplicaIn is startReplicaAt over the data directory dir.
func startReplicaIn(t *testing.T, dir string, be partitionedBackend, secret, peerAddr string, extra ...string) *proc {
	t.Helper()
	p := startNemo(t, dir, append(append(partitionedEnv(be, secret), "NEMO_LISTEN_PEER="+peerAddr), extra...)...)
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil && p.cmd.Process.Signal(syscall.SIGTERM) == nil {
			select {
			case <-p.exit:
			case <-time.After(15 * time.Second):
			}
		}
	})
	p.waitReady(t)
	return p
}

func partitionedScenario(t *testing.T, be partitionedBackend) {
	ctx := context.Background()
	var procs []*proc
	logOnFailure(t, "NEMO_TEST_LOG_DIR", 20, func() []*proc { return procs })
	a, b, c := startReplica(t, be, peerSecret), startReplica(t, be, peerSecret), startReplica(t, be, peerSecret)
	procs = append(procs, a, b, c)
	ca, cb, cc := be.client(a), be.client(b), be.client(c)

	// A writes first and owns the table.
	if err := ca.insert(ctx, "seed", 1); err != nil {
		t.Fatalf("A's first write: %v", err)
	}
	if n := awaitAcquired(t, be.keyspace, a)[0]; n != 1 {
		t.Fatalf("A acquired the lease of %s %d times with the first write, want 1", be.keyspace, n)
	}
	for i, cl := range []counterKV{cb, cc} {
		if err := cl.insert(ctx, fmt.Sprintf("fwd%d", i), i); err != nil {
			t.Fatalf("insert through a replica that does not own the table: %v", err)
		}
		if err := cl.insert(ctx, "seed", 9); !be.exists(err) {
			t.Fatalf("insert of an existing key through a replica that does not own the table: %v; want the service's refusal", err)
		}
	}
	for _, p := range []*proc{b, c} {
		if n := acquired(t, p, be.keyspace); n != 0 {
			t.Fatalf("a forwarding replica acquired the lease of %s %d times", be.keyspace, n)
		}
	}

	// Concurrent read-modify-writes through every replica.
	const perClient = 40
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for _, cl := range []counterKV{ca, cb, cc} {
		wg.Go(func() {
			for range perClient {
				if err := cl.incr(ctx, "ctr"); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("increment: %v", err)
	}
	t.Logf("%d increments through 3 replicas at once took %v", 3*perClient, time.Since(began).Round(time.Millisecond))
	// Every replica reads the owner's counter, not yet in the store,
	// within the staleness bound.
	for _, cl := range []counterKV{ca, cb, cc} {
		waitValue(t, cl, "ctr", 3*perClient, 2*partitionedStaleness+time.Second)
	}
	if n, ok, err := be.client(nil).get(ctx, "ctr"); err == nil && ok && n == 3*perClient {
		t.Logf("the store already holds the counter (a write-back ran)")
	}

	// Hot keys through every replica: the owner coalesces them, and
	// group-commits the forwarded commits into its backend log.
	hotCalls := hotKeyWrites(t, []*proc{a, b, c}, []counterKV{ca, cb, cc})

	// kill -9 of the owner under write load through the other two: B or
	// C takes the table over and replays its log, so nothing
	// acknowledged is lost.
	load := startLoad(ctx, []counterKV{cb, cc})
	time.Sleep(300 * time.Millisecond)
	killed := time.Now()
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	a.waitExit(t)
	for {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := cb.put(wctx, "after", 1)
		cancel()
		if err == nil {
			break
		}
		if time.Since(killed) > be.takeover {
			t.Fatalf("no replica took the table over %v after its owner died: %v", time.Since(killed), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(killed)
	time.Sleep(300 * time.Millisecond)
	acked := load.stop()
	t.Logf("hot keys: %.3f store calls per write; %d writes acknowledged under load across the owner's kill", hotCalls, len(acked))
	if hotCalls > 0.5 {
		// Shared mode needs at least one; the owner group-commits
		// (gathering the commits of the transactions in progress) and
		// coalesces: measured 0.17-0.19 on an idle machine (the issue's
		// target 0.2). Lease renewals and reads grow with the phase's
		// duration, not with its writes: under -race in front of a slow
		// emulator (2,000 writes in 42 s) the same phase made 0.327, its
		// log appends still 0.17. The bound leaves room for that.
		t.Errorf("hot keys: %.3f store calls per write, want at most 0.5 (target 0.2)", hotCalls)
	}
	for _, key := range acked {
		if _, ok, err := cb.get(ctx, key); err != nil || !ok {
			t.Fatalf("%s, acknowledged while the owner was killed, is gone (%v, %v)", key, ok, err)
		}
	}
	t.Logf("a replica took the table over %v after its owner was killed (lease TTL %v)", took.Round(time.Millisecond), leaseTTL)
	for _, cl := range []counterKV{cb, cc} {
		waitValue(t, cl, "ctr", 3*perClient, 2*partitionedStaleness+time.Second)
		waitValue(t, cl, "seed", 1, 2*partitionedStaleness+time.Second)
	}
	owner, other, cOther := b, c, cc
	n := awaitAcquired(t, be.keyspace, b, c)
	if n[1] > 0 {
		owner, other, cOther = c, b, cb
	}
	if nb, nc := n[0], n[1]; nb+nc != 1 {
		t.Fatalf("after the owner's death B acquired the lease of %s %d times and C %d times, want once in all", be.keyspace, nb, nc)
	}
	if err := cOther.incr(ctx, "ctr"); err != nil {
		t.Fatal(err)
	}

	// A replica with another secret is refused by the owner.
	d := startReplica(t, be, "another-secret-0123456789abcdef")
	procs = append(procs, d)
	began = time.Now()
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err := be.client(d).put(wctx, "intruder", 1)
	cancel()
	t.Logf("intruder refused after %v: %v", time.Since(began).Round(time.Millisecond), err)
	if err == nil {
		t.Fatal("a replica with the wrong peer secret wrote through the owner")
	}
	if !eventually(10*time.Second, func() bool { return strings.Contains(d.logs(), "wrong peer secret") }) {
		t.Errorf("the refused replica's log does not say why")
	}
	drain(t, d)

	// SIGTERM of the owner: it flushes and releases; the other replica
	// takes over at once.
	drain(t, owner)
	began = time.Now()
	if err := cOther.incr(ctx, "ctr"); err != nil {
		t.Fatalf("write once the owner drained: %v", err)
	}
	if took := time.Since(began); took > leaseTTL {
		t.Errorf("the last replica took %v to take the table over from a drained owner, want less than the lease TTL %v", took, leaseTTL)
	}
	drain(t, other)
	direct := be.client(nil)
	for key, want := range map[string]int{"seed": 1, "fwd0": 0, "fwd1": 1, "after": 1, "ctr": 3*perClient + 2} {
		if n, ok, err := direct.get(ctx, key); err != nil || !ok || n != want {
			t.Errorf("store after every replica drained: %s = %d (found %v, %v), want %d", key, n, ok, err, want)
		}
	}
	if _, ok, err := direct.get(ctx, "intruder"); err != nil || ok {
		t.Errorf("the refused replica's write is in the store (%v, %v)", ok, err)
	}
}

// hotKeyWrites makes 2,000 upserts of 20 keys, four clients per replica
// at once, and returns the store calls all replicas made per write. It
// logs them by operation, and the commit log's appends and group-commit
// calls, so a regression says where it is.
func hotKeyWrites(t *testing.T, procs []*proc, clients []counterKV) float64 {
	t.Helper()
	const writes, keys = 2000, 20
	before := map[string]float64{}
	for _, p := range procs {
		storeCalls(t, p, before)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4*len(clients))
	began := time.Now()
	for _, cl := range clients {
		for range 4 {
			wg.Go(func() {
				for {
					i := next.Add(1)
					if i > writes {
						return
					}
					if err := cl.put(context.Background(), fmt.Sprintf("hot%02d", i%keys), int(i)); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("hot-key upsert: %v", err)
	}
	after := map[string]float64{}
	for _, p := range procs {
		storeCalls(t, p, after)
	}
	total := 0.0
	var by []string
	for _, k := range slices.Sorted(maps.Keys(after)) {
		d := after[k] - before[k]
		if d == 0 {
			continue
		}
		by = append(by, fmt.Sprintf("%s %.0f", k, d))
		if strings.HasPrefix(k, "nemo_remote_requests_total{") {
			total += d
		}
	}
	t.Logf("hot keys, %d writes in %v: %s", writes, time.Since(began).Round(time.Millisecond), strings.Join(by, ", "))
	return total / writes
}

// storeCalls adds to into every call p made to the backend, by
// operation (nemo_remote_requests_total: the buffer's, the leases' and
// the commit logs'), and the commit log's appends and group-commit
// calls (nemo_backend_log_appends_total, nemo_backend_log_store_calls_total).
func storeCalls(t *testing.T, p *proc, into map[string]float64) {
	t.Helper()
	code, body := p.get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "nemo_remote_requests_total{") && !strings.HasPrefix(line, "nemo_backend_log_appends_total") && !strings.HasPrefix(line, "nemo_backend_log_store_calls_total") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		var v float64
		if _, err := fmt.Sscan(line[i+1:], &v); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		into[line[:i]] += v
	}
}

// load writes new keys through clients until stopped, and remembers the
// ones acknowledged.
type load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	acked  []string
}

func startLoad(ctx context.Context, clients []counterKV) *load {
	ctx, cancel := context.WithCancel(ctx)
	l := &load{cancel: cancel}
	for w, cl := range clients {
		l.wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("load-%d-%04d", w, i)
				wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
				err := cl.insert(wctx, key, i)
				wcancel()
				if err == nil {
					l.mu.Lock()
					l.acked = append(l.acked, key)
					l.mu.Unlock()
				} else {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	return l
}

// stop ends the load and returns the keys acknowledged.
func (l *load) stop() []string {
	l.cancel()
	l.wg.Wait()
	return l.acked
}

// acquired counts the times p's log says it acquired or took over the
// lease of ks.
func acquired(t *testing.T, p *proc, ks string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(p.logs(), "\n") {
		var rec struct{ Msg, Keyspace string }
		if json.Unmarshal([]byte(line), &rec) == nil && strings.EqualFold(rec.Keyspace, ks) &&
			(rec.Msg == "lease acquired" || strings.HasPrefix(rec.Msg, "lease taken over")) {
			n++
		}
	}
	return n
}

// awaitAcquired waits, for up to 10 s, until the logs of ps hold at least
// one acquisition of ks between them, and returns each one's count.
func awaitAcquired(t *testing.T, ks string, ps ...*proc) []int {
	t.Helper()
	n := make([]int, len(ps))
	eventually(10*time.Second, func() bool {
		sum := 0
		for i, p := range ps {
			n[i] = acquired(t, p, ks)
			sum += n[i]
		}
		return sum > 0
	})
	return n
}

// waitValue polls key through cl until it reads want, for up to within.
func waitValue(t *testing.T, cl counterKV, key string, want int, within time.Duration) {
	t.Helper()
	var n int
	var ok bool
	var err error
	if eventually(within, func() bool {
		n, ok, err = cl.get(context.Background(), key)
		return err == nil && ok && n == want
	}) {
		return
	}
	t.Fatalf("%s = %d (found %v, %v) after %v, want %d", key, n, ok, err, within, want)
}

// azCounter increments with an ETag-conditioned update, retried on 412
// (and an insert, retried on 409, for an absent key).
type azCounter struct{ azKV }

func (k azCounter) incr(ctx context.Context, key string) error {
	for {
		resp, err := k.c.GetEntity(ctx, "p", key, nil)
		var re *azcore.ResponseError
		if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
			if err := k.insert(ctx, key, 1); !errors.As(err, &re) || re.StatusCode != http.StatusConflict {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		var m struct{ N int }
		if err := json.Unmarshal(resp.Value, &m); err != nil {
			return err
		}
		etag := resp.ETag
		_, err = k.c.UpdateEntity(ctx, azEntity(key, m.N+1), &aztables.UpdateEntityOptions{IfMatch: &etag, UpdateMode: aztables.UpdateModeReplace})
		if errors.As(err, &re) && re.StatusCode == http.StatusPreconditionFailed {
			continue
		}
		return err
	}
}

// dsCounter increments in a Datastore transaction (the client retries it
// on ABORTED).
type dsCounter struct{ dsKV }

func (k dsCounter) incr(ctx context.Context, key string) error {
	_, err := k.c.RunInTransaction(ctx, func(tx *datastore.Transaction) error {
		var e dsE
		if err := tx.Get(datastore.NameKey("K", key, nil), &e); err != nil && !errors.Is(err, datastore.ErrNoSuchEntity) {
			return err
		}
		e.N++
		_, err := tx.Put(datastore.NameKey("K", key, nil), &e)
		return err
	}, datastore.MaxAttempts(50))
	return err
}

// TestBinaryPartitionedAzureBank moves money between accounts of one
// partition through three partitioned replicas over Azurite at once, each
// transfer an entity group transaction of two ETag-conditioned updates
// (retried on 412, as clients do), while audits through the owner sum
// every account in one query: each audit, and the final totals through
// every replica and in the store, must find the initial total.
func TestBinaryPartitionedAzureBank(t *testing.T) {
	ctx := context.Background()
	conn, directSvc, name := azuriteTable(t, "pbank")
	be := partitionedBackend{env: []string{"NEMO_BACKEND_TYPE=aztable", "NEMO_BACKEND_AZTABLE_CONNECTION_STRING=" + conn}, keyspace: name}
	var procs []*proc
	logOnFailure(t, "NEMO_TEST_LOG_DIR", 20, func() []*proc { return procs })
	for range 3 {
		procs = append(procs, startReplica(t, be, peerSecret))
	}
	var clients []*aztables.Client
	for _, p := range procs {
		clients = append(clients, nemoClient(t, p).NewClient(name))
	}
	const accounts, initial = 10, 1000
	for i := range accounts {
		if _, err := clients[0].AddEntity(ctx, bankEntity(i, initial), nil); err != nil {
			t.Fatal(err)
		}
	}
	owner := clients[0] // the first writer owns the table
	stop := time.Now().Add(bankSeconds() / 2)
	var wg sync.WaitGroup
	var transfers, retries atomic.Int64
	errs := make(chan error, len(clients)+1)
	for ci, c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			for time.Now().Before(stop) {
				from, to := rng.IntN(accounts), rng.IntN(accounts-1)
				if to >= from {
					to++
				}
				ok, err := transfer(ctx, c, from, to, 1+rng.IntN(50))
				if err != nil {
					errs <- err
					return
				}
				if ok {
					transfers.Add(1)
				} else {
					retries.Add(1)
				}
			}
		})
	}
	audits := 0
	wg.Go(func() {
		for time.Now().Before(stop) {
			total, err := bankTotal(ctx, owner)
			if err != nil {
				errs <- err
				return
			}
			if total != accounts*initial {
				errs <- fmt.Errorf("an audit through the owner found %d, want %d", total, accounts*initial)
				return
			}
			audits++
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d transfers (%d refused on a stale ETag and retried) through 3 replicas, %d audits through the owner", transfers.Load(), retries.Load(), audits)
	if transfers.Load() == 0 {
		t.Fatal("no transfer committed")
	}
	for i, c := range clients {
		deadline := time.Now().Add(2*partitionedStaleness + time.Second)
		for {
			total, err := bankTotal(ctx, c)
			if err == nil && total == accounts*initial {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the total through replica %d: %d (%v), want %d", i, total, err, accounts*initial)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, p := range procs {
		if code, body := p.post("/debug/flush"); code != http.StatusOK {
			t.Fatalf("flush: %d %s", code, body)
		}
	}
	if total, err := bankTotal(ctx, directSvc.NewClient(name)); err != nil || total != accounts*initial {
		t.Fatalf("the total in the store: %d (%v), want %d", total, err, accounts*initial)
	}
	drain(t, procs...)
}

func bankEntity(i, n int) []byte {
	return []byte(fmt.Sprintf(`{"PartitionKey":"bank","RowKey":"a%02d","N":%d}`, i, n))
}

// transfer moves amount from one account to another in one entity group
// transaction conditioned on the ETags it read; false when an ETag no
// longer matched (nothing moved: read again and retry).
func transfer(ctx context.Context, c *aztables.Client, from, to, amount int) (bool, error) {
	read := func(i int) (int, azcore.ETag, error) {
		resp, err := c.GetEntity(ctx, "bank", fmt.Sprintf("a%02d", i), nil)
		if err != nil {
			return 0, "", err
		}
		var m struct{ N int }
		err = json.Unmarshal(resp.Value, &m)
		return m.N, resp.ETag, err
	}
	nf, ef, err := read(from)
	if err != nil {
		return false, err
	}
	nt, et, err := read(to)
	if err != nil {
		return false, err
	}
	_, err = c.SubmitTransaction(ctx, []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeUpdateReplace, Entity: bankEntity(from, nf-amount), IfMatch: &ef},
		{ActionType: aztables.TransactionTypeUpdateReplace, Entity: bankEntity(to, nt+amount), IfMatch: &et},
	}, nil)
	// A refused batch is a 202 whose changeset answers 412, as Azure
	// answers it.
	var re *azcore.ResponseError
	if errors.As(err, &re) && (re.StatusCode == http.StatusPreconditionFailed ||
		re.StatusCode == http.StatusAccepted && strings.Contains(err.Error(), "412 Precondition Failed")) {
		return false, nil
	}
	return err == nil, err
}

// bankTotal sums every account in one query.
func bankTotal(ctx context.Context, c *aztables.Client) (int, error) {
	filter := "PartitionKey eq 'bank'"
	pager := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter})
	total := 0
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return 0, err
		}
		for _, e := range page.Entities {
			var m struct{ N int }
			if err := json.Unmarshal(e, &m); err != nil {
				return 0, err
			}
			total += m.N
		}
	}
	return total, nil
}

// TestBinaryPartitionedRollingRestart restarts three partitioned replicas
// over Azurite one at a time (SIGTERM, then a new pod: a new data
// directory, node id and peer port), under write load through all of
// them: every error a client sees is one the SDK retries or reports as
// such (503, 500 OperationTimedOut, or the 409 of an insert whose first
// attempt landed), never a refusal; every write acknowledged is there at
// the end; and every drain exits 0.
func TestBinaryPartitionedRollingRestart(t *testing.T) {
	ctx := context.Background()
	conn, directSvc, name := azuriteTable(t, "roll")
	be := partitionedBackend{env: []string{"NEMO_BACKEND_TYPE=aztable", "NEMO_BACKEND_AZTABLE_CONNECTION_STRING=" + conn}, keyspace: name}
	var mu sync.Mutex
	var procs []*proc
	logOnFailure(t, "NEMO_TEST_LOG_DIR", 20, func() []*proc { mu.Lock(); defer mu.Unlock(); return procs })
	clients := make([]*aztables.Client, 3)
	var cmu sync.RWMutex
	for i := range 3 {
		p := startReplica(t, be, peerSecret)
		procs = append(procs, p)
		clients[i] = nemoClient(t, p).NewClient(name)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var acked sync.Map
	var refusals atomic.Int64
	bad := make(chan error, 16)
	for w := range 6 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d-%05d", w, i)
				cmu.RLock()
				c := clients[w%3]
				cmu.RUnlock()
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := c.AddEntity(wctx, azEntity(key, i), nil)
				cancel()
				var re *azcore.ResponseError
				switch {
				case err == nil:
					acked.Store(key, true)
				case errors.As(err, &re) && (re.StatusCode == http.StatusServiceUnavailable || re.StatusCode == http.StatusInternalServerError ||
					re.StatusCode == http.StatusConflict && re.ErrorCode == "EntityAlreadyExists"):
					refusals.Add(1) // retryable, or an unknown outcome's retry
				case errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "EOF"):
					refusals.Add(1) // the replica it talks to is restarting
				default:
					code := "no status"
					if re != nil {
						code = fmt.Sprintf("%d %s", re.StatusCode, re.ErrorCode)
					}
					select {
					case bad <- fmt.Errorf("%s (%s): %w", key, code, err):
					default:
					}
				}
				if err != nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(time.Second)
	for i := range 3 {
		mu.Lock()
		old := procs[i]
		mu.Unlock()
		drain(t, old)
		p := startReplica(t, be, peerSecret)
		mu.Lock()
		procs[i] = p
		mu.Unlock()
		c := nemoClient(t, p).NewClient(name)
		cmu.Lock()
		clients[i] = c
		cmu.Unlock()
		time.Sleep(time.Second)
	}
	close(stop)
	wg.Wait()
	close(bad)
	for err := range bad {
		t.Errorf("a client got an error that is not retryable: %v", err)
	}
	n := 0
	acked.Range(func(k, _ any) bool { n++; return true })
	t.Logf("%d writes acknowledged across a rolling restart of 3 replicas; %d answered as retryable", n, refusals.Load())
	if n == 0 {
		t.Fatal("nothing acknowledged")
	}
	mu.Lock()
	drain(t, procs...)
	mu.Unlock()
	direct := azKV{directSvc.NewClient(name)}
	acked.Range(func(k, _ any) bool {
		if _, ok, err := direct.get(ctx, k.(string)); err != nil || !ok {
			t.Errorf("%s, acknowledged, is not in the store after the drains (%v, %v)", k, ok, err)
		}
		return true
	})
}

// TestBinaryPartitionedBackendCutOff: an owner cut off from the backend
// stops acknowledging before its lease can pass, and once another replica
// owns the table the store refuses what the old owner sent before the cut
// (the log's fence, conditioned on its version, is the epoch check). Two
// partitioned replicas over Azurite; A owns the table and reaches Azurite
// through the fault proxy, B directly.
//
//  1. The proxy holds A's connections, as a network that delays requests:
//     an upsert through A (of a key A knows, so its commit's append is
//     its only store call) is appended, and the append is held, with A's
//     lease renewals.
//  2. B takes the table over once A's lease has stayed unrenewed for a
//     TTL, fencing the log and replaying it (the held entry is not in it).
//  3. The proxy releases what it held: A's append reaches the store after
//     B's fence, and is refused; A's log stops, and reading the fence
//     and B's entry where A's would be proves A's never landed. The
//     upsert through A is answered with a retryable 5xx (the client does
//     not retry), never acknowledged, and its value is neither in B's
//     answers nor in the store.
//  4. The proxy refuses A's connections: A says so on /readyz while B
//     serves on; with the backend back, A is ready and its writes reach
//     B, the owner.
//  5. A drains with exit 0: the table it owned before the cut is B's,
//     and what A did not write back of it is in the log B replayed
//     (txn's forgetTaken), then B drains, and the store has every write.
func TestBinaryPartitionedBackendCutOff(t *testing.T) {
	ctx := context.Background()
	conn, directSvc, name := azuriteTable(t, "cutbe")
	fp := startFaultProxy(t, aztest.Azurite(t))
	be := partitionedBackend{env: []string{"NEMO_BACKEND_TYPE=aztable", "NEMO_BACKEND_AZTABLE_CONNECTION_STRING=" + conn}, keyspace: name}
	beA := partitionedBackend{env: []string{"NEMO_BACKEND_TYPE=aztable",
		"NEMO_BACKEND_AZTABLE_CONNECTION_STRING=" + aztest.ConnectionString(fp.url, aztest.Key)}, keyspace: name}
	a := startReplica(t, beA, peerSecret)
	b := startReplica(t, be, peerSecret)
	logOnFailure(t, "NEMO_TEST_LOG_DIR", 40, func() []*proc { return []*proc{a, b} })
	noRetry := &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}}
	ca, cb := azKV{nemoClient(t, a, noRetry).NewClient(name)}, azKV{nemoClient(t, b).NewClient(name)}
	direct := azKV{directSvc.NewClient(name)}
	for i, c := range []azKV{ca, cb, ca} { // A's first write makes it the owner
		if err := c.put(ctx, fmt.Sprintf("before%d", i), i); err != nil {
			t.Fatalf("write %d before the cut: %v", i, err)
		}
	}
	if err := ca.put(ctx, "held", 1); err != nil {
		t.Fatal(err)
	}
	failedBefore := a.metric(t, "nemo_backend_log_append_errors_total")

	fp.set(faultHold)
	held := make(chan error, 1)
	go func() {
		hctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		held <- ca.put(hctx, "held", 2)
	}()
	select {
	case <-fp.held:
	case err := <-held:
		t.Fatalf("the upsert through A was answered with its backend held: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("A sent nothing to the held backend")
	}
	cut := time.Now()
	for {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := cb.put(wctx, "after", 1)
		cancel()
		if err == nil {
			break
		}
		if time.Since(cut) > 8*leaseTTL {
			t.Fatalf("B has not taken the table over %v after A was cut off: %v", time.Since(cut), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("B took the table over %v after A was cut off", time.Since(cut).Round(time.Millisecond))
	select {
	case err := <-held:
		t.Fatalf("the upsert through A was answered before its append reached the store: %v", err)
	default:
	}
	if n, ok, err := cb.get(ctx, "held"); err != nil || !ok || n != 1 {
		t.Fatalf("held through B: %d, %v, %v; want 1, the value before the cut", n, ok, err)
	}

	fp.release()
	select {
	case err := <-held:
		if err == nil {
			t.Fatal("the upsert whose append reached the store after B fenced the log was acknowledged")
		}
		var re *azcore.ResponseError
		if !errors.As(err, &re) || re.StatusCode < 500 {
			t.Fatalf("the refused upsert through A: %v, want a 5xx the client may retry", err)
		}
		t.Logf("the old owner's late append, refused: %d %s", re.StatusCode, re.ErrorCode)
	case <-time.After(40 * time.Second):
		t.Fatal("the upsert through A is still unanswered 40s after the release")
	}
	if got := a.waitMetric(t, "nemo_backend_log_append_errors_total", func(v float64) bool { return v > failedBefore }); got <= failedBefore {
		t.Fatalf("A counted no failed append")
	}
	select {
	case <-a.logged("backend log stopped: nothing more is appended until it is opened again"):
	case <-time.After(10 * time.Second):
		t.Fatal("A did not say its log stopped")
	}
	// A's settling read finds B's fence, whose last entry already counts
	// B's own appends ("after"), and B's entry where A's would be: A's
	// append is known not applied, not an unknown outcome.
	if !strings.Contains(a.logs(), "is fenced by") || strings.Contains(a.logs(), "may or may not have been appended") {
		t.Fatalf("A's log did not stop on B's fence with its late entry known not appended:\n%s", a.logs())
	}
	if n, ok, err := cb.get(ctx, "held"); err != nil || !ok || n != 1 {
		t.Fatalf("held through B after the release: %d, %v, %v; want 1", n, ok, err)
	}

	fp.set(faultRefuse)
	took, why := a.waitProbe(t, "/readyz", http.StatusServiceUnavailable, 40*time.Second)
	t.Logf("A, cut off from the backend, not ready after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(why))
	if err := cb.put(ctx, "during", 1); err != nil {
		t.Fatalf("a write through B while A is cut off: %v", err)
	}
	fp.set(faultPass)
	a.waitProbe(t, "/readyz", http.StatusOK, 40*time.Second)
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		err := ca.put(ctx, "back", 1)
		if err == nil {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("a write through A with its backend back: %v", err)
		}
	}
	drain(t, a, b)
	for _, key := range []string{"before0", "before1", "before2", "after", "during", "back"} {
		if _, ok, err := direct.get(ctx, key); err != nil || !ok {
			t.Errorf("%s is not in the store after B's drain (%v, %v)", key, ok, err)
		}
	}
	if n, ok, err := direct.get(ctx, "held"); err != nil || !ok || n != 1 {
		t.Errorf("held in the store: %d, %v, %v; want 1 (the refused write's 2 must never land)", n, ok, err)
	}
}

// TestBinaryPartitionedScale: scale-out and scale-in of partitioned
// replicas (coherence.peers naming all three, rebalancing every 500 ms)
// under transactional load through the real Datastore client, with long
// transactions (each holds its read for 2 s before it writes) on the
// replicas that give namespaces up.
//
//  1. A and B; A is the first writer of six namespaces, and rebalancing
//     leaves three on each.
//  2. Scale-out: long transactions through A on all six namespaces, then
//     C starts. A and B each hand one namespace over to C (A's hand-over
//     waits for the long transaction using it), two each.
//  3. Scale-in: long transactions through B on all six, then SIGTERM of
//     B: it lets them end, writes back, truncates and releases; it exits
//     0, and A and C take its namespaces on their next writes.
//
// Load runs through every live replica the whole time: increments of
// four counters per namespace, each a Datastore transaction (retried on
// ABORTED by the client); the long transactions increment a fifth (on the
// load's counters they would lose most deadlocks and retry for minutes). Errors other than the retryable ones a
// hand-over or a drain answers fail the test. Each counter ends at the
// increments acknowledged, plus at most the ones whose outcome was
// unknown: two replicas never acknowledged writes to one namespace at
// once (a lost update would leave a counter short).
func TestBinaryPartitionedScale(t *testing.T) {
	emu, project := dstest.Emulator(t), dstest.Project(t)
	be := partitionedBackend{env: []string{"NEMO_BACKEND_TYPE=datastore", "NEMO_BACKEND_DATASTORE_PROJECT=" + project,
		"NEMO_BACKEND_DATASTORE_EMULATOR_HOST=" + emu}, keyspace: "datastore/" + project + "//"}
	addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	rebalance := []string{"NEMO_COHERENCE_PEERS=" + strings.Join(addrs, ","), "NEMO_COHERENCE_REBALANCE_INTERVAL=500ms"}
	var mu sync.Mutex
	var procs []*proc
	logOnFailure(t, "NEMO_TEST_LOG_DIR", 30, func() []*proc { mu.Lock(); defer mu.Unlock(); return slices.Clone(procs) })
	start := func(i int) (*proc, *datastore.Client) {
		p := startReplicaAt(t, be, peerSecret, addrs[i], rebalance...)
		mu.Lock()
		procs = append(procs, p)
		mu.Unlock()
		_, addr := frontendAddrs(t, p)
		return p, dsClient(t, project, addr)
	}
	spaces := []string{"ns0", "ns1", "ns2", "ns3", "ns4", "ns5"}
	ctx := context.Background()
	a, ca := start(0)
	b, cb := start(1)
	c := &scaleCounters{acked: map[string]int{}, unknown: map[string]int{}}
	for _, ns := range spaces {
		if err := c.incr(ctx, ca, scaleKey(ns, "long"), 0); err != nil {
			t.Fatalf("first increment of %s through A: %v", ns, err)
		}
	}
	waitHeld := func(want map[*proc]int, within time.Duration) {
		t.Helper()
		began := time.Now()
		for {
			ok := true
			got := ""
			for p, n := range want {
				h := int(p.metric(t, "nemo_lease_held"))
				got += fmt.Sprintf(" %d", h)
				ok = ok && h == n
			}
			if ok {
				t.Logf("leases held:%s after %v", got, time.Since(began).Round(time.Millisecond))
				return
			}
			if time.Since(began) > within {
				t.Fatalf("leases held:%s after %v, want %v", got, within, slices.Collect(maps.Values(want)))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitHeld(map[*proc]int{a: 3, b: 3}, 30*time.Second)

	load := c.load(t, []*datastore.Client{ca, cb}, spaces)
	long := c.long(t, ca, spaces)
	time.Sleep(300 * time.Millisecond) // the long transactions have read
	cproc, cc := start(2)
	load.add(cc)
	if err := long.wait(); err != nil {
		t.Fatalf("a long transaction through A during the scale-out: %v", err)
	}
	waitHeld(map[*proc]int{a: 2, b: 2, cproc: 2}, 30*time.Second)

	long = c.long(t, cb, spaces)
	time.Sleep(300 * time.Millisecond)
	load.remove(cb)
	bMoves := b.metric(t, "nemo_rebalance_moves_total")
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := b.waitExit(t); code != 0 {
		t.Fatalf("B exited %d after SIGTERM", code)
	}
	if err := long.wait(); err != nil {
		t.Fatalf("a long transaction through B during its drain: %v", err)
	}
	time.Sleep(2 * time.Second) // A and C take B's namespaces under load
	load.stop(t)
	acked, unknown := 0, 0
	for _, ns := range spaces {
		for _, name := range []string{"long", "load0", "load1", "load2", "load3"} {
			k := scaleKey(ns, name)
			for via, cl := range map[string]*datastore.Client{"A": ca, "C": cc} {
				n, err := c.read(ctx, cl, k)
				if err != nil {
					t.Fatalf("%v through %s: %v", k, via, err)
				}
				if lo, hi := c.acked[scaleID(k)], c.acked[scaleID(k)]+c.unknown[scaleID(k)]; n < lo || n > hi {
					t.Errorf("%v through %s: %d, want %d acknowledged increments (and up to %d unknown)", k, via, n, lo, c.unknown[scaleID(k)])
				}
			}
			acked, unknown = acked+c.acked[scaleID(k)], unknown+c.unknown[scaleID(k)]
		}
	}
	t.Logf("%d increments acknowledged, %d of unknown outcome; A moved %v namespaces, B %v, then drained", acked, unknown,
		a.metric(t, "nemo_rebalance_moves_total"), bMoves)
}

// scaleCounters counts, per namespace, the increments acknowledged and
// those whose outcome is unknown.
type scaleCounters struct {
	mu      sync.Mutex
	acked   map[string]int
	unknown map[string]int
}

// scaleID names a counter in the counts (Key.String leaves the namespace
// out).
func scaleID(k *datastore.Key) string { return k.Namespace + "/" + k.Name }

func scaleKey(ns, name string) *datastore.Key {
	k := datastore.NameKey("K", name, nil)
	k.Namespace = ns
	return k
}

// incr increments the counter k in one transaction that holds its read
// for hold before it writes. An error a hand-over or a drain may answer
// (UNAVAILABLE, ABORTED after the client's retries, DEADLINE_EXCEEDED) is
// counted unknown and returned nil; any other is returned.
func (c *scaleCounters) incr(ctx context.Context, cl *datastore.Client, k *datastore.Key, hold time.Duration) error {
	_, err := cl.RunInTransaction(ctx, func(tx *datastore.Transaction) error {
		var e dsE
		if err := tx.Get(k, &e); err != nil && !errors.Is(err, datastore.ErrNoSuchEntity) {
			return err
		}
		time.Sleep(hold)
		e.N++
		_, err := tx.Put(k, &e)
		return err
	}, datastore.MaxAttempts(50))
	c.mu.Lock()
	defer c.mu.Unlock()
	switch status.Code(err) {
	case codes.OK:
		c.acked[scaleID(k)]++
		return nil
	case codes.Unavailable, codes.Aborted, codes.DeadlineExceeded:
		c.unknown[scaleID(k)]++
		return nil
	}
	if errors.Is(err, datastore.ErrConcurrentTransaction) {
		c.unknown[scaleID(k)]++ // ABORTED 50 times: nothing applied, but counted loosely
		return nil
	}
	return fmt.Errorf("increment of %v: %w", k, err)
}

// read reads the counter k in a transaction (through the owner).
func (c *scaleCounters) read(ctx context.Context, cl *datastore.Client, k *datastore.Key) (int, error) {
	var e dsE
	_, err := cl.RunInTransaction(ctx, func(tx *datastore.Transaction) error {
		err := tx.Get(k, &e)
		if errors.Is(err, datastore.ErrNoSuchEntity) {
			return nil
		}
		return err
	}, datastore.MaxAttempts(50))
	return e.N, err
}

// longTxns are one long increment per namespace, running at once.
type longTxns struct{ errs chan error }

func (c *scaleCounters) long(t *testing.T, cl *datastore.Client, spaces []string) *longTxns {
	l := &longTxns{errs: make(chan error, len(spaces))}
	for _, ns := range spaces {
		go func() { l.errs <- c.incr(context.Background(), cl, scaleKey(ns, "long"), 2*time.Second) }()
	}
	return l
}

func (l *longTxns) wait() error {
	var errs []error
	for range cap(l.errs) {
		errs = append(errs, <-l.errs)
	}
	return errors.Join(errs...)
}

// scaleLoad increments random counters through a changing set of
// clients, two workers each.
type scaleLoad struct {
	c     *scaleCounters
	ns    []string
	mu    sync.Mutex
	stops map[*datastore.Client]chan struct{}
	wg    sync.WaitGroup
	errs  chan error
}

func (c *scaleCounters) load(t *testing.T, clients []*datastore.Client, spaces []string) *scaleLoad {
	l := &scaleLoad{c: c, ns: spaces, stops: map[*datastore.Client]chan struct{}{}, errs: make(chan error, 16)}
	for _, cl := range clients {
		l.add(cl)
	}
	return l
}

func (l *scaleLoad) add(cl *datastore.Client) {
	l.mu.Lock()
	defer l.mu.Unlock()
	stop := make(chan struct{})
	l.stops[cl] = stop
	seed := uint64(len(l.stops))
	for w := range 2 {
		l.wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := scaleKey(l.ns[rng.IntN(len(l.ns))], fmt.Sprintf("load%d", rng.IntN(4)))
				if err := l.c.incr(context.Background(), cl, k, 0); err != nil {
					select {
					case l.errs <- err:
					default:
					}
					return
				}
			}
		})
	}
}

// remove stops cl's workers (their replica is about to go).
func (l *scaleLoad) remove(cl *datastore.Client) {
	l.mu.Lock()
	stop := l.stops[cl]
	delete(l.stops, cl)
	l.mu.Unlock()
	close(stop)
}

func (l *scaleLoad) stop(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	for cl, stop := range l.stops {
		close(stop)
		delete(l.stops, cl)
	}
	l.mu.Unlock()
	l.wg.Wait()
	select {
	case err := <-l.errs:
		t.Fatal(err)
	default:
	}
}
