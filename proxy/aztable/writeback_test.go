package aztable

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/aztest"
)

// writeSome makes a mixed set of writes through client tc: inserts,
// merges, replaces, deletes and a transaction.
func writeSome(t *testing.T, tc *aztables.Client) {
	ctx := ctxT(t)
	for i := 0; i < 40; i++ {
		e := fmt.Sprintf(`{"PartitionKey":"p%d","RowKey":"r%02d","N":%d,"L":"%d","L@odata.type":"Edm.Int64","D":2.0}`, i%3, i, i, int64(i)<<40)
		if _, err := tc.AddEntity(ctx, []byte(e), nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 40; i += 4 {
		if _, err := tc.UpsertEntity(ctx, []byte(fmt.Sprintf(`{"PartitionKey":"p%d","RowKey":"r%02d","Merged":true}`, i%3, i)), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := tc.DeleteEntity(ctx, fmt.Sprintf("p%d", (i+1)%3), fmt.Sprintf("r%02d", i+1), nil); err != nil {
			t.Fatal(err)
		}
	}
	var acts []aztables.TransactionAction
	for i := 0; i < 30; i++ {
		acts = append(acts, aztables.TransactionAction{ActionType: aztables.TransactionTypeInsertReplace, Entity: []byte(fmt.Sprintf(`{"PartitionKey":"tx","RowKey":"t%02d","V":%d}`, i, i))})
	}
	if _, err := tc.SubmitTransaction(ctx, acts, nil); err != nil {
		t.Fatal(err)
	}
}

// TestWriteBackToAzurite: what nemo acknowledged reaches Azurite on flush,
// property types intact, and a fresh nemo over the same account (cold
// buffer) serves it all.
func TestWriteBackToAzurite(t *testing.T) {
	url := aztest.Azurite(t)
	n := overAzurite(t)
	ctx := ctxT(t)
	name := aztest.TableName("wb")
	nsvc := service(t, n.URL, aztest.Key)
	if _, err := nsvc.CreateTable(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	direct := service(t, url, aztest.Key)
	t.Cleanup(func() { _, _ = direct.DeleteTable(context.Background(), name, nil) }) // after the nemos have checked their buffers
	writeSome(t, nsvc.NewClient(name))
	before, err := queryAll(ctx, nsvc.NewClient(name), "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(before[0]); got != 40-10+30 {
		t.Fatalf("nemo holds %d entities, want 60", got)
	}
	if err := n.Eng.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	inAzurite, err := queryAll(ctx, direct.NewClient(name), "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, inAzurite) {
		t.Fatalf("after flush Azurite holds\n%v\nnemo answered\n%v", inAzurite, before)
	}
	n.Close()

	again := overAzurite(t)
	after, err := queryAll(ctx, service(t, again.URL, aztest.Key).NewClient(name), "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("a restarted nemo answers\n%v\nwant\n%v", after, before)
	}
}

// TestRestartEmbedded: nemo as an emulator keeps tables and entities
// across a graceful restart (flush, then reopen the data directory), and a
// deleted table stays deleted.
func TestRestartEmbedded(t *testing.T) {
	dir := t.TempDir()
	ctx := ctxT(t)
	open := func() (*nemo, *embedded.Store) {
		st, err := embedded.Open(dir, embedded.Options{NoSync: true, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return startNemo(t, st, cache.Options{}), st
	}
	n, st := open()
	svc := service(t, n.URL, aztest.Key)
	for _, tn := range []string{"keep", "gone"} {
		if _, err := svc.CreateTable(ctx, tn, nil); err != nil {
			t.Fatal(err)
		}
	}
	writeSome(t, svc.NewClient("keep"))
	if _, err := svc.NewClient("gone").AddEntity(ctx, []byte(`{"PartitionKey":"a","RowKey":"b"}`), nil); err != nil {
		t.Fatal(err)
	}
	if err := n.Eng.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.DeleteTable(ctx, "gone", nil); err != nil {
		t.Fatal(err)
	}
	before, err := queryAll(ctx, svc.NewClient("keep"), "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Eng.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	n.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if ks, err := reopenKeyspaces(t, dir); err != nil || !reflect.DeepEqual(ks, []adapters.Keyspace{"__tables__", "keep"}) {
		t.Fatalf("keyspaces on disk: %v, %v", ks, err)
	}

	n, _ = open()
	svc = service(t, n.URL, aztest.Key)
	after, err := queryAll(ctx, svc.NewClient("keep"), "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("after restart\n%v\nwant\n%v", after, before)
	}
	tables, err := listTables(ctx, &side{svc: svc})
	if err != nil || !reflect.DeepEqual(tables, [][]string{{"keep"}}) {
		t.Fatalf("tables after restart: %v, %v", tables, err)
	}
	_, err = svc.NewClient("gone").GetEntity(ctx, "a", "b", nil)
	wantStatus(t, "entity of the deleted table", err, 404, "TableNotFound")
}

func reopenKeyspaces(t *testing.T, dir string) ([]adapters.Keyspace, error) {
	st, err := embedded.Open(dir, embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return st.Keyspaces()
}
