package aztable

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/adapters/contract"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/aztest"
)

// TestSharedUnknownOutcome: in coherence mode shared a write reaches the
// store before nemo answers. When the store applied it and the answer was
// lost (500 OperationTimedOut; the adapter's retry is then refused by the
// write's own first application), the client gets the service's own
// answer for that, 500 OperationTimedOut, never a success nor the
// refusal; and nemo keeps nothing of the keys as known, so the next read,
// well within the staleness bound, shows what the store holds (the write,
// applied), and a repeated insert is refused as the service refuses it.
func TestSharedUnknownOutcome(t *testing.T) {
	ctx := ctxT(t)
	c := contract.New(contract.Config{})
	n := startShared(t, contractStore(t, c, true), cache.Options{})
	svc := service(t, n.URL, aztest.Key)
	direct := service(t, aztest.Azurite(t), aztest.Key)
	name := aztest.TableName("uo")
	if _, err := svc.CreateTable(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = svc.DeleteTable(ctxT(t), name, nil) })
	tc, dc := svc.NewClient(name), direct.NewClient(name)
	entity := func(rk string, n int) []byte {
		return fmt.Appendf(nil, `{"PartitionKey":"p","RowKey":%q,"N":%d}`, rk, n)
	}
	if _, err := tc.AddEntity(ctx, entity("a", 1), nil); err != nil {
		t.Fatal(err)
	}
	got, err := tc.GetEntity(ctx, "p", "a", nil) // nemo holds it now
	if err != nil {
		t.Fatal(err)
	}
	ambiguity := func(what string, err error) {
		t.Helper()
		if st, code := aztest.Status(err); st != http.StatusInternalServerError || code != "OperationTimedOut" {
			t.Fatalf("%s with its reply lost: %v, want 500 OperationTimedOut", what, err)
		}
	}
	n2 := func(c *aztables.Client, rk string) int {
		t.Helper()
		g, err := c.GetEntity(ctx, "p", rk, nil)
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ N int }
		if err := json.Unmarshal(g.Value, &e); err != nil {
			t.Fatal(err)
		}
		return e.N
	}
	c.LoseNext(1)
	_, err = tc.UpdateEntity(ctx, entity("a", 2), &aztables.UpdateEntityOptions{IfMatch: &got.ETag, UpdateMode: aztables.UpdateModeReplace})
	ambiguity("an If-Match update", err)
	if v := n2(dc, "a"); v != 2 {
		t.Fatalf("the store after the update: N=%d, want it applied", v)
	}
	if v := n2(tc, "a"); v != 2 {
		t.Fatalf("read through nemo after the unknown outcome: N=%d, want the store's 2 (nemo kept the old state as fresh)", v)
	}
	c.LoseNext(1)
	_, err = tc.AddEntity(ctx, entity("b", 1), nil)
	ambiguity("an insert", err)
	if _, err := tc.AddEntity(ctx, entity("b", 1), nil); func() bool {
		st, code := aztest.Status(err)
		return st != http.StatusConflict || code != "EntityAlreadyExists"
	}() {
		t.Fatalf("the insert sent again: %v, want 409 EntityAlreadyExists (the first one was applied)", err)
	}
	c.LoseNext(1)
	_, err = tc.SubmitTransaction(ctx, []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeAdd, Entity: entity("c", 1)},
		{ActionType: aztables.TransactionTypeUpdateReplace, Entity: entity("a", 3), IfMatch: to.Ptr(azcore.ETagAny)}}, nil)
	ambiguity("a transaction", err)
	if v := n2(tc, "a"); v != 3 {
		t.Fatalf("read through nemo after the transaction: N=%d, want 3", v)
	}
	if v := n2(tc, "c"); v != 1 {
		t.Fatalf("read through nemo after the transaction: c N=%d, want 1", v)
	}
}

// TestWriteBackAppliedThenFailed: in coherence mode exclusive a write-back
// batch the store applied but whose answer was lost is settled by reading
// its keys back: write-back recognizes its own writes in the store and
// reports no conflict, also for an entity written again in between, and
// the store ends with the last values.
func TestWriteBackAppliedThenFailed(t *testing.T) {
	ctx := ctxT(t)
	c := contract.New(contract.Config{})
	n := startNemo(t, contractStore(t, c, false), cache.Options{DisableWorkers: true})
	svc := service(t, n.URL, aztest.Key)
	direct := service(t, aztest.Azurite(t), aztest.Key)
	name := aztest.TableName("wb")
	if _, err := svc.CreateTable(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = svc.DeleteTable(ctxT(t), name, nil) })
	tc := svc.NewClient(name)
	// Known absent first (a query seals the range), so the write-backs
	// are conditional: inserts.
	if _, err := queryAll(ctx, tc, "", "", 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		if _, err := tc.AddEntity(ctx, fmt.Appendf(nil, `{"PartitionKey":"p","RowKey":"r%d","N":%d}`, i, i), nil); err != nil {
			t.Fatal(err)
		}
	}
	c.LoseNext(1)
	// Settled in the same write-back: one read of the batch's keys finds
	// its own values (cache TestWriteBackOwnEarlierAttempt covers the
	// retry conditioned on the versions before it, when that read fails).
	if err := n.Eng.Flush(ctx); err != nil {
		t.Fatalf("the flush whose write-back answer was lost: %v, want it settled by reading the keys back", err)
	}
	if _, err := direct.NewClient(name).GetEntity(ctx, "p", "r3", nil); err != nil {
		t.Fatalf("the store after the lost answer: %v, want the batch applied", err)
	}
	if _, err := tc.UpsertEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r0","N":100}`), nil); err != nil { // written again in between
		t.Fatal(err)
	}
	if err := n.Eng.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := n.Buf.Stats(); st.WritebackConflicts != 0 {
		t.Errorf("%d write-back conflicts, want none: the refusals were the batch's own first attempt", st.WritebackConflicts)
	}
	pages, err := queryAll(ctx, direct.NewClient(name), "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var ns []any
	for _, p := range pages {
		for _, e := range p {
			ns = append(ns, e["N"])
		}
	}
	if fmt.Sprint(ns) != "[100 1 2 3 4 5]" {
		t.Errorf("the store after the flush: N %v, want [100 1 2 3 4 5]", ns)
	}
	if st := c.Stats(); st.Lost != 1 {
		t.Errorf("lost replies: %d, want 1", st.Lost)
	}
}
