package datastore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
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
	"github.com/nemocache/nemo/internal/dstest"
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

// TestWriteAtomic runs the conformance kit in front of both Datastore
// backends: the legacy Datastore emulator and the Firestore emulator in
// Datastore mode.
func TestWriteAtomic(t *testing.T) {
	for _, b := range dsBackends() {
		t.Run(b.name, func(t *testing.T) {
			s, p := b.open(t, Options{})
			atomictest.Run(t, atomicKit(t, s, p))
		})
	}
}

// dsBackend is a Datastore backend the adapter is verified against.
type dsBackend struct {
	name string
	host func(testing.TB) string
}

func dsBackends() []dsBackend {
	return []dsBackend{{"datastore-emulator", dstest.Emulator}, {"firestore", dstest.FirestoreEmulator}}
}

// open opens a Store over the backend, in a fresh project.
func (b dsBackend) open(t *testing.T, o Options) (*Store, dscodec.Partition) {
	t.Helper()
	o.EmulatorHost = b.host(t)
	s, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dscodec.Partition{Project: dstest.Project(t), Namespace: "ns1"}
}

// counting opens a Store over the backend, in a fresh project, and another
// over the same connection whose calls cc counts.
func (b dsBackend) counting(t *testing.T) (inner, s *Store, cc *countingClient, p dscodec.Partition) {
	t.Helper()
	inner, p = b.open(t, Options{})
	cc = &countingClient{DatastoreClient: inner.client}
	return inner, over(t, cc, Options{}), cc, p
}

// TestWriteAtomicRollsBack: a transaction whose commit the backend refuses
// (a property name it reserves) is rolled back. Firestore holds locks on
// what a read-write transaction read until it ends or expires (60 s in its
// emulator), so a transaction left open would hold up every later write
// of the key it checked.
func TestWriteAtomicRollsBack(t *testing.T) {
	for _, b := range dsBackends() {
		t.Run(b.name, func(t *testing.T) {
			s, p := b.open(t, Options{RetryBase: time.Millisecond})
			ctx := context.Background()
			ks := p.Keyspace()
			a := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "a")}, 1)
			vers, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{a}))
			if err != nil {
				t.Fatal(err)
			}
			bad := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "bad")}, 1)
			r, _ := dscodec.DecodeValue(bad.Value)
			r.Entity.Properties["__reserved__"] = &datastorepb.Value{ValueType: &datastorepb.Value_IntegerValue{IntegerValue: 1}}
			if bad.Value, err = dscodec.EncodeValue(r); err != nil {
				t.Fatal(err)
			}
			_, err = s.WriteAtomic(ctx, ks, []adapters.Mutation{
				atomictest.Check(a.Key, adapters.Expect{Kind: adapters.ExpectVersion, Version: vers[0]}),
				atomictest.Upsert(bad.Key, bad.Value, adapters.Expect{}),
			})
			if code, _, _ := adapters.ServiceStatusOf(err); !errors.Is(err, adapters.ErrInvalid) || code != "InvalidArgument" {
				t.Fatalf("a commit the backend refuses: %v", err)
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			start := time.Now()
			a2 := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "a")}, 2)
			if _, err := s.Upsert(wctx, ks, adapters.Puts([]adapters.Record{a2})); err != nil {
				t.Fatalf("a write of the key the refused transaction read, %v later: %v", time.Since(start), err)
			}
		})
	}
}

// TestRollbackRetried: a rollback that fails before it reaches the service
// is sent again, so the transaction's locks (Firestore holds what a
// read-write transaction read until it ends, or for 60 s) do not hold up
// the next write of the key it read. Sent once, the write after the
// refused group waited for the lock to expire.
func TestRollbackRetried(t *testing.T) {
	for _, b := range dsBackends() {
		t.Run(b.name, func(t *testing.T) {
			var rollbacks atomic.Int32
			failFirst := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if strings.HasSuffix(method, "/Rollback") && rollbacks.Add(1) == 1 {
					return status.Error(codes.Unavailable, "injected before the service")
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			s, p := b.open(t, Options{RetryBase: time.Millisecond, Interceptors: []grpc.UnaryClientInterceptor{failFirst}})
			ctx := context.Background()
			ks := p.Keyspace()
			a := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "a")}, 1)
			vers, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{a}))
			if err != nil {
				t.Fatal(err)
			}
			stale := adapters.Expect{Kind: adapters.ExpectVersion, Version: vers[0] + "0"}
			if _, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{atomictest.Upsert(a.Key, a.Value, stale)}); !errors.Is(err, adapters.ErrConflict) {
				t.Fatalf("a refused group: %v", err)
			}
			if n := rollbacks.Load(); n < 2 {
				t.Fatalf("%d rollbacks sent", n)
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			start := time.Now()
			at := adapters.Expect{Kind: adapters.ExpectVersion, Version: vers[0]}
			if _, err := s.WriteAtomic(wctx, ks, []adapters.Mutation{atomictest.Upsert(a.Key, a.Value, at)}); err != nil {
				t.Fatalf("a group writing the key the refused transaction read, %v later: %v", time.Since(start), err)
			}
		})
	}
}

// TestRangeChecksOutsideWhenRefused: both emulators refuse the range
// check's key-range query inside a read-write transaction (legacy: only
// ancestor queries; Firestore's emulator: UNKNOWN for a kindless query);
// the adapter says so once, reads range checks just outside the
// transaction from then on, and a phantom still refuses the group.
func TestRangeChecksOutsideWhenRefused(t *testing.T) {
	for _, b := range dsBackends() {
		t.Run(b.name, func(t *testing.T) {
			var logged lockedBuffer
			s, p := b.open(t, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			ctx := context.Background()
			ks := p.Keyspace()
			lo := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "a")}, 1)
			hi := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "z")}, 1)
			in := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "m")}, 1)
			check := adapters.Mutation{Write: adapters.Write{Key: lo.Key}, Check: true, Range: &adapters.RangeCheck{End: hi.Key}}
			comp := record(t, p, []*datastorepb.Key_PathElement{nameEl("L", "c")}, 1)
			for i := 0; i < 2; i++ {
				if _, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{check, atomictest.Upsert(comp.Key, comp.Value, adapters.Expect{Kind: adapters.ExpectAny})}); err != nil {
					t.Fatalf("group %d over an empty range: %v", i, err)
				}
			}
			if !s.rangesOutside.Load() {
				t.Fatal("the backend took a key-range query in a read-write transaction: rangeIn's comment is out of date")
			}
			if n := strings.Count(logged.String(), "refuses key-range queries inside read-write transactions"); n != 1 {
				t.Fatalf("the refusal was logged %d times, want once:\n%s", n, logged.String())
			}
			if _, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{in})); err != nil {
				t.Fatal(err)
			}
			_, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{check})
			var ce *adapters.ConflictError
			if !errors.As(err, &ce) {
				t.Fatalf("a phantom in the checked range: %v, want a conflict", err)
			}
		})
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger used concurrently.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
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

// abortingClient answers the first aborts commits with ABORTED, each after
// delay (a lock timeout), and, while lookupsDown is set, every Lookup with
// UNAVAILABLE after delay.
type abortingClient struct {
	datastorepb.DatastoreClient
	aborts      atomic.Int32
	commits     atomic.Int32
	lookups     atomic.Int32
	lookupsDown atomic.Bool
	delay       time.Duration
}

func (c *abortingClient) Commit(ctx context.Context, in *datastorepb.CommitRequest, o ...grpc.CallOption) (*datastorepb.CommitResponse, error) {
	c.commits.Add(1)
	if c.aborts.Add(-1) >= 0 {
		time.Sleep(c.delay)
		return nil, status.Error(codes.Aborted, "too much contention")
	}
	return c.DatastoreClient.Commit(ctx, in, o...)
}

func (c *abortingClient) Lookup(ctx context.Context, in *datastorepb.LookupRequest, o ...grpc.CallOption) (*datastorepb.LookupResponse, error) {
	c.lookups.Add(1)
	if c.lookupsDown.Load() {
		time.Sleep(c.delay)
		return nil, status.Error(codes.Unavailable, "lookups are down")
	}
	return c.DatastoreClient.Lookup(ctx, in, o...)
}

// TestRetriesEndBeforeTheDeadline: a transaction the service keeps
// aborting, each run after a lock timeout, is not run again when another
// run would not end before the caller's deadline: the call fails then with
// ErrAborted and the service's ABORTED (which the frontend passes on and
// clients retry as a transaction), not later with the deadline's error,
// which leaves a caller unsure whether the write was applied. The same for
// a retried Lookup: ErrUnavailable with the service's answer, before the
// deadline.
func TestRetriesEndBeforeTheDeadline(t *testing.T) {
	inner, p := openEmulator(t)
	ks := p.Keyspace()
	r := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "late")}, 1)
	ac := &abortingClient{DatastoreClient: inner.client, delay: 300 * time.Millisecond}
	ac.aborts.Store(100)
	s := over(t, ac, Options{RetryBase: time.Millisecond, Retries: 100})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{atomictest.Upsert(r.Key, r.Value, adapters.Expect{Kind: adapters.ExpectAbsent})})
	ctxErr := ctx.Err()
	cancel()
	if code, _, _ := adapters.ServiceStatusOf(err); !errors.Is(err, adapters.ErrAborted) || code != "Aborted" || ctxErr != nil {
		t.Fatalf("a transaction aborted after 300ms each run, 1s left: %v (service status %q; context %v), want ErrAborted before the deadline", err, code, ctxErr)
	}
	if n := ac.commits.Load(); n < 2 || n > 3 {
		t.Fatalf("%d runs in 1s of 300ms each, want 2 or 3", n)
	}

	ac.lookups.Store(0)
	ac.lookupsDown.Store(true)
	ctx, cancel = context.WithTimeout(context.Background(), time.Second)
	_, err = s.Get(ctx, ks, [][]byte{r.Key})
	ctxErr = ctx.Err()
	cancel()
	if code, _, _ := adapters.ServiceStatusOf(err); !errors.Is(err, adapters.ErrUnavailable) || code != "Unavailable" || ctxErr != nil {
		t.Fatalf("lookups failing after 300ms each, 1s left: %v (service status %q; context %v), want ErrUnavailable before the deadline", err, code, ctxErr)
	}
	if n := ac.lookups.Load(); n < 2 || n > 3 {
		t.Fatalf("%d lookups in 1s of 300ms each, want 2 or 3", n)
	}
}

// TestWriteAtomicAborted: an aborted transaction is run again from its
// start, a bounded number of times, then the call fails with ErrAborted
// carrying the service's own status and message (not ErrUnavailable: the
// service is there, it refused for contention).
func TestWriteAtomicAborted(t *testing.T) {
	inner, p := openEmulator(t)
	ctx := context.Background()
	ks := p.Keyspace()
	r := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "aborted")}, 1)
	ac := &abortingClient{DatastoreClient: inner.client}
	ac.aborts.Store(2)
	s := over(t, ac, Options{RetryBase: time.Millisecond})
	m := atomictest.Upsert(r.Key, r.Value, adapters.Expect{Kind: adapters.ExpectAbsent})
	vers, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{m})
	if err != nil || vers[0] == "" || ac.commits.Load() != 3 {
		t.Fatalf("after two aborts: %q %v, %d commits", vers, err, ac.commits.Load())
	}
	ac.aborts.Store(100)
	ac.commits.Store(0)
	m.Expect = adapters.Expect{Kind: adapters.ExpectVersion, Version: vers[0]}
	_, err = s.WriteAtomic(ctx, ks, []adapters.Mutation{m})
	if code, msg, ok := adapters.ServiceStatusOf(err); !errors.Is(err, adapters.ErrAborted) || errors.Is(err, adapters.ErrUnavailable) ||
		!ok || code != "Aborted" || msg != "too much contention" {
		t.Fatalf("persistent aborts: %v (service status %q %q)", err, code, msg)
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
	s := over(t, ic, Options{RetryBase: time.Millisecond})
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
