package datastore

import (
	"context"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/testenv"
)

// hitLookup serves nemo over the embedded store holding one buffered 1 KiB
// entity, K/1, and returns a call of its gRPC Lookup as the server makes
// it, minus the transport: through the frontend's interceptor, with the
// deadline nemo serve gives it (59 s, the client's 60 s followed).
func hitLookup(t testing.TB) func() (*datastorepb.LookupResponse, error) {
	n := startNemoServed(t, embeddedBackend(t.TempDir()), "p", cache.Options{}, serving{})
	n.f.opts.FollowClient = true
	k := datastore.IDKey("K", 1, nil)
	if _, err := client(t, n.addr, "p").Put(context.Background(), k, &benchEntity{N: 1, Body: strings.Repeat("0123456789abcdef", 64)}); err != nil {
		t.Fatal(err)
	}
	req := &datastorepb.LookupRequest{ProjectId: "p", Keys: []*datastorepb.Key{{PartitionId: &datastorepb.PartitionId{ProjectId: "p"},
		Path: []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: 1}}}}}}
	info := &grpc.UnaryServerInfo{Server: n.f, FullMethod: datastorepb.Datastore_Lookup_FullMethodName}
	handler := func(ctx context.Context, req any) (any, error) {
		return n.f.Lookup(ctx, req.(*datastorepb.LookupRequest))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	t.Cleanup(cancel)
	return func() (*datastorepb.LookupResponse, error) {
		resp, err := n.f.bounded(ctx, req, info, handler)
		if err != nil {
			return nil, err
		}
		return resp.(*datastorepb.LookupResponse), nil
	}
}

// lookupHitAllocs is the ceiling TestLookupHitAllocs holds a buffered
// Lookup to: a little above what it makes today (15 on 2026-12-07; 42
// before it ran on the call's goroutine, answered the stored bytes and
// made its deadline's timer only when waited for).
const lookupHitAllocs = 18

// TestLookupHitAllocs: a Lookup of a buffered entity, through the
// frontend's interceptor, makes at most lookupHitAllocs allocations, so
// that the hit path does not grow unseen (its speed is
// BenchmarkHitPathLookup's, in package proxy).
func TestLookupHitAllocs(t *testing.T) {
	lookup := hitLookup(t)
	resp, err := lookup()
	if err != nil || len(resp.GetFound()) != 1 {
		t.Fatalf("lookup of the buffered entity: %v, %d found", err, len(resp.GetFound()))
	}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := lookup(); err != nil {
			t.Fatal(err)
		}
	})
	testenv.AllocsAtMost(t, "buffered Lookup", allocs, lookupHitAllocs)
}

// BenchmarkLookupHit: TestLookupHitAllocs's Lookup, timed.
func BenchmarkLookupHit(b *testing.B) {
	lookup := hitLookup(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lookup(); err != nil {
			b.Fatal(err)
		}
	}
}
