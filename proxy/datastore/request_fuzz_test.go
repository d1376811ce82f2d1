package datastore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/genproto/googleapis/type/latlng"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/tlsfront"
)

// fuzzProject is the project the fuzzed frontend serves (Options.Project).
const fuzzProject = "fz"

// fuzzMethods are the Datastore methods FuzzRequest calls, by the low three
// bits of its selector: the REST name (restMethods) and the response type.
var fuzzMethods = []struct {
	name    string
	newResp func() proto.Message
}{
	{"lookup", func() proto.Message { return &datastorepb.LookupResponse{} }},
	{"runQuery", func() proto.Message { return &datastorepb.RunQueryResponse{} }},
	{"runAggregationQuery", func() proto.Message { return &datastorepb.RunAggregationQueryResponse{} }},
	{"beginTransaction", func() proto.Message { return &datastorepb.BeginTransactionResponse{} }},
	{"commit", func() proto.Message { return &datastorepb.CommitResponse{} }},
	{"rollback", func() proto.Message { return &datastorepb.RollbackResponse{} }},
	{"allocateIds", func() proto.Message { return &datastorepb.AllocateIdsResponse{} }},
	{"reserveIds", func() proto.Message { return &datastorepb.ReserveIdsResponse{} }},
}

// Selector bits above the method's.
const (
	fuzzREST        = 1 << 3 // the REST API instead of gRPC
	fuzzProjectBits = 4      // 2 bits: the request's project (fuzzProjectOf)
	fuzzTxnBits     = 6      // 2 bits: the request's transaction (fuzzTxn*)
)

// How FuzzRequest sets the request's transaction (selector bits 6-7).
const (
	fuzzTxnAsSent    = iota // whatever the request says
	fuzzTxnReadWrite        // a read-write transaction begun for it
	fuzzTxnReadOnly         // a read-only one
	fuzzTxnFinished         // one already rolled back
)

// fuzzProjectOf is the request's project for selector bits 4-5: the
// served one, the request's own (mostly none or another), or another.
func fuzzProjectOf(bits uint8, own string) string {
	switch bits & 3 {
	case 1:
		return own
	case 2:
		return "other"
	}
	return fuzzProject
}

// FuzzRequest sends arbitrary Datastore requests to the frontend over the
// embedded store, by gRPC or the REST API (as the selector says), into a
// project holding a few entities. The body is the method's request
// message in protobuf; one that does not unmarshal is skipped. The
// selector also sets the request's project (the served one, another, or
// the body's own) and may put it in a transaction begun for it, read-write,
// read-only or already finished; every transaction the call leaves open is
// rolled back after it.
//
// Properties: no call crashes nemo; every error is a status the service
// gives for bad input or state (INVALID_ARGUMENT, NOT_FOUND,
// ALREADY_EXISTS, FAILED_PRECONDITION, OUT_OF_RANGE, or UNIMPLEMENTED for
// what nemo documents it does not do), never INTERNAL, UNKNOWN,
// UNAVAILABLE, DEADLINE_EXCEEDED or ABORTED (the store never fails, and
// one call at a time contends with nothing), and on REST it is Google's
// JSON error document with the matching HTTP status; a request with an
// invalid timestamp (no JSON encoding) is refused; every success is a
// well-formed answer (fuzzResponse) that JSON can carry; a query's answer
// is what the query it answered with gives when run again, each full
// entity the one Lookup finds (requery), and a count what the nested query
// returns (recount); a commit's effects are exactly what it answered, and
// a failed one changed nothing (a non-transactional one: the mutations
// before the refused one). At the end the buffer must still agree with the
// store (the harness checks it at cleanup, and every fuzzCheckEvery while
// fuzzing).
func FuzzRequest(f *testing.F) {
	for _, s := range fuzzSeeds() {
		b, err := proto.Marshal(s.req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(s.sel, b)
	}
	n := startNemoServed(f, embeddedBackend(f.TempDir()), fuzzProject, cache.Options{}, serving{project: fuzzProject})
	conn, err := grpc.NewClient("passthrough:///"+n.addr, grpc.WithTransportCredentials(transportCredentials(n.addr)))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { conn.Close() })
	fz := &fuzzChecker{n: n, conn: conn, pb: datastorepb.NewDatastoreClient(conn), http: tlsfront.HTTPClient(0), checked: time.Now()}
	f.Cleanup(fz.http.CloseIdleConnections)
	var muts []*datastorepb.Mutation
	for _, ns := range []string{"", "ns"} {
		for i, name := range []string{"a", "b", "c"} {
			k := fuzzKey(ns, "K", name)
			muts = append(muts, upsert(&datastorepb.Entity{Key: k, Properties: map[string]*datastorepb.Value{
				"n": ival(int64(i)), "s": sval(name), "arr": aval(ival(int64(i)), sval("x")),
			}}))
		}
		muts = append(muts, upsert(&datastorepb.Entity{Key: fuzzKey(ns, "K", "a", "C", 1), Properties: map[string]*datastorepb.Value{"n": ival(9)}}))
	}
	if _, err := fz.pb.Commit(context.Background(), &datastorepb.CommitRequest{ProjectId: fuzzProject, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL, Mutations: muts}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) {
		m := fuzzMethods[sel&7]
		req := restMethods[m.name].newReq()
		if proto.Unmarshal(body, req) != nil {
			return
		}
		fz.run(t, sel, m.name, req, m.newResp())
	})
}

// fuzzCheckEvery is how long FuzzRequest fuzzes between checks of the
// buffer's invariants (a check reads every clean record from the store, so
// the more the fuzzer wrote, the longer it takes).
const fuzzCheckEvery = 30 * time.Second

// fuzzChecker is FuzzRequest's nemo and what checks its answers.
type fuzzChecker struct {
	n       *nemo
	conn    *grpc.ClientConn
	pb      datastorepb.DatastoreClient
	http    *http.Client
	calls   int
	checked time.Time // the last check of the buffer's invariants
}

// run sends req as sel says and checks the answer.
func (fz *fuzzChecker) run(t *testing.T, sel uint8, method string, req, resp proto.Message) {
	ctx := context.Background()
	// A request JSON cannot express holds an invalid timestamp, which
	// the service refuses wherever it is; REST clients cannot send it.
	_, noJSON := protojson.Marshal(req)
	if noJSON != nil && sel&fuzzREST != 0 {
		return
	}
	project := fuzzProjectOf(sel>>fuzzProjectBits, req.ProtoReflect().Get(fuzzProjectField(req)).String())
	req.ProtoReflect().Set(fuzzProjectField(req), protoreflect.ValueOfString(project))
	var open [][]byte // transactions to roll back after the call
	if mode := sel >> fuzzTxnBits & 3; mode != fuzzTxnAsSent {
		b, err := fz.pb.BeginTransaction(ctx, &datastorepb.BeginTransactionRequest{ProjectId: fuzzProject, TransactionOptions: fuzzTxnOptions(mode)})
		if err != nil {
			t.Fatalf("begin: %v", err)
		}
		if mode == fuzzTxnFinished {
			if _, err := fz.pb.Rollback(ctx, &datastorepb.RollbackRequest{ProjectId: fuzzProject, Transaction: b.Transaction}); err != nil {
				t.Fatalf("rollback: %v", err)
			}
		} else {
			open = append(open, b.Transaction)
		}
		setFuzzTransaction(req, b.Transaction)
	}
	var before map[string]*datastorepb.EntityResult
	cr, isCommit := req.(*datastorepb.CommitRequest)
	if isCommit {
		before = fz.states(t, cr, nil)
	}
	via := "grpc"
	var err error
	if sel&fuzzREST != 0 {
		via = "rest"
		err = fz.rest(t, method, project, req, resp)
	} else {
		err = fz.conn.Invoke(ctx, "/google.datastore.v1.Datastore/"+strings.ToUpper(method[:1])+method[1:], req, resp)
	}
	t.Logf("%s %s %v: %v", via, method, req, err)
	if err != nil {
		checkFuzzStatus(t, err)
	} else if noJSON != nil {
		t.Fatalf("took a request with an invalid timestamp (%v)", noJSON)
	} else {
		open = append(open, fuzzResponse(t, req, resp)...)
		switch r := resp.(type) {
		case *datastorepb.RunQueryResponse:
			fz.requery(t, req.(*datastorepb.RunQueryRequest), r)
		case *datastorepb.RunAggregationQueryResponse:
			fz.recount(t, req.(*datastorepb.RunAggregationQueryRequest), r)
		}
	}
	if isCommit {
		fz.commitEffects(t, cr, before, resp.(*datastorepb.CommitResponse), err)
	}
	for _, id := range open {
		if _, err := fz.pb.Rollback(ctx, &datastorepb.RollbackRequest{ProjectId: fuzzProject, Transaction: id}); status.Code(err) != codes.OK && status.Code(err) != codes.InvalidArgument {
			t.Fatalf("rollback after the call: %v", err)
		}
	}
	if fz.calls++; time.Since(fz.checked) > fuzzCheckEvery {
		fz.checked = time.Now()
		if err := fz.n.buf.Check(ctx); err != nil {
			t.Fatalf("buffer invariants after %d calls: %v", fz.calls, err)
		}
	}
}

// rest posts req to the REST API and decodes the answer into resp, or
// checks the error document and returns its status.
func (fz *fuzzChecker) rest(t *testing.T, method, project string, req, resp proto.Message) error {
	body, err := protojson.Marshal(req)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	u := restURL(fz.n.addr) + "/v1/projects/" + url.PathEscape(project) + ":" + method
	r, err := fz.http.Post(u, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	defer r.Body.Close()
	got, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	if r.StatusCode == http.StatusOK {
		if err := protojson.Unmarshal(got, resp); err != nil {
			t.Fatalf("POST %s: 200 with %q: %v", u, got, err)
		}
		return nil
	}
	var doc struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Status  string `json:"status"`
		} `json:"error"`
	}
	if err := json.Unmarshal(got, &doc); err != nil || doc.Error.Status == "" || doc.Error.Message == "" {
		t.Fatalf("POST %s %s: %d with no error document: %q", u, body, r.StatusCode, got)
	}
	for c, h := range httpStatus {
		if strings.ToUpper(codeName(c)) == doc.Error.Status {
			if h != r.StatusCode || doc.Error.Code != r.StatusCode {
				t.Fatalf("POST %s %s: HTTP %d, error %+v", u, body, r.StatusCode, doc.Error)
			}
			return status.Error(c, doc.Error.Message)
		}
	}
	t.Fatalf("POST %s %s: unknown status in %q", u, body, got)
	return nil
}

// checkFuzzStatus fails t unless err is a status the service answers bad
// input or state with.
func checkFuzzStatus(t *testing.T, err error) {
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("not a status: %v", err)
	}
	switch st.Code() {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition, codes.OutOfRange:
		return
	case codes.Unimplemented:
		// What nemo documents it does not do.
		switch st.Message() {
		case "nemo does not support property transforms", "nemo does not explain queries", "nemo does not support vector search (find_nearest)":
			return
		}
	}
	t.Fatalf("answered %v", err)
}

// fuzzProjectField is the project_id field every request has.
func fuzzProjectField(req proto.Message) protoreflect.FieldDescriptor {
	return req.ProtoReflect().Descriptor().Fields().ByName("project_id")
}

func fuzzTxnOptions(mode uint8) *datastorepb.TransactionOptions {
	if mode == fuzzTxnReadOnly {
		return &datastorepb.TransactionOptions{Mode: &datastorepb.TransactionOptions_ReadOnly_{ReadOnly: &datastorepb.TransactionOptions_ReadOnly{}}}
	}
	return &datastorepb.TransactionOptions{Mode: &datastorepb.TransactionOptions_ReadWrite_{ReadWrite: &datastorepb.TransactionOptions_ReadWrite{}}}
}

// setFuzzTransaction puts the request in transaction id.
func setFuzzTransaction(req proto.Message, id []byte) {
	in := &datastorepb.ReadOptions{ConsistencyType: &datastorepb.ReadOptions_Transaction{Transaction: id}}
	switch r := req.(type) {
	case *datastorepb.LookupRequest:
		r.ReadOptions = in
	case *datastorepb.RunQueryRequest:
		r.ReadOptions = in
	case *datastorepb.RunAggregationQueryRequest:
		r.ReadOptions = in
	case *datastorepb.CommitRequest:
		r.TransactionSelector = &datastorepb.CommitRequest_Transaction{Transaction: id}
	case *datastorepb.RollbackRequest:
		r.Transaction = id
	}
}

// fuzzResponse checks a successful answer is well formed and returns the
// transactions it began. Whatever nemo answers by gRPC, it must be able to
// answer by REST: the answer has a JSON encoding.
func fuzzResponse(t *testing.T, req, resp proto.Message) [][]byte {
	if _, err := protojson.Marshal(resp); err != nil {
		t.Fatalf("the answer %v has no JSON encoding: %v", resp, err)
	}
	switch r := resp.(type) {
	case *datastorepb.LookupResponse:
		checkFuzzLookup(t, req.(*datastorepb.LookupRequest), r)
		return nonEmpty(r.Transaction)
	case *datastorepb.RunQueryResponse:
		checkFuzzBatch(t, r)
		return nonEmpty(r.Transaction)
	case *datastorepb.RunAggregationQueryResponse:
		checkFuzzAggregation(t, r)
		return nonEmpty(r.Transaction)
	case *datastorepb.BeginTransactionResponse:
		if len(r.Transaction) == 0 {
			t.Fatalf("began no transaction")
		}
		return [][]byte{r.Transaction}
	case *datastorepb.CommitResponse:
		if n := len(req.(*datastorepb.CommitRequest).Mutations); len(r.MutationResults) != n {
			t.Fatalf("%d mutation results for %d mutations", len(r.MutationResults), n)
		}
	case *datastorepb.AllocateIdsResponse:
		keys := req.(*datastorepb.AllocateIdsRequest).Keys
		if len(r.Keys) != len(keys) {
			t.Fatalf("allocated %d keys for %d", len(r.Keys), len(keys))
		}
		seen := map[string]bool{}
		for i, k := range r.Keys {
			id := fuzzKeyID(k)
			if len(k.Path) != len(keys[i].Path) || incomplete(k) || seen[id] {
				t.Fatalf("allocated %v for %v (incomplete or given twice)", k, keys[i])
			}
			seen[id] = true
		}
	}
	return nil
}

func nonEmpty(id []byte) [][]byte {
	if len(id) == 0 {
		return nil
	}
	return [][]byte{id}
}

// checkFuzzLookup: every key asked comes back once, found, missing or
// deferred, and a Lookup that defers finds something (it progresses).
func checkFuzzLookup(t *testing.T, req *datastorepb.LookupRequest, r *datastorepb.LookupResponse) {
	asked := map[string]bool{}
	for _, k := range req.Keys {
		asked[fuzzKeyID(k)] = true
	}
	got := map[string]bool{}
	answer := func(k *datastorepb.Key) {
		id := fuzzKeyID(k)
		if !asked[id] || got[id] {
			t.Fatalf("answered %v, not asked or twice", k)
		}
		got[id] = true
	}
	for _, e := range r.Found {
		answer(e.GetEntity().GetKey())
		if e.Version <= 0 {
			t.Fatalf("found %v with version %d", e.Entity.Key, e.Version)
		}
	}
	for _, e := range r.Missing {
		answer(e.GetEntity().GetKey())
	}
	for _, k := range r.Deferred {
		answer(k)
	}
	if len(got) != len(asked) || len(r.Deferred) > 0 && len(r.Found) == 0 {
		t.Fatalf("asked %d keys: %d found, %d missing, %d deferred", len(asked), len(r.Found), len(r.Missing), len(r.Deferred))
	}
}

// checkFuzzBatch: a batch says whether there is more, holds no more than
// the limit, skips no more than the offset, of the query's kind; one that
// is not finished has moved on.
func checkFuzzBatch(t *testing.T, r *datastorepb.RunQueryResponse) {
	b, q := r.GetBatch(), r.GetQuery()
	if b == nil || b.MoreResults == datastorepb.QueryResultBatch_MORE_RESULTS_TYPE_UNSPECIFIED || b.EntityResultType == datastorepb.EntityResult_RESULT_TYPE_UNSPECIFIED {
		t.Fatalf("batch %v", b)
	}
	if q == nil {
		t.Fatalf("no query in the answer")
	}
	if l := q.GetLimit(); l != nil && l.Value >= 0 && len(b.EntityResults) > int(l.Value) {
		t.Fatalf("%d results past the limit %d", len(b.EntityResults), l.Value)
	}
	if int(b.SkippedResults) > int(q.Offset) {
		t.Fatalf("skipped %d results, offset %d", b.SkippedResults, q.Offset)
	}
	kind := ""
	if len(q.Kind) == 1 && !reserved.MatchString(q.Kind[0].Name) {
		kind = q.Kind[0].Name
	}
	for _, e := range b.EntityResults {
		k := e.GetEntity().GetKey()
		if len(k.GetPath()) == 0 || incomplete(k) || kind != "" && k.Path[len(k.Path)-1].Kind != kind {
			t.Fatalf("result %v of a query of %q", e, kind)
		}
	}
	if b.MoreResults == datastorepb.QueryResultBatch_NOT_FINISHED && bytes.Equal(b.EndCursor, q.StartCursor) {
		t.Fatalf("not finished, and the end cursor is the start")
	}
}

// requery runs the query a RunQuery answered with (the structured query
// nemo ran, a GQL query's translation) again, by itself: it must give the
// same batch (nothing was written in between), and each full entity it
// returns must be the one Lookup finds, at the same version.
func (fz *fuzzChecker) requery(t *testing.T, req *datastorepb.RunQueryRequest, r *datastorepb.RunQueryResponse) {
	ctx := context.Background()
	again, err := fz.pb.RunQuery(ctx, &datastorepb.RunQueryRequest{ProjectId: req.ProjectId, DatabaseId: req.DatabaseId, PartitionId: req.PartitionId,
		PropertyMask: req.PropertyMask, QueryType: &datastorepb.RunQueryRequest_Query{Query: r.Query}})
	if err != nil {
		t.Fatalf("the query %v answered with: %v", r.Query, err)
	}
	a, b := r.Batch, again.Batch
	if len(a.EntityResults) != len(b.EntityResults) || a.SkippedResults != b.SkippedResults || a.MoreResults != b.MoreResults || !bytes.Equal(a.EndCursor, b.EndCursor) {
		t.Fatalf("the query %v answered with gives another batch:\n%v\n%v", r.Query, a, b)
	}
	var keys []*datastorepb.Key
	for i, e := range a.EntityResults {
		if !proto.Equal(e.Entity, b.EntityResults[i].Entity) || e.Version != b.EntityResults[i].Version {
			t.Fatalf("the query %v answered with gives another result %d:\n%v\n%v", r.Query, i, e, b.EntityResults[i])
		}
		keys = append(keys, e.Entity.Key)
	}
	if a.EntityResultType != datastorepb.EntityResult_FULL || req.PropertyMask != nil || len(keys) == 0 ||
		len(r.Query.Kind) > 0 && reserved.MatchString(r.Query.Kind[0].Name) {
		return // not whole stored entities (a metadata query's are virtual)
	}
	found, err := fz.pb.Lookup(ctx, &datastorepb.LookupRequest{ProjectId: req.ProjectId, DatabaseId: req.DatabaseId, Keys: keys})
	if err != nil {
		t.Fatalf("looking up the results of %v: %v", r.Query, err)
	}
	byKey := map[string]*datastorepb.EntityResult{}
	for _, e := range found.Found {
		byKey[fuzzKeyID(e.Entity.Key)] = e
	}
	for _, e := range a.EntityResults {
		l := byKey[fuzzKeyID(e.Entity.Key)]
		if l == nil || !proto.Equal(l.Entity, e.Entity) || l.Version != e.Version {
			t.Fatalf("the query %v returned %v (version %d); Lookup finds %v", r.Query, e.Entity, e.Version, l)
		}
	}
}

// recount checks the counts of an aggregation of counts only: each is the
// number of results its nested query returns (at most its up_to), when
// one batch holds them all.
func (fz *fuzzChecker) recount(t *testing.T, req *datastorepb.RunAggregationQueryRequest, r *datastorepb.RunAggregationQueryResponse) {
	aq := r.Query
	for _, a := range aq.Aggregations {
		if a.GetCount() == nil {
			return
		}
	}
	rows, err := fz.pb.RunQuery(context.Background(), &datastorepb.RunQueryRequest{ProjectId: req.ProjectId, DatabaseId: req.DatabaseId, PartitionId: req.PartitionId,
		QueryType: &datastorepb.RunQueryRequest_Query{Query: aq.GetNestedQuery()}})
	if err != nil {
		t.Fatalf("the nested query of %v: %v", aq, err)
	}
	if rows.Batch.MoreResults == datastorepb.QueryResultBatch_NOT_FINISHED {
		return
	}
	for i, a := range aq.Aggregations {
		want := int64(len(rows.Batch.EntityResults))
		if up := a.GetCount().GetUpTo(); up != nil {
			want = min(want, up.Value)
		}
		if got := r.Batch.AggregationResults[0].AggregateProperties[aliasOf(a, i)]; got.GetIntegerValue() != want {
			t.Fatalf("%v counted %v; the nested query returns %d results", aq, got, len(rows.Batch.EntityResults))
		}
	}
}

// checkFuzzAggregation: one result with every alias asked, and a batch
// that says whether there is more.
func checkFuzzAggregation(t *testing.T, r *datastorepb.RunAggregationQueryResponse) {
	b := r.GetBatch()
	if b == nil || b.MoreResults == datastorepb.QueryResultBatch_MORE_RESULTS_TYPE_UNSPECIFIED || len(b.AggregationResults) != 1 {
		t.Fatalf("aggregation batch %v", b)
	}
	if aq := r.GetQuery(); aq == nil || len(b.AggregationResults[0].AggregateProperties) != len(aq.Aggregations) {
		t.Fatalf("aggregation result %v for %v", b.AggregationResults[0], aq)
	}
}

// fuzzKeyID identifies a key within the served project by its namespace
// and path.
func fuzzKeyID(k *datastorepb.Key) string {
	return k.GetPartitionId().GetNamespaceId() + "\x00" + keyString(k)
}

// states looks up the complete keys of the commit's mutations (and, with
// results, the keys the commit completed), nil when the Lookup refuses them.
func (fz *fuzzChecker) states(t *testing.T, req *datastorepb.CommitRequest, results []*datastorepb.MutationResult) map[string]*datastorepb.EntityResult {
	var keys []*datastorepb.Key
	for i, m := range req.Mutations {
		k := mutationKey(m)
		if i < len(results) && results[i].Key != nil {
			k = &datastorepb.Key{PartitionId: k.GetPartitionId(), Path: results[i].Key.Path}
		}
		if len(k.GetPath()) > 0 && !incomplete(k) {
			keys = append(keys, k)
		}
	}
	r, err := fz.pb.Lookup(context.Background(), &datastorepb.LookupRequest{ProjectId: req.ProjectId, DatabaseId: req.DatabaseId, Keys: keys})
	if err != nil {
		checkFuzzStatus(t, err)
		return nil
	}
	if _, err := protojson.Marshal(r); err != nil {
		t.Fatalf("the entities %v have no JSON encoding: %v", r.Found, err)
	}
	out := map[string]*datastorepb.EntityResult{}
	for _, e := range r.Found {
		out[fuzzKeyID(e.Entity.Key)] = e
	}
	return out
}

// commitEffects checks what a commit changed: exactly what it answered
// (an entity written at the version its result gives, or deleted; a
// conflict left it as it was), nothing if it failed, or for a failed
// non-transactional commit, the mutations before the refused one.
func (fz *fuzzChecker) commitEffects(t *testing.T, req *datastorepb.CommitRequest, before map[string]*datastorepb.EntityResult, resp *datastorepb.CommitResponse, err error) {
	if before == nil {
		if err == nil {
			t.Fatalf("a commit of keys Lookup refuses succeeded")
		}
		return
	}
	after := fz.states(t, req, resp.GetMutationResults())
	if after == nil {
		t.Fatalf("the keys of a commit could be looked up before it, not after")
	}
	same := func(id string) bool {
		b, a := before[id], after[id]
		return b == nil && a == nil || b != nil && a != nil && b.Version == a.Version
	}
	if err == nil {
		want := map[string]string{} // key → what its last mutation left
		for i, m := range req.Mutations {
			res := resp.MutationResults[i]
			k := mutationKey(m)
			if res.Key != nil {
				k = &datastorepb.Key{PartitionId: k.GetPartitionId(), Path: res.Key.Path}
			}
			id := fuzzKeyID(k)
			switch {
			case res.ConflictDetected:
				if _, ok := want[id]; !ok {
					want[id] = "unchanged"
				}
			case m.GetDelete() != nil:
				want[id] = "deleted"
			default:
				want[id] = fmt.Sprint(res.Version)
			}
		}
		for id, w := range want {
			a := after[id]
			switch {
			case w == "unchanged" && !same(id),
				w == "deleted" && a != nil,
				w != "unchanged" && w != "deleted" && (a == nil || fmt.Sprint(a.Version) != w):
				t.Fatalf("%q: the commit answered %s, then found %v (before %v)", id, w, a, before[id])
			}
		}
		return
	}
	// Failed: a transactional commit changed nothing, a non-transactional
	// one a prefix of its mutations.
	applied := map[string]bool{}
	if req.Mode == datastorepb.CommitRequest_NON_TRANSACTIONAL {
		for _, m := range req.Mutations {
			k := mutationKey(m)
			if len(k.GetPath()) == 0 || incomplete(k) {
				continue // not known until the commit answers
			}
			id := fuzzKeyID(k)
			changed := !same(id)
			if m.GetDelete() == nil && !changed || m.GetDelete() != nil && after[id] != nil {
				break
			}
			applied[id] = true
		}
	}
	for _, m := range req.Mutations {
		if k := mutationKey(m); len(k.GetPath()) > 0 && !incomplete(k) {
			if id := fuzzKeyID(k); !applied[id] && !same(id) {
				t.Fatalf("%q: the commit failed (%v), yet the entity went from %v to %v", id, err, before[id], after[id])
			}
		}
	}
}

// mutationKey is the key a mutation writes or deletes.
func mutationKey(m *datastorepb.Mutation) *datastorepb.Key {
	switch op := m.GetOperation().(type) {
	case *datastorepb.Mutation_Insert:
		return op.Insert.GetKey()
	case *datastorepb.Mutation_Update:
		return op.Update.GetKey()
	case *datastorepb.Mutation_Upsert:
		return op.Upsert.GetKey()
	case *datastorepb.Mutation_Delete:
		return op.Delete
	}
	return nil
}

// fuzzKey is a key in the served project, namespace ns.
func fuzzKey(ns string, path ...any) *datastorepb.Key {
	k := pkey(path...)
	k.PartitionId = &datastorepb.PartitionId{ProjectId: fuzzProject, NamespaceId: ns}
	return k
}

// fuzzSeed is one FuzzRequest input before marshalling.
type fuzzSeed struct {
	sel uint8
	req proto.Message
}

// fuzzSeeds are a valid request of each method, and malformed ones.
func fuzzSeeds() []fuzzSeed {
	const (
		lookup, runQuery, runAggregation, begin, commitM, rollback, allocate, reserve = 0, 1, 2, 3, 4, 5, 6, 7
		rw, ro, finished                                                              = fuzzTxnReadWrite << fuzzTxnBits, fuzzTxnReadOnly << fuzzTxnBits, fuzzTxnFinished << fuzzTxnBits
		own, other                                                                    = 1 << fuzzProjectBits, 2 << fuzzProjectBits
	)
	kind := []*datastorepb.KindExpression{{Name: "K"}}
	ns := &datastorepb.PartitionId{NamespaceId: "ns"}
	ent := func(k *datastorepb.Key) *datastorepb.Entity {
		return &datastorepb.Entity{Key: k, Properties: map[string]*datastorepb.Value{"n": ival(5), "s": sval("z"),
			"t": {ValueType: &datastorepb.Value_TimestampValue{TimestampValue: &timestamppb.Timestamp{Seconds: 1, Nanos: 5000}}},
			"g": {ValueType: &datastorepb.Value_GeoPointValue{GeoPointValue: &latlng.LatLng{Latitude: 1, Longitude: 2}}}}}
	}
	nonTx := datastorepb.CommitRequest_NON_TRANSACTIONAL
	q := func(q *datastorepb.Query) *datastorepb.RunQueryRequest {
		return &datastorepb.RunQueryRequest{QueryType: &datastorepb.RunQueryRequest_Query{Query: q}}
	}
	agg := func(q *datastorepb.Query, aggs ...*datastorepb.AggregationQuery_Aggregation) *datastorepb.RunAggregationQueryRequest {
		return &datastorepb.RunAggregationQueryRequest{QueryType: &datastorepb.RunAggregationQueryRequest_AggregationQuery{
			AggregationQuery: &datastorepb.AggregationQuery{QueryType: &datastorepb.AggregationQuery_NestedQuery{NestedQuery: q}, Aggregations: aggs}}}
	}
	count := &datastorepb.AggregationQuery_Aggregation{Operator: &datastorepb.AggregationQuery_Aggregation_Count_{Count: &datastorepb.AggregationQuery_Aggregation_Count{}}}
	sum := &datastorepb.AggregationQuery_Aggregation{Alias: "s", Operator: &datastorepb.AggregationQuery_Aggregation_Sum_{Sum: &datastorepb.AggregationQuery_Aggregation_Sum{Property: &datastorepb.PropertyReference{Name: "n"}}}}
	incompleteKey := fuzzKey("", "K", nil)
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 6, protowire.VarintType), 48)
	withUnknown := func(m proto.Message) proto.Message { m.ProtoReflect().SetUnknown(unknown); return m }
	return []fuzzSeed{
		// Valid requests.
		{lookup, &datastorepb.LookupRequest{Keys: []*datastorepb.Key{fuzzKey("", "K", "a"), fuzzKey("", "K", "zz"), fuzzKey("ns", "K", "a", "C", 1)}}},
		{lookup | rw, &datastorepb.LookupRequest{Keys: []*datastorepb.Key{fuzzKey("", "K", "b")}}},
		{lookup | fuzzREST, &datastorepb.LookupRequest{Keys: []*datastorepb.Key{fuzzKey("ns", "K", "c")}, PropertyMask: &datastorepb.PropertyMask{Paths: []string{"s"}}}},
		{runQuery, q(&datastorepb.Query{Kind: kind, Filter: propFilter("n", datastorepb.PropertyFilter_GREATER_THAN, ival(0)), Order: orderBy("n", true), Limit: wrapperspb.Int32(2)})},
		{runQuery | ro, &datastorepb.RunQueryRequest{PartitionId: ns, QueryType: &datastorepb.RunQueryRequest_GqlQuery{GqlQuery: &datastorepb.GqlQuery{QueryString: "SELECT s FROM K WHERE arr = 'x' ORDER BY s", AllowLiterals: true}}}},
		{runQuery | fuzzREST, q(&datastorepb.Query{Kind: []*datastorepb.KindExpression{{Name: "__kind__"}}})},
		{runAggregation, agg(&datastorepb.Query{Kind: kind}, count, sum)},
		{begin, &datastorepb.BeginTransactionRequest{TransactionOptions: fuzzTxnOptions(fuzzTxnReadOnly)}},
		{commitM, &datastorepb.CommitRequest{Mode: nonTx, Mutations: []*datastorepb.Mutation{upsert(ent(fuzzKey("", "K", "d"))), {Operation: &datastorepb.Mutation_Insert{Insert: ent(incompleteKey)}}}}},
		{commitM | rw, &datastorepb.CommitRequest{Mode: datastorepb.CommitRequest_TRANSACTIONAL, Mutations: []*datastorepb.Mutation{
			{Operation: &datastorepb.Mutation_Update{Update: ent(fuzzKey("ns", "K", "b"))}}, {Operation: &datastorepb.Mutation_Delete{Delete: fuzzKey("", "K", "d")}}}}},
		{commitM | fuzzREST, &datastorepb.CommitRequest{Mode: datastorepb.CommitRequest_TRANSACTIONAL, TransactionSelector: &datastorepb.CommitRequest_SingleUseTransaction{SingleUseTransaction: fuzzTxnOptions(fuzzTxnReadWrite)},
			Mutations: []*datastorepb.Mutation{{Operation: &datastorepb.Mutation_Upsert{Upsert: ent(fuzzKey("", "K", "e"))}, ConflictDetectionStrategy: &datastorepb.Mutation_BaseVersion{BaseVersion: 1}}}}},
		{rollback | rw, &datastorepb.RollbackRequest{}},
		{allocate, &datastorepb.AllocateIdsRequest{Keys: []*datastorepb.Key{incompleteKey, fuzzKey("ns", "K", "a", "C", nil)}}},
		{reserve | fuzzREST, &datastorepb.ReserveIdsRequest{Keys: []*datastorepb.Key{fuzzKey("", "K", 77)}}},
		// Malformed ones.
		{lookup, &datastorepb.LookupRequest{Keys: []*datastorepb.Key{incompleteKey, {}}}},
		{lookup | own, &datastorepb.LookupRequest{ProjectId: "elsewhere", Keys: []*datastorepb.Key{fuzzKey("", "K", "a")}}},
		{lookup | other, &datastorepb.LookupRequest{Keys: []*datastorepb.Key{fuzzKey("", "K", "a")}}},
		{lookup | finished, &datastorepb.LookupRequest{Keys: []*datastorepb.Key{fuzzKey("", "__K__", "a"), pkey("K", "a")}}},
		{lookup, &datastorepb.LookupRequest{Keys: []*datastorepb.Key{fuzzKey("bad ns!", "K", "a")}, ReadOptions: &datastorepb.ReadOptions{ConsistencyType: &datastorepb.ReadOptions_ReadTime{ReadTime: timestamppb.Now()}}}},
		{runQuery, q(&datastorepb.Query{Kind: kind, Filter: and(propFilter("n", datastorepb.PropertyFilter_GREATER_THAN, ival(0)), propFilter("s", datastorepb.PropertyFilter_LESS_THAN, sval("b"))),
			Projection: []*datastorepb.Projection{{Property: &datastorepb.PropertyReference{Name: "n"}}}, Order: orderBy("s", false), Offset: 1 << 30, Limit: wrapperspb.Int32(-1)})},
		{runQuery, q(&datastorepb.Query{Kind: append(kind, kind...), StartCursor: []byte("junk"), DistinctOn: []*datastorepb.PropertyReference{{Name: "arr"}}})},
		{runQuery, q(&datastorepb.Query{Filter: propFilter("__key__", datastorepb.PropertyFilter_IN, aval(sval("a"))), Offset: 3, Limit: wrapperspb.Int32(0)})},
		{runAggregation | rw, agg(&datastorepb.Query{Kind: kind, Limit: wrapperspb.Int32(1 << 30)}, count, count)},
		{commitM, &datastorepb.CommitRequest{Mode: datastorepb.CommitRequest_TRANSACTIONAL, Mutations: []*datastorepb.Mutation{upsert(ent(fuzzKey("", "K", "f")))}}},
		{commitM | ro, &datastorepb.CommitRequest{Mutations: []*datastorepb.Mutation{upsert(ent(fuzzKey("", "K", "f")))}}},
		{commitM, &datastorepb.CommitRequest{Mode: nonTx, Mutations: []*datastorepb.Mutation{
			upsert(ent(fuzzKey("", "K", "g"))), {Operation: &datastorepb.Mutation_Insert{Insert: ent(fuzzKey("", "K", "a"))}}, upsert(ent(fuzzKey("", "K", "h")))}}},
		{commitM, &datastorepb.CommitRequest{Mode: nonTx, Mutations: []*datastorepb.Mutation{{Operation: &datastorepb.Mutation_Update{Update: ent(fuzzKey("", "K", "b"))},
			ConflictDetectionStrategy: &datastorepb.Mutation_UpdateTime{UpdateTime: timestamppb.Now()}, PropertyMask: &datastorepb.PropertyMask{Paths: []string{"s", "zz"}}}}}},
		{commitM | rw, &datastorepb.CommitRequest{Mode: datastorepb.CommitRequest_TRANSACTIONAL, Mutations: []*datastorepb.Mutation{
			{Operation: &datastorepb.Mutation_Insert{Insert: ent(fuzzKey("", "K", "c"))}}, {Operation: &datastorepb.Mutation_Delete{Delete: incompleteKey}}}}},
		{rollback, &datastorepb.RollbackRequest{Transaction: []byte("nope")}},
		// What nemo once took: timestamps out of range (stored, one then
		// failed every REST read of the entity), NaN coordinates, read
		// times before the epoch.
		{commitM, &datastorepb.CommitRequest{Mode: nonTx, Mutations: []*datastorepb.Mutation{upsert(&datastorepb.Entity{Key: fuzzKey("", "K", "t"), Properties: map[string]*datastorepb.Value{
			"t": aval(&datastorepb.Value{ValueType: &datastorepb.Value_TimestampValue{TimestampValue: &timestamppb.Timestamp{Nanos: 1.5e9}}})}})}}},
		{commitM, &datastorepb.CommitRequest{Mode: nonTx, Mutations: []*datastorepb.Mutation{upsert(&datastorepb.Entity{Key: fuzzKey("", "K", "t"), Properties: map[string]*datastorepb.Value{
			"g": {ValueType: &datastorepb.Value_GeoPointValue{GeoPointValue: &latlng.LatLng{Latitude: math.NaN()}}}}})}}},
		{commitM, &datastorepb.CommitRequest{Mode: nonTx, Mutations: []*datastorepb.Mutation{{Operation: &datastorepb.Mutation_Delete{Delete: fuzzKey("", "K", "t")},
			ConflictDetectionStrategy: &datastorepb.Mutation_UpdateTime{UpdateTime: &timestamppb.Timestamp{Nanos: -1}}}}}},
		{runQuery, q(&datastorepb.Query{Kind: kind, Filter: propFilter("t", datastorepb.PropertyFilter_IN, aval(&datastorepb.Value{ValueType: &datastorepb.Value_TimestampValue{TimestampValue: &timestamppb.Timestamp{Seconds: 253402300800}}}))})},
		{lookup, &datastorepb.LookupRequest{Keys: []*datastorepb.Key{fuzzKey("", "K", "a")}, ReadOptions: &datastorepb.ReadOptions{ConsistencyType: &datastorepb.ReadOptions_ReadTime{ReadTime: &timestamppb.Timestamp{Seconds: -1}}}}},
		{begin, &datastorepb.BeginTransactionRequest{TransactionOptions: &datastorepb.TransactionOptions{Mode: &datastorepb.TransactionOptions_ReadOnly_{ReadOnly: &datastorepb.TransactionOptions_ReadOnly{ReadTime: &timestamppb.Timestamp{Nanos: 1e9}}}}}},
		// An id set to 0 (nemo once allocated one), a negative base version.
		{commitM, &datastorepb.CommitRequest{Mode: nonTx, Mutations: []*datastorepb.Mutation{upsert(ent(&datastorepb.Key{Path: []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{}}}}))}}},
		{commitM, &datastorepb.CommitRequest{Mode: nonTx, Mutations: []*datastorepb.Mutation{{Operation: &datastorepb.Mutation_Update{Update: ent(fuzzKey("", "K", "a"))},
			ConflictDetectionStrategy: &datastorepb.Mutation_BaseVersion{BaseVersion: -3}}}}},
		// Fields nemo does not know, and a null value's unknown enum
		// number, were stored with the entity and served to gRPC readers
		// (not to REST ones: a REST query then answered otherwise).
		{commitM, &datastorepb.CommitRequest{Mode: nonTx, Mutations: []*datastorepb.Mutation{upsert(withUnknown(&datastorepb.Entity{
			Key:        &datastorepb.Key{Path: []*datastorepb.Key_PathElement{withUnknown(&datastorepb.Key_PathElement{Kind: "K", IdType: &datastorepb.Key_PathElement_Name{Name: "u"}}).(*datastorepb.Key_PathElement)}},
			Properties: map[string]*datastorepb.Value{"v": withUnknown(sval("u")).(*datastorepb.Value), "n": {ValueType: &datastorepb.Value_NullValue{NullValue: 6152}}}}).(*datastorepb.Entity))}}},
		{runQuery | fuzzREST, q(&datastorepb.Query{Kind: kind})},
		{allocate, &datastorepb.AllocateIdsRequest{Keys: []*datastorepb.Key{fuzzKey("", "K", "named"), {}}}},
		{reserve, &datastorepb.ReserveIdsRequest{Keys: []*datastorepb.Key{incompleteKey, fuzzKey("", "K", -5)}}},
	}
}
