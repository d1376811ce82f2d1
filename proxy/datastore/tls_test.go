package datastore

import (
	"context"
	"testing"

	"cloud.google.com/go/datastore"
	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

// TestGoClientOverTLS runs one round trip of the Go Datastore client, one
// raw gRPC call and one REST call against nemo served over TLS through
// tlsserve, as listen.tls serves a frontend's port, in every run: the
// suites run over TLS only with NEMO_TEST_TLS=1 (.ci/test's last pass).
// The clients trust the test CA only; nemo must have served every
// connection over TLS.
func TestGoClientOverTLS(t *testing.T) {
	project := dstest.Project(t)
	n := startNemoServed(t, embeddedBackend(t.TempDir()), project, cache.Options{}, serving{tls: true})
	ctx := context.Background()
	c := client(t, n.addr, project)
	k := datastore.NameKey("K", "tls", nil)
	if _, err := c.Put(ctx, k, &tokenEntity{N: 3}); err != nil {
		t.Fatalf("put over TLS: %v", err)
	}
	var e tokenEntity
	if err := c.Get(ctx, k, &e); err != nil || e.N != 3 {
		t.Fatalf("get over TLS: %+v %v", e, err)
	}
	var p peer.Peer
	res, err := pbClient(t, n.addr).Lookup(ctx, &datastorepb.LookupRequest{ProjectId: project, Keys: []*datastorepb.Key{{
		PartitionId: &datastorepb.PartitionId{ProjectId: project}, Path: []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Name{Name: "tls"}}}}}}, grpc.Peer(&p))
	if err != nil || len(res.Found) != 1 {
		t.Fatalf("gRPC lookup over TLS: %v %v", res, err)
	}
	if _, ok := p.AuthInfo.(credentials.TLSInfo); !ok {
		t.Fatalf("the gRPC call's connection: %T, want TLS", p.AuthInfo)
	}
	if code, out := post(t, restURL(n.addr), "/v1/projects/"+project+":lookup", `{"keys":[{"path":[{"kind":"K","name":"tls"}]}]}`); code != 200 || out["found"] == nil {
		t.Fatalf("REST lookup over TLS: %d %v", code, out)
	}
	if all, overTLS := n.tls.Served(); overTLS == 0 || overTLS != all {
		t.Fatalf("nemo served %d connections, %d of them over TLS; want all over TLS", all, overTLS)
	}
}
