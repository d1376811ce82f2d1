package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/internal/dstest"
)

// The bank tests run real nemo processes in front of each Datastore
// backend (the legacy Datastore emulator, and the Firestore emulator in
// Datastore mode) and check that transactions through them are as
// consistent as the service's own: money moves between accounts in
// read-write transactions through every nemo at once, and audits sum every
// account in read-write and in read-only transactions, reading the
// accounts by key (one Lookup) or by a kind query. A committed audit must
// have seen the initial total; an audit whose commit failed proves nothing
// and is retried, as clients do.
//
// NEMO_BANK_SECONDS sets how long each bank runs (default 6).

const (
	bankAccounts = 20
	bankInitial  = 1000
)

type bankAccount struct{ N int64 }

// dsBackendEnv is a Datastore backend nemo runs in front of in these tests.
type dsBackendEnv struct {
	name string
	host func(testing.TB) string
}

func dsBackendEnvs() []dsBackendEnv {
	return []dsBackendEnv{{"datastore-emulator", dstest.Emulator}, {"firestore", dstest.FirestoreEmulator}}
}

// nemos starts n nemo processes in coherence mode (shared, or exclusive
// with leases) in front of the backend, for project, and returns a Go
// client through each.
func (b dsBackendEnv) nemos(t *testing.T, n int, mode, project string) ([]*proc, []*datastore.Client) {
	t.Helper()
	env := []string{"NEMO_COHERENCE_MODE=" + mode, "NEMO_BACKEND_TYPE=datastore",
		"NEMO_BACKEND_DATASTORE_PROJECT=" + project, "NEMO_BACKEND_DATASTORE_EMULATOR_HOST=" + b.host(t)}
	switch mode {
	case "shared":
		env = append(env, "NEMO_COHERENCE_MAX_STALENESS="+cohStaleness.String())
	case "partitioned":
		env = append(env, "NEMO_WAL_LOCATION=backend", "NEMO_COHERENCE_PEER_SECRET="+peerSecret,
			"NEMO_COHERENCE_MAX_STALENESS="+partitionedStaleness.String(), "NEMO_COHERENCE_LEASE_TTL="+leaseTTL.String())
	}
	var procs []*proc
	var clients []*datastore.Client
	for range n {
		penv := env
		if mode == "partitioned" {
			penv = append(env[:len(env):len(env)], "NEMO_LISTEN_PEER="+freeAddr(t))
		}
		p := startNemo(t, t.TempDir(), penv...)
		procs = append(procs, p)
	}
	for _, p := range procs {
		p.waitReady(t)
		_, addr := frontendAddrs(t, p)
		clients = append(clients, dsClient(t, project, addr))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, p := range procs {
				t.Logf("nemo %d WARN/ERROR lines:\n%s", i, warnLines(p.logs(), 40))
			}
		}
	})
	return procs, clients
}

// warnLines returns the last max WARN and ERROR lines of a JSON log.
func warnLines(logs string, max int) string {
	var lines []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
			lines = append(lines, l)
		}
	}
	if len(lines) > max {
		lines = append([]string{fmt.Sprintf("... %d earlier", len(lines)-max)}, lines[len(lines)-max:]...)
	}
	return strings.Join(lines, "\n")
}

func bankKey(ns string, i int) *datastore.Key {
	k := datastore.IDKey("Account", int64(i+1), nil)
	k.Namespace = ns
	return k
}

func bankSeconds() time.Duration {
	if s := os.Getenv("NEMO_BANK_SECONDS"); s != "" {
		var n int
		if _, err := fmt.Sscan(s, &n); err == nil && n > 0 {
			return time.Duration(n) * time.Second
		}
	}
	return 6 * time.Second
}

// TestBinaryBank runs the bank through 3 nemo replicas in coherence mode
// shared and in mode partitioned (the replicas forward to the namespace's
// owner), and through one nemo in mode exclusive, in front of each
// Datastore backend; then the deterministic read skew of two replicas.
func TestBinaryBank(t *testing.T) {
	for _, b := range dsBackendEnvs() {
		t.Run(b.name+"/shared", func(t *testing.T) {
			project := dstest.Project(t)
			procs, clients := b.nemos(t, 3, "shared", project)
			runBank(t, clients, dsClient(t, project, b.host(t)), nil, bankForms)
			for i, p := range procs {
				failuresLogged(t, i, p)
			}
		})
		t.Run(b.name+"/partitioned", func(t *testing.T) {
			project := dstest.Project(t)
			procs, clients := b.nemos(t, 3, "partitioned", project)
			runBank(t, clients, dsClient(t, project, b.host(t)), func() {
				for _, p := range procs {
					p.flush(t)
				}
			}, bankForms)
			for i, p := range procs {
				failuresLogged(t, i, p)
			}
		})
		t.Run(b.name+"/exclusive", func(t *testing.T) {
			project := dstest.Project(t)
			procs, clients := b.nemos(t, 1, "exclusive", project)
			runBank(t, clients, dsClient(t, project, b.host(t)), func() { procs[0].flush(t) }, bankForms)
		})
		if os.Getenv("NEMO_BANK_DIRECT") != "" {
			// The same bank straight against the backend, for scale,
			// in the audits it takes: the legacy emulator refuses a
			// kind query in a transaction, the Firestore emulator the
			// commit of a read-only transaction.
			t.Run(b.name+"/direct", func(t *testing.T) {
				project := dstest.Project(t)
				c := dsClient(t, project, b.host(t))
				forms := []bankForm{{false, false}, {true, false}}
				if b.name == "firestore" {
					forms = []bankForm{{false, false}, {false, true}}
				}
				runBank(t, []*datastore.Client{c, c, c}, nil, nil, forms)
			})
		}
		t.Run(b.name+"/read-skew", func(t *testing.T) {
			project := dstest.Project(t)
			_, clients := b.nemos(t, 2, "shared", project)
			readSkew(t, b.name, clients)
		})
	}
}

// bankForm is one way to audit.
type bankForm struct {
	readOnly, query bool
}

func (f bankForm) String() string {
	s := "read-write"
	if f.readOnly {
		s = "read-only"
	}
	if f.query {
		return s + "/query"
	}
	return s + "/lookup"
}

var bankForms = []bankForm{{false, false}, {false, true}, {true, false}, {true, true}}

// runBank runs transfers and audits (in forms) through clients for bankSeconds,
// then checks the final total, through every client and (direct, when not
// nil) straight from the backend, once flush (when not nil) has written
// back what nemo holds.
func runBank(t *testing.T, clients []*datastore.Client, direct *datastore.Client, flush func(), forms []bankForm) {
	ctx := context.Background()
	ns := fmt.Sprintf("bank%08x", rand.Uint32())
	keys := make([]*datastore.Key, bankAccounts)
	accts := make([]bankAccount, bankAccounts)
	for i := range keys {
		keys[i], accts[i] = bankKey(ns, i), bankAccount{N: bankInitial}
	}
	if _, err := clients[0].PutMulti(ctx, keys, accts); err != nil {
		t.Fatal(err)
	}
	stop := time.Now().Add(bankSeconds())
	var transfers, gaveUp atomic.Int64
	type tally struct{ committed, wrong, retried atomic.Int64 }
	tallies := make([]tally, len(forms))
	var wg sync.WaitGroup
	for ci, c := range clients {
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(ci), uint64(w)))
				for time.Now().Before(stop) && !t.Failed() {
					from, to := rng.IntN(bankAccounts), rng.IntN(bankAccounts-1)
					if to >= from {
						to++
					}
					amount := int64(1 + rng.IntN(50))
					_, err := c.RunInTransaction(ctx, func(tx *datastore.Transaction) error {
						var a, b bankAccount
						if err := tx.Get(keys[from], &a); err != nil {
							return err
						}
						if err := tx.Get(keys[to], &b); err != nil {
							return err
						}
						if a.N < amount {
							return nil
						}
						a.N, b.N = a.N-amount, b.N+amount
						if _, err := tx.Put(keys[from], &a); err != nil {
							return err
						}
						_, err := tx.Put(keys[to], &b)
						return err
					}, datastore.MaxAttempts(8))
					switch {
					case err == nil:
						transfers.Add(1)
					case errors.Is(err, datastore.ErrConcurrentTransaction):
						gaveUp.Add(1)
					default:
						t.Errorf("transfer through nemo %d: %v", ci, err)
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := ci; time.Now().Before(stop) && !t.Failed(); i++ {
				fi := i % len(forms)
				f := forms[fi]
				var total int64
				var n int
				opts := []datastore.TransactionOption{datastore.MaxAttempts(1)}
				if f.readOnly {
					opts = append(opts, datastore.ReadOnly)
				}
				_, err := c.RunInTransaction(ctx, func(tx *datastore.Transaction) error {
					total, n = 0, 0
					var got []bankAccount
					if f.query {
						if _, err := c.GetAll(ctx, datastore.NewQuery("Account").Namespace(ns).Transaction(tx), &got); err != nil {
							return err
						}
					} else {
						got = make([]bankAccount, bankAccounts)
						if err := tx.GetMulti(keys, got); err != nil {
							return err
						}
					}
					n = len(got)
					for _, a := range got {
						total += a.N
					}
					return nil
				}, opts...)
				switch {
				case err == nil:
					tallies[fi].committed.Add(1)
					if total != bankAccounts*bankInitial || n != bankAccounts {
						tallies[fi].wrong.Add(1)
						t.Errorf("a %v audit through nemo %d committed having seen %d accounts totalling %d", f, ci, n, total)
					}
				case errors.Is(err, datastore.ErrConcurrentTransaction), isAborted(err):
					tallies[fi].retried.Add(1)
				default:
					t.Errorf("a %v audit through nemo %d: %v", f, ci, err)
				}
			}
		}()
	}
	wg.Wait()
	var report []string
	for fi, f := range forms {
		tl := &tallies[fi]
		report = append(report, fmt.Sprintf("%v: %d committed, %d wrong, %d aborted", f, tl.committed.Load(), tl.wrong.Load(), tl.retried.Load()))
		if tl.committed.Load() == 0 {
			t.Errorf("no %v audit committed", f)
		}
	}
	t.Logf("%d transfers (%d gave up after 8 attempts) through %d nemo; audits: %s", transfers.Load(), gaveUp.Load(), len(clients), strings.Join(report, "; "))
	if transfers.Load() == 0 {
		t.Error("no transfer committed")
	}
	readers := clients
	if direct != nil {
		readers = append(readers, direct)
	}
	if flush != nil {
		flush()
	}
	// Plain reads through a replica in mode shared may be as old as
	// max_staleness.
	time.Sleep(cohStaleness + cohSlack)
	for i, c := range readers {
		got := make([]bankAccount, bankAccounts)
		if err := c.GetMulti(ctx, keys, got); err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, a := range got {
			total += a.N
		}
		if total != bankAccounts*bankInitial {
			t.Errorf("reader %d (the last is the backend itself) sees a total of %d at the end", i, total)
		}
	}
}

// isAborted reports whether err carries an ABORTED status anywhere in its
// chain (the client wraps some).
func isAborted(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if status.Code(e) == codes.Aborted {
			return true
		}
	}
	return false
}

// readSkew is the deterministic two-replica read skew, ten times in each
// transaction kind: a transaction reads account a through nemo 0, a
// transfer from a to b commits through nemo 1, and the transaction reads
// b and commits. A read-write transaction must abort (the legacy emulator
// aborts its read of b, Firestore would hold the transfer back until it
// ends; neither lets it commit having seen a before and b after). A
// read-only one reads its snapshot: it sees b as it was (total 2000) and
// commits, or (legacy emulator) its read of b aborts, as the emulator's
// own read-only transactions do.
func readSkew(t *testing.T, backend string, clients []*datastore.Client) {
	ctx := context.Background()
	ns := fmt.Sprintf("skew%08x", rand.Uint32())
	a, b := bankKey(ns, 0), bankKey(ns, 1)
	outcomes := map[string]int{}
	for _, readOnly := range []bool{false, true} {
		for round := 0; round < 10; round++ {
			if _, err := clients[1].PutMulti(ctx, []*datastore.Key{a, b}, []bankAccount{{1000}, {1000}}); err != nil {
				t.Fatal(err)
			}
			var opts []datastore.TransactionOption
			if readOnly {
				opts = append(opts, datastore.ReadOnly)
			}
			tx, err := clients[0].NewTransaction(ctx, opts...)
			if err != nil {
				t.Fatal(err)
			}
			var va, vb bankAccount
			if err := tx.Get(a, &va); err != nil {
				t.Fatal(err)
			}
			if _, err := clients[1].RunInTransaction(ctx, func(x *datastore.Transaction) error {
				var xa, xb bankAccount
				if err := x.GetMulti([]*datastore.Key{a, b}, []*bankAccount{&xa, &xb}); err != nil {
					return err
				}
				xa.N, xb.N = xa.N-100, xb.N+100
				_, err := x.PutMulti([]*datastore.Key{a, b}, []*bankAccount{&xa, &xb})
				return err
			}); err != nil {
				t.Fatalf("the transfer through nemo 1: %v", err)
			}
			kind := "read-write"
			if readOnly {
				kind = "read-only"
			}
			outcome := ""
			if err := tx.Get(b, &vb); err != nil {
				if !isAborted(err) && !errors.Is(err, datastore.ErrConcurrentTransaction) {
					t.Fatalf("%s: the read of b: %v", kind, err)
				}
				outcome = "read of b aborted"
				_ = tx.Rollback()
			} else if _, err := tx.Commit(); err != nil {
				if !errors.Is(err, datastore.ErrConcurrentTransaction) && !isAborted(err) {
					t.Fatalf("%s: the commit: %v", kind, err)
				}
				outcome = fmt.Sprintf("commit aborted (saw %d)", va.N+vb.N)
				_ = tx.Rollback()
			} else {
				outcome = fmt.Sprintf("committed (saw %d)", va.N+vb.N)
				if va.N+vb.N != 2000 {
					t.Errorf("%s transaction %d committed having seen a=%d and b=%d", kind, round, va.N, vb.N)
				}
			}
			if !readOnly && strings.HasPrefix(outcome, "committed") {
				t.Errorf("read-write transaction %d committed across the transfer: %s", round, outcome)
			}
			outcomes[kind+": "+outcome]++
		}
	}
	t.Logf("%s: %v", backend, outcomes)
}

// failuresLogged checks that nemo p logged its failed remote calls: for
// every operation with failures (nemo_remote_errors_total), lines naming
// the operation, the keyspace and the error, with the backend's status and
// message where it answered one (a refused precondition is nemo's own
// check); no more lines (with those held back by the rate limit) than
// failures.
//
// The metric and the log are read apart, and a line crosses a pipe to the
// test: a call failing in the background (a refresh, a write-back) between
// the two reads, or a line still on its way, would make them disagree for a
// moment. The check is read again until they agree, for up to 10 s.
func failuresLogged(t *testing.T, i int, p *proc) {
	t.Helper()
	var failed, logged map[string]int
	var statuses, bad, disagree []string
	eventually(10*time.Second, func() bool {
		failed, logged, statuses, bad = remoteFailures(p)
		disagree = disagree[:0]
		for op, n := range failed {
			if n > 0 && logged[op] == 0 || logged[op] > n {
				disagree = append(disagree, fmt.Sprintf("%d failed %s calls, %d logged", n, op, logged[op]))
			}
		}
		return len(disagree) == 0
	})
	for _, line := range bad {
		t.Errorf("nemo %d: a failed remote call logged without its keyspace, error or the backend's status: %s", i, line)
	}
	for _, d := range disagree {
		t.Errorf("nemo %d: %s", i, d)
	}
	slices.Sort(statuses)
	t.Logf("nemo %d: failed remote calls %v, logged %v; statuses logged: %q", i, failed, logged, slices.Compact(statuses))
}

// remoteFailures reads p's failed remote calls by operation from its
// metrics, and from its log the lines saying so (with those held back by
// the rate limit), the statuses they name and the lines lacking a field.
func remoteFailures(p *proc) (failed, logged map[string]int, statuses, bad []string) {
	_, metrics := p.get("/metrics")
	failed, logged = map[string]int{}, map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^nemo_remote_errors_total\{op="([a-z_]+)"\} (\d+)$`).FindAllStringSubmatch(metrics, -1) {
		n, _ := strconv.Atoi(m[2])
		failed[m[1]] = n
	}
	for _, line := range strings.Split(p.logs(), "\n") {
		var rec struct {
			Msg, Op, Keyspace, Status, Message, Err string
			Withheld                                int `json:"withheld_since_last"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || !strings.HasPrefix(rec.Msg, "remote call") {
			continue
		}
		logged[rec.Op] += 1 + rec.Withheld
		if rec.Keyspace == "" || rec.Err == "" || strings.Contains(rec.Err, "rpc error") && rec.Status == "" {
			bad = append(bad, line)
		}
		if rec.Status != "" {
			statuses = append(statuses, rec.Op+" "+rec.Status+": "+rec.Message)
		}
	}
	return failed, logged, statuses, bad
}
