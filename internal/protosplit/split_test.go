package protosplit

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

func listen(t *testing.T, peek time.Duration) *Split {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(ln, peek)
	go s.Serve()
	t.Cleanup(func() { s.Close() })
	return s
}

func dial(t *testing.T, s *Split, send string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if send != "" {
		if _, err := io.WriteString(c, send); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// accept returns what the next connection on l carries, up to n bytes.
func accept(t *testing.T, l net.Listener, n int) string {
	t.Helper()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSortsByPreface: the preface goes to HTTP2, anything else (a method,
// a prefix of the preface that turns into something else, a short line)
// to HTTP1, with every byte read put back; a client that sends nothing
// does not hold up the others and is closed after the peek timeout.
func TestSortsByPreface(t *testing.T) {
	s := listen(t, 200*time.Millisecond)
	silent := dial(t, s, "")
	h2 := h2Preface + "\x00\x00\x00\x04"
	dial(t, s, h2)
	if got := accept(t, s.HTTP2(), len(h2)); got != h2 {
		t.Errorf("HTTP2 got %q", got)
	}
	for _, req := range []string{"GET / HTTP/1.1\r\n\r\n", "POST /v1 HTTP/1.1\r\n", "PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n", "PUT"} {
		dial(t, s, req)
		if got := accept(t, s.HTTP1(), len(req)); got != req {
			t.Errorf("HTTP1 got %q, want %q", got, req)
		}
	}
	silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("silent client: read %v, want EOF (closed by the split)", err)
	}
}

// TestClosesWhenBothSidesHave: the shared listener stays open while one
// side serves and closes once both sides are closed; Accept on a closed
// side says net.ErrClosed.
func TestClosesWhenBothSidesHave(t *testing.T) {
	s := listen(t, time.Second)
	s.HTTP1().Close()
	if _, err := s.HTTP1().Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept on a closed side: %v", err)
	}
	dial(t, s, h2Preface)
	if got := accept(t, s.HTTP2(), len(h2Preface)); got != h2Preface {
		t.Errorf("HTTP2 got %q", got)
	}
	s.HTTP2().Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", s.ln.Addr().String())
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("shared listener still accepting after both sides closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
