package bench

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// serveConns serves every connection to a loopback port with handle (in
// a goroutine each, closing it after) until the test ends.
func serveConns(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// echoServer echoes every connection until its client half-closes, then
// closes it.
func echoServer(t *testing.T) string {
	return serveConns(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
}

// stamped is a server that answers each 8-byte request with the time
// (UnixNano) it read it, so a test can see each direction's delay.
func stamped(t *testing.T) string {
	return serveConns(t, func(c net.Conn) {
		b := make([]byte, 8)
		for {
			if _, err := io.ReadFull(c, b); err != nil {
				return
			}
			if _, err := c.Write(binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano()))); err != nil {
				return
			}
		}
	})
}

// dialDelayed is a connection to target through a delay proxy, both
// closed when the test ends.
func dialDelayed(t *testing.T, target string, rtt, jitter time.Duration) net.Conn {
	t.Helper()
	p, err := startDelayProxy(target, rtt, jitter)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.close() })
	c, err := net.Dial("tcp", p.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestDelayProxyDelay: a request reaches the server at least rtt/2 after
// it was sent, and its answer the client at least rtt/2 after the server
// sent it; a round trip takes at least rtt.
func TestDelayProxyDelay(t *testing.T) {
	const rtt = 40 * time.Millisecond
	c := dialDelayed(t, stamped(t), rtt, 5*time.Millisecond)
	b := make([]byte, 8)
	for range 5 {
		t0 := time.Now()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		t2 := time.Now()
		t1 := time.Unix(0, int64(binary.BigEndian.Uint64(b)))
		if up, down := t1.Sub(t0), t2.Sub(t1); up < rtt/2 || down < rtt/2 {
			t.Errorf("one way: %v up, %v down, want at least %v each", up, down, rtt/2)
		}
		if d := t2.Sub(t0); d < rtt || d > rtt+time.Second {
			t.Errorf("round trip %v, want at least %v", d, rtt)
		}
	}
}

// TestDelayProxyOrder: many small writes, pipelined, come back through
// an echo server whole and in order (with jitter, which must not reorder
// a direction's chunks).
func TestDelayProxyOrder(t *testing.T) {
	c := dialDelayed(t, echoServer(t), 2*time.Millisecond, 3*time.Millisecond)
	var want bytes.Buffer
	for i := range 2000 {
		want.Write(binary.BigEndian.AppendUint32(nil, uint32(i)))
	}
	errc := make(chan error, 1)
	go func() {
		src := want.Bytes()
		for len(src) > 0 {
			n := min(len(src), 1+len(src)%61)
			if _, err := c.Write(src[:n]); err != nil {
				errc <- err
				return
			}
			src = src[n:]
		}
		// A half close passes through: the echo server ends, and so
		// does our read.
		errc <- c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("echoed %d bytes, want the %d sent, in order", len(got), want.Len())
	}
}

// TestDelayProxyClose: close ends open connections (the client reads
// EOF or an error, not a hang), returns once every pipe ended, and the
// port no longer accepts.
func TestDelayProxyClose(t *testing.T) {
	p, err := startDelayProxy(echoServer(t), 10*time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 2)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "hi" {
		t.Fatalf("echo: %q, %v", b, err)
	}
	done := make(chan error, 1)
	go func() { done <- p.close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("close did not return")
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(b); err == nil {
		t.Fatalf("read %d bytes after close, want EOF", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the connection stayed open after close")
	}
	if c2, err := net.DialTimeout("tcp", p.addr(), time.Second); err == nil {
		c2.Close()
		t.Fatal("the proxy still accepts after close")
	}
}

// TestDelayProxyTally: the proxy counts every chunk it carries, each way,
// and how late it wrote them; a run without a proxy tallies nothing.
func TestDelayProxyTally(t *testing.T) {
	p, err := startDelayProxy(echoServer(t), 4*time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	c, err := net.Dial("tcp", p.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := make([]byte, 8)
	for range 5 {
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
	}
	n := p.tally()
	if n.chunks != 10 {
		t.Errorf("tallied %d chunks, want 10 (5 round trips, one chunk each way)", n.chunks)
	}
	if n.late < 0 || n.late > 10*time.Second {
		t.Errorf("late %v in all, want a small non-negative sum", n.late)
	}
	r := Result{NetLate: n.late, NetChunks: n.chunks}
	if d, ok := r.NetLateMean(); !ok || d != n.late/10 {
		t.Errorf("NetLateMean = %v, %v; want %v, true", d, ok, n.late/10)
	}
	var none *delayProxy
	if z := none.tally(); z != (netTally{}) {
		t.Errorf("no proxy tallied %+v", z)
	}
	if _, ok := (Result{}).NetLateMean(); ok {
		t.Error("NetLateMean of a run without a proxy says it has one")
	}
}

// TestTableNetLateColumn: a real target's table has as many cells in
// every row as in its header, and reports each series' net lateness (a
// dash for a run without a simulated round trip).
func TestTableNetLateColumn(t *testing.T) {
	f := figure{name: "fig", title: "Fig", xlabel: "x", baseline: "direct", xfmt: func(x float64) string { return fmt.Sprint(x) }}
	e := experiment{name: "exp", figures: []figure{f}}
	cpu := []ProcCPU{{Role: "server", Time: time.Second}}
	rs := []Result{
		{Figure: "fig", Series: "direct", Ops: 100, Elapsed: time.Second, CPU: cpu, NetLate: 300 * time.Microsecond, NetChunks: 2},
		{Figure: "fig", Series: "shared", Ops: 200, Elapsed: time.Second, CPU: cpu},
	}
	sc := Scale{Records: 10, ValueSize: 8, Workers: 1, Measure: time.Second}
	out := table(Options{Target: TargetAzurite, Scale: &sc}, "src", e, rs)
	var rows []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "|") {
			rows = append(rows, l)
		}
	}
	if len(rows) != 4 {
		t.Fatalf("%d table lines, want a header, its rule and 2 rows:\n%s", len(rows), out)
	}
	for _, l := range rows[1:] {
		if got, want := strings.Count(l, "|"), strings.Count(rows[0], "|"); got != want {
			t.Errorf("%d cells' bars in %q, the header has %d", got, l, want)
		}
	}
	if !strings.Contains(rows[0], "| net late |") || !strings.HasSuffix(rows[2], " 150µs |") || !strings.HasSuffix(rows[3], " – |") {
		t.Errorf("net late column:\n%s", strings.Join(rows, "\n"))
	}
}
