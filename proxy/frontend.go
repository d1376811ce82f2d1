package proxy

import (
	"log/slog"
	"time"

	"github.com/labstack/echo/v4"
	"google.golang.org/grpc"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/txn"
)

// Frontend is one client-facing API dialect (Azure Table, Datastore).
//
// How a frontend plugs in: cmd/nemo passes proxy.New one Mount per dialect,
// naming the listener address from the configuration and a constructor. Once
// the engine is open (after the WAL replay) the Server calls the
// constructor with an Env, creates a fresh *echo.Echo for that listener with
// the shared middleware already installed, and calls Register, which adds the
// dialect's routes and may replace e.HTTPErrorHandler to render errors in its
// own wire format. The Server owns the http.Server, the listener and the
// shutdown; the frontend never starts or stops anything.
//
// Every listener speaks HTTP/1.1 and unencrypted HTTP/2 (prior knowledge)
// to echo, unless the frontend is a GRPCFrontend: see there.
//
// What the shared middleware does before Register's handlers run: a panic
// becomes a 500 and an error log line with the stack; a request whose
// Content-Length exceeds listen.max_request_bytes is refused with
// echo.ErrStatusRequestEntityTooLarge, and reading a body past the limit
// fails with *http.MaxBytesError; the request context carries the request
// deadline (RequestDeadline) and a commit sent to the store the longer
// write deadline (WriteDeadline, internal/deadline); an error a handler returns is passed to
// e.HTTPErrorHandler exactly once (a replacement handler must do nothing
// when c.Response().Committed); one log line per request is written at
// debug level.
type Frontend interface {
	Register(e *echo.Echo)
}

// GRPCFrontend is a Frontend that also serves gRPC on its listener, on
// grpc-go's own transport. The Server splits the listener by connection: one
// that opens with the HTTP/2 client preface (prior knowledge, as gRPC
// clients talk to an emulator) is served by GRPCServer, anything else
// (HTTP/1.x) by echo as for any frontend. So on such a listener HTTP/2 is
// gRPC only: a REST request over h2c prior knowledge gets grpc-go's 415.
//
// The frontend builds its grpc.Server with Env.GRPC first among its
// options (the shared interceptors: the debug request log, and a panic
// turned into INTERNAL and an error log line with the stack), then its own:
// message size limits, a per-call deadline. The Server calls Serve, and on
// shutdown GracefulStop within the frontends' share of the grace, then Stop.
type GRPCFrontend interface {
	Frontend
	GRPCServer() *grpc.Server
}

// Env is what a frontend is built from.
type Env struct {
	// Engine serves every read and write; it has replayed the WAL.
	Engine *txn.Engine
	// Backend is the store behind the buffer itself, without the counters
	// or fault injection (node.Node.Backend), for dialect operations the
	// Store interface has no word for (a frontend type-asserts it to e.g.
	// a table-admin interface). Data reads and writes go through Engine,
	// never here.
	Backend adapters.Store
	// Logger is tagged with the frontend's name.
	Logger *slog.Logger
	// GRPC are the shared gRPC server options a GRPCFrontend builds its
	// grpc.Server with, before its own.
	GRPC []grpc.ServerOption
}

// Mount says where a frontend listens and how to build it.
type Mount struct {
	// Name labels the frontend in logs ("aztable", "datastore").
	Name string
	// Addr is the host:port to listen on (port 0 picks a free one); empty
	// disables the frontend, so no listener is opened for it.
	Addr string
	// New builds the frontend. It is called once, after the engine is open.
	New func(Env) (Frontend, error)
	// ServiceTimeout is how long the service the frontend speaks for lets
	// a request run (Azure: 30 s for an operation; Datastore: its clients'
	// 60 s): the request deadline when listen.request_timeout is 0
	// (RequestDeadline).
	ServiceTimeout time.Duration
}
