package main

import (
	"context"
	"errors"
	"testing"

	"cloud.google.com/go/datastore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/internal/dstest"
)

// TestBinaryBackendLogDatastore runs a nemo process with wal.location
// backend in front of both Datastore emulators, through the Go Datastore
// client: a transaction writing two namespaces is refused with
// INVALID_ARGUMENT (not a retryable code: sent again it is refused again)
// and writes nothing; transactions and writes in one namespace are
// acknowledged once in the backend log, which /metrics counts; SIGTERM
// drains them to the store (exit 0), a checkpoint empties the log, and
// the released leases let another node write at once.
func TestBinaryBackendLogDatastore(t *testing.T) {
	for _, b := range dsBackendEnvs() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			project := dstest.Project(t)
			// start runs a nemo with its own data directory (so its own
			// node id) and returns a client through it.
			start := func() (*proc, *datastore.Client) {
				addr := stableAddr(t)
				p := startCmd(t, serveProcess(t, t.TempDir(), []string{"--listen-datastore", addr},
					"NEMO_COHERENCE_MODE=exclusive", "NEMO_WAL_LOCATION=backend", "NEMO_COHERENCE_LEASE_TTL=3s",
					"NEMO_BACKEND_TYPE=datastore", "NEMO_BACKEND_DATASTORE_PROJECT="+project,
					"NEMO_BACKEND_DATASTORE_EMULATOR_HOST="+b.host(t)))
				p.waitReady(t)
				return p, dsClient(t, project, addr)
			}
			p, c := start()
			key := func(ns, name string) *datastore.Key {
				k := datastore.NameKey("Doc", name, nil)
				k.Namespace = ns
				return k
			}

			_, err := c.RunInTransaction(ctx, func(tx *datastore.Transaction) error {
				if _, err := tx.Put(key("a", "x"), &dsEntity{V: "1"}); err != nil {
					return err
				}
				_, err := tx.Put(key("b", "x"), &dsEntity{V: "1"})
				return err
			})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("a transaction over two namespaces: %v, want InvalidArgument", err)
			}
			for _, ns := range []string{"a", "b"} {
				if err := c.Get(ctx, key(ns, "x"), &dsEntity{}); !errors.Is(err, datastore.ErrNoSuchEntity) {
					t.Fatalf("after the refused transaction, %s/x: %v, want no entity", ns, err)
				}
			}

			if _, err := c.RunInTransaction(ctx, func(tx *datastore.Transaction) error {
				for _, name := range []string{"x", "y"} {
					if _, err := tx.Put(key("a", name), &dsEntity{V: "t"}); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatalf("a transaction in one namespace: %v", err)
			}
			if _, err := c.Put(ctx, key("b", "z"), &dsEntity{V: "p"}); err != nil {
				t.Fatal(err)
			}
			if n := p.metric(t, "nemo_backend_log_appends_total"); n < 2 {
				t.Fatalf("nemo_backend_log_appends_total %v after two acknowledged commits", n)
			}
			if n := p.metric(t, "nemo_backend_log_append_errors_total"); n != 0 {
				t.Fatalf("nemo_backend_log_append_errors_total %v", n)
			}

			drain(t, p)
			direct := dsClient(t, project, b.host(t))
			for _, k := range []*datastore.Key{key("a", "x"), key("a", "y"), key("b", "z")} {
				var e dsEntity
				if err := direct.Get(ctx, k, &e); err != nil {
					t.Fatalf("the store after the drain, %v: %v", k, err)
				}
			}
			// The drain's checkpoint truncated the logs: nothing is left
			// for a next owner to replay.
			q := datastore.NewQuery("NemoLogEntry").KeysOnly()
			keys, err := direct.GetAll(ctx, q, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) != 0 {
				t.Fatalf("%d log entries left after a clean drain: %v", len(keys), keys)
			}

			// The drain released the leases: another node (another
			// data directory, so another node id) writes at once. A
			// lease left to lapse would refuse it with
			// FAILED_PRECONDITION for the 3 s TTL.
			p2, c2 := start()
			if _, err := c2.Put(ctx, key("a", "w"), &dsEntity{V: "next"}); err != nil {
				t.Fatalf("the next node's first write after a clean hand-over: %v", err)
			}
			var e dsEntity
			if err := c2.Get(ctx, key("a", "x"), &e); err != nil || e.V != "t" {
				t.Fatalf("the next node reads a/x = %+v, %v", e, err)
			}
			drain(t, p2)
			if err := direct.Get(ctx, key("a", "w"), &e); err != nil || e.V != "next" {
				t.Fatalf("the store after the next node's drain: a/w = %+v, %v", e, err)
			}
		})
	}
}
