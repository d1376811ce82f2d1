package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"

	"github.com/nemocache/nemo/adapters"
	azstore "github.com/nemocache/nemo/adapters/aztable"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
	"github.com/nemocache/nemo/internal/enum"
	"github.com/nemocache/nemo/proxy/peer"
	"github.com/nemocache/nemo/txn"
)

const testPeerSecret = "node-test-peer-secret-0123456789"

// replica is one coherence partitioned node of a test, with its peer
// server on a loopback listener (which may drop its replies).
type replica struct {
	*Node
	ln  *dropListener
	srv *peer.Server
}

// startReplica opens a partitioned node with node id id over the
// Datastore emulator, in the test's own project.
func startReplica(t testing.TB, id string) *replica {
	t.Helper()
	return startReplicaWith(t, id, testPeerSecret, nil)
}

// startReplicaWith is startReplica with the peer secret secret and the
// configuration changed by mod (when not nil).
func startReplicaWith(t testing.TB, id, secret string, mod func(*config.Config)) *replica {
	t.Helper()
	return startReplicaOn(t, id, secret, listenPeer(t), mod)
}

// listenPeer is a loopback listener for a replica's peer server.
func listenPeer(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// startReplicaOn is startReplicaWith serving its peers on ln.
func startReplicaOn(t testing.TB, id, secret string, ln net.Listener, mod func(*config.Config)) *replica {
	t.Helper()
	dl := &dropListener{Listener: ln}
	cfg := logsConfig(t, config.BackendDatastore, dstest.Emulator(t), id)
	cfg.Backend.Datastore.Project = testProject(t)
	cfg.Coherence.Mode, cfg.Coherence.PeerSecret = enum.Partitioned, secret
	cfg.Listen.Peer = ln.Addr().String()
	if mod != nil {
		mod(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n, err := Open(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{Node: n, ln: dl}
	r.serve(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r.srv.Stop(ctx)
		_ = n.Drain(ctx)
	})
	return r
}

// serve starts r's peer server on r.ln.
func (r *replica) serve(t testing.TB) {
	t.Helper()
	r.srv = r.PeerServer()
	go func() { _ = r.srv.Serve(r.ln) }()
}

// cutOff stops r's peer server (its listener closed, its connections
// cut) and opens a new listener on the same address for serve.
func (r *replica) cutOff(t *testing.T) {
	t.Helper()
	addr := r.ln.Addr().String()
	r.srv.Stop(context.Background())
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r.ln = &dropListener{Listener: ln}
}

// testProjects is the Datastore project of each test (and benchmark):
// its replicas and keyspaces share it, and no other test's nodes see its
// leases and logs (an Azure account is shared by every test, and a node
// recovers every log it finds pending at start).
var testProjects sync.Map // testing.TB -> string

func testProject(t testing.TB) string {
	p, _ := testProjects.LoadOrStore(t, dstest.Project(t))
	return p.(string)
}

// partitionedTable is a namespace of the test's Datastore project, a
// keyspace with a lease of its own.
func partitionedTable(t testing.TB, namespace string) adapters.Keyspace {
	t.Helper()
	return dscodec.Partition{Project: testProject(t), Namespace: namespace}.Keyspace()
}

// rowKey and rowValue are entity i of kind K, with property N = n, in
// keyspace ks.
func rowKey(i int) []byte {
	k, err := dscodec.EncodePath([]*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: int64(i + 1)}}})
	if err != nil {
		panic(err)
	}
	return k
}

func rowValue(ks adapters.Keyspace, i, n int) []byte {
	p, err := dscodec.ParseKeyspace(ks)
	if err != nil {
		panic(err)
	}
	v, err := dscodec.EncodeValue(&datastorepb.EntityResult{Entity: &datastorepb.Entity{
		Key: &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: p.Project, DatabaseId: p.Database, NamespaceId: p.Namespace},
			Path: []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: int64(i + 1)}}}},
		Properties: map[string]*datastorepb.Value{"N": {ValueType: &datastorepb.Value_IntegerValue{IntegerValue: int64(n)}}}}})
	if err != nil {
		panic(err)
	}
	return v
}

// azRowKey and azRowValue are entity i of partition "p" of an Azure table.
func azRowKey(i int) []byte { return tablecodec.EncodeKey("p", fmt.Sprintf("r%03d", i)) }

func azRowValue(i int) []byte {
	return tablecodec.EncodeEntity(&tablecodec.Entity{PartitionKey: "p", RowKey: fmt.Sprintf("r%03d", i),
		Props: []tablecodec.Property{{Name: "N", Type: tablecodec.EdmInt32, Value: int32(i)}}})
}

// dropListener's connections can be told to fail the next time the
// server writes to them: a reply lost after the server acted on the
// request (fault injection).
type dropListener struct {
	net.Listener
	arm atomic.Bool
}

func (l *dropListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &dropConn{Conn: c, l: l}, nil
}

type dropConn struct {
	net.Conn
	l *dropListener
}

// Write fails the first write of a message once armed: a frame longer
// than HTTP/2's control frames (window updates, pings, settings), which
// carry no reply.
func (c *dropConn) Write(b []byte) (int, error) {
	if len(b) > 64 && c.l.arm.CompareAndSwap(true, false) {
		c.Conn.Close()
		return 0, net.ErrClosed
	}
	return c.Conn.Write(b)
}

// TestPartitionedForwarding: the first node to write a table owns it;
// another node's writes and transactions run on the owner, with the
// owner's refusals (an insert of an existing key), and its reads see the
// owner's writes, not yet in the store, through its own buffer.
func TestPartitionedForwarding(t *testing.T) {
	ctx := context.Background()
	ks := partitionedTable(t, "fwd")
	a, b := startReplica(t, "node-a"), startReplica(t, "node-b")
	if err := a.Engine.Insert(ctx, ks, rowKey(1), rowValue(ks, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := b.Engine.Insert(ctx, ks, rowKey(1), rowValue(ks, 1, 2)); !errors.Is(err, txn.ErrExists) {
		t.Fatalf("insert of an existing key through the other node: %v, want txn.ErrExists", err)
	}
	if err := b.Engine.Insert(ctx, ks, rowKey(2), rowValue(ks, 2, 2)); err != nil {
		t.Fatal(err)
	}
	if a.Leases.Epoch(ks) == 0 || b.Leases.Epoch(ks) != 0 {
		t.Fatalf("lease epochs: owner %d, forwarder %d", a.Leases.Epoch(ks), b.Leases.Epoch(ks))
	}
	// A read-modify-write transaction through the forwarder.
	err := b.Engine.Run(ctx, false, func(tx *txn.Txn) error {
		v, ok, err := tx.GetForUpdate(ctx, ks, rowKey(1))
		if err != nil || !ok || string(v) != string(rowValue(ks, 1, 1)) {
			return fmt.Errorf("forwarded read: %q %v %w", v, ok, err)
		}
		return tx.Update(ctx, ks, rowKey(1), rowValue(ks, 1, 3))
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*replica{a, b} {
		v, ok, err := n.Engine.Get(ctx, ks, rowKey(1), txn.ReadLatest)
		if err != nil || !ok || string(v) != string(rowValue(ks, 1, 3)) {
			t.Fatalf("read after the forwarded commit: %q %v %v", v, ok, err)
		}
	}
	recs, err := b.Backend.Get(ctx, ks, [][]byte{rowKey(2)})
	if err != nil || recs[0].Value != nil {
		t.Fatalf("the store holds the owner's write already (%v): the test needs it unflushed", err)
	}
	if v, ok, err := b.Engine.Get(ctx, ks, rowKey(2), txn.ReadLatest); err != nil || !ok || string(v) != string(rowValue(ks, 2, 2)) {
		t.Fatalf("the forwarder's read of a write the store lacks: %q %v %v", v, ok, err)
	}
}

// TestPartitionedOwnersDiffer: a transaction over two tables owned by two
// nodes is refused on a third, and writes nothing.
func TestPartitionedOwnersDiffer(t *testing.T) {
	ctx := context.Background()
	ks1, ks2 := partitionedTable(t, "own1"), partitionedTable(t, "own2")
	a, b, c := startReplica(t, "node-a"), startReplica(t, "node-b"), startReplica(t, "node-c")
	if err := a.Engine.Upsert(ctx, ks1, rowKey(1), rowValue(ks1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := c.Engine.Upsert(ctx, ks2, rowKey(1), rowValue(ks2, 1, 1)); err != nil {
		t.Fatal(err)
	}
	tx, err := b.Engine.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Upsert(ctx, ks1, rowKey(2), rowValue(ks1, 2, 2)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Upsert(ctx, ks2, rowKey(2), rowValue(ks2, 2, 2)); !errors.Is(err, txn.ErrOwnersDiffer) {
		t.Fatalf("a write of a table another node owns, in a transaction bound elsewhere: %v, want txn.ErrOwnersDiffer", err)
	}
	if err := tx.Commit(ctx); !errors.Is(err, txn.ErrAborted) {
		t.Fatalf("commit after the refusal: %v, want txn.ErrAborted", err)
	}
	if _, ok, err := a.Engine.Get(ctx, ks1, rowKey(2), txn.ReadLatest); err != nil || ok {
		t.Fatalf("the refused transaction's first write is at its owner (%v, %v)", ok, err)
	}
}

// TestPartitionedHandover: a keyspace handed over while a transaction
// forwarded to its owner is open: the transaction is aborted as a
// conflict and retried until it runs on the next owner, where it
// applies once; the handover
// leaves the store holding everything and the lease released.
func TestPartitionedHandover(t *testing.T) {
	ctx := context.Background()
	ks := partitionedTable(t, "hand")
	a, b := startReplica(t, "node-a"), startReplica(t, "node-b")
	if err := a.Engine.Upsert(ctx, ks, rowKey(1), rowValue(ks, 1, 1)); err != nil {
		t.Fatal(err)
	}
	handed := make(chan error, 1)
	attempts := 0
	err := b.Engine.Run(ctx, false, func(tx *txn.Txn) error {
		attempts++
		v, ok, err := tx.GetForUpdate(ctx, ks, rowKey(1))
		if err != nil || !ok {
			return fmt.Errorf("read: %v %w", ok, err)
		}
		if attempts == 1 {
			go func() { handed <- a.Engine.Handover(ctx, ks) }()
			waitHandingOver(t, a, ks)
		}
		return tx.Update(ctx, ks, rowKey(1), rowValue(ks, 1, rowN(t, v)+1))
	})
	if err != nil {
		t.Fatalf("the transaction across the handover: %v", err)
	}
	if err := <-handed; err != nil {
		t.Fatalf("handover: %v", err)
	}
	// Aborted by the handover, retried (perhaps again while the owner
	// wrote back) until it ran on the next owner; applied once.
	if attempts < 2 {
		t.Fatalf("the transaction ran %d times, want it aborted by the handover and retried", attempts)
	}
	if b.Leases.Epoch(ks) == 0 || a.Leases.Epoch(ks) != 0 {
		t.Fatalf("after the handover: the old owner's epoch %d, the new one's %d", a.Leases.Epoch(ks), b.Leases.Epoch(ks))
	}
	for _, n := range []*replica{a, b} {
		waitRead(t, n, ks, rowKey(1), 2)
	}
	if err := a.Engine.Handover(ctx, ks); !errors.Is(err, txn.ErrNotOwner) {
		t.Fatalf("a handover by a node that does not own the keyspace: %v, want txn.ErrNotOwner", err)
	}
}

// TestPartitionedRebalance: two replicas whose coherence.peers name each
// other, rebalancing every 200 ms. A owns four namespaces (their first
// writer), B none: A hands two over to B, one per round, each taken by B
// (nemo_rebalance_moves_total counts those B's Take got; one B's own
// writer took first is not counted), then stops at two each. Clients
// write all four through both replicas the whole time (retrying the
// retryable refusals of a hand-over, as the SDKs do): the two never own
// one namespace at the same moment, and every acknowledged write is read
// back through both.
func TestPartitionedRebalance(t *testing.T) {
	ctx := context.Background()
	lnA, lnB := listenPeer(t), listenPeer(t)
	rebalance := func(other net.Listener) func(*config.Config) {
		return func(c *config.Config) {
			c.Coherence.Peers = other.Addr().String() + ", " + lnA.Addr().String() // its own address too, as a headless Service's
			c.Coherence.RebalanceInterval = 200 * time.Millisecond
		}
	}
	spaces := []adapters.Keyspace{partitionedTable(t, "rb0"), partitionedTable(t, "rb1"), partitionedTable(t, "rb2"), partitionedTable(t, "rb3")}
	a := startReplicaOn(t, "node-a", testPeerSecret, lnA, rebalance(lnB))
	for _, ks := range spaces {
		if err := a.Engine.Upsert(ctx, ks, rowKey(0), rowValue(ks, 0, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(a.Engine.Owned()); got != 4 {
		t.Fatalf("A owns %d namespaces after writing four first, want 4", got)
	}
	b := startReplicaOn(t, "node-b", testPeerSecret, lnB, rebalance(lnA))

	type row struct {
		ks adapters.Keyspace
		i  int
	}
	var acked sync.Map // row -> n, the last acknowledged write of it
	stop := make(chan struct{})
	var wg sync.WaitGroup
	bad := make(chan error, 4)
	for w, rep := range []*replica{a, b, a, b} {
		wg.Go(func() {
			for i := 1; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ks, r := spaces[(w+i)%len(spaces)], 1+w
				err := rep.Engine.Run(ctx, false, func(tx *txn.Txn) error { return tx.Upsert(ctx, ks, rowKey(r), rowValue(ks, r, i)) })
				switch {
				case err == nil:
					acked.Store(row{ks, r}, i)
				case errors.Is(err, txn.ErrLeaseUnavailable), errors.Is(err, txn.ErrOwnerUnavailable), errors.Is(err, txn.ErrConflict):
					time.Sleep(10 * time.Millisecond) // retryable: a hand-over under way
				default:
					bad <- fmt.Errorf("write %d of %s through replica %d: %w", i, ks, w, err)
					return
				}
			}
		})
	}
	began := time.Now()
	for {
		ownA, ownB := a.Engine.Owned(), b.Engine.Owned()
		for _, x := range ownA {
			for _, y := range ownB {
				if x.Keyspace == y.Keyspace {
					t.Fatalf("A and B both own %s", x.Keyspace)
				}
			}
		}
		if len(ownA) == 2 && len(ownB) == 2 {
			break
		}
		if time.Since(began) > 20*time.Second {
			t.Fatalf("after %v A owns %d namespaces and B %d, want 2 and 2", time.Since(began), len(ownA), len(ownB))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("A owned 2 namespaces and B 2 after %v", time.Since(began).Round(time.Millisecond))
	time.Sleep(time.Second) // five more rounds: nothing more moves
	close(stop)
	wg.Wait()
	select {
	case err := <-bad:
		t.Fatal(err)
	default:
	}
	// A released namespace goes to its next writer if that comes before
	// the peer's Take (B's own writers, here, routing to nobody): not
	// every step is a counted move.
	if m := a.RebalanceMoves(); m < 1 || m > 2 || b.RebalanceMoves() != 0 {
		t.Fatalf("moves: A %d, B %d; want 1 or 2, and 0", m, b.RebalanceMoves())
	}
	if len(a.Engine.Owned()) != 2 || len(b.Engine.Owned()) != 2 {
		t.Fatalf("ownership moved on after it was even: A %d, B %d", len(a.Engine.Owned()), len(b.Engine.Owned()))
	}
	n := 0
	acked.Range(func(k, v any) bool {
		ks, r := k.(row).ks, k.(row).i
		for name, rep := range map[string]*replica{"A": a, "B": b} {
			var got []byte
			var ok bool
			err := rep.Engine.Run(ctx, false, func(tx *txn.Txn) error {
				var err error
				got, ok, err = tx.Get(ctx, ks, rowKey(r))
				return err
			})
			if err != nil || !ok {
				t.Errorf("%s row %d through %s: found %v, %v; want N at least %d", ks, r, name, ok, err, v)
				continue
			}
			// At least the last acknowledged value: a write refused
			// with an unknown outcome after it may have landed.
			if err != nil || rowN(t, got) < v.(int) {
				t.Errorf("%s row %d through %s: N %d, want at least %d (%v)", ks, r, name, rowN(t, got), v, err)
			}
		}
		n++
		return true
	})
	t.Logf("%d rows read back through both replicas", n)
}

// TestPartitionedStaleRoute: a stale route costs one lease read. C
// remembers that A owns a namespace (it just forwarded a write there);
// the namespace moves to B (A hands it over, B takes it). C's next write
// goes to A on the remembered route, A refuses it (not the owner, nothing
// ran), C forgets the route, reads the lease once and forwards to B: one
// store call for the whole write. The leases live 30 s here, so C's
// memory of the owner (TTL/15, 2 s) outlasts the move.
func TestPartitionedStaleRoute(t *testing.T) {
	ctx := context.Background()
	a, b, c, ks := staleRoute(t, "stale")
	before := c.Store.Stats()
	if err := c.Engine.Upsert(ctx, ks, rowKey(3), rowValue(ks, 3, 1)); err != nil {
		t.Fatalf("a write through C on its stale route: %v", err)
	}
	lease, calls := storeCallsSince(c, before)
	if lease != 1 || calls != 1 {
		t.Fatalf("a write on a stale route made %d lease reads and %d store calls in all, want 1 and 1", lease, calls)
	}
	if len(b.Engine.Owned()) != 1 || len(a.Engine.Owned()) != 0 {
		t.Fatalf("owned: A %d, B %d; want 0 and 1", len(a.Engine.Owned()), len(b.Engine.Owned()))
	}
	waitRead(t, b, ks, rowKey(3), 1)
}

// TestPartitionedStaleRouteRead: a read C's buffer misses goes to the
// owner C remembers; the old owner refuses it, and C routes it again at
// once (one lease read) and answers from the new owner, without an
// error: the read path re-routes as forwarded transactions do.
func TestPartitionedStaleRouteRead(t *testing.T) {
	ctx := context.Background()
	_, b, c, ks := staleRoute(t, "staleread")
	// Written on B, the new owner, only: C has never read the key, and
	// the store may not have it yet, so only B can answer it.
	if err := b.Engine.Upsert(ctx, ks, rowKey(4), rowValue(ks, 4, 7)); err != nil {
		t.Fatal(err)
	}
	before := c.Store.Stats()
	v, _, err := c.Engine.Get(ctx, ks, rowKey(4), txn.ReadLatest)
	if err != nil || v == nil {
		t.Fatalf("a read through C on its stale route: %q, %v", v, err)
	}
	if n := rowN(t, v); n != 7 {
		t.Fatalf("a read through C on its stale route: N=%d, want 7", n)
	}
	if lease, calls := storeCallsSince(c, before); lease != 1 || calls != 1 {
		t.Fatalf("a read on a stale route made %d lease reads and %d store calls in all, want 1 and 1", lease, calls)
	}
}

// staleRoute starts replicas A, B and C (leases of 30 s) on a new table
// ks that A owns, with C having written through A, then moves ks from A
// to B quickly enough that C still remembers A as its owner.
func staleRoute(t *testing.T, name string) (a, b, c *replica, ks adapters.Keyspace) {
	t.Helper()
	ctx := context.Background()
	ks = partitionedTable(t, name)
	long := func(c *config.Config) { c.Coherence.LeaseTTL = 30 * time.Second }
	a = startReplicaWith(t, "node-a", testPeerSecret, long)
	b = startReplicaWith(t, "node-b", testPeerSecret, long)
	c = startReplicaWith(t, "node-c", testPeerSecret, long)
	if err := a.Engine.Upsert(ctx, ks, rowKey(1), rowValue(ks, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := c.Engine.Upsert(ctx, ks, rowKey(2), rowValue(ks, 2, 1)); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := a.Engine.Handover(ctx, ks); err != nil {
		t.Fatal(err)
	}
	if err := b.Engine.Acquire(ctx, ks); err != nil {
		t.Fatal(err)
	}
	if moved := time.Since(began); moved > 1500*time.Millisecond {
		t.Fatalf("the move took %v: C's memory of the route (2 s) may be gone; the test needs it stale", moved)
	}
	return a, b, c, ks
}

// storeCallsSince is n's lease reads (store Gets) and store calls in all
// since its store's stats were before.
func storeCallsSince(n *replica, before adapters.Stats) (lease, calls uint64) {
	after := n.Store.Stats()
	calls = after.Total().Requests - before.Total().Requests
	return after[adapters.OpGet].Requests - before[adapters.OpGet].Requests, calls
}

// waitHandingOver waits until n refuses its own new operations on ks.
func waitHandingOver(t *testing.T, n *replica, ks adapters.Keyspace) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		tx, err := n.Engine.Begin(false)
		if err != nil {
			t.Fatal(err)
		}
		_, _, _, err = tx.LockKnown(context.Background(), ks, rowKey(99))
		tx.Abort()
		if errors.Is(err, txn.ErrNotOwner) {
			return
		}
	}
	t.Fatal("the owner never began the handover")
}

// waitRead waits until n reads property N = want at key (within the
// staleness bound).
func waitRead(t *testing.T, n *replica, ks adapters.Keyspace, key []byte, want int) {
	t.Helper()
	var v []byte
	var err error
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if v, _, err = n.Engine.Get(context.Background(), ks, key, txn.ReadLatest); err == nil && v != nil && rowN(t, v) == want {
			return
		}
	}
	t.Fatalf("read %q (%v), want N=%d", v, err, want)
}

// rowN is property N of an entity rowValue made (the store may have
// stamped it since).
func rowN(t *testing.T, v []byte) int {
	t.Helper()
	r, err := dscodec.DecodeValue(v)
	if err != nil {
		t.Fatalf("entity %q: %v", v, err)
	}
	n, ok := r.GetEntity().GetProperties()["N"].GetValueType().(*datastorepb.Value_IntegerValue)
	if !ok {
		t.Fatalf("entity %q has no integer N", v)
	}
	return int(n.IntegerValue)
}

// TestPartitionedCommitReplyLost: a forwarded commit whose reply is lost
// (the owner applied it, the connection broke before the answer) fails
// with adapters.ErrUnknownOutcome and is not sent again: the owner
// applied it once.
func TestPartitionedCommitReplyLost(t *testing.T) {
	ctx := context.Background()
	ks := partitionedTable(t, "lost")
	a, b := startReplica(t, "node-a"), startReplica(t, "node-b")
	if err := a.Engine.Upsert(ctx, ks, rowKey(1), rowValue(ks, 1, 1)); err != nil {
		t.Fatal(err)
	}
	commits := a.Engine.Stats().Commits
	runs := 0
	err := b.Engine.Run(ctx, false, func(tx *txn.Txn) error {
		runs++
		if err := tx.Upsert(ctx, ks, rowKey(2), rowValue(ks, 2, 2)); err != nil {
			return err
		}
		a.ln.arm.Store(true) // the next thing the owner writes is lost: the commit's reply
		return nil
	})
	if !errors.Is(err, adapters.ErrUnknownOutcome) {
		t.Fatalf("a forwarded commit whose reply was lost: %v, want adapters.ErrUnknownOutcome", err)
	}
	if runs != 1 {
		t.Fatalf("the transaction ran %d times, want once (never sent again)", runs)
	}
	// The owner applied it, once.
	if got := a.Engine.Stats().Commits - commits; got != 1 {
		t.Fatalf("the owner committed %d transactions, want 1", got)
	}
	if v, ok, err := a.Engine.Get(ctx, ks, rowKey(2), txn.ReadLatest); err != nil || !ok || string(v) != string(rowValue(ks, 2, 2)) {
		t.Fatalf("the owner's state after the lost reply: %q %v %v", v, ok, err)
	}
	// The forwarder goes on: a new connection.
	if err := b.Engine.Upsert(ctx, ks, rowKey(3), rowValue(ks, 3, 3)); err != nil {
		t.Fatalf("the next forwarded write: %v", err)
	}
}

// TestPeerSecret: a node presenting another secret is refused by the
// owner's peer server, reads and writes alike, with an error that says
// so, and writes nothing.
func TestPeerSecret(t *testing.T) {
	ctx := context.Background()
	ks := partitionedTable(t, "sec")
	a := startReplica(t, "node-a")
	if err := a.Engine.Upsert(ctx, ks, rowKey(1), rowValue(ks, 1, 1)); err != nil {
		t.Fatal(err)
	}
	b := startReplicaWith(t, "node-b", "another-secret-0123456789", nil)
	err := b.Engine.Upsert(ctx, ks, rowKey(2), rowValue(ks, 2, 2))
	if !errors.Is(err, txn.ErrOwnerUnavailable) || !strings.Contains(err.Error(), "wrong peer secret") {
		t.Fatalf("a write through a node with another secret: %v", err)
	}
	if _, _, err := b.Engine.Get(ctx, ks, rowKey(1), txn.ReadLatest); !errors.Is(err, adapters.ErrUnavailable) || !strings.Contains(err.Error(), "wrong peer secret") {
		t.Fatalf("a read through a node with another secret: %v", err)
	}
	if _, ok, err := a.Engine.Get(ctx, ks, rowKey(2), txn.ReadLatest); err != nil || ok {
		t.Fatalf("the refused write is at the owner (%v, %v)", ok, err)
	}
}

// TestPartitionedPeerCutOff: a replica that cannot reach the owner of a
// table (the owner's peer listener closed; the owner alive, renewing its
// lease) refuses the table's writes as retryable and, once that has
// lasted longer than a dead owner's lease would take to pass, says so on
// readiness; when the owner answers again, both end.
func TestPartitionedPeerCutOff(t *testing.T) {
	ctx := context.Background()
	ks := partitionedTable(t, "cut")
	a, b := startReplica(t, "node-a"), startReplica(t, "node-b")
	if err := a.Engine.Upsert(ctx, ks, rowKey(1), rowValue(ks, 1, 1)); err != nil {
		t.Fatal(err)
	}
	a.cutOff(t)
	began := time.Now()
	for {
		wctx, cancel := context.WithTimeout(ctx, time.Second) // a request's deadline
		err := b.Engine.Upsert(wctx, ks, rowKey(2), rowValue(ks, 2, 2))
		cancel()
		if !errors.Is(err, txn.ErrOwnerUnavailable) {
			t.Fatalf("a write while its owner is cut off: %v, want txn.ErrOwnerUnavailable", err)
		}
		ok, why := b.Ready()
		if !ok {
			if !strings.Contains(why, "unreachable") || time.Since(began) < 2*2*time.Second {
				t.Fatalf("not ready after %v: %q; want it after twice the lease TTL (2s), naming the peer", time.Since(began), why)
			}
			t.Logf("not ready after %v: %s", time.Since(began).Round(time.Millisecond), why)
			break
		}
		if time.Since(began) > 15*time.Second {
			t.Fatalf("still ready 15s into the cut: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if a.Leases.Epoch(ks) == 0 {
		t.Fatal("the cut-off owner lost its lease: the test needs it alive")
	}
	a.serve(t)
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		err := b.Engine.Upsert(ctx, ks, rowKey(2), rowValue(ks, 2, 2))
		if err == nil {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("writes through the owner after it came back: %v", err)
		}
	}
	if ok, why := b.Ready(); !ok {
		t.Fatalf("still not ready once the owner answers: %s", why)
	}
}

// TestTableDeletedBehindWriteBack: a table deleted outside nemo while nemo
// holds acknowledged writes to it: write-back quarantines them (recorded in
// conflicts.jsonl, counted as rejected), as the service deletes a table's
// entities with it, instead of retrying them forever, so the drain ends
// (it exited 3 before, at every start, with the log in the backend).
func TestTableDeletedBehindWriteBack(t *testing.T) {
	ctx := context.Background()
	cfg := logsConfig(t, config.BackendAzTable, aztest.Azurite(t), "node-gone")
	st, err := azstore.New(azstore.Options{ConnectionString: cfg.Backend.AzTable.ConnectionString})
	if err != nil {
		t.Fatal(err)
	}
	ks := adapters.Keyspace(aztest.TableName("gone"))
	if err := st.CreateTable(ctx, string(ks)); err != nil {
		t.Fatal(err)
	}
	n, err := Open(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := n.Engine.Upsert(ctx, ks, azRowKey(i), azRowValue(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.DeleteTable(ctx, string(ks)); err != nil {
		t.Fatal(err)
	}
	if err := n.Engine.Flush(ctx); err != nil {
		t.Fatalf("flush of a table deleted behind nemo: %v", err)
	}
	if got := n.Buffer.Stats().WritebackRejected; got != 3 {
		t.Fatalf("%d writes quarantined, want 3", got)
	}
	if err := n.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	b, err := os.ReadFile(cfg.ConflictsFile())
	if err != nil || strings.Count(string(b), "\n") != 3 {
		t.Fatalf("conflicts file: %d lines (%v), want the 3 quarantined writes", strings.Count(string(b), "\n"), err)
	}
}

// TestPartitionedDrainAfterTakeover: an owner cut off from the backend
// long enough for its lease to pass (another replica takes the keyspace
// over, replays its log and writes on) drains afterwards with success:
// what it never wrote back is in the log the new owner replayed, so its
// drain forgets the keyspace instead of retrying a write-back and a
// truncation the new owner's fence refuses until its time runs out (a
// drain that reported unflushed writes, exit 3, under load in
// nemo-bench). Nothing is lost: the new owner's drain leaves every write
// in the store.
func TestPartitionedDrainAfterTakeover(t *testing.T) {
	ctx := context.Background()
	ks := partitionedTable(t, "taken")
	a := startReplicaWith(t, "node-a", testPeerSecret, func(c *config.Config) {
		c.Backend.Fault = config.FaultBackend{Enabled: true, Seed: 1, Error: config.FaultUnavailable, OutageMode: config.OutageFail}
		c.Cache.MaxDirtyAge = time.Hour // A's writes stay dirty: only its log has them
	})
	b := startReplica(t, "node-b")
	for i := range 3 {
		if err := a.Engine.Upsert(ctx, ks, rowKey(i), rowValue(ks, i, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if u := a.Buffer.Unflushed(); u.Records == 0 {
		t.Fatal("A wrote its writes back at once; the test needs them dirty")
	}
	a.faults.SetHung(true) // cut off: A's renewals go unanswered
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = b.Engine.Upsert(wctx, ks, rowKey(3), rowValue(ks, 3, 2))
		cancel()
		if err == nil {
			break
		}
		t.Logf("%s B: %v", time.Now().Format("15:04:05.000"), err)
	}
	if err != nil {
		t.Fatalf("B never took the keyspace over from A, cut off: %v", err)
	}
	if len(b.Engine.Owned()) != 1 {
		t.Fatalf("B owns %d keyspaces after its write, want 1", len(b.Engine.Owned()))
	}
	a.faults.SetHung(false)
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := a.Drain(dctx); err != nil {
		t.Fatalf("A's drain after B took its keyspace over: %v", err)
	}
	if err := b.Drain(dctx); err != nil {
		t.Fatalf("B's drain: %v", err)
	}
	c := startReplica(t, "node-c") // reads the store: no node holds the keyspace now
	for i, want := range []int{1, 1, 1, 2} {
		v, _, err := c.Engine.Get(ctx, ks, rowKey(i), txn.ReadLatest)
		if err != nil || v == nil {
			t.Fatalf("key %d in the store after both drains: %q, %v", i, v, err)
		}
		if n := rowN(t, v); n != want {
			t.Errorf("key %d in the store: N=%d, want %d", i, n, want)
		}
	}
}
