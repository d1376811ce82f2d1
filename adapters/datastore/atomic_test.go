package datastore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/atomictest"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

// atomicKit is the conformance kit over s, in fresh namespaces of
// project p.Project.
func atomicKit(t *testing.T, s *Store, p dscodec.Partition) atomictest.Kit {
	n := 0
	return atomictest.Kit{
		Store: s,
		Keyspace: func(*testing.T) adapters.Keyspace {
			n++
			q := p
			q.Namespace = fmt.Sprintf("atomic%d", n)
			return q.Keyspace()
		},
		Key: func(i int) []byte {
			k, err := dscodec.EncodePath([]*datastorepb.Key_PathElement{idEl("K", int64(i+1))})
			if err != nil {
				t.Fatal(err)
			}
			return k
		},
		Value: func(key []byte, n int) []byte {
			path, err := dscodec.DecodePath(key)
			if err != nil {
				t.Fatal(err)
			}
			return record(t, p, path, int64(n)).Value
		},
		Payload:  func(t *testing.T, v []byte) int { return int(propV(t, v)) },
		MaxGroup: MaxAtomic,
		Invalid: func(t *testing.T) [][]adapters.Mutation {
			r := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "x")}, 1)
			return [][]adapters.Mutation{
				{atomictest.Upsert(r.Key, []byte("not a value"), adapters.Expect{})},
				{atomictest.Upsert(r.Key, r.Value, adapters.Expect{Kind: 9})},
			}
		},
	}
}

func TestWriteAtomic(t *testing.T) {
	s, p := openEmulator(t)
	atomictest.Run(t, atomicKit(t, s, p))
}

// TestWriteAtomicCalls: a group without preconditions is one commit; with
// preconditions, a transaction (begin, lookup, commit), and a refused one
// sends no commit.
func TestWriteAtomicCalls(t *testing.T) {
	s, cc, p := countingStore(t)
	ctx := context.Background()
	ks := p.Keyspace()
	a := record(t, p, []*datastorepb.Key_PathElement{idEl("K", 1)}, 1)
	a2 := record(t, p, []*datastorepb.Key_PathElement{idEl("K", 1)}, 11) // a changed
	b := record(t, p, []*datastorepb.Key_PathElement{idEl("K", 2)}, 2)
	vers, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{atomictest.Upsert(a.Key, a.Value, adapters.Expect{}), atomictest.Delete(b.Key, adapters.Expect{})})
	if err != nil {
		t.Fatal(err)
	}
	if c, l, x := cc.commits.Load(), cc.lookups.Load(), cc.txns.Load(); c != 1 || l != 0 || x != 1 {
		t.Fatalf("unconditional group: %d commits (%d transactional), %d lookups", c, x, l)
	}
	cc.reset()
	cc.txns.Store(0)
	if _, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{
		atomictest.Upsert(a.Key, a2.Value, adapters.Expect{Kind: adapters.ExpectVersion, Version: vers[0]}),
		atomictest.Upsert(b.Key, b.Value, adapters.Expect{Kind: adapters.ExpectAbsent}),
	}); err != nil {
		t.Fatal(err)
	}
	if c, l := cc.commits.Load(), cc.lookups.Load(); c != 1 || l != 1 {
		t.Fatalf("conditional group: %d commits, %d lookups", c, l)
	}
	cc.reset()
	_, err = s.WriteAtomic(ctx, ks, []adapters.Mutation{
		atomictest.Upsert(a.Key, a.Value, adapters.Expect{Kind: adapters.ExpectVersion, Version: vers[0]}), // stale now
		atomictest.Delete(b.Key, adapters.Expect{Kind: adapters.ExpectAbsent}),                             // b exists
	})
	var ce *adapters.ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 2 || !ce.Conflicts[0].Exists || !ce.Conflicts[1].Exists || ce.Conflicts[1].Current == "" {
		t.Fatalf("want both mutations refused, with their versions: %v", err)
	}
	if c := cc.commits.Load(); c != 0 {
		t.Fatalf("a refused group sent %d commits", c)
	}
}

// abortingClient answers the first aborts commits with ABORTED.
type abortingClient struct {
	datastorepb.DatastoreClient
	aborts  atomic.Int32
	commits atomic.Int32
}

func (c *abortingClient) Commit(ctx context.Context, in *datastorepb.CommitRequest, o ...grpc.CallOption) (*datastorepb.CommitResponse, error) {
	c.commits.Add(1)
	if c.aborts.Add(-1) >= 0 {
		return nil, status.Error(codes.Aborted, "too much contention")
	}
	return c.DatastoreClient.Commit(ctx, in, o...)
}

// TestWriteAtomicAborted: an aborted transaction is run again from its
// start, a bounded number of times, then the call fails with
// ErrUnavailable.
func TestWriteAtomicAborted(t *testing.T) {
	inner, p := openEmulator(t)
	ctx := context.Background()
	ks := p.Keyspace()
	r := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "aborted")}, 1)
	ac := &abortingClient{DatastoreClient: inner.client}
	ac.aborts.Store(2)
	s := New(ac, Options{RetryBase: time.Millisecond})
	m := atomictest.Upsert(r.Key, r.Value, adapters.Expect{Kind: adapters.ExpectAbsent})
	vers, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{m})
	if err != nil || vers[0] == "" || ac.commits.Load() != 3 {
		t.Fatalf("after two aborts: %q %v, %d commits", vers, err, ac.commits.Load())
	}
	ac.aborts.Store(100)
	ac.commits.Store(0)
	m.Expect = adapters.Expect{Kind: adapters.ExpectVersion, Version: vers[0]}
	if _, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{m}); !errors.Is(err, adapters.ErrUnavailable) {
		t.Fatalf("persistent aborts: %v", err)
	}
	if n := ac.commits.Load(); n != maxAtomicAttempts {
		t.Fatalf("%d commits, want %d", n, maxAtomicAttempts)
	}
	recs, err := inner.Get(ctx, ks, [][]byte{r.Key})
	if err != nil || recs[0].Version != vers[0] {
		t.Fatalf("after the aborted call: %+v %v", recs, err)
	}
}

// interferingClient writes the key through another (non-transactional)
// commit right after the first transactional Lookup has read it.
type interferingClient struct {
	datastorepb.DatastoreClient
	write func()
	done  bool
}

func (c *interferingClient) Lookup(ctx context.Context, in *datastorepb.LookupRequest, o ...grpc.CallOption) (*datastorepb.LookupResponse, error) {
	resp, err := c.DatastoreClient.Lookup(ctx, in, o...)
	if in.GetReadOptions().GetTransaction() != nil && !c.done {
		c.done = true
		c.write()
	}
	return resp, err
}

// TestWriteAtomicReadIsolation: a write of a key between the
// transaction's read of it and its commit aborts the commit (the
// emulator, like the service, checks the keys a transaction read); the
// transaction runs again, finds the new version and refuses the group.
func TestWriteAtomicReadIsolation(t *testing.T) {
	inner, p := openEmulator(t)
	ctx := context.Background()
	ks := p.Keyspace()
	path := []*datastorepb.Key_PathElement{nameEl("K", "isolated")}
	r1, r2, r3 := record(t, p, path, 1), record(t, p, path, 2), record(t, p, path, 3)
	v1, err := inner.Upsert(ctx, ks, adapters.Puts([]adapters.Record{r1}))
	if err != nil {
		t.Fatal(err)
	}
	var v2 []adapters.Version
	ic := &interferingClient{DatastoreClient: inner.client, write: func() {
		if v2, err = inner.Upsert(ctx, ks, adapters.Puts([]adapters.Record{r2})); err != nil {
			t.Error(err)
		}
	}}
	s := New(ic, Options{RetryBase: time.Millisecond})
	_, err = s.WriteAtomic(ctx, ks, []adapters.Mutation{atomictest.Upsert(r3.Key, r3.Value, adapters.Expect{Kind: adapters.ExpectVersion, Version: v1[0]})})
	var ce *adapters.ConflictError
	if !errors.As(err, &ce) || ce.Conflicts[0].Current != v2[0] {
		t.Fatalf("want a conflict at the interfering write's version %q: %v", v2, err)
	}
	recs, err := inner.Get(ctx, ks, [][]byte{r1.Key})
	if err != nil || propV(t, recs[0].Value) != 2 {
		t.Fatalf("the refused write was applied: %+v %v", recs, err)
	}
}
