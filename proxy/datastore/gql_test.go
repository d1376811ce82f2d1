package datastore

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/proxy/datastore/internal/gql"
)

func gqlReq(q string, named map[string]*datastorepb.GqlQueryParameter, positional ...*datastorepb.GqlQueryParameter) *datastorepb.RunQueryRequest {
	return &datastorepb.RunQueryRequest{ProjectId: "p", QueryType: &datastorepb.RunQueryRequest_GqlQuery{GqlQuery: &datastorepb.GqlQuery{
		QueryString: q, AllowLiterals: true, NamedBindings: named, PositionalBindings: positional}}}
}

func bindValue(v *datastorepb.Value) *datastorepb.GqlQueryParameter {
	return &datastorepb.GqlQueryParameter{ParameterType: &datastorepb.GqlQueryParameter_Value{Value: v}}
}

func bindCursor(c []byte) *datastorepb.GqlQueryParameter {
	return &datastorepb.GqlQueryParameter{ParameterType: &datastorepb.GqlQueryParameter_Cursor{Cursor: c}}
}

// TestGQLOverEmbedded: GQL runs over the embedded store like the
// structured query it stands for, with bindings, cursors, operators the
// emulator lacks (OR, IN, NOT IN, !=) and aggregations.
func TestGQLOverEmbedded(t *testing.T) {
	_, c := local(t)
	ctx := context.Background()
	var muts []*datastorepb.Mutation
	for i := 1; i <= 6; i++ {
		props := map[string]*datastorepb.Value{"n": ival(int64(i % 3)), "s": sval(string(rune('a' + i)))}
		if i == 6 {
			props["n"] = &datastorepb.Value{ValueType: &datastorepb.Value_NullValue{}}
		}
		muts = append(muts, upsert(&datastorepb.Entity{Key: pkey("P", "x", "K", i), Properties: props}))
	}
	muts = append(muts, upsert(&datastorepb.Entity{Key: pkey("K", 7), Properties: map[string]*datastorepb.Value{"n": ival(1)}}))
	commit(t, c, muts...)
	run := func(req *datastorepb.RunQueryRequest) *datastorepb.RunQueryResponse {
		t.Helper()
		resp, err := c.RunQuery(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", req.GetGqlQuery().GetQueryString(), err)
		}
		return resp
	}
	for q, want := range map[string][]string{
		"SELECT * FROM K": {"7", "1", "2", "3", "4", "5", "6"},
		"SELECT * FROM K WHERE n = 1 ORDER BY __key__ DESC": {"4", "1", "7"},
		"SELECT * FROM K WHERE 1 < n":                       {"2", "5"},
		"SELECT * FROM K WHERE n IS NULL":                   {"6"},
		"SELECT * FROM K WHERE n = 0 OR s = 'c'":            {"2", "3"},
		"SELECT * FROM K WHERE n IN ARRAY(0, 2) AND n != 2": {"3"},
		// Ties on n in key order following the last order's direction,
		// as production (Firestore in Datastore mode) orders them.
		"SELECT * FROM K WHERE n NOT IN ARRAY(1, NULL) ORDER BY n DESC":     {"5", "2", "3"},
		"SELECT * FROM K WHERE __key__ HAS ANCESTOR KEY(P, 'x') LIMIT 2":    {"1", "2"},
		"SELECT * FROM K WHERE KEY(P, 'x') HAS DESCENDANT __key__ OFFSET 4": {"5", "6"},
		"SELECT * FROM `K` WHERE __key__ > KEY(P, 'x', K, 5)":               {"6"},
		"SELECT * WHERE __key__ < KEY(K, 8)":                                {"7"},
		"SELECT __key__ FROM __kind__":                                      {"K"}, // a metadata query, as structured ones
	} {
		if got := resultNames(run(gqlReq(q, nil)).Batch); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", q, got, want)
		}
	}
	// Bindings, and the response's parsed query.
	resp := run(gqlReq("SELECT __key__ FROM K WHERE n = @n AND s > @1 LIMIT @lim", map[string]*datastorepb.GqlQueryParameter{
		"n": bindValue(ival(1)), "lim": bindValue(ival(1))}, bindValue(sval("b"))))
	if got := resultNames(resp.Batch); !slices.Equal(got, []string{"4"}) || resp.Batch.EntityResultType != datastorepb.EntityResult_KEY_ONLY {
		t.Errorf("bound query: %v %v", got, resp.Batch.EntityResultType)
	}
	if resp.Query.GetLimit().GetValue() != 1 || len(resp.Query.GetProjection()) != 1 || resp.Query.GetFilter().GetCompositeFilter() == nil {
		t.Errorf("response query: %v", resp.Query)
	}
	// Cursors bound as start (OFFSET @c) and end (LIMIT @c, FIRST(@c, n)).
	all := run(gqlReq("SELECT * FROM K", nil)).Batch
	c2, c5 := all.EntityResults[1].Cursor, all.EntityResults[4].Cursor
	cursors := map[string]*datastorepb.GqlQueryParameter{"c2": bindCursor(c2), "c5": bindCursor(c5)}
	for q, want := range map[string][]string{
		"SELECT * FROM K OFFSET @c2":                     {"2", "3", "4", "5", "6"},
		"SELECT * FROM K OFFSET @c2 + 1":                 {"3", "4", "5", "6"},
		"SELECT * FROM K LIMIT @c5":                      {"7", "1", "2", "3", "4"},
		"SELECT * FROM K LIMIT FIRST(@c5, 2) OFFSET @c2": {"2", "3"},
		"SELECT * FROM K LIMIT FIRST(3, @c5)":            {"7", "1", "2"},
	} {
		if got := resultNames(run(gqlReq(q, cursors)).Batch); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", q, got, want)
		}
	}
	// Aggregations.
	agg, err := c.RunAggregationQuery(ctx, &datastorepb.RunAggregationQueryRequest{ProjectId: "p", QueryType: &datastorepb.RunAggregationQueryRequest_GqlQuery{
		GqlQuery: &datastorepb.GqlQuery{QueryString: "SELECT COUNT(*) AS c, SUM(n), COUNT_UP_TO(2) AS u FROM K WHERE n >= 1", AllowLiterals: true}}})
	if err != nil {
		t.Fatal(err)
	}
	props := agg.Batch.AggregationResults[0].AggregateProperties
	if props["c"].GetIntegerValue() != 5 || props["property_2"].GetIntegerValue() != 7 || props["u"].GetIntegerValue() != 2 {
		t.Errorf("aggregation: %v", props)
	}
	if _, ok := agg.Query.GetQueryType().(*datastorepb.AggregationQuery_NestedQuery); !ok || len(agg.Query.Aggregations) != 3 {
		t.Errorf("aggregation response query: %v", agg.Query)
	}
	agg, err = c.RunAggregationQuery(ctx, &datastorepb.RunAggregationQueryRequest{ProjectId: "p", QueryType: &datastorepb.RunAggregationQueryRequest_GqlQuery{
		GqlQuery: &datastorepb.GqlQuery{QueryString: "AGGREGATE AVG(n) OVER (SELECT * FROM K WHERE n > 0 ORDER BY n LIMIT 2)", AllowLiterals: true}}})
	if err != nil || agg.Batch.AggregationResults[0].AggregateProperties["property_1"].GetDoubleValue() != 1 {
		t.Errorf("AGGREGATE ... OVER: %v %v", agg, err)
	}
	// Errors are INVALID_ARGUMENT with the service's messages.
	for q, want := range map[string]string{
		"SELECT * FROM K WHERE n = @x":                                  "Absent named binding: x.",
		"SELECT COUNT(*) FROM K":                                        "Expecting ENTITY_QUERY, but got AGGREGATION_QUERY. Use Datastore.RunAggregationQuery API instead for such queries.",
		"SELECT * FROM K WHERE ST_CONTAINS(CIRCLE(LATLNG(1, 2), 3), g)": "using an StContains filter is not allowed",
	} {
		_, err := c.RunQuery(ctx, gqlReq(q, nil))
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want {
			t.Errorf("%s: %v, want %q", q, err, want)
		}
	}
	// What the planner refuses is refused as for a structured query.
	for _, q := range []string{"SELECT * FROM K WHERE __key__ HAS PARENT KEY(P, 'x')"} {
		if _, err := c.RunQuery(ctx, gqlReq(q, nil)); err == nil {
			t.Errorf("%s: accepted", q)
		}
	}
}

// TestGQLInTransaction: a GQL query in a read-write transaction locks what
// it reads exactly as the structured query does: an insert into its range
// from another transaction conflicts until it ends, and its own commit of
// what it read goes through.
func TestGQLInTransaction(t *testing.T) {
	n, c := local(t)
	ctx := context.Background()
	commit(t, c, upsert(&datastorepb.Entity{Key: pkey("K", 1), Properties: map[string]*datastorepb.Value{"n": ival(1)}}))
	req := gqlReq("SELECT * FROM K WHERE n >= 1", nil)
	req.ReadOptions = &datastorepb.ReadOptions{ConsistencyType: &datastorepb.ReadOptions_NewTransaction{NewTransaction: &datastorepb.TransactionOptions{}}}
	r1, err := c.RunQuery(ctx, req)
	if err != nil || len(r1.Transaction) == 0 || len(r1.Batch.EntityResults) != 1 {
		t.Fatalf("GQL with new_transaction: %v %v", r1, err)
	}
	inTxn := func(tx []byte) *datastorepb.CommitRequest {
		return &datastorepb.CommitRequest{ProjectId: "p", TransactionSelector: &datastorepb.CommitRequest_Transaction{Transaction: tx}}
	}
	// Another transaction inserting into the range: a phantom, refused.
	t2, err := c.BeginTransaction(ctx, &datastorepb.BeginTransactionRequest{ProjectId: "p"})
	if err != nil {
		t.Fatal(err)
	}
	phantom := inTxn(t2.Transaction)
	phantom.Mutations = []*datastorepb.Mutation{upsert(&datastorepb.Entity{Key: pkey("K", 2), Properties: map[string]*datastorepb.Value{"n": ival(5)}})}
	if _, err := c.Commit(ctx, phantom); status.Code(err) != codes.Aborted {
		t.Fatalf("insert into a range a GQL query holds: %v, want ABORTED", err)
	}
	// A second GQL read in the same transaction sees the same rows; a
	// plain GQL query outside it is not blocked.
	again := gqlReq("SELECT * FROM K", nil)
	again.ReadOptions = &datastorepb.ReadOptions{ConsistencyType: &datastorepb.ReadOptions_Transaction{Transaction: r1.Transaction}}
	if r, err := c.RunQuery(ctx, again); err != nil || len(r.Batch.EntityResults) != 1 {
		t.Fatalf("second GQL read in the transaction: %v %v", r, err)
	}
	if r, err := c.RunQuery(ctx, gqlReq("SELECT * FROM K", nil)); err != nil || len(r.Batch.EntityResults) != 1 {
		t.Fatalf("GQL outside the transaction: %v %v", r, err)
	}
	// A read-modify-write of what it read commits.
	write := inTxn(r1.Transaction)
	write.Mutations = []*datastorepb.Mutation{upsert(&datastorepb.Entity{Key: pkey("K", 1), Properties: map[string]*datastorepb.Value{"n": ival(2)}})}
	if _, err := c.Commit(ctx, write); err != nil {
		t.Fatal(err)
	}
	// Once it ended the range is free again.
	t3, _ := c.BeginTransaction(ctx, &datastorepb.BeginTransactionRequest{ProjectId: "p"})
	insert := inTxn(t3.Transaction)
	insert.Mutations = phantom.Mutations
	if _, err := c.Commit(ctx, insert); err != nil {
		t.Fatalf("insert after the transaction ended: %v", err)
	}
	if r, _ := c.RunQuery(ctx, gqlReq("SELECT * FROM K WHERE n >= 2", nil)); len(r.GetBatch().GetEntityResults()) != 2 {
		t.Fatalf("after both commits: %v", r)
	}
	// An aggregation in a transaction locks its range too.
	agg, err := c.RunAggregationQuery(ctx, &datastorepb.RunAggregationQueryRequest{ProjectId: "p",
		ReadOptions: &datastorepb.ReadOptions{ConsistencyType: &datastorepb.ReadOptions_NewTransaction{NewTransaction: &datastorepb.TransactionOptions{}}},
		QueryType:   &datastorepb.RunAggregationQueryRequest_GqlQuery{GqlQuery: &datastorepb.GqlQuery{QueryString: "SELECT COUNT(*) FROM K"}}})
	if err != nil || len(agg.Transaction) == 0 {
		t.Fatalf("GQL aggregation with new_transaction: %v", err)
	}
	t4, _ := c.BeginTransaction(ctx, &datastorepb.BeginTransactionRequest{ProjectId: "p"})
	phantom = inTxn(t4.Transaction)
	phantom.Mutations = []*datastorepb.Mutation{upsert(&datastorepb.Entity{Key: pkey("K", 3)})}
	if _, err := c.Commit(ctx, phantom); status.Code(err) != codes.Aborted {
		t.Fatalf("insert into a range a GQL aggregation holds: %v, want ABORTED", err)
	}
	if _, err := c.Rollback(ctx, &datastorepb.RollbackRequest{ProjectId: "p", Transaction: agg.Transaction}); err != nil {
		t.Fatal(err)
	}
	if st := n.engine.Stats(); st.Live != 0 {
		t.Errorf("%d transactions still live", st.Live)
	}
}

// FuzzGQL: the GQL parser never panics, fails only with INVALID_ARGUMENT,
// and whatever it accepts the planner accepts or refuses with a status
// (never an internal error). Entity and aggregation forms both; the
// query's @n sites are bound (to integers), as are a few names of every
// kind of parameter. Seeds: testdata/fuzz/FuzzGQL.
func FuzzGQL(f *testing.F) {
	f.Add("SELECT * FROM K WHERE a = @1 AND b > @s ORDER BY b DESC LIMIT @n OFFSET @c + 1", true)
	f.Add("SELECT COUNT(*) AS c, SUM(a) FROM K WHERE a IN ARRAY(1, 2) OR k = KEY(P, 'x', K, 7)", true)
	named := map[string]*datastorepb.GqlQueryParameter{
		"n": bindValue(ival(2)), "s": bindValue(sval("x")), "arr": bindValue(aval(ival(1), sval("a"))),
		"k": bindValue(&datastorepb.Value{ValueType: &datastorepb.Value_KeyValue{KeyValue: pkey("K", 1)}}),
		"c": bindCursor(encodeCursor(&position{key: []byte("k")})), "junk": bindCursor([]byte("junk")),
	}
	site := regexp.MustCompile(`@([0-9]{1,2})\b`)
	partition := &datastorepb.PartitionId{ProjectId: "p"}
	fr := &Frontend{}
	f.Fuzz(func(t *testing.T, q string, literals bool) {
		g := &datastorepb.GqlQuery{QueryString: q, AllowLiterals: literals, NamedBindings: named}
		for _, m := range site.FindAllStringSubmatch(q, -1) {
			n, _ := strconv.Atoi(m[1])
			for len(g.PositionalBindings) < n {
				g.PositionalBindings = append(g.PositionalBindings, bindValue(ival(int64(len(g.PositionalBindings)))))
			}
		}
		planned := func(what string, q *datastorepb.Query, err error) {
			if err != nil {
				if status.Code(err) != codes.InvalidArgument {
					t.Fatalf("%s: parser error %v is not INVALID_ARGUMENT", what, err)
				}
				return
			}
			if _, err := fr.planQuery("p", "", partition, q); err != nil {
				if s, ok := status.FromError(err); !ok || s.Code() == codes.Unknown || s.Code() == codes.Internal {
					t.Fatalf("%s: the planner failed on a translated query without a status: %v", what, err)
				}
			}
		}
		eq, err := gql.Query(g, partition)
		planned("entity query", eq, err)
		aq, err := gql.AggregationQuery(g, partition)
		planned("aggregation query", aq.GetNestedQuery(), err)
	})
}
