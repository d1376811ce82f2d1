package datastore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"github.com/labstack/echo/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/internal/deadline"
	"github.com/nemocache/nemo/txn"
)

// IDAllocator completes incomplete keys (AllocateIds, and incomplete keys
// in Commit) and reserves ids (ReserveIds). The Datastore backend adapter
// implements it by forwarding to the service; LocalAllocator serves the
// embedded store.
type IDAllocator interface {
	AllocateIDs(ctx context.Context, project, database string, keys []*datastorepb.Key) ([]*datastorepb.Key, error)
	ReserveIDs(ctx context.Context, project, database string, keys []*datastorepb.Key) error
}

// Options configures a Frontend.
type Options struct {
	// Project, when set, is the only project served; requests for another
	// fail with INVALID_ARGUMENT. Empty serves any project.
	Project string
	// Allocator hands out ids. Nil means a LocalAllocator over the engine,
	// which is right only for the embedded store: in front of Datastore,
	// pass the backend adapter so ids never collide with other clients'.
	Allocator IDAllocator
	// Metadata lists the entities of __kind__ and __property__ queries
	// from the backend (the Datastore adapter) when nothing is unflushed
	// in their namespace; nil
	// means nemo always answers them from what the engine reads.
	Metadata MetadataRunner
	// Token, when set, is the bearer token a client not on loopback must
	// send (auth.go); empty lets every client in, as the emulator does.
	Token string
	// MaxRequestBytes bounds a gRPC or REST request. Default 16 MiB.
	MaxRequestBytes int
	// RequestTimeout, when > 0, bounds each gRPC call's handler (the
	// proxy bounds REST requests), so a backend that does not answer
	// gets the client DEADLINE_EXCEEDED before the server stops writing.
	RequestTimeout time.Duration
	// FollowClient (listen.request_timeout 0) bounds a call that carries
	// its client's deadline by that deadline less what nemo keeps to
	// answer in (deadline.Within: a fifth of the time left, at most a
	// second), at most RequestTimeout: the answer, a timeout included,
	// reaches the client before it gives up.
	FollowClient bool
	// WriteTimeout, when > 0, bounds a gRPC call whose commit was sent to
	// the store before RequestTimeout: such a call runs on to the client's
	// own deadline, at most this long (internal/deadline), rather than
	// leave the commit's outcome unknown. 0 leaves only the client's.
	WriteTimeout time.Duration
	// ServerOptions come first among the gRPC server's options: the
	// proxy's shared interceptors (proxy.Env.GRPC).
	ServerOptions []grpc.ServerOption
	Logger        *slog.Logger
}

// Frontend is the Datastore v1 dialect: the gRPC service and the REST JSON
// API over one engine.
type Frontend struct {
	datastorepb.UnimplementedDatastoreServer

	engine *txn.Engine
	opts   Options
	log    *slog.Logger
	alloc  IDAllocator
	txns   *registry
	grpc   *grpc.Server
	tokens *tokenCheck // nil: no Options.Token

	handlers workers // where handOff runs Commit

	clock atomic.Int64
}

var _ datastorepb.DatastoreServer = (*Frontend)(nil)

// New builds the frontend over engine.
func New(engine *txn.Engine, opts Options) (*Frontend, error) {
	if engine == nil {
		return nil, errors.New("datastore frontend: nil engine")
	}
	if opts.MaxRequestBytes == 0 {
		opts.MaxRequestBytes = 16 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	f := &Frontend{engine: engine, opts: opts, log: opts.Logger, txns: newRegistry(), handlers: workers{work: make(chan func())}}
	f.alloc = opts.Allocator
	if f.alloc == nil {
		f.alloc = NewLocalAllocator(engine)
	}
	if opts.Token != "" {
		f.tokens = newTokenCheck(opts.Token)
	}
	sopts := append(opts.ServerOptions[:len(opts.ServerOptions):len(opts.ServerOptions)],
		grpc.MaxRecvMsgSize(opts.MaxRequestBytes), grpc.MaxSendMsgSize(64<<20), grpc.ForceServerCodecV2(newRequestCodec()),
		grpc.ChainUnaryInterceptor(f.bounded))
	f.grpc = grpc.NewServer(sopts...)
	datastorepb.RegisterDatastoreServer(f.grpc, f)
	return f, nil
}

// bounded is the frontend's gRPC interceptor (one: grpc-go's chain builds
// a handler per call for each interceptor but the last). It checks
// Options.Token (authenticate), gives a call's handler
// Options.RequestTimeout (deadline), and sends an error status after the
// response headers, so the call is committed: the Go client's retry policy
// retries a Lookup's or a query's DEADLINE_EXCEEDED and UNAVAILABLE when
// they come trailers-only (grpc-go's way on its own transport), up to 5
// times, which would multiply the wait and hide an outage. Errors reach
// the client once, as when gRPC went through net/http. The exception is
// an error that says the call did nothing and may be sent again
// (retryAfter: this nemo's lease unconfirmed): it goes trailers-only with
// grpc-retry-pushback-ms, so the client's retry policy does retry it,
// after the delay.
func (f *Frontend) bounded(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := f.authenticate(ctx); err != nil {
		return nil, err
	}
	resp, err := f.deadline(ctx, req, info, handler)
	if err != nil && ctx.Err() == nil {
		if d, ok := retryDelay(err); ok {
			_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", strconv.FormatInt(d.Milliseconds(), 10)))
		} else {
			_ = grpc.SendHeader(ctx, metadata.MD{})
		}
	}
	return resp, err
}

// deadline runs handler with Options.RequestTimeout and answers
// DEADLINE_EXCEEDED when it is up. Every method but Commit runs on the
// call's own goroutine: each of its waits (locks, the buffer, the store's
// answer) ends with its context, so it returns at the deadline, and what
// it returns then is answered as the deadline (the deadline costs a timer
// only once something waits on it: internal/deadline). Commit goes to a
// worker (handOff):
// once it has sent a commit to the store it waits for the outcome whatever
// its context says (the WAL's fsync, the backend log's batch), so it may
// still be running when its deadline comes.
func (f *Frontend) deadline(outer context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if f.opts.RequestTimeout <= 0 {
		return handler(outer, req)
	}
	ctx, r, cancel := deadline.Start(outer, f.callTimeout(outer), f.opts.WriteTimeout)
	defer cancel()
	if info.FullMethod == datastorepb.Datastore_Commit_FullMethodName {
		return f.handOff(ctx, r, req, info, handler)
	}
	resp, err := handler(ctx, req)
	if err != nil && ctx.Err() != nil {
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return resp, err
}

// handOff runs handler on a worker and answers DEADLINE_EXCEEDED when
// ctx's deadline is up even if the handler has not returned, unless the
// handler has sent a commit to the store: then it waits for the handler's
// answer until the client's own deadline (at most Options.WriteTimeout),
// the deadline the commit runs to (internal/deadline). Once answered, the
// handler runs on, and what it returns is dropped. A panic in the handler
// is raised again here, for the proxy's recovery.
func (f *Frontend) handOff(ctx context.Context, r *deadline.Request, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	type result struct {
		resp     any
		err      error
		panicked any
	}
	done := make(chan result, 1)
	f.handlers.run(func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{panicked: fmt.Sprintf("%v\n%s", p, debug.Stack())}
			}
		}()
		resp, err := handler(ctx, req)
		done <- result{resp: resp, err: err}
	})
	answer := func(res result) (any, error) {
		if res.panicked != nil {
			panic(res.panicked)
		}
		return res.resp, res.err
	}
	select {
	case res := <-done:
		return answer(res)
	case <-ctx.Done():
	}
	if !r.Cut() {
		long, cancelLong := r.Long()
		defer cancelLong()
		select {
		case res := <-done:
			return answer(res)
		case <-long.Done():
			ctx = long
		}
	}
	f.log.Debug("call answered at its deadline; the handler runs on", "method", info.FullMethod)
	return nil, status.FromContextError(ctx.Err()).Err()
}

// ClientDeadline is the deadline the Datastore clients give a call (the Go
// client's 60 s for all its attempts, the Node client's 60 s per attempt):
// the request deadline of a call that carries none when
// listen.request_timeout is 0 (proxy.Mount.ServiceTimeout).
const ClientDeadline = 60 * time.Second

// callTimeout is how long a call whose context is ctx may wait: see
// Options.RequestTimeout and Options.FollowClient.
func (f *Frontend) callTimeout(ctx context.Context) time.Duration {
	d := f.opts.RequestTimeout
	if end, ok := ctx.Deadline(); ok && f.opts.FollowClient {
		d = min(d, deadline.Within(time.Until(end)))
	}
	return d
}

// workers runs the handlers handOff starts on goroutines kept between
// calls. A fresh goroutine starts with a small stack and grows it, copying
// it at each doubling, to the depth of the engine and the store client on
// every call: 8-11% of nemo's CPU per forwarded Commit in a profile
// (runtime.copystack under the handler). A worker idle for workerIdle
// exits; when every worker is busy (a handler running on past its
// deadline, a burst) a call starts one more.
type workers struct{ work chan func() }

const workerIdle = 10 * time.Second

func (w *workers) run(fn func()) {
	select {
	case w.work <- fn:
	default:
		go w.loop(fn)
	}
}

func (w *workers) loop(fn func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		fn()
		idle.Reset(workerIdle)
		select {
		case fn = <-w.work:
		case <-idle.C:
			return
		}
	}
}

// Name is the frontend's name in logs and metrics.
func (f *Frontend) Name() string { return "datastore" }

// Register mounts the REST API on an echo server (proxy.Frontend): the
// methods under /v1/, the emulator's health check at GET /, and for any
// other path Google's NOT_FOUND error document. gRPC is served by
// GRPCServer on its own transport.
func (f *Frontend) Register(e *echo.Echo) {
	e.Any("/*", echo.WrapHandler(f.restHandler()))
}

// GRPCServer is the google.datastore.v1.Datastore gRPC service
// (proxy.GRPCFrontend): the proxy serves it on the frontend's listener.
func (f *Frontend) GRPCServer() *grpc.Server { return f.grpc }

// Close ends every open transaction and stops the gRPC server's streams.
func (f *Frontend) Close() error {
	f.txns.closeAll()
	f.grpc.Stop()
	return nil
}

// version returns a new commit version: microseconds since the epoch, kept
// strictly increasing, so versions grow across restarts too.
func (f *Frontend) version() int64 {
	now := time.Now().UnixMicro()
	for {
		last := f.clock.Load()
		v := max(now, last+1)
		if f.clock.CompareAndSwap(last, v) {
			return v
		}
	}
}

// readVersion is the version of a read snapshot (missing entities report
// it): no later than any version yet to be assigned.
func (f *Frontend) readVersion() int64 {
	return max(f.clock.Load(), time.Now().UnixMicro())
}

// keyspace is the partition's keyspace (the engine opens it on first use).
func (f *Frontend) keyspace(p dscodec.Partition) adapters.Keyspace { return p.Keyspace() }

// checkProject validates a request's project against Options.Project.
func (f *Frontend) checkProject(project string) error {
	if project == "" {
		return invalid("The project_id field is required.")
	}
	if f.opts.Project != "" && project != f.opts.Project {
		return invalid("project %q is not served here (nemo serves %q)", project, f.opts.Project)
	}
	return nil
}
