// Package nemotest runs an application's tests against one nemo in
// memory: TestMain starts it, every test resets it first, and it stops
// when the tests end.
package nemotest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"cloud.google.com/go/datastore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// nemo's listeners, as its "nemo ready" log line names them.
var nemo struct{ AzTable, Datastore, Admin string }

func TestMain(m *testing.M) {
	stop, err := startNemo()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start nemo:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

// startNemo runs `nemo --in-memory` ($NEMO_BIN, or nemo on the PATH) on
// free loopback ports, so test packages running in parallel each have
// their own, and points the Datastore client libraries at it.
func startNemo() (stop func(), err error) {
	bin := os.Getenv("NEMO_BIN")
	if bin == "" {
		bin = "nemo"
	}
	cmd := exec.Command(bin, "--in-memory",
		"--listen-azure-table", "127.0.0.1:0", "--listen-datastore", "127.0.0.1:0",
		"--listen-http", "127.0.0.1:0", "--listen-admin", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "NEMO_LOG_FORMAT=json")
	logs, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(logs)
	for nemo.Admin == "" && sc.Scan() {
		var line struct{ Msg, AzTable, Datastore, Admin string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "nemo ready" {
			nemo.AzTable, nemo.Datastore, nemo.Admin = line.AzTable, line.Datastore, line.Admin
		}
	}
	if nemo.Admin == "" {
		cmd.Process.Kill()
		return nil, errors.Join(errors.New("nemo exited before it was ready"), cmd.Wait())
	}
	go io.Copy(io.Discard, logs) // keep reading its log
	os.Setenv("DATASTORE_EMULATOR_HOST", nemo.Datastore)
	return func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}, nil
}

// resetNemo empties nemo: every table, entity and kind is gone.
func resetNemo(t *testing.T) {
	t.Helper()
	resp, err := http.Post("http://"+nemo.Admin+"/reset", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /reset: %s", resp.Status)
	}
}

// tables is an Azure Table client of nemo, with Azurite's well-known key.
func tables(t *testing.T) *aztables.ServiceClient {
	t.Helper()
	conn := "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;" +
		"AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;" +
		"TableEndpoint=http://" + nemo.AzTable + "/devstoreaccount1;"
	svc, err := aztables.NewServiceClientFromConnectionString(conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

type order struct{ Qty int }

// TestPlaceOrder writes a table, an entity and a Datastore entity.
func TestPlaceOrder(t *testing.T) {
	resetNemo(t)
	ctx := context.Background()
	if _, err := tables(t).CreateTable(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	e, _ := json.Marshal(map[string]any{"PartitionKey": "alice", "RowKey": "1", "Qty": 3})
	if _, err := tables(t).NewClient("orders").AddEntity(ctx, e, nil); err != nil {
		t.Fatal(err)
	}
	ds, err := datastore.NewClient(ctx, "my-project") // DATASTORE_EMULATOR_HOST is nemo
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	if _, err := ds.Put(ctx, datastore.NameKey("Order", "1", nil), &order{Qty: 3}); err != nil {
		t.Fatal(err)
	}
}

// TestStartsEmpty finds nothing of TestPlaceOrder: the reset emptied nemo,
// so the same table can be created again.
func TestStartsEmpty(t *testing.T) {
	resetNemo(t)
	ctx := context.Background()
	ds, err := datastore.NewClient(ctx, "my-project")
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	var o order
	if err := ds.Get(ctx, datastore.NameKey("Order", "1", nil), &o); !errors.Is(err, datastore.ErrNoSuchEntity) {
		t.Errorf("Get after the reset: %v, want ErrNoSuchEntity", err)
	}
	if _, err := tables(t).CreateTable(ctx, "orders", nil); err != nil {
		t.Errorf("create the table again: %v", err)
	}
}
