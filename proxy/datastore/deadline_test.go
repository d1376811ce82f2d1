package datastore

import (
	"context"
	"errors"
	"testing"
	"time"

	"cloud.google.com/go/datastore"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

type contendedDoc struct{ N int64 }

// TestContentionAnsweredAborted: in front of Firestore, whose read-write
// transactions lock what they read and whose writers give up waiting after
// a 2 s lock timeout (ABORTED), a transaction through nemo in coherence
// shared whose commit meets another transaction's lock is answered ABORTED
// (nothing applied: the client runs it again) before its request's
// deadline. nemo used to run the backend transaction again after the lock
// timeout, and the deadline cut that second run short: DEADLINE_EXCEEDED,
// which leaves the client unsure and which RunInTransaction does not retry
// (the flakes of TestBinaryBank/firestore/shared and
// TestBinaryCoherenceSharedDatastore/firestore).
func TestContentionAnsweredAborted(t *testing.T) {
	fs := dstest.FirestoreEmulator(t)
	ctx := context.Background()
	project := dstest.Project(t)
	const deadline = 3 * time.Second
	n := startNemoServed(t, firestoreBackend(fs, true), project, cache.Options{}, serving{requestTimeout: deadline})
	c := client(t, n.addr, project)
	direct := client(t, fs, project)
	k := datastore.NameKey("Contended", "k", nil)
	if _, err := direct.Put(ctx, k, &contendedDoc{1}); err != nil {
		t.Fatal(err)
	}
	// A transaction straight on Firestore reads k, which locks it, and
	// holds the lock for longer than the request's deadline.
	holder, err := direct.NewTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var e contendedDoc
	if err := holder.Get(k, &e); err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()

	start := time.Now()
	err = incrementOnce(ctx, c, k)
	took := time.Since(start)
	// The Go client reads a commit's ABORTED as ErrConcurrentTransaction.
	if !errors.Is(err, datastore.ErrConcurrentTransaction) {
		t.Fatalf("a commit meeting a lock held past the deadline: %v after %v, want ABORTED", err, took)
	}
	if took >= deadline {
		t.Fatalf("answered after %v, not before the %v deadline", took, deadline)
	}
	holder.Rollback()
	var got contendedDoc
	if err := direct.Get(ctx, k, &got); err != nil || got.N != 1 {
		t.Fatalf("after the aborted transaction the store holds %+v (%v), want N=1", got, err)
	}
	t.Logf("ABORTED after %v: %v", took.Round(time.Millisecond), err)
}

// incrementOnce runs one transaction that reads k's N and writes N+1, with
// no second attempt.
func incrementOnce(ctx context.Context, c *datastore.Client, k *datastore.Key) error {
	_, err := c.RunInTransaction(ctx, func(tx *datastore.Transaction) error {
		var e contendedDoc
		if err := tx.Get(k, &e); err != nil {
			return err
		}
		e.N++
		_, err := tx.Put(k, &e)
		return err
	}, datastore.MaxAttempts(1))
	return err
}
