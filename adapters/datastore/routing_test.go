package datastore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/atomictest"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/internal/dstest"
)

// TestRoutingHeaders: every RPC the adapter sends (Lookup, RunQuery,
// Commit, BeginTransaction, Rollback, AllocateIds, ReserveIds) carries the
// routing headers the service routes a database's calls by, once each:
// x-goog-request-params with project_id, and database_id for a named
// database, and google-cloud-resource-prefix, as the Go client library
// (cloud.google.com/go/datastore) sends them. They are read on the
// connection, where the backend receives them, in front of the emulator,
// for the default and a named database.
func TestRoutingHeaders(t *testing.T) {
	type seen struct{ params, prefix []string }
	var mu sync.Mutex
	calls := map[string][]seen{}
	record := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		mu.Lock()
		calls[method] = append(calls[method], seen{md.Get("x-goog-request-params"), md.Get("google-cloud-resource-prefix")})
		mu.Unlock()
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	s, err := Open(context.Background(), Options{EmulatorHost: dstest.Emulator(t), Interceptors: []grpc.UnaryClientInterceptor{record}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	project := dstest.Project(t)
	for _, db := range []struct{ name, params, prefix string }{
		{"", "project_id=" + project, "projects/" + project},
		{"db-2", "project_id=" + project + "&database_id=db-2", "projects/" + project + "/databases/db-2"},
	} {
		clear(calls)
		p := dscodec.Partition{Project: project, Database: db.name, Namespace: "ns"}
		ks := p.Keyspace()
		a := recordOf(t, p, "a", 1)
		if _, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{a})); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, ks, [][]byte{a.Key}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.GetRange(ctx, ks, nil, nil, 0); err != nil {
			t.Fatal(err)
		}
		// A precondition that holds: begin, lookup, commit; one that
		// fails: begin, lookup, rollback.
		b := recordOf(t, p, "b", 2)
		if _, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{atomictest.Upsert(b.Key, b.Value, adapters.Expect{Kind: adapters.ExpectAbsent})}); err != nil {
			t.Fatal(err)
		}
		var ce *adapters.ConflictError
		if _, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{atomictest.Upsert(b.Key, b.Value, adapters.Expect{Kind: adapters.ExpectAbsent})}); !errors.As(err, &ce) {
			t.Fatalf("insert of an existing key: %v", err)
		}
		inc := &datastorepb.Key{PartitionId: partitionID(p), Path: []*datastorepb.Key_PathElement{{Kind: "K"}}}
		keys, err := s.AllocateIDs(ctx, p.Project, p.Database, []*datastorepb.Key{inc})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ReserveIDs(ctx, p.Project, p.Database, keys); err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{"Lookup", "RunQuery", "Commit", "BeginTransaction", "Rollback", "AllocateIds", "ReserveIds"} {
			got := calls["/google.datastore.v1.Datastore/"+m]
			if len(got) == 0 {
				t.Errorf("database %q: no %s call", db.name, m)
			}
			for _, h := range got {
				if !slices.Equal(h.params, []string{db.params}) || !slices.Equal(h.prefix, []string{db.prefix}) {
					t.Errorf("database %q: %s sent x-goog-request-params %q, google-cloud-resource-prefix %q; want %q, %q",
						db.name, m, h.params, h.prefix, db.params, db.prefix)
				}
			}
		}
	}
}

// recordOf is a record of kind K named name in p.
func recordOf(t *testing.T, p dscodec.Partition, name string, v int64) adapters.Record {
	return record(t, p, []*datastorepb.Key_PathElement{nameEl("K", name)}, v)
}
