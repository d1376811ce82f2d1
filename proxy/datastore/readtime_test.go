package datastore

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

// readTimeView is what a client reads at one read_time: three keys by
// Lookup (one changed after it, one deleted after it, one created after
// it), a query over their kind, a count, and the same by Lookup and query
// in a read-only transaction at that read_time.
type readTimeView struct {
	Changed, Deleted, Created string // N of each, or "absent"
	Query                     []string
	Count                     int
	TxnChanged, TxnDeleted    string
	TxnQuery                  []string
}

type rtEntity struct{ N string }

// readAt reads the view at rt through two clients of addr: one set to
// read at rt (the Go client keeps read options on the client, and then
// refuses queries in transactions), one for the transaction.
func readAt(t *testing.T, addr, project, kind string, rt time.Time) (readTimeView, error) {
	t.Helper()
	ctx := context.Background()
	c, plain := client(t, addr, project), client(t, addr, project)
	var v readTimeView
	get := func(g func(*datastore.Key, any) error, name string) (string, error) {
		var e rtEntity
		err := g(datastore.NameKey(kind, name, nil), &e)
		if errors.Is(err, datastore.ErrNoSuchEntity) {
			return "absent", nil
		}
		return e.N, err
	}
	c = c.WithReadOptions(datastore.ReadTime(rt))
	cget := func(k *datastore.Key, dst any) error { return c.Get(ctx, k, dst) }
	var err error
	if v.Changed, err = get(cget, "changed"); err != nil {
		return v, err
	}
	if v.Deleted, err = get(cget, "deleted"); err != nil {
		return v, err
	}
	if v.Created, err = get(cget, "created"); err != nil {
		return v, err
	}
	names := func(c *datastore.Client, q *datastore.Query) ([]string, error) {
		var es []rtEntity
		if _, err := c.GetAll(ctx, q, &es); err != nil {
			return nil, err
		}
		var out []string
		for _, e := range es {
			out = append(out, e.N)
		}
		return out, nil
	}
	if v.Query, err = names(c, datastore.NewQuery(kind)); err != nil {
		return v, err
	}
	if v.Count, err = c.Count(ctx, datastore.NewQuery(kind)); err != nil {
		return v, err
	}
	tx, err := plain.NewTransaction(ctx, datastore.ReadOnly, datastore.WithReadTime(rt))
	if err != nil {
		return v, err
	}
	defer tx.Rollback()
	if v.TxnChanged, err = get(tx.Get, "changed"); err != nil {
		return v, err
	}
	if v.TxnDeleted, err = get(tx.Get, "deleted"); err != nil {
		return v, err
	}
	v.TxnQuery, err = names(plain, datastore.NewQuery(kind).Transaction(tx))
	return v, err
}

// TestReadTime: a read at a read_time (Lookup, RunQuery,
// RunAggregationQuery, and a read-only transaction's reads) answers as the
// store answers it at that moment, past the buffer, which holds only the
// latest state. Before, nemo answered every such read with the latest
// state: in front of Firestore (production Datastore) a silently wrong
// answer. In coherence shared nemo's answer must equal the reference
// emulator's own at the same read_time (the Firestore emulator reads the
// past; the legacy emulator answers with its latest state); in coherence
// exclusive, in front of Datastore, where the store's past lacks what nemo
// has not yet written back, the read is refused (FAILED_PRECONDITION); the
// embedded store keeps no past and answers with the latest state, as the
// legacy emulator does.
func TestReadTime(t *testing.T) {
	fs := dstest.FirestoreEmulator(t)
	for _, b := range append(plainBackends(t), firestoreBackend(fs, false), firestoreBackend(fs, true)) {
		t.Run(b.name, func(t *testing.T) { readTimeCase(t, b, b.reference(t) == fs) })
	}
}

func readTimeCase(t *testing.T, b backend, firestore bool) {
	ctx := context.Background()
	project := dstest.Project(t)
	n := startNemo(t, b, project, cache.Options{})
	c := client(t, n.addr, project)
	kind := "RT"
	put := func(name, val string) {
		t.Helper()
		if _, err := c.Put(ctx, datastore.NameKey(kind, name, nil), &rtEntity{val}); err != nil {
			t.Fatal(err)
		}
	}
	put("changed", "old")
	put("deleted", "gone")
	// A read_time of a whole second (the Go client sends a Lookup's in
	// whole seconds), after the writes above and before those below.
	rt := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(rt.Add(300 * time.Millisecond)))
	put("changed", "new")
	put("created", "born")
	if err := c.Delete(ctx, datastore.NameKey(kind, "deleted", nil)); err != nil {
		t.Fatal(err)
	}
	// nemo has the latest state buffered: a read at rt must not take it.
	var e rtEntity
	if err := c.Get(ctx, datastore.NameKey(kind, "changed", nil), &e); err != nil || e.N != "new" {
		t.Fatalf("latest read: %+v %v", e, err)
	}
	got, err := readAt(t, n.addr, project, kind, rt)
	switch {
	case b.name == "embedded":
		latest := readTimeView{Changed: "new", Deleted: "absent", Created: "born", Query: []string{"new", "born"}, Count: 2,
			TxnChanged: "new", TxnDeleted: "absent", TxnQuery: []string{"new", "born"}}
		if err != nil || !reflect.DeepEqual(got, latest) {
			t.Fatalf("read at a read_time: %+v %v, want the latest state %+v", got, err, latest)
		}
		return
	case !b.shared:
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("coherence exclusive: read at a read_time: %+v %v, want FAILED_PRECONDITION", got, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("read at a read_time: %v", err)
	}
	want, err := readAt(t, b.reference(t), project, kind, rt)
	if status.Code(err) == codes.InvalidArgument && !firestore {
		// The legacy emulator allows only ancestor queries in a
		// transaction (docs/datastore.md): compare the rest.
		got.TxnQuery, err = nil, nil
	}
	if err != nil {
		t.Fatalf("the reference emulator's read at a read_time: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read at a read_time:\nnemo     %+v\nemulator %+v", got, want)
	}
	if firestore && got.Changed != "old" {
		t.Fatalf("the Firestore emulator read %+v at the read_time: the test shows nothing", want)
	}
	// A moment before the entities existed, and one in the future (which
	// Firestore refuses): nemo answers as the emulator does.
	for _, at := range []time.Time{rt.Add(-time.Hour), time.Now().Add(time.Hour).Truncate(time.Second)} {
		got, gotErr := lookupAt(n.addr, project, kind, at)
		want, wantErr := lookupAt(b.reference(t), project, kind, at)
		if got != want || status.Code(gotErr) != status.Code(wantErr) || status.Convert(gotErr).Message() != status.Convert(wantErr).Message() {
			t.Fatalf("Lookup at %v: nemo %q %v, the emulator %q %v", at, got, gotErr, want, wantErr)
		}
	}
}

// lookupAt looks "changed" up at at through a Datastore client of addr.
func lookupAt(addr, project, kind string, at time.Time) (string, error) {
	c, err := datastore.NewClient(context.Background(), project, clientOptions(addr)...)
	if err != nil {
		return "", err
	}
	defer c.Close()
	var e rtEntity
	err = c.WithReadOptions(datastore.ReadTime(at)).Get(context.Background(), datastore.NameKey(kind, "changed", nil), &e)
	if errors.Is(err, datastore.ErrNoSuchEntity) {
		return "absent", nil
	}
	return e.N, err
}
