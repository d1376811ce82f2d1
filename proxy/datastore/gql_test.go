package datastore

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

func TestGQLKind(t *testing.T) {
	for q, want := range map[string]string{
		"SELECT * FROM Task":                         "Task",
		"select __key__ from `Odd Kind` where a = 1": "Odd Kind",
		"SELECT * FROM `a``b` LIMIT 3":               "a`b",
		"SELECT *":                                   "",
		"SELECT x FROM\n  K2\tWHERE x > @1":          "K2",
	} {
		if got := gqlKind(q); got != want {
			t.Errorf("gqlKind(%q) = %q, want %q", q, got, want)
		}
	}
}

func gqlRequest(project, q string) *datastorepb.RunQueryRequest {
	return &datastorepb.RunQueryRequest{
		ProjectId: project,
		QueryType: &datastorepb.RunQueryRequest_GqlQuery{GqlQuery: &datastorepb.GqlQuery{QueryString: q, AllowLiterals: true}},
	}
}

// TestGQLPassThrough: GQL goes to the Datastore backend as it is, but only
// when it cannot miss a buffered write; otherwise, and over the embedded
// store, a clear error says why.
func TestGQLPassThrough(t *testing.T) {
	ctx := context.Background()

	t.Run("embedded", func(t *testing.T) {
		n, pb := local(t)
		_, err := pb.RunQuery(ctx, gqlRequest(n.project, "SELECT * FROM G"))
		if status.Code(err) != codes.Unimplemented {
			t.Fatalf("GQL over the embedded store: %v, want UNIMPLEMENTED", err)
		}
	})

	t.Run("emulator", func(t *testing.T) {
		project := dstest.Project(t)
		n := startNemo(t, emulatorBackend(), project, cache.Options{FlushInterval: time.Hour, MaxDirtyAge: time.Hour})
		c := client(t, n.addr, project)
		pb := pbClient(t, n.addr)
		for i := 1; i <= 3; i++ {
			if _, err := c.Put(ctx, datastore.IDKey("G", int64(i), nil), &struct{ N int }{i}); err != nil {
				t.Fatal(err)
			}
		}
		// The writes are buffered, not yet in the emulator.
		_, err := pb.RunQuery(ctx, gqlRequest(project, "SELECT * FROM G"))
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("GQL over dirty kind G: %v, want FAILED_PRECONDITION", err)
		}
		// Another kind has nothing dirty: it passes through.
		resp, err := pb.RunQuery(ctx, gqlRequest(project, "SELECT * FROM H"))
		if err != nil || len(resp.GetBatch().GetEntityResults()) != 0 {
			t.Fatalf("GQL over clean kind H: %v %v", resp, err)
		}
		// Inside a transaction nemo could not lock what GQL reads.
		req := gqlRequest(project, "SELECT * FROM H")
		req.ReadOptions = &datastorepb.ReadOptions{ConsistencyType: &datastorepb.ReadOptions_NewTransaction{NewTransaction: &datastorepb.TransactionOptions{}}}
		if _, err := pb.RunQuery(ctx, req); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("GQL in a transaction: %v, want FAILED_PRECONDITION", err)
		}
		// After the write-back the emulator has them, and GQL sees them.
		if err := n.engine.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		resp, err = pb.RunQuery(ctx, gqlRequest(project, "SELECT * FROM G WHERE N >= 2"))
		if err != nil {
			t.Fatal(err)
		}
		if got := len(resp.GetBatch().GetEntityResults()); got != 2 {
			t.Fatalf("GQL after write-back: %d entities, want 2", got)
		}
		// A GQL error from the backend comes back as the backend's status.
		if _, err := pb.RunQuery(ctx, gqlRequest(project, "SELEKT nonsense")); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("malformed GQL: %v, want INVALID_ARGUMENT from the emulator", err)
		}
	})
}
