package datastore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/datastore"
	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

// TestWriteBackToEmulator: data already in the emulator is served through
// nemo; writes through nemo reach the emulator after a flush (and not
// before, in write-back mode); a new nemo over the same emulator sees
// everything.
func TestWriteBackToEmulator(t *testing.T) {
	emuAddr := dstest.Emulator(t)
	project := dstest.Project(t)
	ctx := context.Background()
	emu := client(t, emuAddr, project)
	type E struct{ N int }
	// Written to the emulator behind nemo's back, before nemo starts.
	for i := 1; i <= 5; i++ {
		if _, err := emu.Put(ctx, datastore.IDKey("Pre", int64(i), nil), &E{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	n := startNemo(t, emulatorBackend(), project, cache.Options{DisableWorkers: true})
	c := client(t, n.addr, project)
	var got []E
	if _, err := c.GetAll(ctx, datastore.NewQuery("Pre").FilterField("N", ">", 2).Order("-N"), &got); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[{5} {4} {3}]" {
		t.Fatalf("pre-existing data through nemo: %v", got)
	}
	// Writes, an update and a delete through nemo.
	var keys []*datastore.Key
	var vals []*E
	for i := 1; i <= 40; i++ {
		keys = append(keys, datastore.IDKey("W", int64(i), datastore.NameKey("Root", "r", nil)))
		vals = append(vals, &E{N: i})
	}
	if _, err := c.PutMulti(ctx, keys, vals); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, keys[0], &E{N: 100}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, keys[1]); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, datastore.IDKey("Pre", 1, nil)); err != nil {
		t.Fatal(err)
	}
	var e E
	if err := emu.Get(ctx, keys[5], &e); !errors.Is(err, datastore.ErrNoSuchEntity) {
		t.Fatalf("write reached the emulator before the flush (write-back expected): %v", err)
	}
	if err := n.engine.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := n.store.Stats(); st[adapters.OpUpsert].Records < 39 || st[adapters.OpDelete].Keys < 2 {
		t.Fatalf("the flush wrote %d records and deleted %d keys", st[adapters.OpUpsert].Records, st[adapters.OpDelete].Keys)
	}
	check := func(who string, cl *datastore.Client) {
		t.Helper()
		var all []E
		ks, err := cl.GetAll(ctx, datastore.NewQuery("W").Ancestor(datastore.NameKey("Root", "r", nil)), &all)
		if err != nil {
			t.Fatal(err)
		}
		if len(ks) != 39 || all[0].N != 100 || ks[1].ID != 3 {
			t.Fatalf("%s: %d entities, first %v, second key %v", who, len(ks), all[0], ks[1])
		}
		if err := cl.Get(ctx, datastore.IDKey("Pre", 1, nil), &e); !errors.Is(err, datastore.ErrNoSuchEntity) {
			t.Fatalf("%s: deleted entity present: %v", who, err)
		}
		var pre []*datastore.Key
		if pre, err = cl.GetAll(ctx, datastore.NewQuery("Pre").KeysOnly(), nil); err != nil || len(pre) != 4 {
			t.Fatalf("%s: %d Pre entities, %v", who, len(pre), err)
		}
	}
	check("emulator after flush", emu)
	// A fresh nemo (empty buffer) over the same emulator sees the same.
	n2 := startNemo(t, emulatorBackend(), project, cache.Options{DisableWorkers: true})
	check("restarted nemo", client(t, n2.addr, project))
	// Versions come from the backend once an entity is re-read from it.
	pc := pbClient(t, n2.addr)
	lr, err := pc.Lookup(ctx, &datastorepb.LookupRequest{ProjectId: project, Keys: []*datastorepb.Key{{
		PartitionId: &datastorepb.PartitionId{ProjectId: project},
		Path:        []*datastorepb.Key_PathElement{{Kind: "Root", IdType: &datastorepb.Key_PathElement_Name{Name: "r"}}, {Kind: "W", IdType: &datastorepb.Key_PathElement_Id{Id: 3}}}}}})
	if err != nil || len(lr.Found) != 1 || lr.Found[0].Version == 0 {
		t.Fatalf("lookup after restart: %v %v", lr, err)
	}
}

// poisonUpsert upserts through the raw gRPC client an entity K/name whose
// property p is, when poison, a vector (meaning 31 on an unindexed array of
// doubles): production Datastore and the Firestore emulator take it, so
// nemo does, but the legacy Datastore emulator refuses any meaning on an
// array ("A Value containing a list_value cannot specify a meaning."): a
// value only the backend refuses.
func poisonUpsert(t *testing.T, addr, project, name string, poison bool) error {
	t.Helper()
	v := &datastorepb.Value{ValueType: &datastorepb.Value_StringValue{StringValue: name}}
	if poison {
		v = &datastorepb.Value{Meaning: 31, ExcludeFromIndexes: true, ValueType: &datastorepb.Value_ArrayValue{ArrayValue: &datastorepb.ArrayValue{
			Values: []*datastorepb.Value{{ValueType: &datastorepb.Value_DoubleValue{DoubleValue: 1}}}}}}
	}
	e := &datastorepb.Entity{
		Key:        &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: project}, Path: []*datastorepb.Key_PathElement{{Kind: "P", IdType: &datastorepb.Key_PathElement_Name{Name: name}}}},
		Properties: map[string]*datastorepb.Value{"p": v},
	}
	_, err := pbClient(t, addr).Commit(context.Background(), &datastorepb.CommitRequest{ProjectId: project, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL,
		Mutations: []*datastorepb.Mutation{{Operation: &datastorepb.Mutation_Upsert{Upsert: e}}}})
	return err
}

// TestPoisonedWriteBackIsIsolated: nemo (write-back, in front of the
// emulator) acknowledges an entity the emulator refuses, between valid ones
// of the same kind. Write-back must isolate it: the valid entities reach
// the emulator, the flush succeeds, and the refused one is quarantined and
// counted instead of wedging the batch.
func TestPoisonedWriteBackIsIsolated(t *testing.T) {
	emuAddr := dstest.Emulator(t)
	project := dstest.Project(t)
	ctx := context.Background()
	n := startNemo(t, emulatorBackend(), project, cache.Options{DisableWorkers: true})
	for i, poison := range []bool{false, true, false} {
		if err := poisonUpsert(t, n.addr, project, fmt.Sprint(i), poison); err != nil {
			t.Fatalf("entity %d refused at once (%v): nemo now checks this rule at commit; poison the store another way", i, err)
		}
	}
	if err := n.engine.Flush(ctx); err != nil {
		t.Fatalf("flush with one entity the emulator refuses: %v", err)
	}
	emu := client(t, emuAddr, project)
	for _, i := range []int{0, 2} {
		var e struct{ P string }
		if err := emu.Get(ctx, datastore.NameKey("P", fmt.Sprint(i), nil), &e); err != nil || e.P != fmt.Sprint(i) {
			t.Errorf("valid entity %d in the emulator: %+v %v", i, e, err)
		}
	}
	if st := n.buf.Stats(); st.WritebackRejected != 1 || st.DirtyBytes != 0 {
		t.Errorf("rejected %d, dirty bytes %d; want 1 and 0", st.WritebackRejected, st.DirtyBytes)
	}
}

// TestSharedInvalidWriteGetsTheServiceError: writing through (coherence
// shared), an entity the emulator refuses gets the emulator's own
// INVALID_ARGUMENT and message, not nemo's internal text, and nothing of it
// is kept.
func TestSharedInvalidWriteGetsTheServiceError(t *testing.T) {
	project := dstest.Project(t)
	shared := emulatorBackend()
	shared.shared = true
	n := startNemo(t, shared, project, cache.Options{})
	err := poisonUpsert(t, n.addr, project, "bad", true)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "cannot specify a meaning") || strings.Contains(err.Error(), "cache:") {
		t.Fatalf("put of an entity the emulator refuses: %v; want its INVALID_ARGUMENT and message", err)
	}
	c := client(t, n.addr, project)
	var e struct{ P string }
	if err := c.Get(context.Background(), datastore.NameKey("P", "bad", nil), &e); !errors.Is(err, datastore.ErrNoSuchEntity) {
		t.Fatalf("the refused entity reads back: %+v %v", e, err)
	}
}

// commitCounter counts the Commit calls on an adapter's connection and
// those the backend refused for spanning too many entity groups.
type commitCounter struct{ commits, wide atomic.Int32 }

func (c *commitCounter) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if method == datastorepb.Datastore_Commit_FullMethodName {
		c.commits.Add(1)
		if status.Code(err) == codes.InvalidArgument && strings.Contains(status.Convert(err).Message(), "too many entity groups") {
			c.wide.Add(1)
		}
	}
	return err
}

// TestWriteBackSizedForTheBackend: the write-back of 200 new entities in
// 200 entity groups, each read absent through nemo first (so each is
// written back as an insert, in a transaction), makes exactly the Commit
// calls counted here and none that the backend refuses. The legacy
// Datastore emulator takes at most 25 entity groups in a transaction: two
// write-back batches of 100 (cache.Options.WriteBatch), 4 commits each.
// Firestore in Datastore mode has no such limit: one commit per batch (the
// reads told the adapter which backend it faces). Before the adapter
// sized its commits, the legacy emulator refused each batch of 100 and
// then each half of it, and the buffer split them down to 25: 14 commits,
// 6 of them refused.
func TestWriteBackSizedForTheBackend(t *testing.T) {
	fs := dstest.FirestoreEmulator(t)
	for _, c := range []struct {
		name    string
		host    func(testing.TB) string
		commits int32
	}{{"emulator", dstest.Emulator, 8}, {"firestore", func(testing.TB) string { return fs }, 2}} {
		t.Run(c.name, func(t *testing.T) {
			var cc commitCounter
			project := dstest.Project(t)
			ctx := context.Background()
			n := startNemo(t, datastoreBackend(c.name, c.host, false, cc.interceptor), project, cache.Options{DisableWorkers: true})
			cl := client(t, n.addr, project)
			type E struct{ N int }
			keys := make([]*datastore.Key, 200)
			vals := make([]E, len(keys))
			for i := range keys {
				keys[i], vals[i] = datastore.IDKey("G", int64(i+1), nil), E{N: i}
			}
			var merr datastore.MultiError
			if err := cl.GetMulti(ctx, keys, make([]E, len(keys))); !errors.As(err, &merr) || !errors.Is(merr[0], datastore.ErrNoSuchEntity) {
				t.Fatalf("reading the absent keys: %v", err)
			}
			if _, err := cl.PutMulti(ctx, keys, vals); err != nil {
				t.Fatal(err)
			}
			before := cc.commits.Load()
			if err := n.engine.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if got := cc.commits.Load() - before; got != c.commits || cc.wide.Load() != 0 {
				t.Errorf("write-back of 200 entities in 200 groups: %d commits, %d refused for too many entity groups; want %d, none refused", got, cc.wide.Load(), c.commits)
			}
			direct, err := client(t, c.host(t), project).Count(ctx, datastore.NewQuery("G"))
			if err != nil || direct != len(keys) {
				t.Fatalf("the backend holds %d of the %d entities (%v)", direct, len(keys), err)
			}
		})
	}
}
