package tlsserve

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/nemocache/nemo/internal/loopback"
	"github.com/nemocache/nemo/internal/protosplit"
)

// recordTypeHandshake opens every TLS connection: a ClientHello record.
const recordTypeHandshake = 0x16

// ErrPlaintext is what Read returns on a plaintext connection from a peer
// not on loopback when the listener requires TLS, after the refusal was
// written to it.
var ErrPlaintext = errors.New("tlsserve: plaintext connection from a client not on loopback, where TLS is required")

// refusal answers a refused plaintext connection. It is an HTTP/1.0
// response, which is what such a client most likely speaks (a gRPC client
// fails reading it as HTTP/2: "error reading server preface").
const refusal = "HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" +
	"nemo: this listener requires TLS from clients not on loopback (listen.tls); connect with https or TLS credentials\n"

// Listen wraps ln: each connection that opens with a TLS handshake is
// served over TLS with cfg; one that does not is served as plaintext if its
// peer is on loopback or plain is true, and otherwise refused (see
// ErrPlaintext) and counted in r's metrics.
func (r *Reloader) Listen(ln net.Listener, cfg *tls.Config, plain bool) net.Listener {
	return &listener{Listener: ln, r: r, cfg: cfg, plain: plain}
}

type listener struct {
	net.Listener
	r     *Reloader
	cfg   *tls.Config
	plain bool
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c, l: l, plain: l.plain || loopback.Client(c.RemoteAddr().String())}, nil
}

// Conn is an accepted connection, sorted into TLS or plaintext by its
// first byte on its first Read or Write.
type Conn struct {
	net.Conn // the accepted connection
	l        *listener
	plain    bool // plaintext is allowed from this peer

	once sync.Once
	mu   sync.Mutex
	rw   net.Conn  // what Read and Write use once sorted
	tls  *tls.Conn // rw, when the client speaks TLS
	err  error     // why the connection cannot be used
}

// sort reads the first byte and decides.
func (c *Conn) sort() {
	c.once.Do(func() {
		var b [1]byte
		n, err := c.Conn.Read(b[:])
		c.mu.Lock()
		defer c.mu.Unlock()
		if n == 0 {
			c.err = err
			if err == nil {
				c.err = io.ErrUnexpectedEOF
			}
			return
		}
		rest := &protosplit.Peeked{Conn: c.Conn, Prefix: b[:1]}
		switch {
		case b[0] == recordTypeHandshake:
			c.tls = tls.Server(rest, c.l.cfg)
			c.rw = c.tls
		case c.plain:
			c.rw = rest
		default:
			c.l.r.refused.Add(1)
			refuse(c.Conn)
			c.err = ErrPlaintext
		}
	})
}

// refuse answers c with the refusal and closes it. Closing with the
// request unread would reset the connection, and the client would likely
// lose the answer: the write side is closed first and what the client
// sends is read and dropped until it closes its side (a second at most).
func refuse(c net.Conn) {
	io.WriteString(c, refusal)
	if cw, ok := c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		c.SetReadDeadline(time.Now().Add(time.Second))
		io.Copy(io.Discard, c)
	}
	c.Close()
}

func (c *Conn) Read(b []byte) (int, error) {
	c.sort()
	if c.err != nil {
		return 0, c.err
	}
	return c.rw.Read(b)
}

func (c *Conn) Write(b []byte) (int, error) {
	c.sort()
	if c.err != nil {
		return 0, c.err
	}
	return c.rw.Write(b)
}

// Close closes the connection, with a TLS close_notify if it speaks TLS.
func (c *Conn) Close() error {
	c.mu.Lock()
	t := c.tls
	c.mu.Unlock()
	if t != nil {
		return t.Close()
	}
	return c.Conn.Close()
}

// ConnectionState is the TLS state of a connection that speaks TLS and has
// completed its handshake; ok is false otherwise.
func (c *Conn) ConnectionState() (st tls.ConnectionState, ok bool) {
	c.mu.Lock()
	t := c.tls
	c.mu.Unlock()
	if t == nil {
		return st, false
	}
	st = t.ConnectionState()
	return st, st.HandshakeComplete
}
