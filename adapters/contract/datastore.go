package contract

import (
	"context"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The Datastore methods the contract treats specially.
const (
	dsLookup      = "/google.datastore.v1.Datastore/Lookup"
	dsRunQuery    = "/google.datastore.v1.Datastore/RunQuery"
	dsAggregation = "/google.datastore.v1.Datastore/RunAggregationQuery"
	dsCommit      = "/google.datastore.v1.Datastore/Commit"
	dsBegin       = "/google.datastore.v1.Datastore/BeginTransaction"
	dsRollback    = "/google.datastore.v1.Datastore/Rollback"
)

// The service's messages for the errors the contract injects.
const (
	msgUnavailable = "The service is currently unavailable."
	msgAborted     = "too much contention on these datastore entities. please try again."
)

// Interceptor returns the gRPC unary client interceptor that makes a
// Datastore connection answer under the contract (see the package
// documentation).
func (c *Contract) Interceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		write := method == dsCommit
		f, safe := c.decide(write)
		if f == failBefore {
			c.failed.Add(1)
			if safe && abortable(method, req) && !c.inReadOnly(req) {
				return status.Error(codes.Aborted, msgAborted)
			}
			if write {
				c.ambiguous.Add(1)
			}
			return status.Error(codes.Unavailable, msgUnavailable)
		}
		if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
		c.trackReadOnly(method, req, reply)
		if f == loseAfter {
			c.lost.Add(1)
			if write {
				c.ambiguous.Add(1)
			}
			return status.Error(codes.Unavailable, msgUnavailable)
		}
		switch method {
		case dsRunQuery:
			return c.cutQuery(ctx, req.(*datastorepb.RunQueryRequest), reply.(*datastorepb.RunQueryResponse), cc, invoker, opts)
		case dsLookup:
			c.deferLookup(reply.(*datastorepb.LookupResponse))
		}
		return nil
	}
}

// reader is a read's request: a Lookup, RunQuery or RunAggregationQuery.
type reader interface {
	GetReadOptions() *datastorepb.ReadOptions
}

// inReadOnly reports whether req names a read-only transaction the
// backend began (trackReadOnly): its reads see a snapshot and take no
// locks, so the service never aborts them for contention.
func (c *Contract) inReadOnly(req any) bool {
	var id []byte
	switch r := req.(type) {
	case reader:
		id = r.GetReadOptions().GetTransaction()
	case *datastorepb.CommitRequest:
		id = r.GetTransaction()
	}
	if len(id) == 0 {
		return false
	}
	_, ok := c.readOnly.Load(string(id))
	return ok
}

// trackReadOnly remembers the read-only transactions the backend began,
// by BeginTransaction or by a read that began one (new_transaction), and
// forgets one when it ends.
func (c *Contract) trackReadOnly(method string, req, reply any) {
	switch method {
	case dsBegin:
		if req.(*datastorepb.BeginTransactionRequest).GetTransactionOptions().GetReadOnly() != nil {
			c.readOnly.Store(string(reply.(*datastorepb.BeginTransactionResponse).GetTransaction()), struct{}{})
		}
	case dsLookup, dsRunQuery, dsAggregation:
		r, ok := req.(reader)
		t, ok2 := reply.(interface{ GetTransaction() []byte })
		if ok && ok2 && r.GetReadOptions().GetNewTransaction().GetReadOnly() != nil && len(t.GetTransaction()) > 0 {
			c.readOnly.Store(string(t.GetTransaction()), struct{}{})
		}
	case dsCommit:
		c.readOnly.Delete(string(req.(*datastorepb.CommitRequest).GetTransaction()))
	case dsRollback:
		c.readOnly.Delete(string(req.(*datastorepb.RollbackRequest).GetTransaction()))
	}
}

// abortable reports whether the service answers the call ABORTED under
// contention: a Commit, or a read inside a transaction (unless the
// transaction is read-only: see inReadOnly).
func abortable(method string, req any) bool {
	switch method {
	case dsCommit:
		return true
	case dsLookup, dsRunQuery, dsAggregation:
		r, ok := req.(reader)
		return ok && r.GetReadOptions().GetTransaction() != nil
	}
	return false
}

// cutQuery cuts a RunQuery answer short (see cutAt): it keeps some of the
// skipped results and results, says NOT_FINISHED and puts end_cursor at
// the cut, so a client continuing from it (with its offset less the
// skipped results, its limit less the results) gets the rest.
func (c *Contract) cutQuery(ctx context.Context, req *datastorepb.RunQueryRequest, resp *datastorepb.RunQueryResponse, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	b := resp.GetBatch()
	if b == nil || req.GetExplainOptions() != nil {
		return nil
	}
	skipped := int(b.GetSkippedResults())
	at, ok := c.cutAt(skipped, len(b.GetEntityResults()))
	if !ok {
		return nil
	}
	if kept := at - skipped; kept > 0 {
		b.EntityResults = b.EntityResults[:kept]
		b.EndCursor = b.EntityResults[kept-1].GetCursor()
	} else {
		cursor, ok, err := c.position(ctx, req, resp, at, cc, invoker, opts)
		if err != nil || !ok {
			return err
		}
		b.SkippedResults = int32(at)
		b.SkippedCursor = nil
		if at > 0 {
			b.SkippedCursor = cursor
		}
		b.EntityResults = nil
		b.EndCursor = cursor
		c.empty.Add(1)
	}
	b.MoreResults = datastorepb.QueryResultBatch_NOT_FINISHED
	c.cut.Add(1)
	return nil
}

// position returns the backend's cursor for the query's position after
// skipping at results: the batch's skipped_cursor or the query's start
// cursor where one is that position, otherwise the end cursor of a probe,
// the same query with offset at and limit 0. ok is false where there is
// none: a GQL query, which cannot be probed that way, or a probe answered
// without a cursor.
func (c *Contract) position(ctx context.Context, req *datastorepb.RunQueryRequest, resp *datastorepb.RunQueryResponse, at int, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) ([]byte, bool, error) {
	b := resp.GetBatch()
	q := req.GetQuery()
	switch {
	case at > 0 && at == int(b.GetSkippedResults()) && len(b.GetSkippedCursor()) > 0:
		return b.GetSkippedCursor(), true, nil
	case at == 0 && len(q.GetStartCursor()) > 0:
		return q.GetStartCursor(), true, nil
	case q == nil:
		return nil, false, nil
	}
	probe := proto.Clone(req).(*datastorepb.RunQueryRequest)
	pq := probe.GetQuery()
	pq.Offset, pq.Limit = int32(at), wrapperspb.Int32(0)
	if probe.GetReadOptions().GetNewTransaction() != nil {
		// The query began a transaction: the probe reads in it.
		probe.ReadOptions = &datastorepb.ReadOptions{ConsistencyType: &datastorepb.ReadOptions_Transaction{Transaction: resp.GetTransaction()}}
	}
	var pr datastorepb.RunQueryResponse
	c.probes.Add(1)
	if err := invoker(ctx, dsRunQuery, probe, &pr, cc, opts...); err != nil {
		return nil, false, err
	}
	// The Firestore emulator answers a query with limit 0 and no offset
	// with no cursor: no cut there.
	cursor := pr.GetBatch().GetEndCursor()
	return cursor, len(cursor) > 0, nil
}

// deferLookup moves some of a Lookup's answered keys to deferred.
func (c *Contract) deferLookup(resp *datastorepb.LookupResponse) {
	found, missing := resp.GetFound(), resp.GetMissing()
	pick := c.deferKeys(len(found) + len(missing))
	if pick == nil {
		return
	}
	keep := func(rs []*datastorepb.EntityResult, pick []bool) []*datastorepb.EntityResult {
		out := rs[:0:0]
		for i, r := range rs {
			if pick[i] {
				resp.Deferred = append(resp.Deferred, r.GetEntity().GetKey())
				c.deferred.Add(1)
				continue
			}
			out = append(out, r)
		}
		return out
	}
	resp.Found = keep(found, pick[:len(found)])
	resp.Missing = keep(missing, pick[len(found):])
}
