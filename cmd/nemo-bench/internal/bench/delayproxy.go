package bench

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A simulated cloud round trip (Options.RTT, RTTJitter). The real targets
// are loopback servers, a fraction of a millisecond away; a cloud store
// is milliseconds away. With RTT set, every series of a run reaches the
// backend through one delayProxy, the clients that talk to the backend
// directly included, so each ratio compares nemo and the backend at the
// same distance. The proxy runs in this process (its CPU counts as the
// clients'): a pair of goroutines per connection copy the bytes each way,
// and every chunk read is written on half a round trip (plus a uniform
// jitter in [0, RTTJitter]) after it arrived, in order per direction.
// The proxy keeps how late it wrote each chunk (its goroutines wait for a
// core like any other), so a report can say how far the simulated round
// trip was from the one asked for.

// delayProxy forwards TCP connections from a loopback port to target,
// each chunk delayed by half the round trip each way.
type delayProxy struct {
	ln     net.Listener
	target string
	half   time.Duration // D/2, each way
	jitter time.Duration // plus a uniform delay in [0, jitter], each way
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	late   atomic.Int64 // ns the chunks were written after they were due, summed
	chunks atomic.Int64 // chunks written
}

// netTally is how late a delay proxy wrote its chunks so far: the sum
// over all chunks, and how many.
type netTally struct {
	late   time.Duration
	chunks int64
}

// tally is p's lateness so far; zero for a nil p (no simulated round
// trip).
func (p *delayProxy) tally() netTally {
	if p == nil {
		return netTally{}
	}
	return netTally{time.Duration(p.late.Load()), p.chunks.Load()}
}

// startDelayProxy listens on a free loopback port and forwards to target
// (host:port) with round trip rtt plus up to 2×jitter (jitter each way).
func startDelayProxy(target string, rtt, jitter time.Duration) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, target: target, half: rtt / 2, jitter: jitter, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// addr is the proxy's host:port.
func (p *delayProxy) addr() string { return p.ln.Addr().String() }

func (p *delayProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			var both sync.WaitGroup
			both.Go(func() { p.pipe(up, c) })
			both.Go(func() { p.pipe(c, up) })
			both.Wait()
			c.Close()
			up.Close()
			p.mu.Lock()
			delete(p.conns, c)
			delete(p.conns, up)
			p.mu.Unlock()
		}()
	}
}

// track registers a connection pair; false if the proxy closed.
func (p *delayProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// chunk is what one read brought, and when it may be written.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each chunk written no earlier than its arrival
// plus the one-way delay, in order. At src's end it closes dst's write
// side (a half close passes through); on an error either side it closes
// both, so the other direction ends as well.
func (p *delayProxy) pipe(dst, src net.Conn) {
	q := make(chan chunk, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var last time.Time
		for c := range q {
			// Never earlier than the chunk before: order per direction.
			due := c.due
			if due.Before(last) {
				due = last
			}
			last = due
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
			p.late.Add(int64(time.Since(due)))
			p.chunks.Add(1)
			if _, err := dst.Write(c.b); err != nil {
				src.Close()
				dst.Close()
				for range q {
				}
				return
			}
		}
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		} else {
			dst.Close()
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			d := p.half
			if p.jitter > 0 {
				d += rand.N(p.jitter + 1)
			}
			q <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(d)}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				dst.Close()
			}
			break
		}
	}
	close(q)
	<-done
}

// close stops accepting, closes every connection and waits for the
// pipes.
func (p *delayProxy) close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}
