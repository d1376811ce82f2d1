package peer

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/txn"
)

const (
	serviceName  = "nemo.peer.v1.Peer"
	methodRead   = "/" + serviceName + "/Read"
	methodTxn    = "/" + serviceName + "/Txn"
	methodStatus = "/" + serviceName + "/Status"
	methodTake   = "/" + serviceName + "/Take"
	secretHeader = "nemo-peer-secret"
	// maxMessage bounds a peer message: a scan's page or a batch of
	// values (each at most the buffer's value limit, 2 MiB by default).
	maxMessage = 64 << 20
)

// Server serves the peer API of one node: its engine's operations, for
// the replicas that forward to it the keyspaces it owns.
type Server struct {
	eng    *txn.Engine
	router txn.Router
	secret [sha256.Size]byte
	grpc   *grpc.Server
	log    *slog.Logger
}

// NewServer returns the peer server of eng; router is the node's own
// (it tells the keyspaces this node owns), secret what every peer must
// present.
func NewServer(eng *txn.Engine, router txn.Router, secret string, log *slog.Logger) *Server {
	s := &Server{eng: eng, router: router, secret: sha256.Sum256([]byte(secret)), log: log}
	s.grpc = grpc.NewServer(grpc.ForceServerCodec(codec{}), grpc.MaxRecvMsgSize(maxMessage), grpc.MaxSendMsgSize(maxMessage),
		grpc.UnaryInterceptor(s.unaryAuth), grpc.StreamInterceptor(s.streamAuth))
	s.grpc.RegisterService(&grpc.ServiceDesc{
		ServiceName: serviceName,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			unary(methodRead, func(s *Server, ctx context.Context, req *readRequest) message { return s.read(ctx, req) }),
			unary(methodStatus, func(s *Server, _ context.Context, _ *statusRequest) message { return s.status() }),
			unary(methodTake, func(s *Server, ctx context.Context, req *takeRequest) message { return s.take(ctx, req) }),
		},
		Streams: []grpc.StreamDesc{{StreamName: "Txn", Handler: txnHandler, ServerStreams: true, ClientStreams: true}},
	}, s)
	return s
}

// Serve serves l until Stop.
func (s *Server) Serve(l net.Listener) error { return s.grpc.Serve(l) }

// Stop lets the streams in flight end until ctx does, then cuts them.
func (s *Server) Stop(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
	}
}

// authorized checks the secret a peer sent, in constant time.
func (s *Server) authorized(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	got := md.Get(secretHeader)
	if len(got) != 1 {
		return status.Error(codes.Unauthenticated, "nemo peer API: the peer secret (coherence.peer_secret) is missing")
	}
	sum := sha256.Sum256([]byte(got[0]))
	if subtle.ConstantTimeCompare(sum[:], s.secret[:]) != 1 {
		return status.Error(codes.Unauthenticated, "nemo peer API: wrong peer secret (coherence.peer_secret differs between replicas)")
	}
	return nil
}

func (s *Server) unaryAuth(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.authorized(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Server) streamAuth(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.authorized(ss.Context()); err != nil {
		return err
	}
	return h(srv, ss)
}

// unary is the method of the peer service at method (its full name): it
// decodes a Req, runs it through the interceptors (the secret's check)
// and answers what run returns.
func unary[Req any, P interface {
	*Req
	message
}](method string, run func(s *Server, ctx context.Context, req P) message) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: method[strings.LastIndexByte(method, '/')+1:],
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			s := srv.(*Server)
			req := P(new(Req))
			if err := dec(req); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "nemo peer API: %v", err)
			}
			h := func(ctx context.Context, _ any) (any, error) { return run(s, ctx, req), nil }
			if ic == nil {
				return h(ctx, req)
			}
			return ic(ctx, req, &grpc.UnaryServerInfo{Server: s, FullMethod: method}, h)
		},
	}
}

// status answers a rebalance's look: how many keyspaces this node owns,
// and whether it is draining.
func (s *Server) status() *statusReply {
	return &statusReply{owned: len(s.eng.Owned()), draining: s.eng.Draining()}
}

// take makes this node the owner of a keyspace a peer has just handed
// over to it (txn.Engine.Acquire).
func (s *Server) take(ctx context.Context, req *takeRequest) *takeReply {
	err := s.eng.Acquire(ctx, req.ks)
	if err != nil {
		s.log.Info("did not take a keyspace a peer handed over", "keyspace", req.ks, "err", err)
	} else {
		s.log.Info("took a keyspace a peer handed over", "keyspace", req.ks)
	}
	return &takeReply{err: toWire(err)}
}

// read answers a read of a keyspace this node owns from its engine: the
// latest committed state, writes not yet in the store included. A
// keyspace it does not own is refused (txn.ErrNotOwner): the sender
// routes again.
func (s *Server) read(ctx context.Context, req *readRequest) *readReply {
	r, err := s.router.Route(ctx, req.ks)
	switch {
	case err != nil:
		return &readReply{err: toWire(err)}
	case r.Leased && !r.Held:
		return &readReply{err: toWire(fmt.Errorf("%w: %q", txn.ErrNotOwner, req.ks))}
	}
	if req.rangeRead {
		recs, next, err := s.eng.Scan(ctx, req.ks, req.start, req.end, req.limit, txn.ReadLatest)
		return &readReply{recs: recs, more: next != nil, err: toWire(err)}
	}
	out := &readReply{recs: make([]adapters.Record, 0, len(req.keys))}
	for _, k := range req.keys {
		v, ok, err := s.eng.Get(ctx, req.ks, k, txn.ReadLatest)
		if err != nil {
			return &readReply{err: toWire(err)}
		}
		out.recs = append(out.recs, adapters.Record{Key: k, Value: readValue(v, ok)})
	}
	return out
}

// readValue is a point read's answer as a Record's value, which says
// absent by nil alone: nil unless ok, and never nil if ok. Whether the key
// exists is ok's to say, never v's: a read may answer an absent key with
// an empty, non-nil v, which sent as it is would read as present and
// empty (an entity no codec decodes).
func readValue(v []byte, ok bool) []byte {
	switch {
	case !ok:
		return nil
	case v == nil:
		return []byte{}
	}
	return v
}

func txnHandler(srv any, ss grpc.ServerStream) error { return srv.(*Server).txn(ss) }

// txn runs one forwarded transaction: the first message begins it, each
// later one is an operation, answered in order, until a commit or an
// abort. The transaction is aborted if the stream ends first.
func (s *Server) txn(ss grpc.ServerStream) error {
	var req request
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	if req.op.Kind != 0 {
		return status.Error(codes.InvalidArgument, "nemo peer API: a transaction stream begins with a begin message")
	}
	t, beginErr := s.eng.BeginServed(req.readOnly)
	if beginErr == nil {
		defer t.Abort()
	}
	for {
		if err := ss.RecvMsg(&req); err != nil {
			return err
		}
		if !req.op.Kind.Valid() {
			return status.Errorf(codes.InvalidArgument, "nemo peer API: unknown operation %d", req.op.Kind)
		}
		var rep reply
		if beginErr != nil {
			rep.err = toWire(beginErr)
		} else {
			ctx, cancel := opContext(ss.Context(), req.deadline)
			var err error
			rep.res, err = t.Serve(ctx, req.op)
			cancel()
			rep.err = toWire(err)
		}
		if err := ss.SendMsg(&rep); err != nil {
			return err
		}
		if req.op.Kind == txn.OpCommit || req.op.Kind == txn.OpAbort {
			return nil
		}
	}
}

// opContext bounds one operation by the sender's deadline.
func opContext(ctx context.Context, deadline int64) (context.Context, context.CancelFunc) {
	if deadline == 0 {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, time.Unix(0, deadline))
}
