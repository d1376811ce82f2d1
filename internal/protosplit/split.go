// Package protosplit shares one listener between an HTTP/1.x server and an
// HTTP/2 prior-knowledge server (grpc.Server on its own transport) by the
// first bytes of each connection.
package protosplit

import (
	"errors"
	"net"
	"sync"
	"time"
)

// h2Preface opens every HTTP/2 connection made with prior knowledge (RFC
// 9113 §3.4), which is how gRPC clients talk to a plaintext endpoint.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Split shares one listener between two servers by the first bytes
// of each connection: one that opens with the HTTP/2 client preface goes to
// HTTP2 (grpc.Server, on its own transport), anything else to HTTP1 (an
// http.Server). Each accepted connection is sorted
// on a goroutine of its own, with a read deadline, so a client that sends
// nothing cannot hold up the next Accept; one that sends nothing within
// peekTimeout is closed.
//
// Closing either side stops handing it connections; the shared listener
// closes when both sides have (each server closes its own on shutdown), or
// when Close is called.
type Split struct {
	ln          net.Listener
	peekTimeout time.Duration
	h1, h2      *sideListener

	closeOnce sync.Once
}

// New splits ln; run Serve to start sorting connections.
func New(ln net.Listener, peekTimeout time.Duration) *Split {
	p := &Split{ln: ln, peekTimeout: peekTimeout}
	p.h1 = newSideListener(p)
	p.h2 = newSideListener(p)
	return p
}

// HTTP1 is the side that gets every connection but HTTP/2 prior knowledge.
func (p *Split) HTTP1() net.Listener { return p.h1 }

// HTTP2 is the side that gets connections opening with the HTTP/2 preface.
func (p *Split) HTTP2() net.Listener { return p.h2 }

// Serve accepts until the shared listener fails or is closed; the error is
// then what both sides' Accept return.
func (p *Split) Serve() {
	var backoff time.Duration
	for {
		c, err := p.ln.Accept()
		if err != nil {
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() && !errors.Is(err, net.ErrClosed) {
				// Out of file descriptors and the like: as
				// net/http does, wait and retry.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			p.h1.fail(err)
			p.h2.fail(err)
			return
		}
		backoff = 0
		go p.sort(c)
	}
}

// sort reads just enough of c to tell HTTP/2 prior knowledge from
// anything else and hands c, with what was read put back, to its side.
func (p *Split) sort(c net.Conn) {
	var buf [len(h2Preface)]byte
	n := 0
	if p.peekTimeout > 0 {
		c.SetReadDeadline(time.Now().Add(p.peekTimeout))
	}
	for n < len(buf) && string(buf[:n]) == h2Preface[:n] {
		m, err := c.Read(buf[n:])
		n += m
		if err != nil {
			c.Close()
			return
		}
	}
	c.SetReadDeadline(time.Time{})
	side := p.h1
	if string(buf[:n]) == h2Preface {
		side = p.h2
	}
	side.deliver(&Peeked{Conn: c, Prefix: buf[:n]})
}

// Close closes the shared listener (both sides then fail Accept).
func (p *Split) Close() error {
	var err error
	p.closeOnce.Do(func() { err = p.ln.Close() })
	return err
}

// sideClosed closes the shared listener once both sides are closed.
func (p *Split) sideClosed() {
	if p.h1.isClosed() && p.h2.isClosed() {
		p.Close()
	}
}

// Peeked is a connection whose first bytes were read to sort it: Read
// returns Prefix first, then what Conn reads.
type Peeked struct {
	net.Conn
	Prefix []byte
}

func (c *Peeked) Read(b []byte) (int, error) {
	if len(c.Prefix) > 0 {
		n := copy(b, c.Prefix)
		c.Prefix = c.Prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// sideListener is one side of a Split, a net.Listener for a server.
type sideListener struct {
	split *Split
	conns chan net.Conn

	mu     sync.Mutex
	closed bool
	err    error         // the shared listener's, once it failed
	done   chan struct{} // closed when closed or err is set
}

func newSideListener(p *Split) *sideListener {
	return &sideListener{split: p, conns: make(chan net.Conn), done: make(chan struct{})}
}

// deliver hands c to the side's server, or closes it if the side is closed.
func (l *sideListener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *sideListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.closed {
			return nil, net.ErrClosed
		}
		return nil, l.err
	}
}

// fail ends the side because the shared listener failed with err.
func (l *sideListener) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.err != nil {
		return
	}
	l.err = err
	close(l.done)
}

func (l *sideListener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	if l.err == nil {
		close(l.done)
	}
	l.mu.Unlock()
	l.split.sideClosed()
	return nil
}

func (l *sideListener) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

func (l *sideListener) Addr() net.Addr { return l.split.ln.Addr() }
