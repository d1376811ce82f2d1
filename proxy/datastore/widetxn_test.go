package datastore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"cloud.google.com/go/datastore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

// TestWideTransactionAnsweredAsTheBackend: in coherence shared a client
// transaction writing more entity groups than the backend takes in one
// (legacy Datastore: 25) gets the backend's own refusal through nemo, as
// it does directly, and nothing of it is written; nemo no longer wrote it
// in parts that are not atomic together. A non-transactional commit of
// the same entities is applied, as the service applies it (not
// atomically), and a Firestore backend takes the transaction whole.
func TestWideTransactionAnsweredAsTheBackend(t *testing.T) {
	for _, b := range []backend{datastoreBackend("emulator-shared", dstest.Emulator, true), firestoreBackend(dstest.FirestoreEmulator(t), true)} {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			project := dstest.Project(t)
			n := startNemo(t, b, project, cache.Options{})
			through := client(t, n.addr, project)
			direct := client(t, b.reference(t), project)
			keys := func(prefix string) ([]*datastore.Key, []*wideEntity) {
				var ks []*datastore.Key
				var vs []*wideEntity
				for i := range 30 {
					ks = append(ks, datastore.NameKey("Wide", fmt.Sprintf("%s%02d", prefix, i), nil))
					vs = append(vs, &wideEntity{V: prefix})
				}
				return ks, vs
			}
			inTxn := func(c *datastore.Client, prefix string) error {
				ks, vs := keys(prefix)
				_, err := c.RunInTransaction(ctx, func(tx *datastore.Transaction) error {
					_, err := tx.PutMulti(ks, vs)
					return err
				}, datastore.MaxAttempts(1))
				return err
			}
			count := func(prefix string) int {
				ks, _ := keys(prefix)
				vs := make([]wideEntity, len(ks))
				err := direct.GetMulti(ctx, ks, vs)
				n := len(ks)
				if me, ok := err.(datastore.MultiError); ok {
					for _, e := range me {
						if e == datastore.ErrNoSuchEntity {
							n--
						}
					}
				} else if err != nil {
					t.Fatal(err)
				}
				return n
			}
			want := inTxn(direct, "d")
			got := inTxn(through, "n")
			if status.Code(want) != status.Code(got) || (want != nil && !strings.Contains(got.Error(), status.Convert(want).Message())) {
				t.Fatalf("a transaction of 30 entity groups: directly %v, through nemo %v", want, got)
			}
			if want != nil {
				if status.Code(got) != codes.InvalidArgument {
					t.Fatalf("refused with %v, want INVALID_ARGUMENT", got)
				}
				if c := count("n"); c != 0 {
					t.Fatalf("a refused transaction wrote %d of its 30 entities", c)
				}
			} else if c := count("n"); c != 30 {
				t.Fatalf("the transaction wrote %d of 30", c)
			}
			t.Logf("a transaction of 30 entity groups: %v", got)
			ks, vs := keys("p")
			if _, err := through.PutMulti(ctx, ks, vs); err != nil {
				t.Fatalf("a non-transactional commit of 30 entity groups: %v", err)
			}
			if c := count("p"); c != 30 {
				t.Fatalf("the non-transactional commit wrote %d of 30", c)
			}
		})
	}
}

type wideEntity struct{ V string }
