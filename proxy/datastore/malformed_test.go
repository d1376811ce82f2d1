package datastore

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/cache"
)

// rawCodec sends and receives messages as the bytes they are, so a test
// can put on the wire what no client library would.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = bytes.Clone(b)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestMalformedMessages: a request that is not a protobuf message of its
// method (truncated, a bad wire type, a wrong field type) is refused with
// INTERNAL naming the parse failure (grpc-go decodes the request before
// nemo sees it; both emulators answer such bytes UNKNOWN, the legacy one
// with no message, Firestore's with "Application error processing RPC",
// and no client retries either code), and a request body that is not
// JSON gets the REST API's 400 INVALID_ARGUMENT document. Nothing is
// written, and the next request is served.
func TestMalformedMessages(t *testing.T) {
	n := startNemoServed(t, embeddedBackend(t.TempDir()), fuzzProject, cache.Options{}, serving{project: fuzzProject})
	conn, err := grpc.NewClient("passthrough:///"+n.addr, grpc.WithTransportCredentials(transportCredentials(n.addr)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	for _, method := range []string{"Lookup", "RunQuery", "Commit", "BeginTransaction", "AllocateIds"} {
		for _, body := range [][]byte{{0xff, 0xff, 0xff}, {0x0a, 0x05, 'a'}, {0x08}, {0x12, 0x01}} {
			in, out := body, []byte(nil)
			err := conn.Invoke(ctx, "/google.datastore.v1.Datastore/"+method, &in, &out, grpc.ForceCodec(rawCodec{}))
			if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "unmarshal") {
				t.Errorf("%s %x: %v, want INTERNAL naming the unmarshalling", method, body, err)
			}
		}
	}
	for _, body := range []string{"{", `{"keys": 3}`, "\xff"} {
		resp, err := restHTTP.Post(restURL(n.addr)+"/v1/projects/"+fuzzProject+":lookup", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var doc bytes.Buffer
		doc.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(doc.String(), `"INVALID_ARGUMENT"`) {
			t.Errorf("REST %q: %d %s, want 400 INVALID_ARGUMENT", body, resp.StatusCode, doc.String())
		}
	}
	pb := datastorepb.NewDatastoreClient(conn)
	k := fuzzKey("", "K", "after")
	if _, err := pb.Commit(ctx, &datastorepb.CommitRequest{ProjectId: fuzzProject, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL,
		Mutations: []*datastorepb.Mutation{upsert(&datastorepb.Entity{Key: k, Properties: map[string]*datastorepb.Value{"n": ival(1)}})}}); err != nil {
		t.Fatalf("a valid commit after the malformed ones: %v", err)
	}
	got, err := pb.Lookup(ctx, &datastorepb.LookupRequest{ProjectId: fuzzProject, Keys: []*datastorepb.Key{k}})
	if err != nil || len(got.Found) != 1 {
		t.Fatalf("lookup after the malformed ones: %v %v", got, err)
	}
	res, err := pb.RunQuery(ctx, &datastorepb.RunQueryRequest{ProjectId: fuzzProject, QueryType: &datastorepb.RunQueryRequest_Query{Query: &datastorepb.Query{Kind: []*datastorepb.KindExpression{{Name: "K"}}}}})
	if err != nil || len(res.Batch.EntityResults) != 1 {
		t.Fatalf("the kind holds %v (%v), want only the valid commit's entity", res.GetBatch().GetEntityResults(), err)
	}
}
