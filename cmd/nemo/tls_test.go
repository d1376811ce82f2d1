package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
	"github.com/nemocache/nemo/internal/remotetest"
	"github.com/nemocache/nemo/internal/tlstest"
)

// TestBinaryRemotePlaintextRefused: in front of Azurite or the Datastore
// emulator, a frontend off loopback whose remote clients authenticate
// (the operator's key, the token) but without listen.tls exits 2 before
// binding anything, naming listen.tls as the fix; listen.allow_remote
// starts it with one warning that says remote credentials cross in the
// clear.
func TestBinaryRemotePlaintextRefused(t *testing.T) {
	ip := remotetest.IP(t)
	secrets := []string{"NEMO_FRONTEND_AZURE_KEY=" + randomSecret(t), "NEMO_FRONTEND_DATASTORE_TOKEN=" + randomSecret(t)}
	for _, be := range cloudBackends(t) {
		t.Run(be.name, func(t *testing.T) {
			args := []string{be.flag, net.JoinHostPort(ip.String(), "0")}
			out, err := runTimeout(t, serveProcess(t, t.TempDir(), args, slices.Concat(be.env, secrets)...))
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != exitUsage {
				t.Fatalf("exit %v, want status %d:\n%s", err, exitUsage, out)
			}
			for _, want := range []string{"is not a loopback address and listen.tls is not set, so remote clients would send",
				"NEMO_LISTEN_TLS_CERT_FILE", "or set listen.allow_remote: true to accept the risk"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "admin listener up") {
				t.Errorf("nemo started serving before refusing:\n%s", out)
			}
			p := startCmd(t, serveProcess(t, t.TempDir(), args, slices.Concat(be.env, secrets, []string{"NEMO_LISTEN_ALLOW_REMOTE=true"})...))
			p.waitReady(t)
			if w := warnings(p, "frontend takes remote credentials in the clear"); len(w) != 1 || w[0]["setting"] != be.key {
				t.Errorf("warnings %v:\n%s", w, p.logs())
			}
			drain(t, p)
		})
	}
}

// TestBinaryTLSAllowRemote: with listen.tls and listen.allow_remote, a
// remote client may still use plaintext (the Go Datastore client with
// the token, as before TLS), and each start says so in a warning.
func TestBinaryTLSAllowRemote(t *testing.T) {
	ip := remotetest.IP(t)
	ca := tlstest.NewCA(t)
	certFile, keyFile := ca.Write(t, t.TempDir(), "nemo", ip.AsSlice())
	token, project := randomSecret(t), dstest.Project(t)
	env := []string{"NEMO_BACKEND_TYPE=datastore", "NEMO_BACKEND_DATASTORE_PROJECT=" + project,
		"NEMO_BACKEND_DATASTORE_EMULATOR_HOST=" + dstest.Emulator(t), "NEMO_FRONTEND_DATASTORE_TOKEN=" + token,
		"NEMO_LISTEN_TLS_CERT_FILE=" + certFile, "NEMO_LISTEN_TLS_KEY_FILE=" + keyFile, "NEMO_LISTEN_ALLOW_REMOTE=true"}
	p := startCmd(t, serveProcess(t, t.TempDir(), []string{"--listen-datastore", net.JoinHostPort(ip.String(), "0")}, env...))
	p.waitReady(t)
	if w := warnings(p, "listen.allow_remote: frontend accepts plaintext from remote clients"); len(w) != 1 || w[0]["setting"] != "listen.datastore" {
		t.Errorf("warnings %v:\n%s", w, p.logs())
	}
	_, dsAddr := frontendAddrs(t, p)
	ctx := context.Background()
	k := datastore.NameKey("Plain", "k", nil)
	c := dsClient(t, project, dsAddr, option.WithGRPCDialOption(grpc.WithPerRPCCredentials(bearer(token))))
	if _, err := c.Put(ctx, k, &dsEntity{V: "x"}); err != nil {
		t.Fatalf("plaintext from remote under allow_remote: %v", err)
	}
	var e dsEntity
	tc := dsTLSClient(t, project, dsAddr, ca, option.WithoutAuthentication(), option.WithGRPCDialOption(grpc.WithPerRPCCredentials(bearer(token))))
	if err := tc.Get(ctx, k, &e); err != nil || e.V != "x" {
		t.Fatalf("TLS from remote: %+v %v", e, err)
	}
	drain(t, p)
}

// TestBinaryTLSRotation: the certificate files are replaced under a
// running nemo (as cert-manager renews a Secret): the next handshake on
// the frontend and on listen.http serves the new pair, without a restart,
// and the aztables SDK goes on over https; a pair that does not load keeps
// the served one, with a warning and the failed-reload counter. listen.http
// answers the probes in plaintext and over TLS.
func TestBinaryTLSRotation(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := ca.Write(t, dir, "first")
	p := startNemo(t, t.TempDir(), "NEMO_LISTEN_TLS_CERT_FILE="+certFile, "NEMO_LISTEN_TLS_KEY_FILE="+keyFile,
		"NEMO_LISTEN_TLS_RELOAD_INTERVAL=1ns") // every handshake checks the files
	p.waitReady(t)
	azAddr, _ := frontendAddrs(t, p)
	for _, addr := range []string{azAddr, p.http} {
		if cn := ca.ServedCN(t, addr); cn != "first" {
			t.Fatalf("%s serves %q, want first", addr, cn)
		}
	}
	ctx := context.Background()
	svc := azureTLSClient(t, azAddr, aztest.Key, ca)
	name := aztest.TableName("rotate")
	if _, err := svc.CreateTable(ctx, name, nil); err != nil {
		t.Fatalf("aztables over https: %v", err)
	}

	ca.Write(t, dir, "second")
	for _, addr := range []string{azAddr, p.http} {
		if cn := ca.ServedCN(t, addr); cn != "second" {
			t.Fatalf("after rotation %s serves %q, want second", addr, cn)
		}
	}
	<-p.logged("listen.tls: certificate reloaded")
	svc = azureTLSClient(t, azAddr, aztest.Key, ca) // a new connection, a new handshake
	if _, err := svc.NewClient(name).AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil); err != nil {
		t.Fatalf("aztables over https after rotation: %v", err)
	}

	ca.WriteBadPair(t, dir, "third")
	if cn := ca.ServedCN(t, azAddr); cn != "second" {
		t.Fatalf("after a bad pair %s serves %q, want second kept", azAddr, cn)
	}
	select {
	case <-p.logged("listen.tls: the certificate files changed but do not load; serving the previous certificate"):
	case <-time.After(10 * time.Second):
		t.Fatalf("no warning about the bad pair:\n%s", p.logs())
	}
	tlsGet := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig()}}
	resp, err := tlsGet.Get("https://" + p.http + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz over TLS: %v %v", resp, err)
	}
	resp.Body.Close()
	if ok, failed := p.metric(t, `nemo_tls_certificate_reloads_total{result="ok"}`), p.metric(t, `nemo_tls_certificate_reloads_total{result="failed"}`); ok != 1 || failed != 1 {
		t.Errorf("reloads ok %v failed %v, want 1 and 1", ok, failed)
	}
	drain(t, p)
}

// TestBinaryTLSBadPairAtStart: a certificate that does not load at start
// stops nemo before it serves, naming listen.tls and the file.
func TestBinaryTLSBadPairAtStart(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "tls.crt")
	cmd := serveProcess(t, t.TempDir(), nil, "NEMO_LISTEN_TLS_CERT_FILE="+missing, "NEMO_LISTEN_TLS_KEY_FILE="+missing)
	out, err := runTimeout(t, cmd)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFailure || !strings.Contains(out, "listen.tls") || !strings.Contains(out, missing) {
		t.Fatalf("exit %v, want status %d naming listen.tls and %s:\n%s", err, exitFailure, missing, out)
	}
}
