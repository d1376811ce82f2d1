package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
)

// faultMode is what the fault proxy does to the connections through it.
type faultMode int

const (
	faultPass   faultMode = iota // forward
	faultRefuse                  // close every connection at once: the backend is down
	faultHang                    // accept, forward nothing: the backend is stopped (SIGSTOP)
	faultSlow                    // forward each chunk after a delay
	faultHold                    // accept and keep what is sent, forward it at release: a request delayed in the network
)

func (m faultMode) String() string {
	return [...]string{"pass", "refused", "hung", "slow", "held"}[m]
}

// faultProxy is a TCP proxy in front of a backend, whose fault mode a test
// switches at any moment; a switch also closes the connections open then
// (a connection pool must not keep the old behaviour).
type faultProxy struct {
	url  string // the backend's URL with the proxy's host:port
	mu   sync.Mutex
	mode faultMode
	open map[net.Conn]bool
	held chan struct{} // a send for each connection accepted while hung or holding (when there is room)
	// released is closed by release: the connections accepted while
	// holding then forward what they kept, and pass from there on.
	released chan struct{}
}

func startFaultProxy(t *testing.T, backend string) *faultProxy {
	t.Helper()
	u, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	u.Host = ln.Addr().String()
	fp := &faultProxy{url: u.String(), open: map[net.Conn]bool{}, held: make(chan struct{}, 16), released: make(chan struct{})}
	t.Cleanup(func() {
		ln.Close()
		fp.set(faultRefuse)
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go fp.serve(c, target)
		}
	}()
	return fp
}

func (fp *faultProxy) set(m faultMode) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if m == faultHold {
		fp.released = make(chan struct{})
	}
	fp.mode = m
	for c := range fp.open {
		c.Close()
	}
	clear(fp.open)
}

// release forwards what the connections accepted while holding kept, at
// once, without closing them, and passes from then on: requests delayed
// in the network reach the backend late.
func (fp *faultProxy) release() {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	fp.mode = faultPass
	close(fp.released)
}

func (fp *faultProxy) track(cs ...net.Conn) faultMode {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	for _, c := range cs {
		fp.open[c] = true
	}
	return fp.mode
}

func (fp *faultProxy) serve(c net.Conn, target string) {
	switch fp.track(c) {
	case faultRefuse:
		c.Close()
		return
	case faultHang:
		select {
		case fp.held <- struct{}{}:
		default:
		}
		return // held open, unanswered, until the mode changes
	case faultHold:
		fp.mu.Lock()
		released := fp.released
		fp.mu.Unlock()
		select {
		case fp.held <- struct{}{}:
		default:
		}
		fp.holdThenPass(c, target, released)
		return
	}
	b, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	mode := fp.track(b)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if mode == faultSlow {
					time.Sleep(500 * time.Millisecond)
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	go pipe(b, c)
	pipe(c, b)
}

// holdThenPass keeps what c sends until released, then forwards it to
// target and pipes both ways. A connection closed before the release
// (by its client, or by a switch of mode) forwards nothing.
func (fp *faultProxy) holdThenPass(c net.Conn, target string, released chan struct{}) {
	var kept []byte
	readDone := make(chan error, 1)
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := c.Read(buf)
			kept = append(kept, buf[:n]...)
			if err != nil {
				readDone <- err
				return
			}
		}
	}()
	select {
	case <-readDone:
		c.Close()
		return
	case <-released:
	}
	_ = c.SetReadDeadline(time.Now()) // wakes the reader
	if err := <-readDone; !errors.Is(err, os.ErrDeadlineExceeded) {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	b, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	fp.track(b)
	if _, err := b.Write(kept); err != nil {
		c.Close()
		b.Close()
		return
	}
	go func() { _, _ = io.Copy(b, c); b.Close() }()
	_, _ = io.Copy(c, b)
	c.Close()
}

// A request whose backend does not answer gets the protocol's timeout error
// within listen.request_timeout (set here to 2s; by default the service's
// own bound, see TestBinarySlowBackendAnswersByDefault), never a closed
// connection and never after the client's own retry policy has given up:
// an uncached read through each frontend with its backend hung behind the
// fault proxy.
func TestBinaryHungBackendAnswersInTime(t *testing.T) {
	const timeout = 2 * time.Second
	want := timeout + time.Second
	env := []string{"NEMO_COHERENCE_MODE=shared", "NEMO_LISTEN_REQUEST_TIMEOUT=" + timeout.String()}
	t.Run("aztable", func(t *testing.T) {
		fp, _, svc, table := azBehindFaultProxy(t, "hung", env...)
		ctx := context.Background()
		fp.set(faultHang)
		began := time.Now()
		_, err := svc.NewClient(table).GetEntity(ctx, "p", "never-read", nil)
		took := time.Since(began)
		var re *azcore.ResponseError
		if !errors.As(err, &re) || (re.ErrorCode != "OperationTimedOut" && re.ErrorCode != "ServerBusy") {
			t.Fatalf("uncached read with the backend hung: %v, want 500 OperationTimedOut or 503 ServerBusy", err)
		}
		if took > want {
			t.Errorf("answered after %v, past the request timeout and a second (%v)", took, want)
		}
		t.Logf("%d %s after %v", re.StatusCode, re.ErrorCode, took.Round(10*time.Millisecond))
	})
	t.Run("datastore", func(t *testing.T) {
		fp := startFaultProxy(t, "http://"+dstest.Emulator(t))
		project := dstest.Project(t)
		p := startNemo(t, t.TempDir(), append(env, "NEMO_BACKEND_TYPE=datastore", "NEMO_BACKEND_DATASTORE_PROJECT="+project,
			"NEMO_BACKEND_DATASTORE_EMULATOR_HOST="+strings.TrimPrefix(fp.url, "http://"))...)
		p.waitReady(t)
		_, dsAddr := frontendAddrs(t, p)
		c := dsClient(t, project, dsAddr)
		fp.set(faultHang)
		t.Cleanup(func() { fp.set(faultPass) })
		began := time.Now()
		var v struct{ N int }
		err := c.Get(context.Background(), datastore.NameKey("Hung", "never-read", nil), &v)
		took := time.Since(began)
		if code := status.Code(err); code != codes.DeadlineExceeded && code != codes.Unavailable {
			t.Fatalf("uncached lookup with the backend hung: %v, want DEADLINE_EXCEEDED or UNAVAILABLE", err)
		}
		if took > want {
			t.Errorf("answered after %v, past the request timeout and a second (%v)", took, want)
		}
		t.Logf("%v after %v", status.Code(err), took.Round(10*time.Millisecond))
	})
}

// TestBinarySlowBackendAnswersByDefault: with listen.request_timeout at its
// default (derived from the service: Azure's 30 s, the Datastore client's
// own deadline), a backend that is slow but works is waited for: with every
// call to the store 7 s slower (backend.fault latency), an uncached read
// through each frontend in coherence shared is answered (not found) after
// more than 7 s, where the earlier 5 s default answered 500
// OperationTimedOut and DEADLINE_EXCEEDED.
func TestBinarySlowBackendAnswersByDefault(t *testing.T) {
	const slow = 7 * time.Second
	env := []string{"NEMO_COHERENCE_MODE=shared", "NEMO_BACKEND_FAULT_ENABLED=true", "NEMO_BACKEND_FAULT_LATENCY=" + slow.String()}
	t.Run("aztable", func(t *testing.T) {
		t.Parallel()
		conn, _, table := azuriteTable(t, "slow")
		p := startNemo(t, t.TempDir(), append(env, "NEMO_BACKEND_TYPE=aztable", "NEMO_BACKEND_AZTABLE_CONNECTION_STRING="+conn)...)
		p.waitReady(t)
		began := time.Now()
		_, err := azNemoService(t, p).NewClient(table).GetEntity(context.Background(), "p", "absent", nil)
		took := time.Since(began)
		if st, code := aztest.Status(err); st != http.StatusNotFound || took < slow {
			t.Fatalf("uncached read from a backend %v slower: %d %s after %v, want 404 ResourceNotFound after more than %v", slow, st, code, took, slow)
		}
		t.Logf("404 after %v", took.Round(10*time.Millisecond))
		drain(t, p)
	})
	t.Run("datastore", func(t *testing.T) {
		t.Parallel()
		project := dstest.Project(t)
		p := startNemo(t, t.TempDir(), append(env, "NEMO_BACKEND_TYPE=datastore", "NEMO_BACKEND_DATASTORE_PROJECT="+project,
			"NEMO_BACKEND_DATASTORE_EMULATOR_HOST="+dstest.Emulator(t))...)
		p.waitReady(t)
		_, dsAddr := frontendAddrs(t, p)
		began := time.Now()
		var v struct{ N int }
		err := dsClient(t, project, dsAddr).Get(context.Background(), datastore.NameKey("Slow", "absent", nil), &v)
		took := time.Since(began)
		if !errors.Is(err, datastore.ErrNoSuchEntity) || took < slow {
			t.Fatalf("uncached lookup from a backend %v slower: %v after %v, want no such entity after more than %v", slow, err, took, slow)
		}
		t.Logf("no such entity after %v", took.Round(10*time.Millisecond))
		drain(t, p)
	})
}

// azBehindFaultProxy starts nemo (with env) in front of Azurite behind a
// fault proxy, and creates a table through it, deleted at cleanup with the
// proxy passing again.
func azBehindFaultProxy(t *testing.T, prefix string, env ...string) (*faultProxy, *proc, *aztables.ServiceClient, string) {
	t.Helper()
	fp := startFaultProxy(t, aztest.Azurite(t))
	p := startNemo(t, t.TempDir(), append(env, "NEMO_BACKEND_TYPE=aztable",
		"NEMO_BACKEND_AZTABLE_CONNECTION_STRING="+aztest.ConnectionString(fp.url, aztest.Key))...)
	p.waitReady(t)
	table := aztest.TableName(prefix)
	svc := azNemoService(t, p)
	if _, err := svc.CreateTable(context.Background(), table, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fp.set(faultPass)
		_, _ = svc.DeleteTable(context.Background(), table, nil)
	})
	return fp, p, svc, table
}

// A write nemo has sent to a slow store is not cut off by nemo's own
// listen.request_timeout, which would leave its outcome unknown (500
// OperationTimedOut, DEADLINE_EXCEEDED) though the store applies it a moment
// later: in coherence shared, with the backend slowed behind the fault
// proxy past the request timeout, an upsert through each frontend answers
// success after the timeout and is in the store, while an uncached read is
// still answered at the timeout.
func TestBinarySentWriteOutlivesRequestTimeout(t *testing.T) {
	// The fault proxy delays each chunk by 500 ms: a write and its answer
	// take about a second, twice the timeout.
	const timeout = 500 * time.Millisecond
	env := []string{"NEMO_COHERENCE_MODE=shared", "NEMO_LISTEN_REQUEST_TIMEOUT=" + timeout.String()}
	readBound := timeout + time.Second
	t.Run("aztable", func(t *testing.T) {
		// The table is created through nemo, so that the upsert finds it
		// known (in coherence shared, for the staleness bound) and sends
		// its write without a read first.
		fp, _, svc, table := azBehindFaultProxy(t, "slowwrite", env...)
		ctx := context.Background()
		direct := azService(t, aztest.ConnectionString(aztest.Azurite(t), aztest.Key))
		tc := svc.NewClient(table)
		fp.set(faultSlow)
		began := time.Now()
		// Replace, not merge: a merge reads the entity it merges into
		// first, and that read is bounded by the request timeout.
		_, err := tc.UpsertEntity(ctx, cohAzEntity("p/slow", "written"), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
		took := time.Since(began)
		if err != nil {
			t.Fatalf("upsert through a slow store: %v after %v, want success", err, took)
		}
		if took <= timeout {
			t.Fatalf("the upsert took %v, not past the %v request timeout: the store was not slow enough to test anything", took, timeout)
		}
		got, err := direct.NewClient(table).GetEntity(ctx, "p", "slow", nil)
		if err != nil || !strings.Contains(string(got.Value), `"written"`) {
			t.Fatalf("the store after the acknowledged upsert: %s, %v", got.Value, err)
		}
		upsertTook := took
		began = time.Now()
		_, err = tc.GetEntity(ctx, "p", "never-read", nil)
		took = time.Since(began)
		var re *azcore.ResponseError
		if !errors.As(err, &re) || re.ErrorCode != "OperationTimedOut" {
			t.Fatalf("uncached read through a slow store: %v after %v, want 500 OperationTimedOut", err, took)
		}
		if took > readBound {
			t.Errorf("the read answered after %v, past the request timeout and a second", took)
		}
		t.Logf("upsert acknowledged after %v; read answered %s after %v", upsertTook.Round(10*time.Millisecond), re.ErrorCode, took.Round(10*time.Millisecond))
	})
	t.Run("datastore", func(t *testing.T) {
		emu := dstest.Emulator(t)
		fp := startFaultProxy(t, "http://"+emu)
		project := dstest.Project(t)
		p := startNemo(t, t.TempDir(), append(env, "NEMO_BACKEND_TYPE=datastore", "NEMO_BACKEND_DATASTORE_PROJECT="+project,
			"NEMO_BACKEND_DATASTORE_EMULATOR_HOST="+strings.TrimPrefix(fp.url, "http://"))...)
		p.waitReady(t)
		_, dsAddr := frontendAddrs(t, p)
		c := dsClient(t, project, dsAddr)
		direct := dsClient(t, project, emu)
		fp.set(faultSlow)
		t.Cleanup(func() { fp.set(faultPass) })
		ctx := context.Background()
		type doc struct{ V string }
		k := datastore.NameKey("SlowWrite", "slow", nil)
		began := time.Now()
		_, err := c.Put(ctx, k, &doc{"written"})
		took := time.Since(began)
		if err != nil {
			t.Fatalf("put through a slow store: %v after %v, want success", err, took)
		}
		if took <= timeout {
			t.Fatalf("the put took %v, not past the %v request timeout: the store was not slow enough to test anything", took, timeout)
		}
		var got doc
		if err := direct.Get(ctx, k, &got); err != nil || got.V != "written" {
			t.Fatalf("the store after the acknowledged put: %+v, %v", got, err)
		}
		putTook := took
		began = time.Now()
		err = c.Get(ctx, datastore.NameKey("SlowWrite", "never-read", nil), &got)
		took = time.Since(began)
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("uncached lookup through a slow store: %v after %v, want DEADLINE_EXCEEDED", err, took)
		}
		if took > readBound {
			t.Errorf("the lookup answered after %v, past the request timeout and a second", took)
		}
		t.Logf("put acknowledged after %v; lookup answered %v after %v", putTook.Round(10*time.Millisecond), status.Code(err), took.Round(10*time.Millisecond))
	})
}

// countEntities lists every entity of a table through tc and counts them.
func countEntities(t *testing.T, tc *aztables.Client) int {
	t.Helper()
	n := 0
	pager := tc.NewListEntitiesPager(nil)
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Entities)
	}
	return n
}

// azuriteTable creates a fresh table in Azurite, deleted at cleanup, and
// returns Azurite's connection string, a client on Azurite and the name.
func azuriteTable(t *testing.T, prefix string) (string, *aztables.ServiceClient, string) {
	t.Helper()
	conn := aztest.ConnectionString(aztest.Azurite(t), aztest.Key)
	name := aztest.TableName(prefix)
	direct, err := aztables.NewServiceClientFromConnectionString(conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.CreateTable(context.Background(), name, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = direct.DeleteTable(context.Background(), name, nil) })
	return conn, direct, name
}
