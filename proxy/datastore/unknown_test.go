package datastore

import (
	"context"
	"testing"

	"cloud.google.com/go/datastore"
	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters/contract"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

// TestSharedUnknownOutcome: in coherence mode shared a commit reaches the
// store before nemo answers. When the store applied it and the answer was
// lost (the contract's lost reply: UNAVAILABLE), the client gets the
// service's own answer, UNAVAILABLE with its message, never a success nor
// a refusal; and nemo keeps nothing of the keys as known, so the next
// read, well within the staleness bound, shows what the store holds (the
// write, applied), and a repeated insert is refused as the service
// refuses it.
func TestSharedUnknownOutcome(t *testing.T) {
	project := dstest.Project(t)
	ctx := context.Background()
	b := contractBackend(1, true, false)
	b.contract.SetConfig(contract.Config{}) // nothing but what the test asks for
	n := startNemo(t, b, project, cache.Options{})
	c := client(t, n.addr, project)
	direct := client(t, dstest.Emulator(t), project)
	type E struct{ N int }
	k := datastore.NameKey("K", "k", nil)
	if _, err := c.Put(ctx, k, &E{N: 1}); err != nil {
		t.Fatal(err)
	}
	var e E
	if err := c.Get(ctx, k, &e); err != nil || e.N != 1 { // nemo holds it now
		t.Fatalf("read: %v %v", e, err)
	}
	ambiguity := func(what string, err error) {
		t.Helper()
		if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "The service is currently unavailable." {
			t.Fatalf("%s with its reply lost: %v, want the service's UNAVAILABLE", what, err)
		}
	}
	// A read-modify-write transaction.
	b.contract.LoseNext(1)
	_, err := c.RunInTransaction(ctx, func(tx *datastore.Transaction) error {
		var cur E
		if err := tx.Get(k, &cur); err != nil {
			return err
		}
		_, err := tx.Put(k, &E{N: cur.N + 1})
		return err
	})
	ambiguity("a transaction", err)
	if err := direct.Get(ctx, k, &e); err != nil || e.N != 2 {
		t.Fatalf("the store after the transaction: %v %v, want it applied", e, err)
	}
	if err := c.Get(ctx, k, &e); err != nil || e.N != 2 {
		t.Fatalf("read through nemo after the unknown outcome: %v %v, want the store's N=2 (nemo kept the old state as fresh)", e, err)
	}
	var all []E
	if _, err := c.GetAll(ctx, datastore.NewQuery("K"), &all); err != nil || len(all) != 1 || all[0].N != 2 {
		t.Fatalf("query through nemo after the unknown outcome: %v %v", all, err)
	}
	// An insert: unknown, then refused as existing, as by the service.
	pb := pbClient(t, n.addr)
	ins := &datastorepb.CommitRequest{ProjectId: project, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL, Mutations: []*datastorepb.Mutation{
		{Operation: &datastorepb.Mutation_Insert{Insert: &datastorepb.Entity{Key: &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: project},
			Path: []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Name{Name: "new"}}}}}}}}}
	b.contract.LoseNext(1)
	_, err = pb.Commit(ctx, ins)
	ambiguity("an insert", err)
	if _, err := pb.Commit(ctx, ins); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("the insert sent again: %v, want ALREADY_EXISTS (the first one was applied)", err)
	}
	if err := c.Get(ctx, datastore.NameKey("K", "new", nil), &e); err != nil {
		t.Fatalf("the inserted entity through nemo: %v", err)
	}
}

// TestWriteBackAppliedThenFailed: in coherence mode exclusive a write-back
// batch the store applied but whose answer was lost is settled by reading
// its keys back (one Lookup): write-back recognizes its own writes in the
// store and reports no conflict, also for an entity written again in
// between, and the store ends with the last values.
func TestWriteBackAppliedThenFailed(t *testing.T) {
	project := dstest.Project(t)
	ctx := context.Background()
	b := contractBackend(1, false, false)
	b.contract.SetConfig(contract.Config{})
	n := startNemo(t, b, project, cache.Options{DisableWorkers: true})
	c := client(t, n.addr, project)
	direct := client(t, dstest.Emulator(t), project)
	type E struct{ N int }
	parent := datastore.NameKey("P", "p", nil)
	var keys []*datastore.Key
	for i := 1; i <= 6; i++ {
		keys = append(keys, datastore.IDKey("K", int64(i), parent))
	}
	// Known absent first (a query seals the range), so the write-backs
	// are conditional: inserts.
	if _, err := c.GetAll(ctx, datastore.NewQuery("K").Ancestor(parent), &[]E{}); err != nil {
		t.Fatal(err)
	}
	vals := make([]*E, len(keys))
	for i := range vals {
		vals[i] = &E{N: i}
	}
	if _, err := c.PutMulti(ctx, keys, vals); err != nil {
		t.Fatal(err)
	}
	b.contract.LoseNext(1)
	// Settled in the same write-back: one read of the batch's keys finds
	// its own values (cache TestWriteBackOwnEarlierAttempt covers the
	// retry conditioned on the versions before it, when that read fails).
	if err := n.engine.Flush(ctx); err != nil {
		t.Fatalf("the flush whose write-back answer was lost: %v, want it settled by reading the keys back", err)
	}
	var e E
	if err := direct.Get(ctx, keys[3], &e); err != nil || e.N != 3 {
		t.Fatalf("the store after the lost answer: %v %v, want the batch applied", e, err)
	}
	if _, err := c.Put(ctx, keys[0], &E{N: 100}); err != nil { // written again in between
		t.Fatal(err)
	}
	if err := n.engine.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := n.buf.Stats(); st.WritebackConflicts != 0 {
		t.Errorf("%d write-back conflicts, want none: the refusals were the batch's own first attempt", st.WritebackConflicts)
	}
	got := make([]E, len(keys))
	if err := direct.GetMulti(ctx, keys, got); err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		want := i
		if i == 0 {
			want = 100
		}
		if g.N != want {
			t.Errorf("key %d in the store: %d, want %d", i, g.N, want)
		}
	}
	if err := c.Get(ctx, keys[0], &e); err != nil || e.N != 100 {
		t.Errorf("through nemo: %v %v", e, err)
	}
	if b.contract.Stats().Lost != 1 {
		t.Errorf("lost replies: %d, want 1", b.contract.Stats().Lost)
	}
}
