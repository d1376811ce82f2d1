package datastore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/datastore"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

// TestContentionAsTheEmulator plays, through the Go client, the contention
// cases where the service completes the calls (issue 12): against the
// emulator itself and against nemo over each backend, every call must
// succeed and every read return what the service's does. nemo waits for a
// lock where the emulator (optimistic) lets a call through at once; the
// outcomes are the same.
func TestContentionAsTheEmulator(t *testing.T) {
	type Doc struct{ N int64 }
	play := func(t *testing.T, c *datastore.Client) []string {
		ctx := context.Background()
		var got []string
		note := func(format string, args ...any) { got = append(got, fmt.Sprintf(format, args...)) }
		k := datastore.NameKey("Contended", "k", nil)
		if _, err := c.Put(ctx, k, &Doc{N: 1}); err != nil {
			t.Fatal(err)
		}
		// Two read-write transactions read one entity: both go on.
		tx1, err := c.NewTransaction(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tx2, err := c.NewTransaction(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var d1, d2 Doc
		note("tx1 read: %v %d", tx1.Get(k, &d1), d1.N)
		note("tx2 read: %v %d", tx2.Get(k, &d2), d2.N)
		// A read-only transaction reads beside them.
		ro, err := c.NewTransaction(ctx, datastore.ReadOnly)
		if err != nil {
			t.Fatal(err)
		}
		var r Doc
		note("ro read: %v %d", ro.Get(k, &r), r.N)
		// A plain Put of the entity they read succeeds (nemo: once the
		// readers are done).
		put := make(chan error, 1)
		go func() {
			_, err := c.Put(ctx, k, &Doc{N: 2})
			put <- err
		}()
		note("tx2 rollback: %v", tx2.Rollback())
		_, err = tx1.Commit()
		note("tx1 commit (no writes): %v", err)
		note("put: %v", <-put)
		note("ro commit: %v", func() error { _, err := ro.Commit(); return err }())
		var after Doc
		note("after: %v %d", c.Get(ctx, k, &after), after.N)

		// Eight clients incrementing one counter in transactions: all
		// succeed (the client retries ABORTED), none is lost.
		ck := datastore.NameKey("Contended", "counter", nil)
		var wg sync.WaitGroup
		var failed error
		var mu sync.Mutex
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 5; i++ {
					_, err := c.RunInTransaction(ctx, func(tx *datastore.Transaction) error {
						var d Doc
						if err := tx.Get(ck, &d); err != nil && !errors.Is(err, datastore.ErrNoSuchEntity) {
							return err
						}
						d.N++
						_, err := tx.Put(ck, &d)
						return err
					}, datastore.MaxAttempts(200))
					if err != nil {
						mu.Lock()
						failed = errors.Join(failed, err)
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		var ctr Doc
		note("counter: %v %v %d", failed, c.Get(ctx, ck, &ctr), ctr.N)
		return got
	}
	emu := dstest.Emulator(t)
	var want []string
	t.Run("emulator-itself", func(t *testing.T) {
		want = play(t, client(t, emu, dstest.Project(t)))
	})

	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			project := dstest.Project(t)
			n := startNemo(t, b, project, cache.Options{})
			start := time.Now()
			got := play(t, client(t, n.addr, project))
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("nemo:\n%q\nthe emulator:\n%q", got, want)
			}
			t.Logf("%v; engine %+v", time.Since(start).Round(time.Millisecond), n.engine.Stats())
		})
	}
}
