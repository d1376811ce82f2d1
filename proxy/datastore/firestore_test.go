package datastore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

// Answers nemo gives as Firestore in Datastore mode (production's engine)
// gives them, recorded from the Firestore emulator and checked against it
// (NEMO_TEST_FIRESTORE); the legacy Datastore
// emulator has no aggregation queries, and applies repeated mutations of
// one entity in a transaction in order.

// TestAggregationsAsFirestore: an aggregation query with several
// aggregations, one of them a sum or an average, counts, sums and averages
// only the entities holding an indexed value of every property summed or
// averaged; sums and averages skip values excluded from indexes; a single
// aggregation takes every entity.
func TestAggregationsAsFirestore(t *testing.T) {
	unindexed := func(v *datastorepb.Value) *datastorepb.Value { v.ExcludeFromIndexes = true; return v }
	dbl := func(d float64) *datastorepb.Value {
		return &datastorepb.Value{ValueType: &datastorepb.Value_DoubleValue{DoubleValue: d}}
	}
	data := map[string][]map[string]*datastorepb.Value{
		// The case.
		"B": {{"I": ival(1), "F": dbl(2)}, {"I": ival(10)}},
		// No arrays: the Firestore emulator aggregates an array once per
		// element, where nemo (following production's one result per
		// entity) skips arrays.
		"A": {{"I": ival(1), "F": dbl(2)}, {"I": ival(10)}, {"I": sval("s"), "F": dbl(1)}, {"I": {ValueType: &datastorepb.Value_NullValue{}}, "F": dbl(1)},
			{"I": unindexed(ival(5)), "F": dbl(1)}, {"F": dbl(4)}},
	}
	count := &datastorepb.AggregationQuery_Aggregation{Operator: &datastorepb.AggregationQuery_Aggregation_Count_{Count: &datastorepb.AggregationQuery_Aggregation_Count{}}, Alias: "n"}
	sum := func(p string) *datastorepb.AggregationQuery_Aggregation {
		return &datastorepb.AggregationQuery_Aggregation{Operator: &datastorepb.AggregationQuery_Aggregation_Sum_{Sum: &datastorepb.AggregationQuery_Aggregation_Sum{Property: &datastorepb.PropertyReference{Name: p}}}, Alias: "sum_" + p}
	}
	avg := func(p string) *datastorepb.AggregationQuery_Aggregation {
		return &datastorepb.AggregationQuery_Aggregation{Operator: &datastorepb.AggregationQuery_Aggregation_Avg_{Avg: &datastorepb.AggregationQuery_Aggregation_Avg{Property: &datastorepb.PropertyReference{Name: p}}}, Alias: "avg_" + p}
	}
	cases := []struct {
		kind string
		aggs []*datastorepb.AggregationQuery_Aggregation
		want string // recorded from the Firestore emulator
	}{
		{"B", []*datastorepb.AggregationQuery_Aggregation{count, sum("I"), avg("F")}, "avg_F=2 n=1 sum_I=1"},
		{"B", []*datastorepb.AggregationQuery_Aggregation{count}, "n=2"},
		{"A", []*datastorepb.AggregationQuery_Aggregation{count}, "n=6"},
		{"A", []*datastorepb.AggregationQuery_Aggregation{sum("I")}, "sum_I=11"},
		{"A", []*datastorepb.AggregationQuery_Aggregation{avg("F")}, "avg_F=1.8"},
		{"A", []*datastorepb.AggregationQuery_Aggregation{count, sum("I")}, "n=4 sum_I=11"},
		{"A", []*datastorepb.AggregationQuery_Aggregation{count, sum("I"), avg("F")}, "avg_F=1.3333333333333333 n=3 sum_I=1"},
		{"A", []*datastorepb.AggregationQuery_Aggregation{avg("F"), sum("I")}, "avg_F=1.3333333333333333 sum_I=1"},
	}
	load := func(addr, project string) {
		t.Helper()
		var muts []*datastorepb.Mutation
		for kind, ents := range data {
			for i, props := range ents {
				muts = append(muts, upsert(&datastorepb.Entity{Key: &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: project},
					Path: []*datastorepb.Key_PathElement{{Kind: kind, IdType: &datastorepb.Key_PathElement_Id{Id: int64(i + 1)}}}}, Properties: props}))
			}
		}
		if _, err := pbClient(t, addr).Commit(context.Background(), &datastorepb.CommitRequest{ProjectId: project, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL, Mutations: muts}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(addr, project string, kind string, aggs []*datastorepb.AggregationQuery_Aggregation) string {
		t.Helper()
		resp, err := pbClient(t, addr).RunAggregationQuery(context.Background(), &datastorepb.RunAggregationQueryRequest{ProjectId: project, PartitionId: &datastorepb.PartitionId{ProjectId: project},
			QueryType: &datastorepb.RunAggregationQueryRequest_AggregationQuery{AggregationQuery: &datastorepb.AggregationQuery{
				QueryType:    &datastorepb.AggregationQuery_NestedQuery{NestedQuery: &datastorepb.Query{Kind: []*datastorepb.KindExpression{{Name: kind}}}},
				Aggregations: aggs}}})
		if err != nil {
			return err.Error()
		}
		props := resp.GetBatch().GetAggregationResults()[0].GetAggregateProperties()
		var out []string
		for _, k := range slices.Sorted(maps.Keys(props)) {
			v := props[k]
			switch x := v.GetValueType().(type) {
			case *datastorepb.Value_IntegerValue:
				out = append(out, fmt.Sprintf("%s=%d", k, x.IntegerValue))
			case *datastorepb.Value_DoubleValue:
				out = append(out, fmt.Sprintf("%s=%v", k, x.DoubleValue))
			default:
				out = append(out, fmt.Sprintf("%s=%v", k, v))
			}
		}
		return strings.Join(out, " ")
	}
	name := func(kind string, aggs []*datastorepb.AggregationQuery_Aggregation) string {
		var parts []string
		for _, a := range aggs {
			parts = append(parts, a.GetAlias())
		}
		return kind + ": " + strings.Join(parts, ", ")
	}
	fs, project := dstest.FirestoreEmulator(t), dstest.Project(t)
	load(fs, project)
	for _, c := range cases {
		if got := run(fs, project, c.kind, c.aggs); got != c.want {
			t.Errorf("%s: the Firestore emulator answers %q, recorded %q", name(c.kind, c.aggs), got, c.want)
		}
	}
	for _, b := range []backend{embeddedBackend(t.TempDir()), emulatorBackend()} {
		t.Run(b.name, func(t *testing.T) {
			project := dstest.Project(t)
			n := startNemo(t, b, project, cache.Options{})
			load(n.addr, project)
			for _, c := range cases {
				if got := run(n.addr, project, c.kind, c.aggs); got != c.want {
					t.Errorf("%s: nemo answers %q, Firestore %q", name(c.kind, c.aggs), got, c.want)
				}
			}
		})
	}
}

// TestMutationPairsAsFirestore: two mutations of one entity in one
// transactional commit, each order of insert, update, upsert and delete,
// with the entity absent and present: Firestore refuses an insert after an
// insert, update or upsert, and an update after a delete, with
// INVALID_ARGUMENT "Cannot X then Y an entity in the same request." (before
// looking at the entity), and applies the other pairs in order (an insert
// of an existing entity ALREADY_EXISTS, an update of an absent one
// NOT_FOUND, with nothing applied).
func TestMutationPairsAsFirestore(t *testing.T) {
	ops := []string{"insert", "update", "upsert", "delete"}
	// Recorded from the Firestore emulator: the code, and the entity's
	// presence after the commit.
	want := map[string]string{
		"absent insert+insert": "InvalidArgument absent", "absent insert+update": "OK present", "absent insert+upsert": "OK present", "absent insert+delete": "OK absent",
		"absent update+insert": "InvalidArgument absent", "absent update+update": "NotFound absent", "absent update+upsert": "NotFound absent", "absent update+delete": "NotFound absent",
		"absent upsert+insert": "InvalidArgument absent", "absent upsert+update": "OK present", "absent upsert+upsert": "OK present", "absent upsert+delete": "OK absent",
		"absent delete+insert": "OK present", "absent delete+update": "InvalidArgument absent", "absent delete+upsert": "OK present", "absent delete+delete": "OK absent",
		"present insert+insert": "InvalidArgument present", "present insert+update": "AlreadyExists present", "present insert+upsert": "AlreadyExists present", "present insert+delete": "AlreadyExists present",
		"present update+insert": "InvalidArgument present", "present update+update": "OK present", "present update+upsert": "OK present", "present update+delete": "OK absent",
		"present upsert+insert": "InvalidArgument present", "present upsert+update": "OK present", "present upsert+upsert": "OK present", "present upsert+delete": "OK absent",
		"present delete+insert": "OK present", "present delete+update": "InvalidArgument present", "present delete+upsert": "OK present", "present delete+delete": "OK absent",
	}
	mutation := func(op string, k *datastorepb.Key) *datastorepb.Mutation {
		e := &datastorepb.Entity{Key: k, Properties: map[string]*datastorepb.Value{"v": ival(1)}}
		switch op {
		case "insert":
			return &datastorepb.Mutation{Operation: &datastorepb.Mutation_Insert{Insert: e}}
		case "update":
			return &datastorepb.Mutation{Operation: &datastorepb.Mutation_Update{Update: e}}
		case "upsert":
			return &datastorepb.Mutation{Operation: &datastorepb.Mutation_Upsert{Upsert: e}}
		}
		return &datastorepb.Mutation{Operation: &datastorepb.Mutation_Delete{Delete: k}}
	}
	// play runs every case against addr and returns what it answered
	// that differs from the recording.
	play := func(t *testing.T, addr, project string) []string {
		ctx := context.Background()
		c := pbClient(t, addr)
		var diffs []string
		id := int64(0)
		for _, state := range []string{"absent", "present"} {
			for _, a := range ops {
				for _, b := range ops {
					id++
					k := &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: project}, Path: []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: id}}}}
					if state == "present" {
						if _, err := c.Commit(ctx, &datastorepb.CommitRequest{ProjectId: project, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL, Mutations: []*datastorepb.Mutation{mutation("upsert", k)}}); err != nil {
							t.Fatal(err)
						}
					}
					tx, err := c.BeginTransaction(ctx, &datastorepb.BeginTransactionRequest{ProjectId: project})
					if err != nil {
						t.Fatal(err)
					}
					_, err = c.Commit(ctx, &datastorepb.CommitRequest{ProjectId: project, Mode: datastorepb.CommitRequest_TRANSACTIONAL,
						TransactionSelector: &datastorepb.CommitRequest_Transaction{Transaction: tx.Transaction}, Mutations: []*datastorepb.Mutation{mutation(a, k), mutation(b, k)}})
					st := status.Convert(err)
					if st.Code() != codes.OK {
						_, _ = c.Rollback(ctx, &datastorepb.RollbackRequest{ProjectId: project, Transaction: tx.Transaction})
					}
					if st.Code() == codes.InvalidArgument {
						if msg := fmt.Sprintf("Cannot %s then %s an entity in the same request.", a, b); st.Message() != msg {
							diffs = append(diffs, fmt.Sprintf("%s %s+%s: message %q, want %q", state, a, b, st.Message(), msg))
						}
					}
					lk, err := c.Lookup(ctx, &datastorepb.LookupRequest{ProjectId: project, Keys: []*datastorepb.Key{k}})
					if err != nil {
						t.Fatal(err)
					}
					after := "absent"
					if len(lk.GetFound()) > 0 {
						after = "present"
					}
					name := state + " " + a + "+" + b
					if got := st.Code().String() + " " + after; got != want[name] {
						diffs = append(diffs, fmt.Sprintf("%s: %s (%s), want %s", name, got, st.Message(), want[name]))
					}
				}
			}
		}
		return diffs
	}
	for _, d := range play(t, dstest.FirestoreEmulator(t), dstest.Project(t)) {
		t.Errorf("the Firestore emulator differs from the recording: %s", d)
	}
	shared := emulatorBackend()
	shared.name, shared.shared = "emulator-shared", true
	for _, b := range []backend{embeddedBackend(t.TempDir()), emulatorBackend(), shared} {
		t.Run(b.name, func(t *testing.T) {
			project := dstest.Project(t)
			n := startNemo(t, b, project, cache.Options{})
			for _, d := range play(t, n.addr, project) {
				t.Errorf("nemo: %s", d)
			}
		})
	}
}
