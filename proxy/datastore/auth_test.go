package datastore

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"golang.org/x/oauth2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
	"github.com/nemocache/nemo/internal/remotetest"
	"github.com/nemocache/nemo/internal/testenv"
)

const testToken = "s3cr3t-Token_0123456789+/=="

// bearer is the per-RPC credential an application gives the Go client
// (option.WithGRPCDialOption(grpc.WithPerRPCCredentials(bearer(token))))
// to send the token over the emulator's plaintext connection.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false: gRPC refuses to send a credential
// that requires TLS over a plaintext connection.
func (bearer) RequireTransportSecurity() bool { return false }

type tokenEntity struct{ N int }

// TestTokenRemoteGoClient: with Options.Token, the Go Datastore client
// connecting from a non-loopback address of this machine (a real remote
// peer) is refused UNAUTHENTICATED without the token or with a wrong one,
// and served with it, whichever way the application hands the client the
// token; the ways that do not work (a token source with
// DATASTORE_EMULATOR_HOST, metadata in the call's context) fail as the
// README says.
func TestTokenRemoteGoClient(t *testing.T) {
	project := dstest.Project(t)
	n := startNemoServed(t, embeddedBackend(t.TempDir()), project, cache.Options{}, serving{ln: remotetest.Listen(t), token: testToken})
	ctx := context.Background()
	key := datastore.NameKey("K", "k", nil)
	use := func(t *testing.T, c *datastore.Client, ctx context.Context) error {
		t.Helper()
		if _, err := c.Put(ctx, key, &tokenEntity{N: 7}); err != nil {
			return err
		}
		var e tokenEntity
		if err := c.Get(ctx, key, &e); err != nil {
			return err
		}
		if e.N != 7 {
			t.Fatalf("got %+v", e)
		}
		return nil
	}
	emulatorClient := func(t *testing.T, opts ...option.ClientOption) *datastore.Client {
		t.Setenv("DATASTORE_EMULATOR_HOST", n.addr)
		c, err := datastore.NewClient(ctx, project, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	refused := func(t *testing.T, err error) {
		t.Helper()
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("got %v, want UNAUTHENTICATED", err)
		}
		if strings.Contains(err.Error(), testToken) {
			t.Fatal("the refusal quotes the token")
		}
	}

	t.Run("no token", func(t *testing.T) {
		refused(t, use(t, emulatorClient(t), ctx))
	})
	t.Run("wrong token", func(t *testing.T) {
		refused(t, use(t, emulatorClient(t, option.WithGRPCDialOption(grpc.WithPerRPCCredentials(bearer(testToken+"x")))), ctx))
		refused(t, use(t, emulatorClient(t, option.WithGRPCDialOption(grpc.WithPerRPCCredentials(bearer(testToken[:len(testToken)-1])))), ctx))
	})
	t.Run("emulator host and per-RPC credential", func(t *testing.T) {
		if err := use(t, emulatorClient(t, option.WithGRPCDialOption(grpc.WithPerRPCCredentials(bearer(testToken)))), ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("per-call metadata is dropped", func(t *testing.T) {
		// The client replaces a call's outgoing metadata with its own, so
		// a token put there never leaves: the README says to use a
		// per-RPC credential instead.
		c := emulatorClient(t)
		refused(t, use(t, c, metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+testToken)))
	})
	t.Run("endpoint and token source", func(t *testing.T) {
		c, err := datastore.NewClient(ctx, project, option.WithEndpoint(n.addr),
			option.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: testToken})),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := use(t, c, ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("emulator host and token source", func(t *testing.T) {
		t.Setenv("DATASTORE_EMULATOR_HOST", n.addr)
		c, err := datastore.NewClient(ctx, project, option.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: testToken})))
		if err == nil {
			c.Close()
			t.Fatal("NewClient took a token source with DATASTORE_EMULATOR_HOST: the README's list of ways to send the token is out of date")
		}
	})
}

// TestTokenLoopbackExempt: a client on loopback needs no token, as the
// application in the pod (an unmodified emulator client) sends none.
func TestTokenLoopbackExempt(t *testing.T) {
	project := dstest.Project(t)
	n := startNemoServed(t, embeddedBackend(t.TempDir()), project, cache.Options{}, serving{token: testToken})
	c := client(t, n.addr, project)
	if _, err := c.Put(context.Background(), datastore.IDKey("K", 1, nil), &tokenEntity{N: 1}); err != nil {
		t.Fatal(err)
	}
	code, _ := restCall(t, restURL(n.addr)+"/v1/projects/"+project+":lookup", "", `{"keys":[{"path":[{"kind":"K","id":"1"}]}]}`)
	if code != http.StatusOK {
		t.Fatalf("REST lookup from loopback: %d", code)
	}
}

// restCall POSTs body with the Authorization header auth (none if empty)
// and returns the status and the decoded JSON.
func restCall(t *testing.T, url, auth, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := restHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("not JSON: %q", raw)
	}
	if resp.StatusCode == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer ") {
		t.Errorf("401 without a Bearer challenge: WWW-Authenticate %q", resp.Header.Get("WWW-Authenticate"))
	}
	return resp.StatusCode, out
}

// TestTokenRemoteREST: the REST API on the same listener checks the same
// token: 401 with Google's JSON error (UNAUTHENTICATED) without it, with
// a wrong one or another scheme; served with it. The emulator's health
// check needs none.
func TestTokenRemoteREST(t *testing.T) {
	project := dstest.Project(t)
	n := startNemoServed(t, embeddedBackend(t.TempDir()), project, cache.Options{}, serving{ln: remotetest.Listen(t), token: testToken})
	url := restURL(n.addr) + "/v1/projects/" + project + ":commit"
	body := `{"mode":"NON_TRANSACTIONAL","mutations":[{"upsert":{"key":{"path":[{"kind":"K","name":"a"}]},"properties":{"n":{"integerValue":"1"}}}}]}`
	for _, auth := range []string{"", "Bearer wrong-token-0123456789", "Bearer " + testToken + "x", "Basic " + testToken, testToken, "Bearer"} {
		code, out := restCall(t, url, auth, body)
		e, _ := out["error"].(map[string]any)
		if code != http.StatusUnauthorized || e["code"] != float64(401) || e["status"] != "UNAUTHENTICATED" || e["message"] == "" {
			t.Errorf("Authorization %q: %d %v, want 401 UNAUTHENTICATED", auth, code, out)
		}
	}
	for _, auth := range []string{"Bearer " + testToken, "bearer " + testToken} {
		if code, out := restCall(t, url, auth, body); code != http.StatusOK {
			t.Errorf("Authorization %q: %d %v", auth, code, out)
		}
	}
	resp, err := restHTTP.Get(restURL(n.addr) + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("health check: %s", resp.Status)
	}
}

func TestTokenCheck(t *testing.T) {
	c := newTokenCheck(testToken)
	for _, tc := range []struct {
		remote string
		values []string
		want   codes.Code
	}{
		{"127.0.0.1:1", nil, codes.OK},
		{"[::1]:1", []string{"Bearer nonsense"}, codes.OK},
		{"192.0.2.2:1", []string{"Bearer " + testToken}, codes.OK},
		{"192.0.2.2:1", []string{"BEARER " + testToken}, codes.OK},
		{"192.0.2.2:1", nil, codes.Unauthenticated},
		{"192.0.2.2:1", []string{""}, codes.Unauthenticated},
		{"192.0.2.2:1", []string{"Bearer "}, codes.Unauthenticated},
		{"192.0.2.2:1", []string{testToken}, codes.Unauthenticated},
		{"192.0.2.2:1", []string{"Basic " + testToken}, codes.Unauthenticated},
		{"192.0.2.2:1", []string{"Bearer " + strings.ToUpper(testToken)}, codes.Unauthenticated},
		{"192.0.2.2:1", []string{"Bearer " + testToken, "Bearer " + testToken}, codes.Unauthenticated},
		{"", []string{"Bearer x"}, codes.Unauthenticated}, // no peer: remote
	} {
		if got := status.Code(c.verify(tc.remote, tc.values)); got != tc.want {
			t.Errorf("verify(%q, %q) = %v, want %v", tc.remote, tc.values, got, tc.want)
		}
	}
}

// TestTokenNodeClient runs testdata/node/token.js: what the Node client
// can do to send the token, against nemo on a non-loopback address.
func TestTokenNodeClient(t *testing.T) {
	dir := os.Getenv(EnvNodeModules)
	if dir == "" {
		testenv.Missing(t, EnvNodeModules+" is not set", ".ci/test installs @google-cloud/datastore and sets it")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found: %v", err)
	}
	project := dstest.Project(t)
	n := startNemoServed(t, embeddedBackend(t.TempDir()), project, cache.Options{}, serving{ln: remotetest.Listen(t), token: testToken})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "node", "token.js"))
	cmd.Env = append(os.Environ(),
		"DATASTORE_EMULATOR_HOST="+n.addr,
		"DATASTORE_PROJECT_ID="+project,
		"NEMO_TOKEN="+testToken,
		"NODE_PATH="+filepath.Join(dir, "node_modules"),
		"METADATA_SERVER_DETECTION=none")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node token test failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// BenchmarkTokenCheck is the cost Options.Token adds to a call: from
// loopback (exempt) and from a remote client with the right token.
func BenchmarkTokenCheck(b *testing.B) {
	c := newTokenCheck(testToken)
	for _, bc := range []struct{ name, remote string }{{"loopback", "127.0.0.1:50000"}, {"remote", "192.0.2.2:50000"}} {
		values := []string{"Bearer " + testToken}
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.verify(bc.remote, values); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
