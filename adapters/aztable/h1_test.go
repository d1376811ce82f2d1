//go:build linux || darwin

package aztable

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/testenv"
)

// scriptServer accepts connections on loopback and answers each request
// head it reads with answer(n, conn), n counting requests from 1 over
// all connections; answer returns false to close the connection.
type scriptServer struct {
	ln       net.Listener
	requests atomic.Int64
	accepted atomic.Int64
	wg       sync.WaitGroup
}

func newScriptServer(t *testing.T, answer func(n int64, c net.Conn) bool) *scriptServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if !answer(s.requests.Add(1), c) {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *scriptServer) url() string { return "http://" + s.ln.Addr().String() }

// untilIdleSeen waits until t keeps no connection, or the one it keeps has
// received bytes or its server's close (idleSpoilt sees them): the event a
// test of what happens to a spoilt idle connection waits for.
func untilIdleSeen(tb testing.TB, t *h1Transport) {
	tb.Helper()
	testenv.WaitFor(tb, 10*time.Second, "the kept connection to receive what its server sent", func() bool {
		t.mu.Lock()
		defer t.mu.Unlock()
		return len(t.idle) == 0 || len(t.idle) == 1 && idleSpoilt(t.idle[0].Conn)
	})
}

// countingDial counts the connections a transport dials.
func countingDial(t *h1Transport) *atomic.Int64 {
	var n atomic.Int64
	dial := t.dial
	t.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		n.Add(1)
		return dial(ctx, network, addr)
	}
	return &n
}

func newTestH1(t *testing.T, endpoint string) (*h1Transport, *atomic.Int64) {
	t.Helper()
	h := newH1Transport(endpoint, pooledClient().Transport.(*http.Transport))
	if h == nil {
		t.Fatalf("no lean transport for %s", endpoint)
	}
	t.Cleanup(h.CloseIdleConnections)
	return h, countingDial(h)
}

func getBody(ctx context.Context, rt http.RoundTripper, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	b, err := readBody(resp)
	return resp.StatusCode, string(b), err
}

// TestH1Answers: the answers HTTP/1.1 allows are read whole and the
// connection is kept exactly when it may be: a Content-Length body, a
// chunked one with a trailer, an interim 100 before the answer (kept);
// Connection: close, and a body delimited by the close (not kept).
func TestH1Answers(t *testing.T) {
	for _, tc := range []struct {
		name, answer, body string
		kept               bool
	}{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: W/\"x\"\r\n\r\nhello", "hello", true},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\nX-T: 1\r\n\r\n", "hello", true},
		{"interim", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", true},
		{"empty 204", "HTTP/1.1 204 No Content\r\n\r\n", "", true},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello", "hello", false},
		{"http/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newScriptServer(t, func(_ int64, c net.Conn) bool {
				io.WriteString(c, tc.answer)
				return strings.HasPrefix(tc.answer, "HTTP/1.1") && !strings.Contains(tc.answer, "close")
			})
			h, dials := newTestH1(t, srv.url())
			for i := range 3 {
				st, body, err := getBody(context.Background(), h, srv.url()+"/t(PartitionKey='p',RowKey='r')")
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if body != tc.body || st/100 != 2 {
					t.Fatalf("request %d: %d %q, want 2xx %q", i, st, body, tc.body)
				}
			}
			want := int64(3)
			if tc.kept {
				want = 1
			}
			if got := dials.Load(); got != want {
				t.Fatalf("%d connections for 3 requests, want %d", got, want)
			}
		})
	}
}

// TestH1KeptConnectionClosed: a kept connection the server closed after
// its last answer fails before the next answer starts; the read goes out
// again on a new connection and succeeds. A new connection that fails so
// is not tried again, nor one whose answer broke off after it began.
func TestH1KeptConnectionClosed(t *testing.T) {
	t.Run("kept", func(t *testing.T) {
		srv := newScriptServer(t, func(_ int64, c net.Conn) bool {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return false // closes without saying so
		})
		h, dials := newTestH1(t, srv.url())
		for i := range 3 {
			if _, body, err := getBody(context.Background(), h, srv.url()+"/x"); err != nil || body != "ok" {
				t.Fatalf("request %d: %q %v", i, body, err)
			}
			untilIdleSeen(t, h) // the close arrived: the next read dials (no retry)
		}
		if got, reqs := dials.Load(), srv.requests.Load(); got != 3 || reqs != 3 {
			t.Fatalf("%d connections, %d requests at the server; want 3 and 3", got, reqs)
		}
	})
	t.Run("closed as the request arrives", func(t *testing.T) {
		// Closed after the idle check (idleSpoilt) saw it open: the retry.
		srv := newScriptServer(t, func(n int64, c net.Conn) bool {
			if n == 2 {
				return false // reads the request, closes without an answer
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return true
		})
		h, dials := newTestH1(t, srv.url())
		for i := range 2 {
			if _, body, err := getBody(context.Background(), h, srv.url()+"/x"); err != nil || body != "ok" {
				t.Fatalf("request %d: %q %v", i, body, err)
			}
		}
		if got, reqs := dials.Load(), srv.requests.Load(); got != 2 || reqs != 3 {
			t.Fatalf("%d connections, %d requests at the server; want 2 and 3", got, reqs)
		}
	})
	t.Run("new", func(t *testing.T) {
		srv := newScriptServer(t, func(int64, net.Conn) bool { return false })
		h, dials := newTestH1(t, srv.url())
		_, _, err := getBody(context.Background(), h, srv.url()+"/x")
		if !errors.Is(err, errNoAnswer) {
			t.Fatalf("got %v, want errNoAnswer", err)
		}
		if got := dials.Load(); got != 1 {
			t.Fatalf("%d connections, want 1 (a new connection is not retried)", got)
		}
	})
	t.Run("truncated", func(t *testing.T) {
		srv := newScriptServer(t, func(n int64, c net.Conn) bool {
			if n == 1 {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				return true
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf")
			return false
		})
		h, dials := newTestH1(t, srv.url())
		if _, _, err := getBody(context.Background(), h, srv.url()+"/x"); err != nil {
			t.Fatal(err)
		}
		_, _, err := getBody(context.Background(), h, srv.url()+"/x")
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
		}
		if got, reqs := dials.Load(), srv.requests.Load(); got != 1 || reqs != 2 {
			t.Fatalf("%d connections, %d requests; want 1 and 2 (an answer that began is not retried)", got, reqs)
		}
	})
}

// TestH1Refusals: what is not an HTTP/1.1 answer is an error, and the
// connection is not used again.
func TestH1Refusals(t *testing.T) {
	for _, tc := range []struct{ name, answer string }{
		{"garbage", "hello there\r\n\r\n"},
		{"bad status", "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n"},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n"},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"},
		{"switch", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newScriptServer(t, func(n int64, c net.Conn) bool {
				if n == 1 {
					io.WriteString(c, tc.answer)
					return true
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				return true
			})
			h, dials := newTestH1(t, srv.url())
			if st, body, err := getBody(context.Background(), h, srv.url()+"/x"); err == nil {
				t.Fatalf("got %d %q, want an error", st, body)
			}
			if _, body, err := getBody(context.Background(), h, srv.url()+"/x"); err != nil || body != "ok" {
				t.Fatalf("next request: %q %v", body, err)
			}
			if got := dials.Load(); got != 2 {
				t.Fatalf("%d connections, want 2 (the refused one closed)", got)
			}
		})
	}
}

// TestH1Context: a cancelled or expired context interrupts an exchange
// waiting for its answer and returns the context's error; the connection
// is closed, not kept.
func TestH1Context(t *testing.T) {
	release := make(chan struct{})
	srv := newScriptServer(t, func(n int64, c net.Conn) bool {
		if n <= 2 {
			<-release
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	defer close(release)
	h, dials := newTestH1(t, srv.url())
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, _, err := getBody(ctx, h, srv.url()+"/x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: got %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := getBody(ctx, h, srv.url()+"/x"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("expired: got %v", err)
	}
	h.mu.Lock()
	kept := len(h.idle)
	h.mu.Unlock()
	if kept != 0 || dials.Load() != 2 {
		t.Fatalf("%d kept, %d dialled; want 0 and 2", kept, dials.Load())
	}
}

// TestH1Pool: concurrent reads keep at most maxIdle connections; one
// kept longer than idleTimeout is closed, not used.
func TestH1Pool(t *testing.T) {
	srv := newScriptServer(t, func(_ int64, c net.Conn) bool {
		time.Sleep(5 * time.Millisecond)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	h, dials := newTestH1(t, srv.url())
	h.maxIdle = 3
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, body, err := getBody(context.Background(), h, srv.url()+"/x"); err != nil || body != "ok" {
				t.Errorf("%q %v", body, err)
			}
		}()
	}
	wg.Wait()
	h.mu.Lock()
	kept := len(h.idle)
	h.mu.Unlock()
	if kept > 3 || dials.Load() < int64(kept) {
		t.Fatalf("%d kept of %d dialled, want at most 3", kept, dials.Load())
	}
	before := dials.Load()
	h.idleTimeout = time.Millisecond
	time.Sleep(5 * time.Millisecond)
	if _, _, err := getBody(context.Background(), h, srv.url()+"/x"); err != nil {
		t.Fatal(err)
	}
	if dials.Load() != before+1 {
		t.Fatalf("an expired idle connection was used (%d dials, want %d)", dials.Load(), before+1)
	}
	h.mu.Lock()
	kept = len(h.idle)
	h.mu.Unlock()
	if kept != 1 {
		t.Fatalf("%d kept after the expired ones went, want 1", kept)
	}
	// A connection put back closes those kept too long before it.
	var wg2 sync.WaitGroup
	for range 3 {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			getBody(context.Background(), h, srv.url()+"/x")
		}()
	}
	wg2.Wait()
	h.idleTimeout = time.Hour
	h.mu.Lock()
	h.idle[0].used = time.Now().Add(-2 * time.Hour)
	h.mu.Unlock()
	if _, _, err := getBody(context.Background(), h, srv.url()+"/x"); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	for _, c := range h.idle {
		if time.Since(c.used) > time.Hour {
			t.Errorf("an expired connection is still kept")
		}
	}
	h.mu.Unlock()
}

// nextRecorder is a next transport that answers every request itself.
type nextRecorder struct{ got []string }

func (n *nextRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	n.got = append(n.got, req.Method+" "+req.URL.Host)
	return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: req}, nil
}

// TestH1Delegates: writes, bodies and other hosts go to the pooled
// transport; an endpoint behind a proxy, or not http(s), gets no lean
// transport.
func TestH1Delegates(t *testing.T) {
	h := newH1Transport("http://127.0.0.1:1/acct", pooledClient().Transport.(*http.Transport))
	rec := &nextRecorder{}
	h.next = rec
	for _, r := range []struct{ method, url, body string }{
		{http.MethodPost, "http://127.0.0.1:1/acct/t", "{}"},
		{http.MethodDelete, "http://127.0.0.1:1/acct/t(PartitionKey='',RowKey='r')", ""},
		{http.MethodGet, "http://127.0.0.2:1/acct/t", ""},
		{http.MethodGet, "https://127.0.0.1:1/acct/t", ""},
	} {
		var body io.Reader
		if r.body != "" {
			body = strings.NewReader(r.body)
		}
		req, _ := http.NewRequest(r.method, r.url, body)
		if _, err := h.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
	}
	if len(rec.got) != 4 {
		t.Fatalf("next saw %v, want all four", rec.got)
	}
	proxied := pooledClient().Transport.(*http.Transport)
	proxied.Proxy = func(*http.Request) (*url.URL, error) { return url.Parse("http://proxy:3128") }
	if newH1Transport("http://127.0.0.1:1/acct", proxied) != nil {
		t.Fatal("a lean transport past the proxy")
	}
	if newH1Transport("ftp://127.0.0.1/acct", pooledClient().Transport.(*http.Transport)) != nil {
		t.Fatal("a lean transport for ftp")
	}
}

// TestH1TLS: an https endpoint is read over TLS with the pooled
// transport's TLS settings, the connection kept.
func TestH1TLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
	}))
	defer srv.Close()
	h := newH1Transport(srv.URL, srv.Client().Transport.(*http.Transport))
	dials := countingDial(h)
	defer h.CloseIdleConnections()
	for range 3 {
		_, body, err := getBody(context.Background(), h, srv.URL+"/acct/t")
		if err != nil || body != "GET /acct/t" {
			t.Fatalf("%q %v", body, err)
		}
	}
	if dials.Load() != 1 {
		t.Fatalf("%d connections, want 1", dials.Load())
	}
}

// TestH1Azurite: point reads of a Store with an account key go through the
// lean transport, on one kept connection when sequential, and read what
// the SDK's path reads.
func TestH1Azurite(t *testing.T) {
	s := newAzurite(t)
	ks := newTable(t, s, "leanread")
	ctx := context.Background()
	var ws []adapters.Write
	for i := range 20 {
		rec := entity("p", fmt.Sprintf("r%02d", i))
		ws = append(ws, adapters.Write{Key: rec.Key, Value: rec.Value})
	}
	if _, err := s.Upsert(ctx, ks, ws); err != nil {
		t.Fatal(err)
	}
	lean, err := New(Options{ConnectionString: aztest.ConnectionString(aztest.Azurite(t), aztest.Key), MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	h := newH1Transport(lean.direct.endpoint, pooledClient().Transport.(*http.Transport))
	dials := countingDial(h)
	defer h.CloseIdleConnections()
	lean.direct.do = h.RoundTrip
	viaSDK, err := New(Options{ConnectionString: aztest.ConnectionString(aztest.Azurite(t), aztest.Key), MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	viaSDK.direct = nil
	absent := entity("p", "absent")
	for _, w := range append(ws, adapters.Write{Key: absent.Key}) {
		a, err := lean.Get(ctx, ks, [][]byte{w.Key})
		if err != nil {
			t.Fatal(err)
		}
		b, err := viaSDK.Get(ctx, ks, [][]byte{w.Key})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a[0].Value, b[0].Value) || a[0].Version != b[0].Version {
			t.Fatalf("%q: lean %q %q, SDK %q %q", w.Key, a[0].Value, a[0].Version, b[0].Value, b[0].Version)
		}
	}
	if dials.Load() != 1 {
		t.Fatalf("%d connections for 21 sequential reads, want 1", dials.Load())
	}
}

// pipeDial returns a dial function whose connections are answered by
// answer, written whole after the request's head is read, then closed.
func pipeDial(answer []byte) func(context.Context, string, string) (net.Conn, error) {
	return func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			if _, err := http.ReadRequest(bufio.NewReader(server)); err != nil {
				return
			}
			server.Write(answer)
		}()
		return client, nil
	}
}

// FuzzH1Answer: whatever a server answers, the lean transport returns
// what net/http's transport returns (an error, or the same status and
// body), without hanging or panicking. A protocol switch is left out:
// net/http hands the connection over, the lean transport refuses it.
func FuzzH1Answer(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: W/\"x\"\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end",
		"HTTP/1.0 200 OK\r\n\r\nold",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 2x0 OK\r\n\r\n",
		"hello there\r\n\r\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, answer []byte) {
		if bytes.Contains(answer, []byte(" 101")) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		next := pooledClient().Transport.(*http.Transport)
		next.DisableCompression = true
		next.DialContext = pipeDial(answer)
		defer next.CloseIdleConnections()
		h := newH1Transport("http://store.invalid", next)
		h.dial = pipeDial(answer)
		defer h.CloseIdleConnections()
		st1, body1, err1 := getBody(ctx, h, "http://store.invalid/t")
		st2, body2, err2 := getBody(ctx, next, "http://store.invalid/t")
		if ctx.Err() != nil {
			t.Fatalf("hung: lean %v, net/http %v", err1, err2)
		}
		if (err1 == nil) != (err2 == nil) || err1 == nil && (st1 != st2 || body1 != body2) {
			t.Fatalf("lean: %d %q %v; net/http: %d %q %v", st1, body1, err1, st2, body2, err2)
		}
	})
}

// TestH1BytesAfterAnswer: bytes a connection holds past the end of an
// answer are no answer to the next request, which goes out on a new
// connection: bytes that came with the answer (a body longer than its
// Content-Length, a body after a 204), and bytes that arrived while the
// connection was kept idle (an answer to no request, a server's 408
// before it closes an idle connection). net/http's transport drops such a
// connection too ("Unsolicited response received on idle HTTP channel").
// Kept, the next read returned the stale answer as its own.
func TestH1BytesAfterAnswer(t *testing.T) {
	const ok, stale = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale"
	for _, tc := range []struct{ name, first, whileIdle string }{
		{"longer than content-length", ok + stale, ""},
		{"body after 204", "HTTP/1.1 204 No Content\r\n\r\n" + stale, ""},
		{"answer while idle", ok, stale},
		{"408 while idle", ok, "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := make(chan struct{}) // the client has read the first answer
			srv := newScriptServer(t, func(n int64, c net.Conn) bool {
				if n > 1 {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh")
					return true
				}
				io.WriteString(c, tc.first)
				if tc.whileIdle != "" {
					<-read
					io.WriteString(c, tc.whileIdle)
				}
				return true
			})
			readDone := sync.OnceFunc(func() { close(read) })
			t.Cleanup(readDone) // before the server's cleanup waits for its handlers
			h, dials := newTestH1(t, srv.url())
			if _, _, err := getBody(context.Background(), h, srv.url()+"/x"); err != nil {
				t.Fatal(err)
			}
			readDone()
			untilIdleSeen(t, h) // what is sent while idle has arrived
			st, body, err := getBody(context.Background(), h, srv.url()+"/x")
			if err != nil || st != 200 || body != "fresh" {
				t.Fatalf("second read: %d %q %v, want 200 \"fresh\"", st, body, err)
			}
			if got := dials.Load(); got != 2 {
				t.Fatalf("%d connections, want 2 (the one with bytes after its answer closed)", got)
			}
		})
	}
}
