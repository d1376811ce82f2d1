package aztable

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// h1Transport carries a directClient's point reads (bodiless GETs to the
// table endpoint) as HTTP/1.1 over kept-alive connections of its own,
// each exchange written and read on the calling goroutine; every other
// request goes to the Store's pooled net/http transport (next).
//
// Why: in coherence shared every miss and every refresh is a point read,
// and a profile of nemo on a long-tailed workload put about a tenth of its
// CPU in the Go scheduler, most of it net/http's client handing each
// request to a connection's writer goroutine and its answer back from the
// reader goroutine. Here the caller writes the request and parks in the
// read itself. The HTTP itself stays net/http's: the request is written
// by http.Request.Write and the answer parsed by http.ReadResponse (status
// line, headers, Content-Length, chunked and close-delimited bodies), so
// no parser of ours sits on the wire.
//
// A connection is kept for the next request only when its answer was
// read whole, nothing followed it, neither side asked to close it and the
// request's context did not interrupt it; at most maxIdle are kept, and
// one idle longer than idleTimeout is closed rather than used, as is one
// that received bytes or its peer's close while idle (idleSpoilt). A
// kept connection that the server closed meanwhile (unseen, or as the
// request went out) fails before the first byte of its answer: the read
// (idempotent) is then sent once more on a new connection, as net/http
// does. The end of the request's context (cancelled, or past
// its deadline) interrupts the exchange: context.AfterFunc sets a
// deadline in the past on the connection, which is then closed.
type h1Transport struct {
	scheme, host string // the endpoint's, which this transport serves
	addr         string // host:port to dial
	tlsConf      *tls.Config
	dial         func(ctx context.Context, network, addr string) (net.Conn, error)
	next         http.RoundTripper
	maxIdle      int
	idleTimeout  time.Duration

	mu   sync.Mutex
	idle []*h1Conn // most recently used last
}

// h1Conn is one connection with its buffers.
type h1Conn struct {
	net.Conn
	br   *bufio.Reader // reads through headLimit
	bw   *bufio.Writer
	used time.Time // when it went idle
	// left is what the answer's head may still read from the connection
	// (maxAnswerHead while one is read, unlimited for its body).
	left int64
}

// maxAnswerHead bounds the bytes read for an answer's status line and
// headers (net/http's transport bounds them too).
const maxAnswerHead = 1 << 20

// errHeadTooLarge: an answer's head went past maxAnswerHead.
var errHeadTooLarge = errors.New("aztable: answer header too large")

// headLimit reads c's connection within c.left.
type headLimit h1Conn

func (l *headLimit) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.Conn.Read(p)
	l.left -= int64(n)
	return n, err
}

// newH1Transport returns the lean transport for endpoint in front of
// next, or nil when endpoint's requests must keep next's path: an
// endpoint reached through a proxy (next's Proxy names one for it), or
// neither http nor https, a transport that dials TLS itself, or a system
// without the idle check (h1idle_other.go).
func newH1Transport(endpoint string, next *http.Transport) *h1Transport {
	u, err := url.Parse(endpoint)
	if !idleCheck || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil
	}
	if next.Proxy != nil {
		if p, err := next.Proxy(&http.Request{URL: u}); err != nil || p != nil {
			return nil
		}
	}
	if next.DialTLSContext != nil {
		return nil
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	t := &h1Transport{
		scheme: u.Scheme, host: u.Host, addr: net.JoinHostPort(u.Hostname(), port),
		next: next, maxIdle: max(next.MaxIdleConnsPerHost, 1), idleTimeout: next.IdleConnTimeout,
	}
	if t.idleTimeout <= 0 {
		t.idleTimeout = 90 * time.Second
	}
	t.dial = next.DialContext
	if t.dial == nil {
		t.dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	if u.Scheme == "https" {
		t.tlsConf = &tls.Config{}
		if next.TLSClientConfig != nil {
			t.tlsConf = next.TLSClientConfig.Clone()
		}
		if t.tlsConf.ServerName == "" {
			t.tlsConf.ServerName = u.Hostname()
		}
		t.tlsConf.NextProtos = []string{"http/1.1"}
	}
	return t
}

// errNoAnswer: a connection ended or failed before the first byte of its
// answer.
var errNoAnswer = errors.New("aztable: connection closed before an answer")

// RoundTrip sends req, a point read on this transport's connections, any
// other request through next. The answer's body has been read whole.
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || (req.Body != nil && req.Body != http.NoBody) ||
		req.URL.Scheme != t.scheme || req.URL.Host != t.host {
		return t.next.RoundTrip(req)
	}
	ctx := req.Context()
	for retried := false; ; retried = true {
		c, reused, err := t.conn(ctx)
		if err != nil {
			return nil, err
		}
		resp, err := t.exchange(ctx, c, req)
		if err == nil {
			return resp, nil
		}
		c.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !reused || retried || !errors.Is(err, errNoAnswer) {
			return nil, err
		}
	}
}

// conn returns a kept connection (reused) or dials a new one. The idle
// check (a system call) runs outside t.mu.
func (t *h1Transport) conn(ctx context.Context) (c *h1Conn, reused bool, err error) {
	now := time.Now()
	for {
		t.mu.Lock()
		n := len(t.idle)
		if n == 0 || now.Sub(t.idle[n-1].used) > t.idleTimeout {
			expired := t.idle // the most recent is too old: so are all
			t.idle = nil
			t.mu.Unlock()
			for _, c := range expired {
				c.Close()
			}
			break
		}
		c = t.idle[n-1]
		t.idle = t.idle[:n-1]
		t.mu.Unlock()
		if !idleSpoilt(c.Conn) {
			return c, true, nil
		}
		c.Close() // bytes arrived while idle, or the server closed it
	}
	raw, err := t.dial(ctx, "tcp", t.addr)
	if err != nil {
		return nil, false, err
	}
	if t.tlsConf != nil {
		tc := tls.Client(raw, t.tlsConf)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, false, fmt.Errorf("aztable: TLS handshake with %s: %w", t.addr, err)
		}
		raw = tc
	}
	c = &h1Conn{Conn: raw, bw: bufio.NewWriter(raw)}
	c.br = bufio.NewReader((*headLimit)(c))
	return c, false, nil
}

// put keeps c for the next request, or closes it when maxIdle are kept;
// kept connections idle longer than idleTimeout are closed on the way
// (the least recently used are first in line), so that none lingers after
// the server has closed its end.
func (t *h1Transport) put(c *h1Conn) {
	c.used = time.Now()
	var closing []*h1Conn
	t.mu.Lock()
	expired := 0
	for expired < len(t.idle) && c.used.Sub(t.idle[expired].used) > t.idleTimeout {
		expired++
	}
	if expired > 0 {
		closing = append(closing, t.idle[:expired]...)
		t.idle = append(t.idle[:0], t.idle[expired:]...)
	}
	if len(t.idle) < t.maxIdle {
		t.idle = append(t.idle, c)
	} else {
		closing = append(closing, c)
	}
	t.mu.Unlock()
	for _, c := range closing {
		c.Close()
	}
}

// CloseIdleConnections closes the kept connections, then next's.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
	idleCloser(t.next)()
}

// aLongTimeAgo is a deadline in the past: it interrupts a blocked read or
// write.
var aLongTimeAgo = time.Unix(1, 0)

// exchange writes req on c and reads its answer whole. On success c has
// been kept or closed; on failure the caller closes it.
func (t *h1Transport) exchange(ctx context.Context, c *h1Conn, req *http.Request) (*http.Response, error) {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	defer stop()
	if err := req.Write(c.bw); err != nil {
		return nil, err
	}
	if err := c.bw.Flush(); err != nil {
		return nil, fmt.Errorf("%w: %w", errNoAnswer, err)
	}
	resp, err := t.readResponse(c, req)
	if err != nil {
		return nil, err
	}
	var body []byte
	if n := resp.ContentLength; n >= 0 && n <= 4<<20 {
		body = make([]byte, n)
		_, err = io.ReadFull(resp.Body, body)
	} else {
		body, err = io.ReadAll(resp.Body)
	}
	if err != nil {
		return nil, err
	}
	resp.Body = &bodyBytes{Reader: bytes.NewReader(body), b: body}
	if !stop() || resp.Close || req.Close || c.br.Buffered() > 0 {
		// The context fired (its deadline is spoilt), or either side
		// closes, or the server sent bytes past the answer's end, which
		// the next request would read as its answer.
		c.Close()
	} else {
		t.put(c)
	}
	return resp, nil
}

// readResponse reads the final answer to req from c, skipping interim
// (1xx) ones, at most maxInterim; errNoAnswer when the connection yields
// no byte of one. A protocol switch, which no request of ours asks for,
// is an error.
func (t *h1Transport) readResponse(c *h1Conn, req *http.Request) (*http.Response, error) {
	c.left = maxAnswerHead
	defer func() { c.left = math.MaxInt64 }()
	for interim := 0; ; interim++ {
		if _, err := c.br.Peek(1); err != nil {
			return nil, fmt.Errorf("%w: %w", errNoAnswer, err)
		}
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			return nil, err
		}
		switch {
		case resp.StatusCode < 100 || resp.StatusCode >= 200:
			return resp, nil
		case interim == maxInterim:
			return nil, fmt.Errorf("aztable: more than %d interim answers from %s", maxInterim, t.addr)
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, fmt.Errorf("aztable: unasked protocol switch from %s", t.addr)
		}
	}
}

// maxInterim is how many interim (1xx) answers may precede the final
// one, as in net/http's transport.
const maxInterim = 5

// bodyBytes is an answer's body, read whole before RoundTrip returned.
type bodyBytes struct {
	*bytes.Reader
	b []byte
}

func (*bodyBytes) Close() error { return nil }
