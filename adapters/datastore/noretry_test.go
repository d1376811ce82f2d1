package datastore

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

// unavailableServer answers every Commit UNAVAILABLE (fault injection:
// a service that may or may not have applied it) and counts them.
type unavailableServer struct {
	datastorepb.UnimplementedDatastoreServer
	commits atomic.Int64
}

func (u *unavailableServer) Commit(context.Context, *datastorepb.CommitRequest) (*datastorepb.CommitResponse, error) {
	u.commits.Add(1)
	return nil, status.Error(codes.Unavailable, "injected")
}

// TestNoRetryBelowTheAdapter: the connection Open dials retries nothing
// of its own, even when a service config asks gRPC to retry UNAVAILABLE
// (as the Go client library's does, Commit included): an insert whose
// Commit found the service unavailable is sent exactly as often as the
// adapter's own rules say (once with Retries -1, three times with 2, once
// when the call's context asks for a single attempt) and
// fails with adapters.ErrUnknownOutcome. The connection is the production
// one (Options.ClientOptions), pointed at a local server.
func TestNoRetryBelowTheAdapter(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fake := &unavailableServer{}
	datastorepb.RegisterDatastoreServer(srv, fake)
	go srv.Serve(lis)
	defer srv.Stop()
	t.Setenv("DATASTORE_EMULATOR_HOST", "")
	const retryAll = `{"methodConfig": [{"name": [{"service": "google.datastore.v1.Datastore"}], "waitForReady": true,
		"retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.001s", "maxBackoff": "0.001s", "backoffMultiplier": 1,
		"retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	p := dscodec.Partition{Project: "p"}
	a := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "a")}, 1)
	insert := []adapters.Write{{Key: a.Key, Value: a.Value, Expect: adapters.Expect{Kind: adapters.ExpectAbsent}}}
	for _, c := range []struct {
		retries, want int64
		single        bool // the call's context asks for one attempt
	}{{-1, 1, false}, {2, 3, false}, {2, 1, true}} {
		fake.commits.Store(0)
		s, err := Open(context.Background(), Options{Retries: int(c.retries), RetryBase: 1, ClientOptions: []option.ClientOption{
			option.WithEndpoint(lis.Addr().String()), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
			option.WithGRPCDialOption(grpc.WithDefaultServiceConfig(retryAll)),
		}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if c.single {
			ctx = adapters.WithSingleAttempt(ctx)
		}
		_, err = s.Upsert(ctx, p.Keyspace(), insert)
		s.Close()
		if !errors.Is(err, adapters.ErrUnknownOutcome) || status.Code(err) != codes.Unavailable {
			t.Errorf("retries %d (single %v): an insert whose commit found the service unavailable: %v, want ErrUnknownOutcome", c.retries, c.single, err)
		}
		if n := fake.commits.Load(); n != c.want {
			t.Errorf("retries %d (single %v): the server received %d commits, want %d", c.retries, c.single, n, c.want)
		}
	}
}
