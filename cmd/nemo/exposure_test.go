package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
	"github.com/nemocache/nemo/internal/remotetest"
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
// the operator's with require_sas; a Datastore token), the frontends start
// off loopback in front of Azurite and the emulator without allow_remote
// and without a warning, and a remote client gets in only with what they
// demand. The secrets never reach the log (at debug level) and `nemo
// config print` redacts them.
func TestBinaryRemoteAuthenticated(t *testing.T) {
	ip := remotetest.IP(t)
	ctx := context.Background()
	key, token := randomSecret(t), randomSecret(t)
	remote := net.JoinHostPort(ip.String(), "0")
	secrets := []string{"NEMO_FRONTEND_AZURE_KEY=" + key, "NEMO_FRONTEND_AZURE_REQUIRE_SAS=true", "NEMO_FRONTEND_DATASTORE_TOKEN=" + token}
	for _, be := range cloudBackends(t) {
		t.Run(be.name, func(t *testing.T) {
			p := startCmd(t, serveProcess(t, t.TempDir(), []string{be.flag, remote}, append(be.env, secrets...)...))
			p.waitReady(t)
			azAddr, dsAddr := frontendAddrs(t, p)
			switch be.name {
			case "aztable":
				_, err := azureClient(t, azAddr, aztest.Key).CreateTable(ctx, aztest.TableName("dev"), nil)
				wantAzure(t, "the development key", err, "KeyBasedAuthenticationNotPermitted")
				_, err = azureClient(t, azAddr, key).CreateTable(ctx, aztest.TableName("key"), nil)
				wantAzure(t, "the frontend key (Shared Key, remote)", err, "KeyBasedAuthenticationNotPermitted")
				cred, err := aztables.NewSharedKeyCredential(aztest.Account, key)
				if err != nil {
					t.Fatal(err)
				}
				now := time.Now().UTC()
				qp, err := aztables.AccountSASSignatureValues{Protocol: aztables.SASProtocolHTTPSandHTTP,
					StartTime: now.Add(-time.Hour), ExpiryTime: now.Add(time.Hour),
					Permissions: "rwdlacu", Services: "t", ResourceTypes: "sco"}.Sign(cred)
				if err != nil {
					t.Fatal(err)
				}
				sas, err := aztables.NewServiceClientWithNoCredential("http://"+azAddr+"/"+aztest.Account+"/?"+qp.Encode(), nil)
				if err != nil {
					t.Fatal(err)
				}
				name := aztest.TableName("sas")
				if _, err := sas.CreateTable(ctx, name, nil); err != nil {
					t.Fatalf("SAS signed with the frontend key: %v", err)
				}
				if _, err := sas.NewClient(name).AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil); err != nil {
					t.Fatalf("SAS insert: %v", err)
				}
				if _, err := sas.DeleteTable(ctx, name, nil); err != nil {
					t.Fatalf("SAS delete table: %v", err)
				}
			case "datastore":
				project := dstest.Project(t)
				k := datastore.NameKey("Auth", "k", nil)
				_, err := dsClient(t, project, dsAddr).Put(ctx, k, &dsEntity{V: "x"})
				if status.Code(err) != codes.Unauthenticated {
					t.Fatalf("no token: %v, want UNAUTHENTICATED", err)
				}
				_, err = dsClient(t, project, dsAddr, option.WithGRPCDialOption(grpc.WithPerRPCCredentials(bearer(key)))).Put(ctx, k, &dsEntity{V: "x"})
				if status.Code(err) != codes.Unauthenticated {
					t.Fatalf("wrong token: %v, want UNAUTHENTICATED", err)
				}
				c := dsClient(t, project, dsAddr, option.WithGRPCDialOption(grpc.WithPerRPCCredentials(bearer(token))))
				if _, err := c.Put(ctx, k, &dsEntity{V: "x"}); err != nil {
					t.Fatalf("token: %v", err)
				}
				var e dsEntity
				if err := c.Get(ctx, k, &e); err != nil || e.V != "x" {
					t.Fatalf("token get: %+v %v", e, err)
				}
			}
			drain(t, p)
			logs := p.logs()
			if w := warnings(p, "open to anyone"); len(w) != 0 {
				t.Errorf("warnings with the secrets set: %v", w)
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

func wantAzure(t *testing.T, what string, err error, code string) {
	t.Helper()
	if st, c := aztest.Status(err); st != 403 || c != code {
		t.Fatalf("%s: %d %s (%v), want 403 %s", what, st, c, err, code)
	}
}
