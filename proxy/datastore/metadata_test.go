package datastore

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"cloud.google.com/go/datastore"
	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/genproto/googleapis/type/latlng"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

// TestMetadataQueriesAsTheEmulator: __namespace__, __kind__ and
// __property__ queries through nemo answer what the Datastore emulator
// answers for the same entities (written to it directly, in a project of
// their own): keys, property representations, key ranges, ancestors,
// limits, offsets, cursors and refusals. nemo runs over every backend in
// write-back mode without background flushes, so its answers must include
// writes (a new kind, a new namespace) and deletes (a kind's last entity)
// that the store has not seen; after a flush the same queries go to the
// backend as they are where it can run them.
func TestMetadataQueriesAsTheEmulator(t *testing.T) {
	emuAddr := dstest.Emulator(t)
	ctx := context.Background()
	// Not in front of the Firestore emulator: it answers no metadata
	// query (__kind__: INVALID_ARGUMENT "Kind queries are not supported
	// in the Datastore Mode emulator."; __property__: nothing), which
	// nemo passes on once it has nothing unflushed.
	for _, b := range backends(t) {
		if strings.HasPrefix(b.name, "firestore") {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			project, refProject := dstest.Project(t), dstest.Project(t)
			n := startNemo(t, b, project, cache.Options{DisableWorkers: true})
			sides := []struct {
				project string
				c       datastorepb.DatastoreClient
			}{{refProject, pbClient(t, emuAddr)}, {project, pbClient(t, n.addr)}}
			key := func(project, ns string, path ...any) *datastorepb.Key {
				k := pkey(path...)
				k.PartitionId = &datastorepb.PartitionId{ProjectId: project, NamespaceId: ns}
				return k
			}
			write := func(muts func(project string) []*datastorepb.Mutation) {
				t.Helper()
				for _, s := range sides {
					if _, err := s.c.Commit(ctx, &datastorepb.CommitRequest{ProjectId: s.project, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL, Mutations: muts(s.project)}); err != nil {
						t.Fatal(err)
					}
				}
			}
			unindexed := func(v *datastorepb.Value) *datastorepb.Value { v.ExcludeFromIndexes = true; return v }
			write(func(p string) []*datastorepb.Mutation {
				return []*datastorepb.Mutation{
					upsert(&datastorepb.Entity{Key: key(p, "", "A", "a"), Properties: map[string]*datastorepb.Value{
						"x": ival(1), "s": sval("s"), "u": unindexed(ival(1)), "arr": aval(ival(1), sval("a")),
						"n": {ValueType: &datastorepb.Value_NullValue{}},
						"e": {ValueType: &datastorepb.Value_EntityValue{EntityValue: &datastorepb.Entity{Properties: map[string]*datastorepb.Value{"in": ival(1)}}}},
					}}),
					upsert(&datastorepb.Entity{Key: key(p, "", "A", "b"), Properties: map[string]*datastorepb.Value{
						"x": sval("str"), "ts": {ValueType: &datastorepb.Value_TimestampValue{TimestampValue: timestamppb.New(timestamppb.Now().AsTime())}},
						"d": {ValueType: &datastorepb.Value_DoubleValue{DoubleValue: 1}}, "k": {ValueType: &datastorepb.Value_KeyValue{KeyValue: key(p, "", "Z", 1)}},
						"b": {ValueType: &datastorepb.Value_BooleanValue{}}, "bl": {ValueType: &datastorepb.Value_BlobValue{BlobValue: []byte("x")}},
						"g": {ValueType: &datastorepb.Value_GeoPointValue{GeoPointValue: &latlng.LatLng{}}},
					}}),
					upsert(&datastorepb.Entity{Key: key(p, "", "A", "b", "B", 1), Properties: map[string]*datastorepb.Value{"y": ival(1)}}),
					upsert(&datastorepb.Entity{Key: key(p, "", "C", "c")}),
					upsert(&datastorepb.Entity{Key: key(p, "ns1", "N", "a"), Properties: map[string]*datastorepb.Value{"z": ival(1)}}),
				}
			})
			meta := func(kind, extra string) string { return `kind{name:"` + kind + `"} ` + extra }
			keyFilter := func(op, path string) string {
				return `filter{property_filter{property{name:"__key__"} op:` + op + ` value{key_value{` + path + `}}}}`
			}
			queries := []struct{ ns, q string }{
				{"", meta(kindNamespace, "")},
				{"", meta(kindNamespace, `projection{property{name:"__key__"}}`)},
				{"", meta(kindNamespace, keyFilter("GREATER_THAN", `path{kind:"__namespace__" id:1}`))},
				{"ns1", meta(kindNamespace, keyFilter("LESS_THAN", `path{kind:"__namespace__" name:"ns1"}`))},
				{"", meta(kindKind, "")},
				{"ns1", meta(kindKind, "")},
				{"", meta(kindKind, keyFilter("GREATER_THAN_OR_EQUAL", `path{kind:"__kind__" name:"B"}`))},
				{"", meta(kindKind, keyFilter("LESS_THAN", `path{kind:"__kind__" name:"B"}`))},
				{"", meta(kindKind, keyFilter("EQUAL", `path{kind:"__kind__" name:"C"}`))},
				{"", meta(kindKind, `limit{value:1} offset:1`)},
				{"", meta(kindKind, `limit{value:1}`)},
				{"", meta(kindProperty, "")},
				{"", meta(kindProperty, `projection{property{name:"__key__"}}`)},
				{"", meta(kindProperty, keyFilter("HAS_ANCESTOR", `path{kind:"__kind__" name:"A"}`))},
				{"", meta(kindProperty, keyFilter("GREATER_THAN_OR_EQUAL", `path{kind:"__kind__" name:"A"} path{kind:"__property__" name:"s"}`))},
				{"", meta(kindProperty, keyFilter("LESS_THAN_OR_EQUAL", `path{kind:"__kind__" name:"A"} path{kind:"__property__" name:"d"}`))},
				{"", meta(kindProperty, `limit{value:2}`)},
				// Refused, as the service refuses them.
				{"", meta(kindKind, `order{property{name:"__key__"} direction:DESCENDING}`)},
				{"", meta(kindKind, `filter{property_filter{property{name:"x"} op:EQUAL value{integer_value:1}}}`)},
				{"", meta(kindKind, keyFilter("HAS_ANCESTOR", `path{kind:"__kind__" name:"A"}`))},
				{"", meta(kindKind, keyFilter("GREATER_THAN", `path{kind:"A" name:"B"}`))},
				{"ns1", meta(kindKind, keyFilter("GREATER_THAN", `partition_id{namespace_id:"ns1"} path{kind:"A" id:5} path{kind:"B" name:"x"}`))},
				{"", meta(kindProperty, keyFilter("GREATER_THAN", `path{kind:"X" name:"N"}`))},
				{"", meta(kindProperty, `projection{property{name:"property_representation"}}`)},
				{"", meta(kindNamespace, keyFilter("GREATER_THAN", `path{kind:"__kind__" name:"A"}`))},
				{"", meta(kindEntityGroup, "")},
			}
			compare := func(stage string) {
				t.Helper()
				for _, q := range queries {
					var got [2]string
					for i, s := range sides {
						got[i] = runMeta(t, s.c, s.project, q.ns, q.q)
					}
					if got[0] != got[1] {
						t.Errorf("%s: %s in namespace %q:\n emulator: %s\n nemo:     %s", stage, q.q, q.ns, got[0], got[1])
					}
				}
			}
			compare("written")
			// Changes the store has not seen: a new kind and namespace, and
			// C's only entity deleted.
			write(func(p string) []*datastorepb.Mutation {
				return []*datastorepb.Mutation{
					upsert(&datastorepb.Entity{Key: key(p, "", "D", 1), Properties: map[string]*datastorepb.Value{"w": ival(1)}}),
					upsert(&datastorepb.Entity{Key: key(p, "ns2", "M", 1)}),
					{Operation: &datastorepb.Mutation_Delete{Delete: key(p, "", "C", "c")}},
				}
			})
			compare("unflushed")
			// In a transaction nemo reads (and locks) the namespace itself.
			tx, err := sides[1].c.BeginTransaction(ctx, &datastorepb.BeginTransactionRequest{ProjectId: project})
			if err != nil {
				t.Fatal(err)
			}
			q := &datastorepb.Query{Kind: []*datastorepb.KindExpression{{Name: kindKind}}}
			resp, err := sides[1].c.RunQuery(ctx, &datastorepb.RunQueryRequest{ProjectId: project, PartitionId: &datastorepb.PartitionId{ProjectId: project},
				ReadOptions: &datastorepb.ReadOptions{ConsistencyType: &datastorepb.ReadOptions_Transaction{Transaction: tx.Transaction}}, QueryType: &datastorepb.RunQueryRequest_Query{Query: q}})
			if err != nil || len(resp.Batch.EntityResults) != 3 {
				t.Errorf("__kind__ in a transaction: %v %v", resp, err)
			}
			if _, err := sides[1].c.Rollback(ctx, &datastorepb.RollbackRequest{ProjectId: project, Transaction: tx.Transaction}); err != nil {
				t.Fatal(err)
			}
			if err := n.engine.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			compare("flushed")
			// Paged one result at a time by end cursors, as an application
			// pages: nemo's cursors, whether or not the backend listed the
			// entities.
			for _, kind := range []string{kindKind, kindProperty} {
				var got [2]string
				for i, s := range sides {
					got[i] = runMetaPaged(t, s.c, s.project, kind)
				}
				if got[0] != got[1] {
					t.Errorf("%s paged by cursors:\n emulator: %s\n nemo:     %s", kind, got[0], got[1])
				}
			}
		})
	}
}

// runMeta runs a query to the end (following cursors) and renders its
// entities, or its refusal.
func runMeta(t *testing.T, c datastorepb.DatastoreClient, project, ns, text string) string {
	t.Helper()
	q := &datastorepb.Query{}
	if err := prototext.Unmarshal([]byte(text), q); err != nil {
		t.Fatal(err)
	}
	if f := q.GetFilter().GetPropertyFilter(); f != nil && f.GetValue().GetKeyValue() != nil {
		k := f.GetValue().GetKeyValue()
		if k.PartitionId == nil {
			k.PartitionId = &datastorepb.PartitionId{}
		}
		k.PartitionId.ProjectId, k.PartitionId.NamespaceId = project, ns
	}
	var out []string
	for pages := 0; pages < 20; pages++ {
		resp, err := c.RunQuery(context.Background(), &datastorepb.RunQueryRequest{ProjectId: project,
			PartitionId: &datastorepb.PartitionId{ProjectId: project, NamespaceId: ns}, QueryType: &datastorepb.RunQueryRequest_Query{Query: q}})
		if err != nil {
			st := status.Convert(err)
			return fmt.Sprintf("%s: %s", st.Code(), strings.ReplaceAll(st.Message(), project, "P"))
		}
		for _, r := range resp.Batch.EntityResults {
			var parts []string
			for _, el := range r.Entity.Key.Path {
				parts = append(parts, fmt.Sprintf("%s:%s%d", el.GetKind(), el.GetName(), el.GetId()))
			}
			s := "ns=" + r.Entity.Key.GetPartitionId().GetNamespaceId() + " " + strings.Join(parts, "/")
			var props []string
			for name, v := range r.Entity.Properties {
				var reprs []string
				for _, x := range v.GetArrayValue().GetValues() {
					reprs = append(reprs, x.GetStringValue())
				}
				props = append(props, name+"="+strings.Join(reprs, ","))
			}
			sort.Strings(props)
			out = append(out, s+" "+strings.Join(props, " "))
		}
		if q.Limit != nil || resp.Batch.MoreResults != datastorepb.QueryResultBatch_NOT_FINISHED {
			break
		}
		q.StartCursor = resp.Batch.EndCursor
	}
	return "[" + strings.Join(slices.Clip(out), "; ") + "]"
}

// runMetaPaged lists a metadata kind one result per query, each starting
// at the end cursor of the one before, and renders the keys.
func runMetaPaged(t *testing.T, c datastorepb.DatastoreClient, project, kind string) string {
	t.Helper()
	var out []string
	q := &datastorepb.Query{Kind: []*datastorepb.KindExpression{{Name: kind}}, Limit: wrapperspb.Int32(1)}
	for pages := 0; pages < 50; pages++ {
		resp, err := c.RunQuery(context.Background(), &datastorepb.RunQueryRequest{ProjectId: project,
			PartitionId: &datastorepb.PartitionId{ProjectId: project}, QueryType: &datastorepb.RunQueryRequest_Query{Query: q}})
		if err != nil {
			return fmt.Sprintf("after %v: %v", out, status.Convert(err).Message())
		}
		if len(resp.Batch.EntityResults) == 0 {
			return strings.Join(out, "; ")
		}
		for _, r := range resp.Batch.EntityResults {
			var parts []string
			for _, el := range r.Entity.Key.Path {
				parts = append(parts, el.GetKind()+":"+el.GetName())
			}
			out = append(out, strings.Join(parts, "/"))
		}
		q.StartCursor = resp.Batch.EndCursor
	}
	return "did not end: " + strings.Join(out, "; ")
}

// TestMetadataQueriesAnswerAsTheBackend: a metadata query from the Go
// client (datastore.NewQuery(kind).KeysOnly() for __kind__, __namespace__
// and __property__) through nemo gets what the backend answers to it
// directly over the same entity, with nemo in coherence shared and in
// write-back once flushed (nemo asks the backend then): the legacy
// Datastore emulator's keys, and the Firestore emulator's refusals
// (__kind__ and __namespace__: INVALID_ARGUMENT with its message) and
// empty answer (__property__). In shared mode in front of Firestore nemo
// answered __kind__ with INTERNAL, its own text around the emulator's.
func TestMetadataQueriesAnswerAsTheBackend(t *testing.T) {
	ctx := context.Background()
	fs := dstest.FirestoreEmulator(t)
	type E struct{ N int }
	put := func(c *datastore.Client) {
		t.Helper()
		if _, err := c.Put(ctx, datastore.NameKey("K", "a", nil), &E{1}); err != nil {
			t.Fatal(err)
		}
	}
	answers := func(c *datastore.Client) map[string]string {
		out := map[string]string{}
		for _, kind := range []string{kindKind, kindNamespace, kindProperty} {
			keys, err := c.GetAll(ctx, datastore.NewQuery(kind).KeysOnly(), nil)
			st := status.Convert(err)
			out[kind] = fmt.Sprintf("%s %q %v", st.Code(), st.Message(), keys)
		}
		return out
	}
	for _, be := range []struct {
		name string
		host func(testing.TB) string
	}{{"emulator", dstest.Emulator}, {"firestore", func(testing.TB) string { return fs }}} {
		t.Run(be.name, func(t *testing.T) {
			direct := client(t, be.host(t), dstest.Project(t))
			put(direct)
			want := answers(direct)
			for _, shared := range []bool{true, false} {
				b := datastoreBackend(be.name, be.host, shared)
				project := dstest.Project(t)
				n := startNemo(t, b, project, cache.Options{DisableWorkers: true})
				c := client(t, n.addr, project)
				put(c)
				if err := n.engine.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				for kind, got := range answers(c) {
					if got != want[kind] {
						t.Errorf("shared %v: %s: nemo answered %s; the backend %s", shared, kind, got, want[kind])
					}
				}
			}
		})
	}
}
