package datastore

import (
	"context"
	"regexp"
	"strings"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

// GQLRunner runs a GQL query on the backend as it is: the Datastore adapter.
type GQLRunner interface {
	RunGQL(ctx context.Context, req *datastorepb.RunQueryRequest) (*datastorepb.RunQueryResponse, error)
}

// gqlFrom finds the kind of a GQL query: FROM Kind, or FROM `Kind` with “
// escaping a backquote. No FROM means a kindless query.
var gqlFrom = regexp.MustCompile("(?is)\\bFROM\\s+(`(?:[^`]|``)+`|[A-Za-z_$][A-Za-z0-9_$]*)")

// gqlKind returns the queried kind, or "" for a kindless query.
func gqlKind(q string) string {
	m := gqlFrom.FindStringSubmatch(q)
	if m == nil {
		return ""
	}
	k := m[1]
	if strings.HasPrefix(k, "`") {
		k = strings.ReplaceAll(k[1:len(k)-1], "``", "`")
	}
	return k
}

// runGQL passes a GQL query through to the backend, which nemo does not
// translate, but only when that cannot miss a write: the backend must run
// it (the embedded store cannot), it must not be part of a transaction
// (nemo could not lock what it reads), and the buffer must hold no write of
// the queried kind that the backend has not seen yet. Otherwise it fails
// with a message saying which, and what to do instead.
func (f *Frontend) runGQL(ctx context.Context, req *datastorepb.RunQueryRequest) (*datastorepb.RunQueryResponse, error) {
	if f.opts.GQL == nil {
		return nil, errGQL
	}
	ro := req.GetReadOptions()
	if ro.GetTransaction() != nil || ro.GetNewTransaction() != nil {
		return nil, status.Error(codes.FailedPrecondition, "nemo cannot run a GQL query inside a transaction (it cannot lock what GQL reads); use a structured query")
	}
	p, err := queryPartition(req.GetProjectId(), req.GetDatabaseId(), req.GetPartitionId())
	if err != nil {
		return nil, err
	}
	kind := gqlKind(req.GetGqlQuery().GetQueryString())
	dirty, err := f.engine.Unflushed(f.keyspace(p), func(key []byte) bool {
		if kind == "" {
			return true
		}
		path, err := dscodec.DecodePath(key)
		return err != nil || (len(path) > 0 && path[len(path)-1].GetKind() == kind)
	})
	if err != nil {
		return nil, toStatus(err)
	}
	if dirty {
		what := "kind " + kind
		if kind == "" {
			what = "this namespace"
		}
		return nil, status.Errorf(codes.FailedPrecondition,
			"nemo holds writes to %s that the backend has not seen yet, so a GQL query passed through would miss them; use a structured query, or retry after the write-back", what)
	}
	resp, err := f.opts.GQL.RunGQL(ctx, req)
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
			return nil, st.Err()
		}
		return nil, toStatus(err)
	}
	return resp, nil
}
