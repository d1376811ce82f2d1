package datastore

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"github.com/labstack/echo/v4"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/contract"
	dsadapter "github.com/nemocache/nemo/adapters/datastore"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/contracttest"
	"github.com/nemocache/nemo/internal/dstest"
	"github.com/nemocache/nemo/internal/protosplit"
	"github.com/nemocache/nemo/internal/testenv"
	"github.com/nemocache/nemo/internal/tlsfront"
	"github.com/nemocache/nemo/txn"
	"github.com/nemocache/nemo/wal"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// nemo is one running nemo datastore frontend for a test.
type nemo struct {
	addr    string
	project string
	f       *Frontend
	engine  *txn.Engine
	buf     *cache.Buffer
	store   *adapters.Counted
	backend adapters.Store
	// NoCheck, when set, says why the buffer's invariants are not checked
	// against the store at the end (a test that writes behind nemo's back).
	NoCheck string
	// tls, when nemo is served over TLS (NEMO_TEST_TLS=1, serving.tls), is
	// its listener: at cleanup the test fails if no connection it served
	// was TLS, unless Plaintext says why its clients use plaintext.
	tls       *tlsfront.Listener
	Plaintext string
}

// backend names a store nemo runs over in a test.
type backend struct {
	name string
	// open returns the store and, for Datastore, its allocator.
	open func(t testing.TB) (adapters.Store, IDAllocator)
	// equal compares a store's value with a clean buffered one in the
	// end-of-test check; nil means byte for byte.
	equal func(store, buffered []byte) bool
	// shared runs nemo in coherence mode shared (as the node wires it):
	// locking reads ask the store, commits are written through,
	// conditioned on what the transaction read.
	shared bool
	// reference is the emulator whose answers nemo over this backend
	// must give: the Firestore emulator in front of it, the legacy
	// Datastore emulator otherwise.
	reference func(testing.TB) string
	// contract, when set, is under the adapter's connection: the
	// emulator answers as the service's API contract allows.
	contract *contract.Contract
}

func embeddedBackend(dir string) backend {
	return backend{name: "embedded", reference: dstest.Emulator, open: func(t testing.TB) (adapters.Store, IDAllocator) {
		s, err := embedded.Open(dir, embedded.Options{NoSync: true, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, nil
	}}
}

func emulatorBackend() backend {
	return datastoreBackend("emulator", dstest.Emulator, false)
}

// firestoreBackend is the Firestore emulator in Datastore mode at addr.
func firestoreBackend(addr string, shared bool) backend {
	name := "firestore"
	if shared {
		name += "-shared"
	}
	return datastoreBackend(name, func(testing.TB) string { return addr }, shared)
}

// firestoreBackends are the Firestore emulator as the backend in both
// coherence modes.
func firestoreBackends(t testing.TB) []backend {
	fs := dstest.FirestoreEmulator(t)
	return []backend{firestoreBackend(fs, false), firestoreBackend(fs, true)}
}

// datastoreBackend is the Datastore adapter over the emulator host names,
// with interceptors on its connection.
func datastoreBackend(name string, host func(testing.TB) string, shared bool, interceptors ...grpc.UnaryClientInterceptor) backend {
	open := func(t testing.TB) (adapters.Store, IDAllocator) {
		s, err := dsadapter.Open(context.Background(), dsadapter.Options{EmulatorHost: host(t), Logger: quiet, Interceptors: interceptors})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, s
	}
	// Datastore stamps its own version, create and update times on what it
	// stores.
	return backend{name: name, open: open, equal: dscodec.SameEntity, shared: shared, reference: host}
}

// contractBackend is the emulator under the contract (Standard plan,
// seeded), in coherence mode shared when shared is set. definite keeps
// writes definite (contract.Config.DefiniteWrites): for suites that
// assert every write's outcome, since in mode shared a write whose
// outcome the service leaves unknown reaches the client as that.
func contractBackend(seed uint64, shared, definite bool) backend {
	cfg := contract.Standard(seed)
	cfg.DefiniteWrites = definite
	c := contract.New(cfg)
	open := func(t testing.TB) (adapters.Store, IDAllocator) {
		s, err := dsadapter.Open(context.Background(), dsadapter.Options{EmulatorHost: dstest.Emulator(t), Logger: quiet,
			RetryBase: time.Millisecond, Interceptors: []grpc.UnaryClientInterceptor{c.Interceptor()}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, s
	}
	name := fmt.Sprintf("emulator-contract-%d", seed)
	if shared {
		name = fmt.Sprintf("emulator-shared-contract-%d", seed)
	}
	return backend{name: name, open: open, equal: dscodec.SameEntity, shared: shared, contract: c}
}

// backends are the stores the client suites run nemo over: the embedded
// one, the emulator in both coherence modes, the emulator under the
// contract in both modes, for each contract seed
// (internal/contracttest), and the Firestore emulator in Datastore mode
// in both modes.
func backends(t *testing.T) []backend {
	bs := plainBackends(t)
	for _, seed := range contracttest.Seeds(t) {
		bs = append(bs, contractBackend(seed, false, false), contractBackend(seed, true, true))
	}
	return append(bs, firestoreBackends(t)...)
}

// startNemo serves a frontend over b on a free loopback port. At cleanup
// it stops serving, closes the engine (no flush), checks the buffer's
// invariants against the store (cache.Buffer.Check, unless the test failed
// or set NoCheck) and closes the buffer; b's store closes after that, its
// cleanup being registered first.
func startNemo(t testing.TB, b backend, project string, copts cache.Options) *nemo {
	t.Helper()
	return startNemoServed(t, b, project, copts, serving{})
}

// serving says how startNemoServed serves the frontend.
type serving struct {
	// viaEcho serves gRPC as nemo did before issue 14, through
	// grpc.Server.ServeHTTP behind echo and h2c, for the benchmarks'
	// before-and-after.
	viaEcho bool
	// ln, when set, is the listener to serve on (a non-loopback address:
	// internal/remotetest); nil means a free loopback port.
	ln net.Listener
	// token is Options.Token.
	token string
	// project is Options.Project: the only project served, or any.
	project string
	// requestTimeout is Options.RequestTimeout; 0 means 59 s, the cap the
	// default listen.write_timeout sets (proxy.RequestDeadline with
	// listen.request_timeout 0).
	requestTimeout time.Duration
	// writeTimeout is Options.WriteTimeout.
	writeTimeout time.Duration
	// wal, when set, is the engine's commit log (coherence exclusive),
	// early release with earlyRelease.
	wal          *wal.Options
	earlyRelease bool
	// tls serves over TLS through tlsserve, as listen.tls does
	// (tlsfront), whatever NEMO_TEST_TLS says; with NEMO_TEST_TLS=1 every
	// nemo on a loopback port is (the tests on a non-loopback ln are
	// of plaintext clients sending a token, which tlsserve would refuse
	// there).
	tls bool
}

// startNemoServed is startNemo, served as sv says.
func startNemoServed(t testing.TB, b backend, project string, copts cache.Options, sv serving) *nemo {
	t.Helper()
	store, alloc := b.open(t)
	if copts.Logger == nil {
		copts.Logger = quiet
	}
	counted := adapters.CountLogged(store, copts.Logger)
	// As the node sets them: the service stamps what it stores.
	copts.Unstamped = dscodec.Unstamped
	topts := txn.Options{Logger: quiet, IdleTimeout: 10 * time.Second, WAL: sv.wal, EarlyRelease: sv.earlyRelease}
	if b.shared {
		copts.FreshLocks = true
		if copts.MaxStaleness == 0 {
			copts.MaxStaleness = time.Second
		}
		topts.Mode, topts.Coherence = txn.WriteThrough, txn.Shared
	}
	buf, err := cache.New(counted, copts)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := txn.New(buf, topts)
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := store.(MetadataRunner)
	if sv.requestTimeout == 0 {
		sv.requestTimeout = 59 * time.Second
	}
	f, err := New(eng, Options{Allocator: alloc, Metadata: meta, RequestTimeout: sv.requestTimeout, WriteTimeout: sv.writeTimeout, Token: sv.token, Project: sv.project, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ln := sv.ln
	if ln == nil {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	var tl *tlsfront.Listener
	if sv.tls || tlsfront.Enabled() && sv.ln == nil {
		// As nemo offers them on a frontend's port: HTTP/1.1 to a client
		// offering both, h2 to a gRPC client.
		tl = tlsfront.Listen(t, ln, "http/1.1", "h2")
		ln = tl
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	f.Register(e)
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: e, Protocols: &protos}
	if sv.viaEcho {
		e.Any("/google.datastore.v1.Datastore/*", echo.WrapHandler(f.GRPCServer()))
		go srv.Serve(ln)
	} else {
		// Served as nemo serves it: one port, HTTP/2 prior knowledge
		// to the gRPC server, HTTP/1.x to echo.
		split := protosplit.New(ln, 10*time.Second)
		go split.Serve()
		go srv.Serve(split.HTTP1())
		go f.GRPCServer().Serve(split.HTTP2())
	}
	n := &nemo{addr: ln.Addr().String(), project: project, f: f, engine: eng, buf: buf, store: counted, backend: store, tls: tl}
	t.Cleanup(func() {
		n.checkTLS(t)
		if b.contract != nil {
			t.Logf("contract: %+v", b.contract.Stats())
		}
		srv.Close()
		f.Close()
		eng.Close()
		if n.NoCheck == "" && !t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if err := buf.CheckWith(ctx, cache.CheckOptions{Equal: b.equal}); err != nil {
				t.Errorf("buffer invariants at the end of the test: %v", err)
			}
			cancel()
		}
		buf.Close()
	})
	return n
}

// checkTLS fails t if nemo was served over TLS and served connections, none
// of them over TLS, unless n.Plaintext says why: with NEMO_TEST_TLS=1 a
// client still set up for plaintext would go on working (tlsserve takes
// plaintext from loopback) and the run would not be over TLS.
func (n *nemo) checkTLS(t testing.TB) {
	if n.tls == nil || n.Plaintext != "" {
		return
	}
	if all, overTLS := n.tls.Served(); all > 0 && overTLS == 0 {
		t.Errorf("nemo served over TLS (%s=1), yet none of the %d connections it served was TLS", testenv.EnvTLS, all)
	}
}

// client returns a Go Datastore client talking to addr over plaintext
// gRPC, as DATASTORE_EMULATOR_HOST would set it up, or over TLS trusting
// the test CA when addr is a nemo served over TLS (NEMO_TEST_TLS=1).
func client(t testing.TB, addr, project string) *datastore.Client {
	t.Helper()
	c, err := datastore.NewClient(context.Background(), project, clientOptions(addr)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// clientOptions set a Go Datastore client up for addr as
// DATASTORE_EMULATOR_HOST would (plaintext gRPC, no credentials), with
// transportCredentials(addr).
func clientOptions(addr string) []option.ClientOption {
	return []option.ClientOption{option.WithEndpoint("passthrough:///" + addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(transportCredentials(addr)))}
}

// transportCredentials are TLS trusting the test CA when addr is a nemo
// served over TLS (tlsfront), plaintext for anything else (the
// emulators, a nemo served as plaintext).
func transportCredentials(addr string) credentials.TransportCredentials {
	if tlsfront.Serves(addr) {
		return credentials.NewTLS(tlsfront.ClientConfig())
	}
	return insecure.NewCredentials()
}

// restURL is the REST (JSON) API's root at addr: https when addr is a
// nemo served over TLS, to be called with restHTTP.
func restURL(addr string) string {
	if tlsfront.Serves(addr) {
		return "https://" + addr
	}
	return "http://" + addr
}

// restHTTP is the REST calls' client: it trusts the test CA (and speaks
// plaintext HTTP to an http URL).
var restHTTP = tlsfront.HTTPClient(time.Minute)

// plainBackends are the embedded store and the emulator in both
// coherence modes.
func plainBackends(t *testing.T) []backend {
	shared := emulatorBackend()
	shared.name, shared.shared = "emulator-shared", true
	return []backend{embeddedBackend(t.TempDir()), emulatorBackend(), shared}
}

// each runs fn against nemo over every backend, in a fresh project.
func each(t *testing.T, fn func(t *testing.T, n *nemo, c *datastore.Client)) {
	eachOf(t, backends(t), fn)
}

// eachOf runs fn against nemo over each of bs, in a fresh project.
func eachOf(t *testing.T, bs []backend, fn func(t *testing.T, n *nemo, c *datastore.Client)) {
	eachWith(t, bs, cache.Options{}, fn)
}

// eachWith is eachOf with the buffer's options opts.
func eachWith(t *testing.T, bs []backend, opts cache.Options, fn func(t *testing.T, n *nemo, c *datastore.Client)) {
	for _, b := range bs {
		t.Run(b.name, func(t *testing.T) {
			project := dstest.Project(t)
			n := startNemo(t, b, project, opts)
			fn(t, n, client(t, n.addr, project))
		})
	}
}
