package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/obs"
	"github.com/nemocache/nemo/proxy/aztable"
	"github.com/nemocache/nemo/proxy/datastore"
)

// realFrontends mounts the Azure Table (anonymous) and Datastore frontends
// on cfg's listeners.
func realFrontends(cfg config.Config) []Mount {
	return []Mount{
		{Name: "aztable", Addr: cfg.Listen.AzureTable, New: func(env Env) (Frontend, error) {
			return aztable.New(env.Engine, aztable.Options{AllowAnonymous: true, Logger: env.Logger})
		}},
		{Name: "datastore", Addr: cfg.Listen.Datastore, New: func(env Env) (Frontend, error) {
			return datastore.New(env.Engine, datastore.Options{ServerOptions: env.GRPC, Logger: env.Logger})
		}},
	}
}

// traced is one client request sent with its own W3C trace context.
type traced struct {
	name   string
	parent trace.SpanContext
}

func newParent(t *testing.T, n byte) trace.SpanContext {
	t.Helper()
	var tid trace.TraceID
	var sid trace.SpanID
	tid[0], tid[15], sid[7] = 0x7e, n, n
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

func traceparent(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
}

// TestTraceSpans runs both frontends with tracing on and an in-process
// exporter, each request carrying a client's W3C trace context (an HTTP
// traceparent header for Azure, gRPC metadata for Datastore), and checks
// the spans: a server span per request, a child of the client's span,
// named after the API and operation, with the keyspace and the cache
// outcome; under a commit a "wal fsync" child; under a miss a "remote get"
// child; under a cached read no remote call. The misses come from a second
// server over the same data directory, whose buffer starts empty.
func TestTraceSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	obs.EnableTracing(tp)
	t.Cleanup(func() { obs.EnableTracing(nil); tp.Shutdown(context.Background()) })

	cfg := testConfig(t)
	var sent []traced
	azure := func(s *Server, n byte, method, path, body string) int {
		t.Helper()
		sc := newParent(t, n)
		req, err := http.NewRequest(method, "http://"+s.FrontendAddr("aztable")+"/devstoreaccount1"+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json;odata=nometadata")
		req.Header.Set("Traceparent", traceparent(sc))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		sent = append(sent, traced{fmt.Sprintf("azure %s %s", method, path), sc})
		return resp.StatusCode
	}
	key := &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: "p"}, Path: []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Name{Name: "k1"}}}}
	dsCall := func(s *Server, n byte, name string, call func(context.Context, datastorepb.DatastoreClient) error) {
		t.Helper()
		conn, err := grpc.NewClient(s.FrontendAddr("datastore"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		sc := newParent(t, n)
		ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent(sc))
		if err := call(ctx, datastorepb.NewDatastoreClient(conn)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sent = append(sent, traced{"datastore " + name, sc})
	}
	lookup := func(s *Server, n byte) {
		dsCall(s, n, "lookup", func(ctx context.Context, c datastorepb.DatastoreClient) error {
			resp, err := c.Lookup(ctx, &datastorepb.LookupRequest{ProjectId: "p", Keys: []*datastorepb.Key{key}})
			if err == nil && len(resp.Found) != 1 {
				err = fmt.Errorf("found %d entities", len(resp.Found))
			}
			return err
		})
	}
	run := func(steps func(s *Server)) {
		s, err := New(Options{Config: cfg, Frontends: realFrontends(cfg), Open: checkedOpen(t), Logger: testLogger(&syncBuffer{})})
		if err != nil {
			t.Fatal(err)
		}
		done := runServer(context.Background(), s)
		waitStatus(t, "http://"+s.HTTPAddr()+"/readyz", http.StatusOK)
		steps(s)
		s.Quit()
		if err := <-done; err != nil { // the drain writes everything back
			t.Fatal(err)
		}
	}
	run(func(s *Server) {
		if code := azure(s, 1, http.MethodPost, "/Tables", `{"TableName":"traced"}`); code != http.StatusCreated {
			t.Fatalf("create table: %d", code)
		}
		if code := azure(s, 2, http.MethodPut, "/traced(PartitionKey='p',RowKey='r')", `{"V":1}`); code != http.StatusNoContent {
			t.Fatalf("insert or replace: %d", code)
		}
		if code := azure(s, 3, http.MethodGet, "/traced(PartitionKey='p',RowKey='r')", ""); code != http.StatusOK {
			t.Fatalf("get: %d", code)
		}
		dsCall(s, 4, "commit", func(ctx context.Context, c datastorepb.DatastoreClient) error {
			_, err := c.Commit(ctx, &datastorepb.CommitRequest{ProjectId: "p", Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL,
				Mutations: []*datastorepb.Mutation{{Operation: &datastorepb.Mutation_Upsert{Upsert: &datastorepb.Entity{Key: key}}}}})
			return err
		})
		lookup(s, 5)
	})
	run(func(s *Server) {
		if code := azure(s, 6, http.MethodGet, "/traced(PartitionKey='p',RowKey='r')", ""); code != http.StatusOK {
			t.Fatalf("get after restart: %d", code)
		}
		lookup(s, 7)
	})

	spans := exp.GetSpans()
	byTrace := map[trace.TraceID][]tracetest.SpanStub{}
	for _, sp := range spans {
		byTrace[sp.SpanContext.TraceID()] = append(byTrace[sp.SpanContext.TraceID()], sp)
	}
	type want struct {
		name, keyspace, outcome string
		child                   string // a child span that must be there ("" none)
		noRemote                bool   // no "remote ..." child
	}
	for i, w := range []want{
		1: {name: "aztable create_table"},
		2: {name: "aztable insert_or_replace", keyspace: "traced", outcome: "none", child: "wal fsync", noRemote: true},
		3: {name: "aztable get", keyspace: "traced", outcome: "hit", noRemote: true},
		4: {name: "datastore commit", child: "wal fsync", noRemote: true},
		5: {name: "datastore lookup", outcome: "hit", noRemote: true},
		6: {name: "aztable get", keyspace: "traced", outcome: "miss", child: "remote get"},
		7: {name: "datastore lookup", outcome: "miss", child: "remote get"},
	} {
		if i == 0 {
			continue
		}
		req := sent[i-1]
		got := byTrace[req.parent.TraceID()]
		var server *tracetest.SpanStub
		for j := range got {
			if got[j].SpanKind == trace.SpanKindServer {
				server = &got[j]
			}
		}
		if server == nil {
			t.Errorf("%s: no server span in the client's trace (spans: %v)", req.name, names(got))
			continue
		}
		if server.Name != w.name || server.Parent.SpanID() != req.parent.SpanID() || !server.Parent.IsRemote() {
			t.Errorf("%s: server span %q with parent %v, want %q under the client's span %v", req.name, server.Name, server.Parent.SpanID(), w.name, req.parent.SpanID())
		}
		attrs := map[string]string{}
		for _, a := range server.Attributes {
			attrs[string(a.Key)] = a.Value.String()
		}
		if w.keyspace != "" && attrs["nemo.keyspace"] != w.keyspace {
			t.Errorf("%s: keyspace %q, want %q", req.name, attrs["nemo.keyspace"], w.keyspace)
		}
		if w.outcome != "" && attrs["nemo.cache.outcome"] != w.outcome {
			t.Errorf("%s: outcome %q, want %q (%v)", req.name, attrs["nemo.cache.outcome"], w.outcome, attrs)
		}
		var children []string
		for _, sp := range got {
			if sp.Parent.SpanID() == server.SpanContext.SpanID() {
				children = append(children, sp.Name)
			}
		}
		if w.child != "" && !contains(children, w.child) {
			t.Errorf("%s: children %v, want %q", req.name, children, w.child)
		}
		for _, c := range children {
			if w.noRemote && strings.HasPrefix(c, "remote ") {
				t.Errorf("%s: a remote call (%s) under a request answered from the buffer", req.name, c)
			}
		}
		if w.child == "remote get" && attrs["nemo.remote_calls"] == "0" {
			t.Errorf("%s: nemo.remote_calls is 0 under a remote get", req.name)
		}
	}
	// Background work (the drain's write-back) starts no trace of its own.
	for tid, sps := range byTrace {
		if tid[0] != 0x7e {
			t.Errorf("a trace nemo started itself: %v", names(sps))
		}
	}
}

func names(sps []tracetest.SpanStub) []string {
	var out []string
	for _, sp := range sps {
		out = append(out, sp.Name)
	}
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
