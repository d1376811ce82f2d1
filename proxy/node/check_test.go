package node

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters"
	dsstore "github.com/nemocache/nemo/adapters/datastore"
	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
	"github.com/nemocache/nemo/txn"
)

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// remoteConfig is a node over Azurite or the Datastore emulator in
// coherence mode mode; at, when set, replaces the backend's address.
func remoteConfig(t testing.TB, backend config.BackendType, mode txn.Coherence, key, at string) config.Config {
	cfg := testConfig(t)
	cfg.Backend.Type = backend
	cfg.Coherence.Mode = mode
	switch backend {
	case config.BackendDatastore:
		cfg.Backend.Datastore.Project, cfg.Backend.Datastore.EmulatorHost = dstest.Project(t), dstest.Emulator(t)
		if at != "" {
			cfg.Backend.Datastore.EmulatorHost = at
		}
	case config.BackendAzTable:
		u := aztest.Azurite(t)
		if at != "" {
			u = "http://" + at + "/" + aztest.Account
		}
		cfg.Backend.AzTable.ConnectionString = aztest.ConnectionString(u, key)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// logBuffer is a goroutine-safe JSON log sink.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(l, nil)) }

// TestStartCheckRefusesBadCredential: in front of Azurite with a wrong
// account key, Open fails with ErrCredentialRefused (and
// adapters.ErrAccessDenied: Azurite's 403) and logs an error naming the
// backend, the endpoint and the setting the credential came from, never
// the key itself. The right key opens.
func TestStartCheckRefusesBadCredential(t *testing.T) {
	wrong := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("x"), 64))
	for _, mode := range []txn.Coherence{txn.Shared, txn.Exclusive} {
		t.Run(string(mode), func(t *testing.T) {
			var logs logBuffer
			cfg := remoteConfig(t, config.BackendAzTable, mode, wrong, "")
			n, err := Open(cfg, logs.logger())
			if err == nil {
				n.Close()
				t.Fatal("Open with a wrong account key succeeded")
			}
			if !errors.Is(err, ErrCredentialRefused) || !errors.Is(err, adapters.ErrAccessDenied) {
				t.Fatalf("Open with a wrong account key: %v, want ErrCredentialRefused and adapters.ErrAccessDenied", err)
			}
			line := logLine(t, logs.String(), "backend refused nemo's credential: fix the credential and start again")
			for _, want := range []string{`"level":"ERROR"`, `"backend":"aztable"`, `"endpoint":"` + aztest.Azurite(t) + `"`,
				"NEMO_BACKEND_AZTABLE_CONNECTION_STRING", "account key"} {
				if !strings.Contains(line, want) {
					t.Errorf("the log line lacks %s: %s", want, line)
				}
			}
			if strings.Contains(logs.String()+err.Error(), wrong) {
				t.Error("the key is in the log or the error")
			}
			t.Logf("%v", err)
		})
	}
	n, err := Open(remoteConfig(t, config.BackendAzTable, txn.Shared, aztest.Key, ""), quiet)
	if err != nil {
		t.Fatalf("Open with the right key: %v", err)
	}
	if ok, why := n.Ready(); !ok || !n.BackendUp() {
		t.Errorf("with the right key: ready %v (%s), backend up %v", ok, why, n.BackendUp())
	}
	n.Close()
}

// logLine returns the log line whose msg is msg.
func logLine(t *testing.T, logs, msg string) string {
	t.Helper()
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `"msg":"`+msg+`"`) {
			return l
		}
	}
	t.Fatalf("no log line %q in:\n%s", msg, logs)
	return ""
}

// TestStartCheckDatastoreRefused: the Datastore emulators take any
// credential, so a refusal is injected below the adapter (a gRPC
// interceptor answering as the service does): PERMISSION_DENIED and
// UNAUTHENTICATED fail the start-up check with ErrCredentialRefused;
// UNAVAILABLE does not (the backend is down, not refusing).
func TestStartCheckDatastoreRefused(t *testing.T) {
	for _, c := range []struct {
		code    codes.Code
		refused bool
	}{{codes.PermissionDenied, true}, {codes.Unauthenticated, true}, {codes.Unavailable, false}} {
		t.Run(c.code.String(), func(t *testing.T) {
			cfg := remoteConfig(t, config.BackendDatastore, txn.Shared, "", "")
			s, err := dsstore.Open(context.Background(), dsstore.Options{EmulatorHost: cfg.Backend.Datastore.EmulatorHost,
				Project: cfg.Backend.Datastore.Project, Retries: -1, Logger: quiet,
				Interceptors: []grpc.UnaryClientInterceptor{func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
					return status.Error(c.code, "injected: the caller does not have permission")
				}}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var logs logBuffer
			unreached, err := checkBackend(s, cfg, logs.logger())
			switch {
			case c.refused && (!errors.Is(err, ErrCredentialRefused) || !errors.Is(err, adapters.ErrAccessDenied)):
				t.Fatalf("start-up check answered %v: %v, want ErrCredentialRefused", c.code, err)
			case c.refused:
				line := logLine(t, logs.String(), "backend refused nemo's credential: fix the credential and start again")
				if !strings.Contains(line, `"endpoint":"`+cfg.Backend.Datastore.EmulatorHost+`"`) || !strings.Contains(line, "NEMO_BACKEND_DATASTORE_EMULATOR_HOST") {
					t.Errorf("the log line names neither the endpoint nor the setting: %s", line)
				}
			case err != nil || unreached == nil:
				t.Fatalf("start-up check answered %v: %v, unreached %v; want the backend unreached, not an error", c.code, err, unreached)
			}
		})
	}
}

// TestStartCheckUnreachable: a backend that does not answer (a closed
// port) is no reason to stop: Open succeeds after a warning, and the node
// starts with the backend down; in coherence shared it is not ready, in
// exclusive it is (the WAL takes writes).
func TestStartCheckUnreachable(t *testing.T) {
	for _, backend := range []config.BackendType{config.BackendAzTable, config.BackendDatastore} {
		for _, mode := range []txn.Coherence{txn.Shared, txn.Exclusive} {
			t.Run(string(backend)+"/"+string(mode), func(t *testing.T) {
				var logs logBuffer
				began := time.Now()
				n, err := Open(remoteConfig(t, backend, mode, aztest.Key, closedAddr(t)), logs.logger())
				if err != nil {
					t.Fatalf("Open with the backend's port closed: %v", err)
				}
				defer n.Close()
				took := time.Since(began)
				if took > probeTimeout+2*time.Second {
					t.Errorf("Open took %v, past the check's bound %v", took, probeTimeout)
				}
				msg := "backend did not answer the start-up check: starting anyway, not ready until it answers"
				if mode == txn.Exclusive {
					msg = "backend did not answer the start-up check: starting anyway, ready while the WAL takes writes"
				}
				logLine(t, logs.String(), msg)
				ready, why := n.Ready()
				if n.BackendUp() || ready != (mode == txn.Exclusive) {
					t.Fatalf("after an unanswered check: backend up %v, ready %v (%s)", n.BackendUp(), ready, why)
				}
				t.Logf("opened in %v; ready %v %s", took.Round(time.Millisecond), ready, why)
			})
		}
	}
}
