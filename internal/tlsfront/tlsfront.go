// Package tlsfront serves a test's frontend over TLS the way nemo serves
// listen.tls (internal/tlsserve: the Reloader's certificate, the listener
// that sorts connections by their first byte and takes plaintext from
// loopback), with a certificate signed by the process's test CA
// (tlstest.Process), and gives the clients what trusts it. It counts the
// connections that completed a TLS handshake, so a harness can fail a test
// whose clients were meant to use TLS and did not.
package tlsfront

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nemocache/nemo/internal/testenv"
	"github.com/nemocache/nemo/internal/tlsserve"
	"github.com/nemocache/nemo/internal/tlstest"
)

// Enabled reports whether the client suites serve over TLS
// (testenv.EnvTLS).
func Enabled() bool { return testenv.TLS() }

// Listener is a loopback listener served through tlsserve.
type Listener struct {
	net.Listener // what tlsserve.Reloader.Listen returned

	mu    sync.Mutex
	conns []*tlsserve.Conn
}

// Listen serves ln through tlsserve with a fresh certificate for the
// loopback addresses and localhost (and ln's address), signed by
// tlstest.Process, offering nextProtos by ALPN; plaintext is taken from
// loopback peers, as nemo's listeners take it.
func Listen(t testing.TB, ln net.Listener, nextProtos ...string) *Listener {
	t.Helper()
	var ips []net.IP
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		ips = append(ips, a.IP)
	}
	certFile, keyFile := tlstest.Process().Write(t, t.TempDir(), "nemo test frontend", ips...)
	r, err := tlsserve.NewReloader(certFile, keyFile, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	served.Store(addr, true)
	t.Cleanup(func() { served.Delete(addr) })
	return &Listener{Listener: r.Listen(ln, r.Config(nextProtos...), false)}
}

// served holds the addresses (host:port) Listen serves.
var served sync.Map

// Serves reports whether addr (host:port) is a listener Listen serves over
// TLS and not yet cleaned up: a harness's client uses TLS to it, and
// plaintext to anything else (the emulators, Azurite).
func Serves(addr string) bool {
	_, ok := served.Load(addr)
	return ok
}

// Accept accepts a connection and remembers it, to count it.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*tlsserve.Conn); ok {
		l.mu.Lock()
		l.conns = append(l.conns, tc)
		l.mu.Unlock()
	}
	return c, err
}

// Served counts the connections accepted so far and those of them that
// completed a TLS handshake.
func (l *Listener) Served() (all, overTLS int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		if _, ok := c.ConnectionState(); ok {
			overTLS++
		}
	}
	return len(l.conns), overTLS
}

// ClientConfig trusts the process's test CA only.
func ClientConfig() *tls.Config { return tlstest.Process().ClientConfig() }

// HTTPClient is an HTTP client trusting the process's test CA, with
// timeout (0: none). It speaks HTTP/1.1, as the SDKs' default
// transports do with a TLS configuration of their own.
func HTTPClient(timeout time.Duration) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = ClientConfig()
	return &http.Client{Transport: tr, Timeout: timeout}
}

type connKey struct{}

// ConnContext is an http.Server's ConnContext that keeps the connection
// in the requests' context, for WithTLSState.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// WithTLSState gives a request that came over a tlsserve connection its
// TLS state (Request.TLS), which net/http sets only for a *tls.Conn: nemo
// does the same (proxy's tlsState), and the Azure frontend reads it (SAS
// spr=https, the URLs it answers with). The server must set ConnContext.
func WithTLSState(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*tlsserve.Conn); ok && r.TLS == nil {
			if st, ok := c.ConnectionState(); ok {
				r.TLS = &st
			}
		}
		h.ServeHTTP(w, r)
	})
}
