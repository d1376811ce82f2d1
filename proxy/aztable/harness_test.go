package aztable

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/labstack/echo/v4"

	"github.com/nemocache/nemo/adapters"
	azstore "github.com/nemocache/nemo/adapters/aztable"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/adapters/contract"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/testenv"
	"github.com/nemocache/nemo/internal/tlsfront"
	"github.com/nemocache/nemo/internal/tlstest"
	"github.com/nemocache/nemo/txn"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// nemo is a frontend over an engine over a store, served on loopback.
type nemo struct {
	URL  string // service URL: http://127.0.0.1:port/devstoreaccount1 (https with NEMO_TEST_TLS=1)
	base string // URL without the account: http://127.0.0.1:port
	// plainURL is URL over plaintext HTTP, for tests of what nemo does
	// with a plaintext request: the same port as URL when served over
	// TLS (tlsserve takes plaintext from loopback).
	plainURL string
	Eng      *txn.Engine
	Buf      *cache.Buffer // the operator's handle: tests check its invariants
	Front    *Frontend
	// Handler serves the API (what srv serves), for tests that serve it
	// again, e.g. over TLS.
	Handler http.Handler
	srv     *httptest.Server
	tls     *tlsfront.Listener // with NEMO_TEST_TLS=1, what srv serves on
	once    sync.Once
	// NoCheck, when set, says why the buffer's invariants are not checked
	// against the store at the end (a test that writes behind nemo's back).
	NoCheck string
	// OthersWriteKey, when set, names the keys that writers other than
	// nemo change behind its back (cache.CheckOptions.OthersWriteKey):
	// the check at the end does not compare them with the store.
	OthersWriteKey func(ks adapters.Keyspace, key []byte) bool
	t              testing.TB
}

// startNemo serves a frontend over store. Close (also run at cleanup)
// stops it without flushing and then checks the buffer's invariants
// against the store (cache.Buffer.Check).
func startNemo(t testing.TB, store adapters.Store, co cache.Options) *nemo {
	t.Helper()
	return startNemoWith(t, store, co, txn.Options{})
}

// startShared is startNemo in coherence mode shared, as the node wires it
// (fresh locking reads, conditional write-through, a 1s staleness bound
// unless co sets one).
func startShared(t testing.TB, store adapters.Store, co cache.Options) *nemo {
	t.Helper()
	co.FreshLocks = true
	if co.MaxStaleness == 0 {
		co.MaxStaleness = time.Second
	}
	return startNemoWith(t, store, co, txn.Options{Mode: txn.WriteThrough, Coherence: txn.Shared})
}

// startNemoWith is startNemo with engine options.
func startNemoWith(t testing.TB, store adapters.Store, co cache.Options, to txn.Options) *nemo {
	t.Helper()
	return startNemoFront(t, store, co, to, Options{Key: aztest.Key, BodyCacheBytes: 4 << 20})
}

// startNemoFront is startNemoWith with frontend options, served over TLS
// with NEMO_TEST_TLS=1.
func startNemoFront(t testing.TB, store adapters.Store, co cache.Options, to txn.Options, fo Options) *nemo {
	t.Helper()
	return startNemoServed(t, store, co, to, fo, tlsfront.Enabled())
}

// startNemoServed is startNemoFront, served over TLS (tlsfront) if
// overTLS.
func startNemoServed(t testing.TB, store adapters.Store, co cache.Options, to txn.Options, fo Options, overTLS bool) *nemo {
	t.Helper()
	co.Logger = quiet
	// As the node sets them: the service stamps what it stores.
	co.Unstamped = tablecodec.Unstamped
	buf, err := cache.New(store, co)
	if err != nil {
		t.Fatal(err)
	}
	to.Logger = quiet
	eng, err := txn.New(buf, to)
	if err != nil {
		t.Fatal(err)
	}
	fo.Logger = quiet
	f, err := New(eng, fo)
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.HideBanner = true
	f.Register(e)
	n := &nemo{Eng: eng, Buf: buf, Front: f, Handler: e, t: t}
	n.serve(e, overTLS)
	n.URL = n.base + "/" + aztest.Account
	t.Cleanup(n.Close)
	return n
}

// serve serves h on a loopback port: if overTLS through tlsserve as
// listen.tls serves it (tlsfront), at an https URL, and otherwise as
// plaintext.
func (n *nemo) serve(h http.Handler, overTLS bool) {
	if !overTLS {
		n.srv = httptest.NewServer(h)
		n.base = n.srv.URL
		n.plainURL = n.base + "/" + aztest.Account
		return
	}
	n.srv = httptest.NewUnstartedServer(tlsfront.WithTLSState(h))
	n.tls = tlsfront.Listen(n.t, n.srv.Listener, "http/1.1")
	n.srv.Listener = n.tls
	n.srv.Config.ConnContext = tlsfront.ConnContext
	n.srv.Start()
	n.base = "https://" + n.tls.Addr().String()
	n.plainURL = "http://" + n.tls.Addr().String() + "/" + aztest.Account
}

// checkTLS fails the test if, with NEMO_TEST_TLS=1, nemo served
// connections and none of them over TLS: the clients were not given the
// https endpoint.
func (n *nemo) checkTLS() {
	if n.tls == nil {
		return
	}
	if all, overTLS := n.tls.Served(); all > 0 && overTLS == 0 {
		n.t.Errorf("%s=1, yet none of the %d connections nemo served was TLS", testenv.EnvTLS, all)
	}
}

// Close stops serving and closes the engine (no flush), checks the
// buffer's invariants against the store, and closes the buffer.
func (n *nemo) Close() {
	n.once.Do(func() {
		n.checkTLS()
		n.srv.Close()
		_ = n.Eng.Close()
		if n.NoCheck == "" && !n.t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			// The service stamps what it stores: compare without the stamps.
			if err := n.Buf.CheckWith(ctx, cache.CheckOptions{Equal: tablecodec.SameEntity, OthersWriteKey: n.OthersWriteKey}); err != nil {
				n.t.Errorf("buffer invariants at the end of the test: %v", err)
			}
			cancel()
		}
		_ = n.Buf.Close()
	})
}

// othersTables names, for the buffer check, every catalog entry but the
// tables whose names start with prefix: in a shared Azurite account the
// other tables are created and deleted by writers nemo does not see.
func othersTables(prefix string) func(adapters.Keyspace, []byte) bool {
	own := tablecodec.TableKey(prefix)
	return func(ks adapters.Keyspace, key []byte) bool {
		return ks == tablecodec.TablesKeyspace && !bytes.HasPrefix(key, own)
	}
}

// overEmbedded is nemo as a local emulator: the embedded store.
func overEmbedded(t testing.TB) *nemo {
	t.Helper()
	return overEmbeddedServed(t, tlsfront.Enabled())
}

// overEmbeddedServed is overEmbedded, served over TLS if overTLS whatever
// NEMO_TEST_TLS says.
func overEmbeddedServed(t testing.TB, overTLS bool) *nemo {
	t.Helper()
	st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return startNemoServed(t, st, cache.Options{}, txn.Options{}, Options{Key: aztest.Key, BodyCacheBytes: 4 << 20}, overTLS)
}

// azuriteStore is the aztables adapter over Azurite.
func azuriteStore(t testing.TB) *azstore.Store {
	t.Helper()
	return azuriteStoreMemo(t, 0)
}

// azuriteStoreMemo is azuriteStore with Options.ETagMemory etagMemory.
func azuriteStoreMemo(t testing.TB, etagMemory int) *azstore.Store {
	t.Helper()
	st, err := azstore.New(azstore.Options{ConnectionString: aztest.ConnectionString(aztest.Azurite(t), aztest.Key), Logger: quiet, ETagMemory: etagMemory})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// overAzurite is nemo in front of Azurite.
func overAzurite(t testing.TB) *nemo {
	t.Helper()
	st := azuriteStore(t)
	return inSharedAccount(startNemo(t, st, cache.Options{}))
}

// inSharedAccount leaves the table catalog out of n's end-of-test check:
// Azurite's one account is shared with the other packages' tests, which
// create and delete tables behind n's back (a nemo in mode exclusive does
// not see them; docs/coherence.md). Tests of the catalog name their own
// tables' prefix instead (othersTables).
func inSharedAccount(n *nemo) *nemo {
	n.OthersWriteKey = func(ks adapters.Keyspace, _ []byte) bool { return ks == tablecodec.TablesKeyspace }
	return n
}

// overContract is nemo in front of Azurite under the contract (Standard
// plan, seeded), in coherence mode shared when shared is set, with its
// writes kept definite there (contract.Config.DefiniteWrites): the client
// suites assert every write's outcome, and in mode shared a write whose
// outcome the service leaves unknown reaches the client as that.
func overContract(t testing.TB, seed uint64, shared bool) *nemo {
	t.Helper()
	cfg := contract.Standard(seed)
	cfg.DefiniteWrites = shared
	c := contract.New(cfg)
	st := contractStore(t, c, shared)
	t.Cleanup(func() { t.Logf("contract: %+v", c.Stats()) })
	if shared {
		return inSharedAccount(startShared(t, st, cache.Options{}))
	}
	return inSharedAccount(startNemo(t, st, cache.Options{}))
}

// contractStore is the adapter over Azurite under c, as the node opens it
// in the coherence mode (shared: no ETag memory, clients see the store's
// own ETags), retrying with short delays.
func contractStore(t testing.TB, c *contract.Contract, shared bool) *azstore.Store {
	t.Helper()
	memory := 0
	if shared {
		memory = -1
	}
	st, err := azstore.New(azstore.Options{ConnectionString: aztest.ConnectionString(aztest.Azurite(t), aztest.Key), Logger: quiet,
		MaxRetries: 8, RetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond, Transport: c.Transport(nil), ETagMemory: memory})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// service is an SDK client of the endpoint at url. Retries are off so
// that the tests see every status the server answers.
func service(t testing.TB, url, key string) *aztables.ServiceClient {
	t.Helper()
	c, err := aztables.NewServiceClientFromConnectionString(aztest.ConnectionString(url, key),
		&aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}, Transport: sdkTransport}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantStatus(t *testing.T, what string, err error, st int, code string) {
	t.Helper()
	gs, gc := aztest.Status(err)
	if gs != st || gc != code {
		t.Fatalf("%s: got %d %q (%v), want %d %q", what, gs, gc, err, st, code)
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeMap(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	return m
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// rawClient sends hand-made requests (trusting the test CA with
// NEMO_TEST_TLS=1).
var rawClient = newClient(30 * time.Second)

// newClient is an HTTP client with timeout: with NEMO_TEST_TLS=1 one that
// trusts the test CA and refuses to send a request to a nemo served over
// TLS in plaintext (tlsChecked), else a plain one.
func newClient(timeout time.Duration) *http.Client {
	if !tlsfront.Enabled() {
		return &http.Client{Timeout: timeout}
	}
	c := tlsfront.HTTPClient(timeout)
	c.Transport = tlsChecked{c.Transport}
	return c
}

// sdkTransport is the SDK clients' transport: nil (the SDK's own) unless
// NEMO_TEST_TLS=1, when it is newClient's.
var sdkTransport = func() policy.Transporter {
	if !tlsfront.Enabled() {
		return nil
	}
	return newClient(0)
}()

// caEnv is the environment that makes a client in another process (node,
// python3, az) trust the test CA with NEMO_TEST_TLS=1: none otherwise.
func caEnv(t testing.TB) []string {
	if !tlsfront.Enabled() {
		return nil
	}
	f := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(f, tlstest.Process().PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"NODE_EXTRA_CA_CERTS=" + f, "SSL_CERT_FILE=" + f, "REQUESTS_CA_BUNDLE=" + f}
}

// tlsChecked fails a request sent to a nemo served over TLS
// (tlsfront.Serves) without TLS, and checks the answer came over TLS:
// with NEMO_TEST_TLS=1 a client that still has an http:// endpoint for
// nemo would otherwise go on working in plaintext (tlsserve takes it
// from loopback) and the run would not be over TLS.
type tlsChecked struct{ next http.RoundTripper }

func (c tlsChecked) RoundTrip(req *http.Request) (*http.Response, error) {
	if !tlsfront.Serves(req.URL.Host) {
		return c.next.RoundTrip(req)
	}
	if req.URL.Scheme != "https" {
		return nil, fmt.Errorf("%s=1: a request to nemo at %s in plaintext (%s)", testenv.EnvTLS, req.URL.Host, req.URL.Redacted())
	}
	resp, err := c.next.RoundTrip(req)
	if err == nil && resp.TLS == nil {
		resp.Body.Close()
		return nil, fmt.Errorf("%s=1: nemo at %s answered without TLS", testenv.EnvTLS, req.URL.Host)
	}
	return resp, err
}
