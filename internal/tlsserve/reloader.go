package tlsserve

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reloader holds the serving certificate read from a certificate and a key
// file (PEM) and reloads it when the files change. Its GetCertificate is a
// tls.Config's.
type Reloader struct {
	certFile, keyFile string
	every             time.Duration
	log               *slog.Logger
	now               func() time.Time // time.Now; a test's clock

	mu       sync.Mutex
	cert     *tls.Certificate
	notAfter time.Time
	certPEM  []byte // what cert was loaded from
	keyPEM   []byte
	badPEM   []byte // the last pair that failed (cert then key), warned about once
	checked  time.Time
	reloads  uint64
	failures uint64
	refused  atomic.Uint64 // plaintext connections refused (Listen)
}

// NewReloader reads the pair and returns a Reloader that checks the files
// again at most once per every. A pair that does not load is an error.
func NewReloader(certFile, keyFile string, every time.Duration, log *slog.Logger) (*Reloader, error) {
	r := &Reloader{certFile: certFile, keyFile: keyFile, every: every, log: log, now: time.Now}
	certPEM, keyPEM, err := r.read()
	if err == nil {
		err = r.take(certPEM, keyPEM)
	}
	if err != nil {
		return nil, fmt.Errorf("tlsserve: %w", err)
	}
	r.checked = r.now()
	return r, nil
}

func (r *Reloader) read() (certPEM, keyPEM []byte, err error) {
	if certPEM, err = os.ReadFile(r.certFile); err != nil {
		return nil, nil, err
	}
	if keyPEM, err = os.ReadFile(r.keyFile); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// take makes the pair the serving certificate if it loads. r.mu is held
// (or r is not shared yet).
func (r *Reloader) take(certPEM, keyPEM []byte) error {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("load %s and %s: %w", r.certFile, r.keyFile, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("parse %s: %w", r.certFile, err)
	}
	cert.Leaf = leaf
	r.cert, r.notAfter, r.certPEM, r.keyPEM = &cert, leaf.NotAfter, certPEM, keyPEM
	return nil
}

// GetCertificate returns the serving certificate, first reloading it if the
// interval has passed since the last check and the files changed.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= r.every {
		r.checked = now
		r.reload()
	}
	return r.cert, nil
}

// reload reads the files and takes them if they differ from the serving
// pair; a pair that fails to load is warned about once and the serving one
// kept. r.mu is held.
func (r *Reloader) reload() {
	certPEM, keyPEM, err := r.read()
	if err == nil && bytes.Equal(certPEM, r.certPEM) && bytes.Equal(keyPEM, r.keyPEM) {
		return
	}
	pair := append(append([]byte{}, certPEM...), keyPEM...)
	if err == nil {
		if err = r.take(certPEM, keyPEM); err == nil {
			r.reloads++
			r.badPEM = nil
			r.log.Info("listen.tls: certificate reloaded", "cert_file", r.certFile,
				"subject", r.cert.Leaf.Subject.String(), "not_after", r.notAfter)
			return
		}
	}
	if errors.Is(err, os.ErrNotExist) || !bytes.Equal(pair, r.badPEM) {
		// A missing file is warned about at each check: it is not a pair
		// that can be remembered.
		r.failures++
		r.badPEM = pair
		r.log.Warn("listen.tls: the certificate files changed but do not load; serving the previous certificate",
			"cert_file", r.certFile, "key_file", r.keyFile, "err", err.Error(), "not_after", r.notAfter)
	}
}

// Config is a TLS server configuration (TLS 1.2 at least) serving r's
// certificate and offering nextProtos by ALPN in that order of preference.
func (r *Reloader) Config(nextProtos ...string) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate, NextProtos: nextProtos}
}

var (
	reloadsDesc = prometheus.NewDesc("nemo_tls_certificate_reloads_total",
		"Certificate reloads from listen.tls's files: ok (a new pair is served), failed (a changed pair did not load; the previous one is kept).", []string{"result"}, nil)
	expiryDesc = prometheus.NewDesc("nemo_tls_certificate_expiry_timestamp_seconds",
		"When the serving certificate expires (Unix seconds).", nil, nil)
	refusedDesc = prometheus.NewDesc("nemo_tls_plaintext_refused_total",
		"Plaintext connections refused because the client is not on loopback and the listener requires TLS.", nil, nil)
)

// Describe and Collect make r a prometheus.Collector of its reloads, its
// certificate's expiry and the plaintext connections refused.
func (r *Reloader) Describe(ch chan<- *prometheus.Desc) {
	ch <- reloadsDesc
	ch <- expiryDesc
	ch <- refusedDesc
}

func (r *Reloader) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	ok, failed, notAfter := r.reloads, r.failures, r.notAfter
	r.mu.Unlock()
	refused := r.refused.Load()
	ch <- prometheus.MustNewConstMetric(reloadsDesc, prometheus.CounterValue, float64(ok), "ok")
	ch <- prometheus.MustNewConstMetric(reloadsDesc, prometheus.CounterValue, float64(failed), "failed")
	ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue, float64(notAfter.Unix()))
	ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(refused))
}
