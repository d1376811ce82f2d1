package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"golang.org/x/oauth2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
	"github.com/nemocache/nemo/internal/remotetest"
	"github.com/nemocache/nemo/internal/tlstest"
)

// cloudBackends are the two cloud backends, each pointed at its emulator
// (an emulator endpoint counts as a cloud backend for the exposure rule),
// with the frontend flag it serves on.
func cloudBackends(t *testing.T) []struct {
	name, flag, key string
	env             []string
} {
	return []struct {
		name, flag, key string
		env             []string
	}{
		{"aztable", "--listen-azure-table", "listen.azure_table",
			[]string{"NEMO_BACKEND_TYPE=aztable", "NEMO_BACKEND_AZTABLE_CONNECTION_STRING=" + aztest.ConnectionString(aztest.Azurite(t), aztest.Key)}},
		{"datastore", "--listen-datastore", "listen.datastore",
			[]string{"NEMO_BACKEND_TYPE=datastore", "NEMO_BACKEND_DATASTORE_PROJECT=" + dstest.Project(t), "NEMO_BACKEND_DATASTORE_EMULATOR_HOST=" + dstest.Emulator(t)}},
	}
}

// TestBinaryRefusesOpenListener: `nemo serve` in front of Azurite or the
// Datastore emulator, with the frontend bound off loopback and nothing but
// the defaults to authenticate clients, exits 2 before it binds anything,
// naming the setting and the safe alternatives; whether the address is
// this machine's interface address, all interfaces or an IPv6 wildcard.
func TestBinaryRefusesOpenListener(t *testing.T) {
	ip := remotetest.IP(t)
	for _, be := range cloudBackends(t) {
		for _, host := range []string{ip.String(), "0.0.0.0", "::", ""} {
			addr := net.JoinHostPort(host, "0")
			t.Run(be.name+" "+addr, func(t *testing.T) {
				cmd := serveProcess(t, t.TempDir(), []string{be.flag, addr}, be.env...)
				out, err := runTimeout(t, cmd)
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != exitUsage {
					t.Fatalf("exit %v, want status %d:\n%s", err, exitUsage, out)
				}
				for _, want := range []string{
					fmt.Sprintf("%s (%s): %q is not a loopback address", be.key, config.EnvName(be.key), addr),
					"Bind it to a loopback address such as 127.0.0.1",
					"or set listen.allow_remote: true to accept the risk",
				} {
					if !strings.Contains(out, want) {
						t.Errorf("output lacks %q:\n%s", want, out)
					}
				}
				if strings.Contains(out, "admin listener up") {
					t.Errorf("nemo started serving before refusing:\n%s", out)
				}
			})
		}
	}
}

// runTimeout runs cmd to completion (a minute at most) and returns its
// combined output.
func runTimeout(t *testing.T, cmd *exec.Cmd) (string, error) {
	t.Helper()
	done := make(chan struct{})
	timer := time.AfterFunc(time.Minute, func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
		}
	})
	defer timer.Stop()
	out, err := cmd.CombinedOutput()
	close(done)
	return string(out), err
}

// warnings returns the WARN lines of p's log whose msg contains sub.
func warnings(p *proc, sub string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(p.logs(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["level"] == "WARN" && strings.Contains(fmt.Sprint(rec["msg"]), sub) {
			out = append(out, rec)
		}
	}
	return out
}

// TestBinaryAllowRemote: listen.allow_remote: true starts the refused
// configurations, warning at every start, and the frontend is then indeed
// open to a client that is not on loopback (the development key signs for
// anyone; the Datastore frontend asks for nothing). Over the embedded store
// the same bind starts without allow_remote, with the warning.
func TestBinaryAllowRemote(t *testing.T) {
	ip := remotetest.IP(t)
	ctx := context.Background()
	for _, be := range cloudBackends(t) {
		t.Run(be.name, func(t *testing.T) {
			dataDir := t.TempDir()
			args := []string{be.flag, net.JoinHostPort(ip.String(), "0")}
			env := append(be.env, "NEMO_LISTEN_ALLOW_REMOTE=true")
			for start := 1; start <= 2; start++ {
				p := startCmd(t, serveProcess(t, dataDir, args, env...))
				p.waitReady(t)
				w := warnings(p, "listen.allow_remote")
				if len(w) != 1 || w[0]["setting"] != be.key || !strings.HasPrefix(fmt.Sprint(w[0]["addr"]), ip.String()) {
					t.Fatalf("start %d: allow_remote warnings %v:\n%s", start, w, p.logs())
				}
				if start == 1 {
					openToAnyone(t, ctx, p, be.name)
				}
				drain(t, p)
			}
		})
	}
	t.Run("embedded", func(t *testing.T) {
		p := startNemo(t, t.TempDir()) // loopback: no warning
		p.waitReady(t)
		if w := warnings(p, "open to anyone"); len(w) != 0 {
			t.Errorf("warnings on loopback: %v", w)
		}
		drain(t, p)
		remote := net.JoinHostPort(ip.String(), "0")
		p = startCmd(t, serveProcess(t, t.TempDir(), []string{"--listen-azure-table", remote, "--listen-datastore", remote}))
		p.waitReady(t)
		w := warnings(p, "local emulator use")
		if len(w) != 2 || w[0]["setting"] != "listen.azure_table" || w[1]["setting"] != "listen.datastore" ||
			!strings.Contains(fmt.Sprint(w[0]["why"]), "published development key") {
			t.Fatalf("embedded warnings %v:\n%s", w, p.logs())
		}
		openToAnyone(t, ctx, p, "aztable")
		drain(t, p)
	})
}

// openToAnyone uses the frontend of backend from p's non-loopback address
// with nothing but what every emulator guide publishes.
func openToAnyone(t *testing.T, ctx context.Context, p *proc, backend string) {
	t.Helper()
	azAddr, dsAddr := frontendAddrs(t, p)
	switch backend {
	case "aztable":
		svc := azureClient(t, azAddr, aztest.Key)
		name := aztest.TableName("open")
		if _, err := svc.CreateTable(ctx, name, nil); err != nil {
			t.Fatalf("well-known key from %s: %v", azAddr, err)
		}
		_, _ = svc.DeleteTable(ctx, name, nil)
	case "datastore":
		c := dsClient(t, dstest.Project(t), dsAddr)
		if _, err := c.Put(ctx, datastore.NameKey("Open", "k", nil), &dsEntity{V: "x"}); err != nil {
			t.Fatalf("no credentials from %s: %v", dsAddr, err)
		}
	}
}

// azureClient is an aztables client of nemo's Azure frontend at addr,
// signing with key; retries off.
func azureClient(t *testing.T, addr, key string) *aztables.ServiceClient {
	t.Helper()
	conn := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;TableEndpoint=http://%s/%s;",
		aztest.Account, key, addr, aztest.Account)
	svc, err := aztables.NewServiceClientFromConnectionString(conn,
		&aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// bearer is the per-RPC credential that sends the Datastore token.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

func randomSecret(t *testing.T) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// TestBinaryRemoteAuthenticated: with the secrets set (a frontend key of
// the operator's with require_sas; a Datastore token) and listen.tls, the
// frontends start on all interfaces in front of Azurite and the emulator
// without allow_remote and without a warning. A remote client gets in only
// over TLS, with the real SDKs (aztables on an https endpoint with Shared
// Key and SAS, the Go Datastore client with TLS transport credentials and
// the token), and only with what the frontend demands; a remote plaintext
// client is refused; the pod's own application on loopback keeps its
// plaintext connection string and emulator host. The secrets never reach
// the log (at debug level) and `nemo config print` redacts them.
func TestBinaryRemoteAuthenticated(t *testing.T) {
	ip := remotetest.IP(t)
	ctx := context.Background()
	key, token := randomSecret(t), randomSecret(t)
	ca := tlstest.NewCA(t)
	certFile, keyFile := ca.Write(t, t.TempDir(), "nemo", ip.AsSlice())
	secrets := []string{"NEMO_FRONTEND_AZURE_KEY=" + key, "NEMO_FRONTEND_AZURE_REQUIRE_SAS=true", "NEMO_FRONTEND_DATASTORE_TOKEN=" + token}
	tlsEnv := []string{"NEMO_LISTEN_TLS_CERT_FILE=" + certFile, "NEMO_LISTEN_TLS_KEY_FILE=" + keyFile}
	for _, be := range cloudBackends(t) {
		t.Run(be.name, func(t *testing.T) {
			p := startCmd(t, serveProcess(t, t.TempDir(), []string{be.flag, "0.0.0.0:0"}, slices.Concat(be.env, secrets, tlsEnv)...))
			p.waitReady(t)
			remote, local := remoteAndLocal(t, p, be.name, ip)
			switch be.name {
			case "aztable":
				remoteAzure(t, ctx, ca, remote, local, key)
			case "datastore":
				remoteDatastore(t, ctx, ca, remote, local, token)
			}
			drain(t, p)
			logs := p.logs()
			if w := slices.Concat(warnings(p, "open to anyone"), warnings(p, "in the clear"), warnings(p, "plaintext")); len(w) != 0 {
				t.Errorf("warnings with the secrets and TLS set: %v", w)
			}
			for _, s := range []string{key, token} {
				if strings.Contains(logs, s) {
					t.Errorf("the log contains a secret:\n%s", logs)
				}
			}
		})
	}
	t.Run("config print", func(t *testing.T) {
		cmd := exec.Command(nemoBinary(t), "config", "print")
		cmd.Env = append(cmd.Environ(), secrets...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if strings.Contains(string(out), key) || strings.Contains(string(out), token) ||
			strings.Count(string(out), config.RedactedValue) < 2 || !strings.Contains(string(out), "require_sas: true") {
			t.Errorf("config print:\n%s", out)
		}
	})
}

// remoteAndLocal are the addresses of p's frontend for backend (bound to
// all interfaces) from a remote client (this machine's address ip) and
// from a client on loopback.
func remoteAndLocal(t *testing.T, p *proc, backend string, ip netip.Addr) (remote, local string) {
	t.Helper()
	azAddr, dsAddr := frontendAddrs(t, p)
	addr := azAddr
	if backend == "datastore" {
		addr = dsAddr
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(ip.String(), port), net.JoinHostPort("127.0.0.1", port)
}

// remoteAzure: from remote over TLS the development key and the frontend
// key (Shared Key) are refused as require_sas demands and a SAS signed
// with the frontend key, restricted to HTTPS, gets in; a plaintext remote
// client gets 400 before any signature is looked at; on loopback the
// frontend key over plaintext still gets in.
func remoteAzure(t *testing.T, ctx context.Context, ca *tlstest.CA, remote, local, key string) {
	t.Helper()
	_, err := azureTLSClient(t, remote, aztest.Key, ca).CreateTable(ctx, aztest.TableName("dev"), nil)
	wantAzure(t, "the development key", err, "KeyBasedAuthenticationNotPermitted")
	_, err = azureTLSClient(t, remote, key, ca).CreateTable(ctx, aztest.TableName("key"), nil)
	wantAzure(t, "the frontend key (Shared Key, remote)", err, "KeyBasedAuthenticationNotPermitted")
	cred, err := aztables.NewSharedKeyCredential(aztest.Account, key)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	qp, err := aztables.AccountSASSignatureValues{Protocol: aztables.SASProtocolHTTPS,
		StartTime: now.Add(-time.Hour), ExpiryTime: now.Add(time.Hour),
		Permissions: "rwdlacu", Services: "t", ResourceTypes: "sco"}.Sign(cred)
	if err != nil {
		t.Fatal(err)
	}
	sas, err := aztables.NewServiceClientWithNoCredential("https://"+remote+"/"+aztest.Account+"/?"+qp.Encode(),
		&aztables.ClientOptions{ClientOptions: trustingCA(ca)})
	if err != nil {
		t.Fatal(err)
	}
	name := aztest.TableName("sas")
	if _, err := sas.CreateTable(ctx, name, nil); err != nil {
		t.Fatalf("SAS (spr=https) signed with the frontend key, over TLS: %v", err)
	}
	if _, err := sas.NewClient(name).AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil); err != nil {
		t.Fatalf("SAS insert: %v", err)
	}
	if st, code := aztest.Status(func() error {
		_, err := azureClient(t, remote, key).CreateTable(ctx, aztest.TableName("plain"), nil)
		return err
	}()); st != 400 {
		t.Fatalf("Shared Key over plaintext from remote: %d %s, want 400", st, code)
	}
	local0 := azureClient(t, local, key)
	if _, err := local0.NewClient(name).AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"local"}`), nil); err != nil {
		t.Fatalf("Shared Key over plaintext on loopback: %v", err)
	}
	if _, err := sas.DeleteTable(ctx, name, nil); err != nil {
		t.Fatalf("SAS delete table: %v", err)
	}
}

// remoteDatastore: from remote over TLS no token and a wrong one get
// UNAUTHENTICATED and the token gets in (as a per-RPC credential, and as
// the client's token source); a plaintext remote client is refused; on
// loopback the emulator-style plaintext client needs nothing.
func remoteDatastore(t *testing.T, ctx context.Context, ca *tlstest.CA, remote, local, token string) {
	t.Helper()
	project := dstest.Project(t)
	k := datastore.NameKey("Auth", "k", nil)
	none := option.WithoutAuthentication()
	if _, err := dsTLSClient(t, project, remote, ca, none).Put(ctx, k, &dsEntity{V: "x"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v, want UNAUTHENTICATED", err)
	}
	wrong := option.WithGRPCDialOption(grpc.WithPerRPCCredentials(bearer(randomSecret(t))))
	if _, err := dsTLSClient(t, project, remote, ca, none, wrong).Put(ctx, k, &dsEntity{V: "x"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("wrong token: %v, want UNAUTHENTICATED", err)
	}
	c := dsTLSClient(t, project, remote, ca, none, option.WithGRPCDialOption(grpc.WithPerRPCCredentials(bearer(token))))
	if _, err := c.Put(ctx, k, &dsEntity{V: "x"}); err != nil {
		t.Fatalf("token over TLS: %v", err)
	}
	ts := option.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token}))
	var e dsEntity
	if err := dsTLSClient(t, project, remote, ca, ts).Get(ctx, k, &e); err != nil || e.V != "x" {
		t.Fatalf("token source over TLS: %+v %v", e, err)
	}
	// REST over TLS on the same port (ALPN gives an HTTP client HTTP/1.1).
	tlsHTTP := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig()}}
	for tok, want := range map[string]int{token: http.StatusOK, "": http.StatusUnauthorized} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+remote+"/v1/projects/"+project+":lookup",
			strings.NewReader(`{"keys":[{"path":[{"kind":"Auth","name":"k"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := tlsHTTP.Do(req)
		if err != nil || resp.StatusCode != want || resp.Proto != "HTTP/1.1" {
			t.Fatalf("REST lookup over TLS (token %v): %v %v, want %d over HTTP/1.1", tok != "", resp, err, want)
		}
		resp.Body.Close()
	}
	// The client retries until its deadline, reading an HTTP/1.0 answer
	// where it expects HTTP/2.
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := dsClient(t, project, remote, option.WithGRPCDialOption(grpc.WithPerRPCCredentials(bearer(token)))).Put(short, k, &dsEntity{V: "y"})
	if err == nil || !strings.Contains(err.Error(), "error reading server preface") {
		t.Fatalf("token over plaintext from remote: %v, want the server's preface refused", err)
	}
	if err := dsClient(t, project, local).Get(ctx, k, &e); err != nil || e.V != "x" {
		t.Fatalf("plaintext on loopback, no token: %+v %v", e, err)
	}
}

// trustingCA are client options whose transport trusts ca only; retries
// off.
func trustingCA(ca *tlstest.CA) azcore.ClientOptions {
	return azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1},
		Transport: &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig()}}}
}

// azureTLSClient is an aztables client of nemo's Azure frontend at addr
// over https, signing with key and trusting ca.
func azureTLSClient(t *testing.T, addr, key string, ca *tlstest.CA) *aztables.ServiceClient {
	t.Helper()
	conn := fmt.Sprintf("DefaultEndpointsProtocol=https;AccountName=%s;AccountKey=%s;TableEndpoint=https://%s/%s;",
		aztest.Account, key, addr, aztest.Account)
	svc, err := aztables.NewServiceClientFromConnectionString(conn, &aztables.ClientOptions{ClientOptions: trustingCA(ca)})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// dsTLSClient is a Go Datastore client of addr over TLS trusting ca, as a
// remote application configures one; opts add to its options and must
// say how it authenticates (option.WithoutAuthentication for none or for a
// per-RPC credential, or a token source).
func dsTLSClient(t *testing.T, project, addr string, ca *tlstest.CA, opts ...option.ClientOption) *datastore.Client {
	t.Helper()
	base := []option.ClientOption{option.WithEndpoint(addr),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(credentials.NewTLS(ca.ClientConfig())))}
	c, err := datastore.NewClient(context.Background(), project, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func wantAzure(t *testing.T, what string, err error, code string) {
	t.Helper()
	if st, c := aztest.Status(err); st != 403 || c != code {
		t.Fatalf("%s: %d %s (%v), want 403 %s", what, st, c, err, code)
	}
}
