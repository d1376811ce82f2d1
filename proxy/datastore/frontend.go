package datastore

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"github.com/labstack/echo/v4"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"
	"google.golang.org/grpc"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
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
	// GQL runs GQL queries on the backend (the Datastore adapter); nil
	// means GQL is refused (UNIMPLEMENTED).
	GQL GQLRunner
	// MaxRequestBytes bounds a gRPC or REST request. Default 16 MiB.
	MaxRequestBytes int
	Logger          *slog.Logger
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

	opened sync.Map // adapters.Keyspace -> struct{}: keyspaces known open
	clock  atomic.Int64
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
	f := &Frontend{engine: engine, opts: opts, log: opts.Logger, txns: newRegistry()}
	f.alloc = opts.Allocator
	if f.alloc == nil {
		f.alloc = NewLocalAllocator(engine)
	}
	f.grpc = grpc.NewServer(grpc.MaxRecvMsgSize(opts.MaxRequestBytes), grpc.MaxSendMsgSize(64<<20))
	datastorepb.RegisterDatastoreServer(f.grpc, f)
	return f, nil
}

// Name is the frontend's name in logs and metrics.
func (f *Frontend) Name() string { return "datastore" }

// GRPCServer is the gRPC server with the Datastore service registered, for
// serving on a listener of its own (grpc.Server.Serve is faster than
// ServeHTTP).
func (f *Frontend) GRPCServer() *grpc.Server { return f.grpc }

// RegisterGRPC registers the Datastore service on another gRPC server.
func (f *Frontend) RegisterGRPC(s *grpc.Server) { datastorepb.RegisterDatastoreServer(s, f) }

// Handler serves gRPC and the REST JSON API on one listener: requests whose
// Content-Type is application/grpc go to the gRPC server, the rest to the
// REST mux. Unencrypted HTTP/2 (prior knowledge, as gRPC clients use with
// DATASTORE_EMULATOR_HOST) is accepted through h2c.
func (f *Frontend) Handler() http.Handler {
	rest := f.restHandler()
	mux := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			f.grpc.ServeHTTP(w, r)
			return
		}
		rest.ServeHTTP(w, r)
	})
	return h2c.NewHandler(mux, &http2.Server{})
}

// Register mounts the frontend on an echo server (proxy.Frontend): gRPC
// under /google.datastore.v1.Datastore/ and the REST API under /v1/.
func (f *Frontend) Register(e *echo.Echo) {
	e.Any("/google.datastore.v1.Datastore/*", echo.WrapHandler(f.grpc))
	e.Any("/v1/*", echo.WrapHandler(f.restHandler()))
}

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

// keyspace opens the partition's keyspace in the buffer on first use.
func (f *Frontend) keyspace(p dscodec.Partition) adapters.Keyspace {
	ks := p.Keyspace()
	if _, ok := f.opened.Load(ks); !ok {
		f.engine.Buffer().OpenKeyspace(ks)
		f.opened.Store(ks, struct{}{})
	}
	return ks
}

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
