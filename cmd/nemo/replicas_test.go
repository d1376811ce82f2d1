package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/internal/dstest"
)

func (p *proc) flush(t *testing.T) {
	t.Helper()
	resp, err := http.Post("http://"+p.admin+"/debug/flush", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("flush: %s", resp.Status)
	}
}

func (p *proc) post(path string) (int, string) {
	resp, err := http.Post("http://"+p.admin+path, "application/json", nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// kv is one client's view of one table or kind: integer entities by name.
type kv interface {
	insert(ctx context.Context, key string, n int) error
	put(ctx context.Context, key string, n int) error
	get(ctx context.Context, key string) (n int, found bool, err error)
}

// leaseBackend is what the exclusive-mode scenario needs of a backend.
type leaseBackend struct {
	env []string
	// client is a kv through the given nemo (nil: straight to the backend).
	client func(p *proc) kv
	// refused reports whether err is the refusal of a write to a leased
	// keyspace, in the protocol's own format.
	refused func(err error) bool
}

const leaseTTL = 3 * time.Second

// TestBinaryExclusiveLeases runs the coherence mode exclusive scenario in
// front of Azurite and of the Datastore emulator, through the real SDKs,
// with real nemo processes and a writer that goes straight to the backend:
//
//   - the first nemo to write a table takes its lease; a second one is
//     refused writes (409 LeaseAlreadyPresent / FAILED_PRECONDITION, naming
//     the holder) and still serves reads;
//   - the holder's write-back never overwrites an outside change (the
//     losing write goes to conflicts.jsonl);
//   - kill -9 of the holder: the other nemo takes over only after the
//     lease lapses, not before half a TTL;
//   - the killed nemo, restarted on its data directory, is refused writes,
//     and its replayed acknowledged writes reach the store unless the new
//     holder changed the key (then they are recorded, never written over
//     the newer value: a stale holder cannot overwrite).
func TestBinaryExclusiveLeases(t *testing.T) {
	t.Run("azure", func(t *testing.T) {
		conn, direct, name := azuriteTable(t, "lease")
		exclusiveScenario(t, leaseBackend{
			env: []string{"NEMO_BACKEND_TYPE=aztable", "NEMO_BACKEND_AZTABLE_CONNECTION_STRING=" + conn},
			client: func(p *proc) kv {
				if p == nil {
					return azKV{direct.NewClient(name)}
				}
				return azKV{nemoClient(t, p).NewClient(name)}
			},
			refused: func(err error) bool {
				var re *azcore.ResponseError
				return errors.As(err, &re) && re.StatusCode == http.StatusConflict && re.ErrorCode == "LeaseAlreadyPresent"
			},
		})
	})
	// In front of the legacy Datastore emulator, and of the Firestore
	// emulator in Datastore mode.
	for name, host := range map[string]func(testing.TB) string{"datastore": dstest.Emulator, "firestore": dstest.FirestoreEmulator} {
		t.Run(name, func(t *testing.T) {
			emu := host(t)
			project := dstest.Project(t)
			dial := func(addr string) *datastore.Client { return dsClient(t, project, addr) }
			exclusiveScenario(t, leaseBackend{
				env: []string{"NEMO_BACKEND_TYPE=datastore", "NEMO_BACKEND_DATASTORE_PROJECT=" + project, "NEMO_BACKEND_DATASTORE_EMULATOR_HOST=" + emu},
				client: func(p *proc) kv {
					if p == nil {
						return dsKV{dial(emu)}
					}
					_, addr := frontendAddrs(t, p)
					return dsKV{dial(addr)}
				},
				refused: func(err error) bool { return status.Code(err) == codes.FailedPrecondition },
			})
		})
	}
}

func exclusiveScenario(t *testing.T, be leaseBackend) {
	ctx := context.Background()
	env := append([]string{"NEMO_COHERENCE_MODE=exclusive", "NEMO_COHERENCE_LEASE_TTL=" + leaseTTL.String()}, be.env...)
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := startNemo(t, dirA, env...), startNemo(t, dirB, env...)
	a.waitReady(t)
	b.waitReady(t)
	ca, cb, cd := be.client(a), be.client(b), be.client(nil)
	want := func(c kv, key string, n int) {
		t.Helper()
		got, ok, err := c.get(ctx, key)
		if err != nil || !ok || got != n {
			t.Fatalf("%s = %d (found %v, %v), want %d", key, got, ok, err, n)
		}
	}

	if err := cd.put(ctx, "x", 1); err != nil {
		t.Fatal(err)
	}
	want(ca, "x", 1) // A has seen x at the outside writer's first version
	if err := ca.insert(ctx, "z", 1); err != nil {
		t.Fatalf("A's first write (takes the lease): %v", err)
	}
	idA := nodeID(t, dirA)
	err := cb.insert(ctx, "q", 1)
	if !be.refused(err) || !strings.Contains(err.Error(), idA) {
		t.Fatalf("B's write while A holds the lease: %v; want the lease refusal naming A (%s)", err, idA)
	}
	want(cb, "x", 1) // reads are served

	// An outside write behind the holder: its write-back must not win.
	if err := cd.put(ctx, "x", 2); err != nil {
		t.Fatal(err)
	}
	if err := ca.put(ctx, "x", 3); err != nil {
		t.Fatalf("A's put, acknowledged from its buffer: %v", err)
	}
	a.flush(t)
	want(cd, "x", 2)
	if _, metrics := a.get("/metrics"); !strings.Contains(metrics, "\nnemo_cache_writeback_conflicts_total 1\n") {
		t.Errorf("A's conflict counter is not 1:\n%s", grepLines(metrics, "conflicts"))
	}

	// Acknowledged, not yet written back, then kill -9.
	for key, n := range map[string]int{"w": 5, "v": 6} {
		if err := ca.insert(ctx, key, n); err != nil {
			t.Fatal(err)
		}
	}
	killed := time.Now()
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	a.waitExit(t)
	for {
		err := cb.insert(ctx, "w", 7)
		if err == nil {
			break
		}
		if !be.refused(err) {
			t.Fatalf("B's write while A's lease lapses: %v", err)
		}
		if time.Since(killed) > 4*leaseTTL {
			t.Fatalf("B still refused %v after the holder died: %v", time.Since(killed), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(killed)
	t.Logf("B took the lease over %v after A was killed (lease TTL %v)", took.Round(time.Millisecond), leaseTTL)
	if took < leaseTTL/2 {
		t.Errorf("B took over %v after the kill, before the holder's lease could have lapsed (TTL %v)", took, leaseTTL)
	}
	if _, metrics := b.get("/metrics"); !strings.Contains(metrics, "\nnemo_lease_takeovers_total 1\n") || !strings.Contains(metrics, "\nnemo_lease_held 1\n") {
		t.Errorf("B's lease metrics after the takeover:\n%s", grepLines(metrics, "nemo_lease"))
	}

	// A restarts on its data directory and replays w and v. B holds the
	// lease: A is refused new writes and writes nothing back, not even its
	// replayed writes (a stale holder never writes the store).
	a2 := startNemo(t, dirA, env...)
	a2.waitReady(t)
	ca2 := be.client(a2)
	idB := nodeID(t, dirB)
	if err := ca2.insert(ctx, "u", 1); !be.refused(err) || !strings.Contains(err.Error(), idB) {
		t.Fatalf("restarted A's write while B holds the lease: %v; want the refusal naming B (%s)", err, idB)
	}
	b.flush(t)
	if code, body := a2.post("/debug/flush"); code == http.StatusOK {
		t.Fatalf("restarted A flushed while B holds the lease: %s", body)
	}
	if _, ok, err := cd.get(ctx, "v"); err != nil || ok {
		t.Fatalf("A's replayed v reached the store while B holds the lease (found %v, %v)", ok, err)
	}
	// B stops and releases; A takes the lease and writes back: v lands,
	// w loses to B's newer w and is recorded.
	drain(t, b)
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		// A remembers B's lease for a moment (lease.Manager answers a
		// refusal from memory for TTL/15) before it reads it again.
		code, body := a2.post("/debug/flush")
		if code == http.StatusOK {
			break
		}
		if time.Since(start) > leaseTTL {
			t.Fatalf("restarted A's flush once B released the lease: %d %s", code, body)
		}
	}
	want(cd, "w", 7)
	want(cd, "v", 6)
	want(cd, "z", 1)
	want(cd, "x", 2)
	drain(t, a2)
	lost := map[string]bool{}
	for _, v := range conflictValues(t, dirA) {
		lost[v] = true
	}
	// x lost once before the kill and again after the replay (the log
	// still held it: no checkpoint came between); w after the restart.
	if len(lost) != 2 {
		t.Errorf("A's conflicts.jsonl holds %d distinct losing writes, want 2 (x and w)", len(lost))
	}
	if _, err := os.Stat(filepath.Join(dirB, "conflicts.jsonl")); err == nil {
		t.Error("B, which lost nothing, wrote a conflicts file")
	}
}

// nodeID is the lease holder name a nemo keeps in its data directory.
func nodeID(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "node-id"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// conflictValues reads a data directory's conflicts file.
func conflictValues(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "conflicts.jsonl"))
	if err != nil {
		t.Fatalf("conflicts file: %v", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var c struct {
			Value  []byte `json:"value"`
			Exists bool   `json:"exists"`
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("conflicts line %q: %v", sc.Text(), err)
		}
		if !c.Exists {
			t.Errorf("conflict with an absent key: %s", sc.Text())
		}
		out = append(out, string(c.Value))
	}
	return out
}

// azKV is kv over an aztables client (partition "p", property N).
type azKV struct{ c *aztables.Client }

func azEntity(key string, n int) []byte {
	return []byte(fmt.Sprintf(`{"PartitionKey":"p","RowKey":%q,"N":%d}`, key, n))
}

func (k azKV) insert(ctx context.Context, key string, n int) error {
	_, err := k.c.AddEntity(ctx, azEntity(key, n), nil)
	return err
}

func (k azKV) put(ctx context.Context, key string, n int) error {
	_, err := k.c.UpsertEntity(ctx, azEntity(key, n), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
	return err
}

func (k azKV) get(ctx context.Context, key string) (int, bool, error) {
	resp, err := k.c.GetEntity(ctx, "p", key, nil)
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	var m struct{ N int }
	if err := json.Unmarshal(resp.Value, &m); err != nil {
		return 0, false, err
	}
	return m.N, true, nil
}

// dsKV is kv over a Datastore client (kind K, property N).
type dsKV struct{ c *datastore.Client }

type dsE struct{ N int }

func (k dsKV) insert(ctx context.Context, key string, n int) error {
	_, err := k.c.Mutate(ctx, datastore.NewInsert(datastore.NameKey("K", key, nil), &dsE{N: n}))
	return err
}

func (k dsKV) put(ctx context.Context, key string, n int) error {
	_, err := k.c.Put(ctx, datastore.NameKey("K", key, nil), &dsE{N: n})
	return err
}

func (k dsKV) get(ctx context.Context, key string) (int, bool, error) {
	var e dsE
	err := k.c.Get(ctx, datastore.NameKey("K", key, nil), &e)
	if errors.Is(err, datastore.ErrNoSuchEntity) {
		return 0, false, nil
	}
	return e.N, err == nil, err
}
