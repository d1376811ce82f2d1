package datastore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

// TestConflictResolutionFail: a mutation whose conflict_resolution_strategy
// is FAIL and whose base version or update time does not match fails the
// whole commit with FAILED_PRECONDITION ("the stored version (S) does not
// match the required base version (B)"): in a transaction nothing is
// applied, without one the mutations before it are (the service's
// non-transactional commit is not atomic); a strategy without a detection
// strategy is INVALID_ARGUMENT. Before, nemo ignored the field: it
// answered success with conflict_detected and applied the commit's other
// mutations. The same scenario runs against the Firestore emulator itself,
// so the expectations are the service's, and through nemo over every
// backend in both coherence modes.
func TestConflictResolutionFail(t *testing.T) {
	fs := dstest.FirestoreEmulator(t)
	t.Run("firestore-itself", func(t *testing.T) {
		conflictFailScenario(t, pbClient(t, fs), dstest.Project(t), true)
	})
	for _, b := range append(plainBackends(t), firestoreBackend(fs, false), firestoreBackend(fs, true)) {
		t.Run(b.name, func(t *testing.T) {
			project := dstest.Project(t)
			n := startNemo(t, b, project, cache.Options{})
			conflictFailScenario(t, pbClient(t, n.addr), project, false)
		})
	}
}

// conflictFailScenario runs the scenario through c in project. itself: c
// is the Firestore emulator, which ignores conflicts under the default
// strategy (docs/datastore.md), so that step is nemo's alone.
func conflictFailScenario(t *testing.T, c datastorepb.DatastoreClient, project string, itself bool) {
	ctx := context.Background()
	key := func(name string) *datastorepb.Key {
		return &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: project},
			Path: []*datastorepb.Key_PathElement{{Kind: "CF", IdType: &datastorepb.Key_PathElement_Name{Name: name}}}}
	}
	ent := func(name string, n int64) *datastorepb.Entity {
		return &datastorepb.Entity{Key: key(name), Properties: map[string]*datastorepb.Value{"N": ival(n)}}
	}
	commitIn := func(tx []byte, ms ...*datastorepb.Mutation) (*datastorepb.CommitResponse, error) {
		req := &datastorepb.CommitRequest{ProjectId: project, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL, Mutations: ms}
		if tx != nil {
			req.Mode, req.TransactionSelector = datastorepb.CommitRequest_TRANSACTIONAL, &datastorepb.CommitRequest_Transaction{Transaction: tx}
		}
		return c.Commit(ctx, req)
	}
	// state is what a Lookup finds: each name's N, or -1 when missing; and
	// b's version and update time.
	state := func() (map[string]int64, int64, *timestamppb.Timestamp) {
		t.Helper()
		r, err := c.Lookup(ctx, &datastorepb.LookupRequest{ProjectId: project, Keys: []*datastorepb.Key{key("a"), key("b"), key("c")}})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{"a": -1, "b": -1, "c": -1}
		var v int64
		var ut *timestamppb.Timestamp
		for _, f := range r.GetFound() {
			name := f.GetEntity().GetKey().GetPath()[0].GetName()
			out[name] = f.GetEntity().GetProperties()["N"].GetIntegerValue()
			if name == "b" {
				v, ut = f.GetVersion(), f.GetUpdateTime()
			}
		}
		return out, v, ut
	}
	want := func(what string, wantA, wantB, wantC int64) {
		t.Helper()
		if got, _, _ := state(); got["a"] != wantA || got["b"] != wantB || got["c"] != wantC {
			t.Fatalf("%s: the store holds %v, want a=%d b=%d c=%d", what, got, wantA, wantB, wantC)
		}
	}
	refused := func(what string, err error, stored, required int64) {
		t.Helper()
		msg := fmt.Sprintf("the stored version (%d) does not match the required base version (%d)", stored, required)
		if status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != msg {
			t.Fatalf("%s: %v, want FAILED_PRECONDITION %q", what, err, msg)
		}
	}
	fail := datastorepb.Mutation_FAIL
	if _, err := commitIn(nil, &datastorepb.Mutation{Operation: &datastorepb.Mutation_Upsert{Upsert: ent("b", 1)}}); err != nil {
		t.Fatal(err)
	}
	_, vb, ub := state()
	stale := func(n int64, s datastorepb.Mutation_ConflictResolutionStrategy) *datastorepb.Mutation {
		return &datastorepb.Mutation{Operation: &datastorepb.Mutation_Update{Update: ent("b", n)},
			ConflictDetectionStrategy: &datastorepb.Mutation_BaseVersion{BaseVersion: vb - 1}, ConflictResolutionStrategy: s}
	}

	_, err := commitIn(nil, &datastorepb.Mutation{Operation: &datastorepb.Mutation_Upsert{Upsert: ent("a", 1)}}, stale(2, fail))
	refused("non-transactional, a stale base version", err, vb, vb-1)
	want("non-transactional: the mutation before the refused one applies", 1, 1, -1)

	tx, err := c.BeginTransaction(ctx, &datastorepb.BeginTransactionRequest{ProjectId: project})
	if err != nil {
		t.Fatal(err)
	}
	_, err = commitIn(tx.GetTransaction(), &datastorepb.Mutation{Operation: &datastorepb.Mutation_Upsert{Upsert: ent("a", 2)}}, stale(3, fail))
	refused("transactional, a stale base version", err, vb, vb-1)
	_, _ = c.Rollback(ctx, &datastorepb.RollbackRequest{ProjectId: project, Transaction: tx.GetTransaction()})
	want("transactional: nothing applies", 1, 1, -1)

	if ub != nil { // the legacy emulator, as a backend, reports no update times
		old := timestamppb.New(ub.AsTime().Add(-10 * time.Second))
		_, err = commitIn(nil, &datastorepb.Mutation{Operation: &datastorepb.Mutation_Update{Update: ent("b", 4)},
			ConflictDetectionStrategy: &datastorepb.Mutation_UpdateTime{UpdateTime: old}, ConflictResolutionStrategy: fail})
		refused("a stale update time", err, vb, old.AsTime().UnixMicro())
		want("a stale update time", 1, 1, -1)
	}

	_, err = commitIn(nil, &datastorepb.Mutation{Operation: &datastorepb.Mutation_Upsert{Upsert: ent("c", 5)},
		ConflictDetectionStrategy: &datastorepb.Mutation_BaseVersion{BaseVersion: 5}, ConflictResolutionStrategy: fail})
	refused("a missing entity, base version 5", err, 0, 5)

	_, err = commitIn(nil, &datastorepb.Mutation{Operation: &datastorepb.Mutation_Upsert{Upsert: ent("c", 6)}, ConflictResolutionStrategy: fail})
	if msg := "cannot set a conflict resolution strategy if no detection strategy was set"; status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != msg {
		t.Fatalf("a strategy without detection: %v, want INVALID_ARGUMENT %q", err, msg)
	}
	want("refused mutations", 1, 1, -1)

	r, err := commitIn(nil, &datastorepb.Mutation{Operation: &datastorepb.Mutation_Update{Update: ent("b", 7)},
		ConflictDetectionStrategy: &datastorepb.Mutation_BaseVersion{BaseVersion: vb}, ConflictResolutionStrategy: fail})
	if err != nil || r.GetMutationResults()[0].GetConflictDetected() {
		t.Fatalf("FAIL with the current base version: %v %v", r, err)
	}
	want("FAIL with the current base version", 1, 7, -1)
	if itself {
		return
	}
	_, vb, _ = state()
	r, err = commitIn(nil, stale(8, datastorepb.Mutation_SERVER_VALUE))
	if err != nil || !r.GetMutationResults()[0].GetConflictDetected() {
		t.Fatalf("SERVER_VALUE with a stale base version: %v %v, want conflict_detected", r, err)
	}
	want("SERVER_VALUE with a stale base version", 1, 7, -1)
}
