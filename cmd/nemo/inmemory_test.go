package main

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"cloud.google.com/go/datastore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
)

// TestBinaryInMemory is issue 41's emulator habit: `nemo --in-memory`, run
// in an empty working directory with an empty TMPDIR, says at start that
// its data is lost at exit, serves the real Azure SDK and the Go
// Datastore client, forgets everything on POST /reset (both answer
// not-found and list nothing), serves again after it, and leaves no file
// behind in either directory when it exits.
func TestBinaryInMemory(t *testing.T) {
	wd, tmp := t.TempDir(), t.TempDir()
	cmd := exec.Command(nemoBinary(t), "--in-memory",
		"--listen-admin", "127.0.0.1:0", "--listen-http", "127.0.0.1:0",
		"--listen-azure-table", "127.0.0.1:0", "--listen-datastore", "127.0.0.1:0")
	cmd.Dir = wd
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NEMO_") && !strings.HasPrefix(kv, "TMPDIR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "NEMO_LOG_FORMAT=json", "TMPDIR="+tmp)
	p := startCmd(t, cmd)
	p.waitReady(t)
	if !strings.Contains(p.logs(), `"level":"WARN","msg":"in memory: `) {
		t.Errorf("no WARN line saying nemo runs in memory:\n%s", p.logs())
	}
	ctx := context.Background()
	_, dsAddr := frontendAddrs(t, p)
	svc := nemoClient(t, p)
	ds := dsClient(t, "mem-project", dsAddr)
	dsKey := datastore.NameKey("K", "k1", nil)
	write := func() {
		t.Helper()
		if _, err := svc.CreateTable(ctx, "mem", nil); err != nil {
			t.Fatalf("create table: %v", err)
		}
		e, _ := json.Marshal(map[string]any{"PartitionKey": "p", "RowKey": "r", "N": 1})
		if _, err := svc.NewClient("mem").AddEntity(ctx, e, nil); err != nil {
			t.Fatalf("add entity: %v", err)
		}
		if _, err := ds.Put(ctx, dsKey, &dsEntity{V: "v"}); err != nil {
			t.Fatalf("datastore put: %v", err)
		}
	}
	write()
	if _, err := svc.NewClient("mem").GetEntity(ctx, "p", "r", nil); err != nil {
		t.Fatalf("get entity before the reset: %v", err)
	}

	if code, body := p.post("/reset"); code != http.StatusOK {
		t.Fatalf("POST /reset = %d %s", code, body)
	}
	_, err := svc.NewClient("mem").GetEntity(ctx, "p", "r", nil)
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusNotFound {
		t.Errorf("get entity after the reset: %v, want 404", err)
	}
	pager := svc.NewListTablesPager(nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, tb := range page.Tables {
			t.Errorf("table %s listed after the reset", *tb.Name)
		}
	}
	var e dsEntity
	if err := ds.Get(ctx, dsKey, &e); !errors.Is(err, datastore.ErrNoSuchEntity) {
		t.Errorf("datastore get after the reset: %v %+v, want ErrNoSuchEntity", err, e)
	}
	if keys, err := ds.GetAll(ctx, datastore.NewQuery("K").KeysOnly(), nil); err != nil || len(keys) != 0 {
		t.Errorf("datastore query after the reset: %v, %v; want no key", keys, err)
	}
	write() // the same names again: nothing of them is left

	drain(t, p)
	for _, dir := range []string{wd, tmp} {
		filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
			if err == nil && path != dir {
				t.Errorf("nemo --in-memory left %s behind", path)
			}
			return err
		})
	}
}

// TestBinaryResetRefusedOnDisk: POST /reset refuses the embedded store on
// disk with 409 and a JSON error saying why and what to do, and its data
// stays.
func TestBinaryResetRefusedOnDisk(t *testing.T) {
	p := startNemo(t, t.TempDir())
	p.waitReady(t)
	svc := nemoClient(t, p)
	ctx := context.Background()
	if _, err := svc.CreateTable(ctx, "kept", nil); err != nil {
		t.Fatal(err)
	}
	e, _ := json.Marshal(map[string]any{"PartitionKey": "p", "RowKey": "r"})
	if _, err := svc.NewClient("kept").AddEntity(ctx, e, nil); err != nil {
		t.Fatal(err)
	}
	code, body := p.post("/reset")
	var out struct{ Error string }
	if err := json.Unmarshal([]byte(body), &out); code != http.StatusConflict || err != nil || !strings.Contains(out.Error, "in-memory") {
		t.Errorf("POST /reset on disk = %d %s, want 409 with a JSON error naming the in-memory store", code, body)
	}
	if _, err := svc.NewClient("kept").GetEntity(ctx, "p", "r", nil); err != nil {
		t.Errorf("the entity is gone after a refused reset: %v", err)
	}
	drain(t, p)
}
