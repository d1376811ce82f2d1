package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/aztest"
)

// TestBinaryDroppedTableStaysDroppedAfterKill9 is issue 10's drop-then-crash
// test with the real binary: entities are written to two tables and stay
// unflushed (no checkpoint, no write-back), one table is deleted, and nemo
// is killed with SIGKILL before any checkpoint. Replay must not bring the
// deleted table back: after the restart and a clean drain it is absent from
// listings and from the store, and the kept table has every entity. Over
// the embedded store and in front of Azurite.
func TestBinaryDroppedTableStaysDroppedAfterKill9(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		dataDir := t.TempDir()
		keep, gone := "keep", "gone"
		dropThenCrash(t, dataDir, keep, gone)
		checkReopened(t, dataDir)
		s := openStore(t, dataDir)
		spaces, err := s.Keyspaces()
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(spaces, adapters.Keyspace(gone)) {
			t.Errorf("the deleted table's keyspace is back in the store: %v", spaces)
		}
		ctx := context.Background()
		recs, _, err := s.GetRange(ctx, tablecodec.TablesKeyspace, nil, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range recs {
			names = append(names, string(r.Value))
		}
		if !slices.Equal(names, []string{keep}) {
			t.Errorf("table list in the store: %v, want [%s]", names, keep)
		}
		if recs, _, err := s.GetRange(ctx, adapters.Keyspace(keep), nil, nil, 0); err != nil || len(recs) != dropCrashRows {
			t.Errorf("kept table in the store: %d entities (%v), want %d", len(recs), err, dropCrashRows)
		}
	})
	t.Run("azurite", func(t *testing.T) {
		url := aztest.Azurite(t)
		keep, gone := aztest.TableName("keep"), aztest.TableName("gone")
		direct, err := aztables.NewServiceClientFromConnectionString(aztest.ConnectionString(url, aztest.Key), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = direct.DeleteTable(context.Background(), keep, nil)
			_, _ = direct.DeleteTable(context.Background(), gone, nil)
		})
		dropThenCrash(t, t.TempDir(), keep, gone,
			"NEMO_COHERENCE_MODE=exclusive", "NEMO_BACKEND_TYPE=aztable",
			"NEMO_BACKEND_AZTABLE_CONNECTION_STRING="+aztest.ConnectionString(url, aztest.Key))
		names, err := tableNames(context.Background(), direct)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(names, gone) || !slices.Contains(names, keep) {
			t.Errorf("tables in Azurite: %v; want %s and not %s", names, keep, gone)
		}
		if n := countEntities(t, direct.NewClient(keep)); n != dropCrashRows {
			t.Errorf("kept table in Azurite: %d entities, want %d", n, dropCrashRows)
		}
	})
}

const dropCrashRows = 20

// dropThenCrash runs the scenario against a nemo over dataDir (env selects
// the backend): writes to keep and gone, delete gone, SIGKILL, restart,
// check the listing through nemo, SIGTERM (a clean drain).
func dropThenCrash(t *testing.T, dataDir, keep, gone string, env ...string) {
	t.Helper()
	ctx := context.Background()
	p := startNemo(t, dataDir, env...)
	p.waitReady(t)
	svc := nemoClient(t, p)
	for _, name := range []string{keep, gone} {
		if _, err := svc.CreateTable(ctx, name, nil); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		tc := svc.NewClient(name)
		for i := range dropCrashRows {
			e, _ := json.Marshal(map[string]any{"PartitionKey": "p", "RowKey": fmt.Sprintf("r%02d", i), "N": i})
			if _, err := tc.AddEntity(ctx, e, nil); err != nil {
				t.Fatalf("add entity %d to %s: %v", i, name, err)
			}
		}
	}
	if _, err := svc.DeleteTable(ctx, gone, nil); err != nil {
		t.Fatalf("delete %s: %v", gone, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.waitExit(t)

	p = startNemo(t, dataDir, env...)
	p.waitReady(t)
	svc = nemoClient(t, p)
	names, err := tableNames(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(names, gone) || !slices.Contains(names, keep) {
		t.Errorf("tables listed after the restart: %v; want %s and not %s", names, keep, gone)
	}
	_, err = svc.NewClient(gone).GetEntity(ctx, "p", "r00", nil)
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.ErrorCode != "TableNotFound" {
		t.Errorf("entity of the deleted table after the restart: %v, want TableNotFound", err)
	}
	if _, err := svc.NewClient(keep).GetEntity(ctx, "p", fmt.Sprintf("r%02d", dropCrashRows-1), nil); err != nil {
		t.Errorf("entity of the kept table after the restart: %v", err)
	}
	drain(t, p)
}

// nemoClient is an aztables client of the running binary's Azure
// listener, with opts (nil: the SDK's defaults).
func nemoClient(t *testing.T, p *proc, opts ...*aztables.ClientOptions) *aztables.ServiceClient {
	t.Helper()
	azAddr, _ := frontendAddrs(t, p)
	def := config.Defaults().Frontend.Azure
	conn := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;TableEndpoint=http://%s/%s;",
		def.Account, def.Key, azAddr, def.Account)
	var o *aztables.ClientOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	svc, err := aztables.NewServiceClientFromConnectionString(conn, o)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func tableNames(ctx context.Context, svc *aztables.ServiceClient) ([]string, error) {
	var names []string
	pager := svc.NewListTablesPager(nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, tb := range page.Tables {
			names = append(names, *tb.Name)
		}
	}
	return names, nil
}
