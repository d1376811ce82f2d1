package aztable

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
	"github.com/nemocache/nemo/txn"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// nemo is a frontend over an engine over a store, served on loopback.
type nemo struct {
	URL   string // service URL: http://127.0.0.1:port/devstoreaccount1
	Eng   *txn.Engine
	Buf   *cache.Buffer // the operator's handle: tests check its invariants
	Front *Frontend
	// Handler serves the API (what srv serves), for tests that serve it
	// again, e.g. over TLS.
	Handler http.Handler
	srv     *httptest.Server
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

// startNemoFront is startNemoWith with frontend options.
func startNemoFront(t testing.TB, store adapters.Store, co cache.Options, to txn.Options, fo Options) *nemo {
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
	n := &nemo{Eng: eng, Buf: buf, Front: f, Handler: e, srv: httptest.NewServer(e), t: t}
	n.URL = n.srv.URL + "/" + aztest.Account
	t.Cleanup(n.Close)
	return n
}

// Close stops serving and closes the engine (no flush), checks the
// buffer's invariants against the store, and closes the buffer.
func (n *nemo) Close() {
	n.once.Do(func() {
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
	st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return startNemo(t, st, cache.Options{})
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
		&aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}})
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

// rawClient sends hand-made requests.
var rawClient = &http.Client{Timeout: 30 * time.Second}
