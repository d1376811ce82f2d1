package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// grpcOptions are the shared gRPC server options a GRPCFrontend builds its
// server with (Env.GRPC): the gRPC counterparts of the echo middleware,
// outermost first: the request's metrics and span, the debug request log,
// then panic recovery (for unary calls one interceptor, unary). Client
// keepalive pings are allowed every 10 s, idle or not (grpc-go's default
// answers pings more often than every 5 minutes with GOAWAY; net/http's
// HTTP/2 server, which served gRPC before, allowed any).
func grpcOptions(log *slog.Logger, api string, m *requestMetrics) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(unary(log, m.api(api))),
		grpc.ChainStreamInterceptor(observeStream(log), recoverStream(log)),
	}
}

// logCall writes the debug request line for a gRPC call, with the keys
// observe uses for HTTP requests (status is the gRPC code's name; log is
// already tagged with the frontend).
func logCall(ctx context.Context, log *slog.Logger, method string, start time.Time, err error) {
	remote := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
	}
	log.LogAttrs(ctx, slog.LevelDebug, "request",
		slog.String("method", "POST"),
		slog.String("path", method),
		slog.String("proto", "gRPC"),
		slog.String("status", status.Code(err).String()),
		slog.Duration("took", time.Since(start)),
		slog.String("remote", remote))
}

func observeStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		if !log.Enabled(ctx, slog.LevelDebug) {
			return handler(srv, ss)
		}
		start := time.Now()
		err := handler(srv, ss)
		logCall(ctx, log, info.FullMethod, start, err)
		return err
	}
}

// panicked logs a handler panic with its stack and returns the INTERNAL
// status the client gets instead of the process going down.
func panicked(log *slog.Logger, method string, r any) error {
	log.Error("handler panic", "method", "POST", "path", method,
		"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	return status.Error(codes.Internal, "internal error")
}

// recovered calls handler, and turns its panic into INTERNAL.
func recovered(ctx context.Context, log *slog.Logger, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, panicked(log, info.FullMethod, r)
		}
	}()
	return handler(ctx, req)
}

func recoverStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = panicked(log, info.FullMethod, r)
			}
		}()
		return handler(srv, ss)
	}
}
