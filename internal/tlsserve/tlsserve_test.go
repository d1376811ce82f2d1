package tlsserve

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nemocache/nemo/internal/remotetest"
	"github.com/nemocache/nemo/internal/tlstest"
)

// served is the common name of the certificate r serves now.
func served(t *testing.T, r *Reloader) string {
	t.Helper()
	c, err := r.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf.Subject.CommonName
}

// TestReloaderRotates: a new pair written over the files is served by the
// first handshake after the interval, not before; a pair that does not
// load (a key of another certificate, a file cut short, a file missing)
// keeps the served one, with one WARN per bad pair, and the next good pair
// is taken. The metrics count both.
func TestReloaderRotates(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := ca.Write(t, dir, "first")
	// GetCertificate runs on this goroutine only: the log and the clock
	// need no locks.
	var logs bytes.Buffer
	r, err := NewReloader(certFile, keyFile, 10*time.Second, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	now := r.checked
	r.now = func() time.Time { return now }
	advance := func() { now = now.Add(10 * time.Second) }

	expect := func(what, cn string) {
		t.Helper()
		if got := served(t, r); got != cn {
			t.Fatalf("%s: serving %q, want %q", what, got, cn)
		}
	}
	lines := func(sub string, n int) {
		t.Helper()
		if got := strings.Count(logs.String(), sub); got != n {
			t.Errorf("%d lines with %q, want %d:\n%s", got, sub, n, logs.String())
		}
	}
	ca.Write(t, dir, "second")
	expect("before the interval", "first")
	advance()
	expect("after the interval", "second")
	lines("certificate reloaded", 1)

	ca.WriteBadPair(t, dir, "third")
	for range 3 {
		advance()
		expect("a bad pair", "second")
	}
	lines("level=WARN", 1)
	certPEM, keyPEM := ca.Issue(t, "fourth")
	tlstest.WritePair(t, dir, certPEM[:len(certPEM)/2], keyPEM)
	advance()
	expect("a truncated certificate", "second")
	tlstest.WritePair(t, dir, certPEM, keyPEM)
	advance()
	expect("a good pair after bad ones", "fourth")
	lines("level=WARN", 2)
	if ok, failed := metric(t, r, "nemo_tls_certificate_reloads_total", "ok"), metric(t, r, "nemo_tls_certificate_reloads_total", "failed"); ok != 2 || failed != 2 {
		t.Errorf("reloads ok %v failed %v, want 2 and 2", ok, failed)
	}
}

// metric is the value of r's metric name, with the result label res if
// it has one.
func metric(t *testing.T, r *Reloader, name, res string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(r)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() == res {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no %s{result=%q}", name, res)
	return 0
}

// TestNewReloaderRefusesBadPair: a pair that does not load at start is an
// error that names the files.
func TestNewReloaderRefusesBadPair(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	ca.WriteBadPair(t, dir, "a")
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	_, err := NewReloader(certFile, keyFile, time.Second, slog.Default())
	if err == nil || !strings.Contains(err.Error(), certFile) || !strings.Contains(err.Error(), keyFile) {
		t.Fatalf("mismatched pair: %v", err)
	}
	if _, err := NewReloader(certFile+".missing", keyFile, time.Second, slog.Default()); err == nil {
		t.Fatal("missing file loaded")
	}
}

// serveHTTP serves "ok" on ln until the test ends.
func serveHTTP(t *testing.T, ln net.Listener) {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

func get(t *testing.T, c *http.Client, url string) (int, string, error) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestListenSortsConnections: on loopback a listener serves both TLS and
// plaintext; from a peer off loopback it serves TLS, and plaintext only
// when allowed, otherwise answering 400 with the reason (counted).
func TestListenSortsConnections(t *testing.T) {
	ca := tlstest.NewCA(t)
	ip := remotetest.IP(t)
	certFile, keyFile := ca.Write(t, t.TempDir(), "nemo", ip.AsSlice())
	r, err := NewReloader(certFile, keyFile, time.Second, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	tlsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig()}}
	plainClient := &http.Client{Transport: &http.Transport{}}
	for _, tc := range []struct {
		name   string
		ln     net.Listener
		plain  bool
		refuse bool // plaintext is refused
	}{
		{"loopback", listenOn(t, "127.0.0.1:0"), false, false},
		{"remote", remotetest.Listen(t), false, true},
		{"remote, plaintext allowed", remotetest.Listen(t), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln := r.Listen(tc.ln, r.Config("http/1.1"), tc.plain)
			serveHTTP(t, ln)
			addr := ln.Addr().String()
			if code, body, err := get(t, tlsClient, "https://"+addr+"/"); err != nil || code != 200 || body != "ok" {
				t.Fatalf("https: %d %q %v", code, body, err)
			}
			before := metric(t, r, "nemo_tls_plaintext_refused_total", "")
			code, body, err := get(t, plainClient, "http://"+addr+"/")
			after := metric(t, r, "nemo_tls_plaintext_refused_total", "")
			switch {
			case err != nil:
				t.Fatalf("http: %v", err)
			case tc.refuse && (code != 400 || !strings.Contains(body, "requires TLS from clients not on loopback") || after != before+1):
				t.Fatalf("plaintext from a remote client: %d %q, refused counter %v -> %v", code, body, before, after)
			case !tc.refuse && (code != 200 || body != "ok" || after != before):
				t.Fatalf("plaintext: %d %q, refused counter %v -> %v", code, body, before, after)
			}
		})
	}
}

func listenOn(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}
