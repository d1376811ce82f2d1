// Package tlstest makes the certificates TLS tests need: a self-signed CA
// and server certificates it signs, written as PEM files the way a
// cert-manager Secret is mounted (tls.crt, tls.key), and the pool that
// trusts the CA for the clients.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// CA is a self-signed certificate authority.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

// NewCA makes a CA valid for a day.
func NewCA(t testing.TB) *CA {
	t.Helper()
	ca, err := newCA()
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

var process struct {
	once sync.Once
	ca   *CA
	err  error
}

// Process is one CA for the whole test process, made on first use: the
// CA that the harnesses serving their frontends over TLS
// (internal/tlsfront) sign with, so that a client made anywhere in the
// package, before or without a test's nemo, can trust it.
func Process() *CA {
	process.once.Do(func() { process.ca, process.err = newCA() })
	if process.err != nil {
		panic("tlstest: " + process.err.Error())
	}
	return process.ca
}

func newCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "nemo test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{cert: cert, key: key, pool: pool}, nil
}

// PEM is the CA's certificate as PEM, for clients outside the process
// (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS).
func (ca *CA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
}

// Pool trusts the CA only.
func (ca *CA) Pool() *x509.CertPool { return ca.pool }

// ClientConfig is a TLS client configuration that trusts the CA only.
func (ca *CA) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}
}

// Issue signs a server certificate for ips and "localhost" whose subject
// common name is cn, and returns it and its key as PEM.
func (ca *CA) Issue(t testing.TB, cn string, ips ...net.IP) (certPEM, keyPEM []byte) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, ips...),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// Write issues a certificate as Issue does and writes the pair into dir as
// tls.crt and tls.key, replacing what is there; it returns the two paths.
func (ca *CA) Write(t testing.TB, dir, cn string, ips ...net.IP) (certFile, keyFile string) {
	t.Helper()
	certPEM, keyPEM := ca.Issue(t, cn, ips...)
	return WritePair(t, dir, certPEM, keyPEM)
}

// WriteBadPair writes into dir, as Write does, a certificate for cn with
// the key of another certificate: a pair that does not load.
func (ca *CA) WriteBadPair(t testing.TB, dir, cn string) {
	t.Helper()
	certPEM, _ := ca.Issue(t, cn)
	_, otherKey := ca.Issue(t, cn)
	WritePair(t, dir, certPEM, otherKey)
}

// WritePair writes a pair into dir as tls.crt and tls.key, each replaced
// atomically (written aside, then renamed), and returns the two paths.
func WritePair(t testing.TB, dir string, certPEM, keyPEM []byte) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for name, data := range map[string][]byte{certFile: certPEM, keyFile: keyPEM} {
		tmp := name + ".tmp"
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, name); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}

// ServedCN dials addr over TLS trusting ca and returns the common name of
// the certificate the server presented.
func (ca *CA) ServedCN(t testing.TB, addr string) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, ca.ClientConfig())
	if err != nil {
		t.Fatalf("TLS handshake with %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
