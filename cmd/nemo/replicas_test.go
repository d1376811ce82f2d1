package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cloud.google.com/go/datastore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nemocache/nemo/internal/aztest"
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

// TestBinaryReplicasNeverOverwriteUnseenChanges runs two real nemo
// processes (separate data directories) over one Azurite, and a writer that
// goes straight to Azurite, through the aztables SDK. Replica B reads Y as
// absent and X at 1; replica A inserts Y and flushes; the direct writer
// sets X to 2; B then inserts Y and replaces X, acknowledging both from its
// buffer. B's write-back must not replace either change it never saw: A's
// Y and the direct X stand in Azurite, B counts two conflicts, and after
// B's drain its data directory's conflicts.jsonl holds both losing writes
// in full.
func TestBinaryReplicasNeverOverwriteUnseenChanges(t *testing.T) {
	url := aztest.Azurite(t)
	ctx := context.Background()
	env := []string{"NEMO_COHERENCE_MODE=exclusive", "NEMO_BACKEND_TYPE=aztable", "NEMO_BACKEND_AZTABLE_CONNECTION_STRING=" + aztest.ConnectionString(url, aztest.Key)}
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := startNemo(t, dirA, env...), startNemo(t, dirB, env...)
	a.waitReady(t)
	b.waitReady(t)
	name := aztest.TableName("replicas")
	direct, err := aztables.NewServiceClientFromConnectionString(aztest.ConnectionString(url, aztest.Key), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.CreateTable(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = direct.DeleteTable(context.Background(), name, nil) })
	td, ta, tb := direct.NewClient(name), nemoClient(t, a).NewClient(name), nemoClient(t, b).NewClient(name)
	entity := func(rk string, n int) []byte {
		return []byte(fmt.Sprintf(`{"PartitionKey":"p","RowKey":%q,"N":%d}`, rk, n))
	}
	if _, err := td.AddEntity(ctx, entity("x", 1), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.GetEntity(ctx, "p", "y", nil); err == nil {
		t.Fatal("B found Y before anyone wrote it")
	}
	if _, err := tb.GetEntity(ctx, "p", "x", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ta.AddEntity(ctx, entity("y", 10), nil); err != nil {
		t.Fatal(err)
	}
	a.flush(t)
	replace := &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}
	if _, err := td.UpsertEntity(ctx, entity("x", 2), replace); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.AddEntity(ctx, entity("y", 20), nil); err != nil {
		t.Fatalf("B's insert, acknowledged from its buffer: %v", err)
	}
	if _, err := tb.UpsertEntity(ctx, entity("x", 3), replace); err != nil {
		t.Fatal(err)
	}
	b.flush(t)
	for rk, want := range map[string]float64{"y": 10, "x": 2} {
		resp, err := td.GetEntity(ctx, "p", rk, nil)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(resp.Value, &m); err != nil {
			t.Fatal(err)
		}
		if m["N"] != want {
			t.Errorf("Azurite holds %s.N = %v, want %v: B overwrote a change it never saw", rk, m["N"], want)
		}
	}
	if _, metrics := b.get("/metrics"); !strings.Contains(metrics, "\nnemo_cache_writeback_conflicts_total 2\n") {
		t.Errorf("B's conflict counter is not 2:\n%s", grepLines(metrics, "conflicts"))
	}
	drain(t, a, b)
	f, err := os.Open(filepath.Join(dirB, "conflicts.jsonl"))
	if err != nil {
		t.Fatalf("B's conflicts file: %v", err)
	}
	defer f.Close()
	lost := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c struct {
			Keyspace string `json:"keyspace"`
			Value    []byte `json:"value"`
			Exists   bool   `json:"exists"`
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("conflicts line %q: %v", sc.Text(), err)
		}
		if c.Keyspace != name || !c.Exists {
			t.Errorf("conflict %s", sc.Text())
		}
		lost[string(c.Value)] = true // nemo's encoding of the losing entity
	}
	if len(lost) != 2 {
		t.Errorf("conflicts.jsonl holds %d losing writes, want B's two", len(lost))
	}
	if _, err := os.Stat(filepath.Join(dirA, "conflicts.jsonl")); err == nil {
		t.Error("A, which lost nothing, wrote a conflicts file")
	}
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

// TestBinaryReplicasDatastore is the same scenario over one Datastore
// emulator, through the Go Datastore client: B's acknowledged insert of a
// key A inserted meanwhile, and its put of an entity changed directly in
// the emulator, lose to the store's versions and are recorded.
func TestBinaryReplicasDatastore(t *testing.T) {
	emu := dstest.Emulator(t)
	ctx := context.Background()
	project := dstest.Project(t)
	env := []string{"NEMO_COHERENCE_MODE=exclusive", "NEMO_BACKEND_TYPE=datastore", "NEMO_BACKEND_DATASTORE_PROJECT=" + project,
		"NEMO_BACKEND_DATASTORE_EMULATOR_HOST=" + emu}
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := startNemo(t, dirA, env...), startNemo(t, dirB, env...)
	a.waitReady(t)
	b.waitReady(t)
	client := func(addr string) *datastore.Client {
		c, err := datastore.NewClient(ctx, project, option.WithEndpoint("passthrough:///"+addr), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	_, dsA := frontendAddrs(t, a)
	_, dsB := frontendAddrs(t, b)
	ca, cb, cd := client(dsA), client(dsB), client(emu)
	type E struct{ N int }
	x, y := datastore.NameKey("K", "x", nil), datastore.NameKey("K", "y", nil)
	if _, err := cd.Put(ctx, x, &E{N: 1}); err != nil {
		t.Fatal(err)
	}
	var e E
	if err := cb.Get(ctx, y, &e); err != datastore.ErrNoSuchEntity {
		t.Fatalf("B reads Y: %v", err)
	}
	if err := cb.Get(ctx, x, &e); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Mutate(ctx, datastore.NewInsert(y, &E{N: 10})); err != nil {
		t.Fatal(err)
	}
	a.flush(t)
	if _, err := cd.Put(ctx, x, &E{N: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Mutate(ctx, datastore.NewInsert(y, &E{N: 20})); err != nil {
		t.Fatalf("B's insert, acknowledged from its buffer: %v", err)
	}
	if _, err := cb.Put(ctx, x, &E{N: 3}); err != nil {
		t.Fatal(err)
	}
	b.flush(t)
	for k, want := range map[*datastore.Key]int{y: 10, x: 2} {
		var got E
		if err := cd.Get(ctx, k, &got); err != nil || got.N != want {
			t.Errorf("the emulator holds %s = %+v (%v), want N=%d: B overwrote a change it never saw", k.Name, got, err, want)
		}
	}
	if _, metrics := b.get("/metrics"); !strings.Contains(metrics, "\nnemo_cache_writeback_conflicts_total 2\n") {
		t.Errorf("B's conflict counter is not 2:\n%s", grepLines(metrics, "conflicts"))
	}
	drain(t, a, b)
	raw, err := os.ReadFile(filepath.Join(dirB, "conflicts.jsonl"))
	if err != nil || strings.Count(string(raw), "\n") != 2 {
		t.Errorf("B's conflicts file: %d lines, %v; want 2", strings.Count(string(raw), "\n"), err)
	}
}
