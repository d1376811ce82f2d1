package txn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/cache"
)

// The keyspace logs of these tests live in memory (memLogs), shared by
// the nodes of a test as the backend would be; each node's lease is a
// test's to give and take (epochLease). The real logs are txn/blog's,
// tested there and through the node.

var errFenced = errors.New("memlog: fenced by a later epoch")

// memLogs are the keyspace logs of a backend.
type memLogs struct {
	mu   sync.Mutex
	logs map[adapters.Keyspace]*memLog
	// appends counts appends, opens opens, for the tests that count
	// calls; lose makes the next append apply and then fail for good, as
	// a blog.Log whose write was left unsettled.
	appends, opens int
	lose           bool
}

type memLog struct {
	fence   uint64 // epoch
	entries []LogEntry
	next    uint64
}

func newMemLogs() *memLogs { return &memLogs{logs: map[adapters.Keyspace]*memLog{}} }

// node is one node's view: its lease and the shared logs.
func (m *memLogs) node(l *epochLease) KeyspaceLogs { return &memNodeLogs{m: m, l: l} }

func (m *memLogs) entries(k adapters.Keyspace) []LogEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.logs[k]; l != nil {
		return append([]LogEntry(nil), l.entries...)
	}
	return nil
}

type memNodeLogs struct {
	m *memLogs
	l *epochLease
}

func (n *memNodeLogs) Epoch(k adapters.Keyspace) uint64 { return n.l.epochOf(k) }

func (n *memNodeLogs) Open(_ context.Context, k adapters.Keyspace, epoch uint64) (KeyspaceLog, []LogEntry, error) {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	l := n.m.logs[k]
	if l == nil {
		l = &memLog{next: 1}
		n.m.logs[k] = l
	}
	if l.fence > epoch {
		return nil, nil, errFenced
	}
	l.fence = epoch
	n.m.opens++
	return &memAppender{m: n.m, k: k, epoch: epoch}, append([]LogEntry(nil), l.entries...), nil
}

type memAppender struct {
	m      *memLogs
	k      adapters.Keyspace
	epoch  uint64
	broken error
}

// SetPending: a memory log has no group commit to gather.
func (a *memAppender) SetPending(func() int) {}

func (a *memAppender) Append(_ context.Context, data []byte) (uint64, error) {
	a.m.mu.Lock()
	defer a.m.mu.Unlock()
	l := a.m.logs[a.k]
	if l.fence != a.epoch {
		return 0, errFenced
	}
	seq := l.next
	l.next++
	if a.broken != nil {
		return 0, a.broken
	}
	l.entries = append(l.entries, LogEntry{Seq: seq, Data: append([]byte(nil), data...)})
	a.m.appends++
	if a.m.lose {
		a.m.lose = false
		a.broken = errors.New("memlog: a write left unsettled")
		return 0, a.broken
	}
	return seq, nil
}

func (a *memAppender) Err() error {
	a.m.mu.Lock()
	defer a.m.mu.Unlock()
	return a.broken
}

func (a *memAppender) Truncate(_ context.Context, below uint64) error {
	a.m.mu.Lock()
	defer a.m.mu.Unlock()
	l := a.m.logs[a.k]
	i := 0
	for i < len(l.entries) && l.entries[i].Seq < below {
		i++
	}
	l.entries = l.entries[i:]
	return nil
}

// epochLease is a node's lease of every keyspace: held at an epoch, or
// not (another node holds it).
type epochLease struct {
	mu    sync.Mutex
	epoch uint64
	held  bool
}

func (l *epochLease) Hold(context.Context, adapters.Keyspace) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		return fmt.Errorf("%w: test lease not held", ErrNotLeaseHolder)
	}
	return nil
}

func (l *epochLease) epochOf(adapters.Keyspace) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		return 0
	}
	return l.epoch
}

func (l *epochLease) set(held bool, epoch uint64) {
	l.mu.Lock()
	l.held, l.epoch = held, epoch
	l.mu.Unlock()
}

// logNode is an engine over its own buffer over a store shared with the
// test's other nodes, with keyspace logs: write-back waits an hour, so
// only checkpoints and drains write the store.
type logNode struct {
	e     *Engine
	buf   *cache.Buffer
	lease *epochLease
}

func startLogNode(t *testing.T, st adapters.Store, logs *memLogs, epoch uint64) *logNode {
	t.Helper()
	b, err := cache.New(st, cache.Options{Logger: quiet, FlushInterval: time.Hour, MaxDirtyAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	l := &epochLease{held: true, epoch: epoch}
	e, err := New(b, Options{Logger: quiet, Coherence: Exclusive, Leases: l, Logs: logs.node(l), CheckpointInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	n := &logNode{e: e, buf: b, lease: l}
	t.Cleanup(func() { n.crash() })
	return n
}

// crash stops n without flushing anything: its dirty records are lost
// with its memory, as with kill -9; its logs stay in the backend.
func (n *logNode) crash() {
	n.e.Close()
	n.buf.Close()
}

func openStore(t *testing.T) *embedded.Store {
	t.Helper()
	st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func getVal(t *testing.T, e *Engine, key string) string {
	t.Helper()
	v, ok, err := e.Get(context.Background(), ks, []byte(key), ReadLatest)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return "<absent>"
	}
	return string(v)
}

func storeVal(t *testing.T, st adapters.Store, key string) string {
	t.Helper()
	recs, err := st.Get(context.Background(), ks, [][]byte{[]byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	if recs[0].Value == nil {
		return "<absent>"
	}
	return string(recs[0].Value)
}

// A node that crashes with acknowledged writes nobody wrote back loses
// none: the next holder of the lease (another node, its own disk gone)
// replays the keyspace's log before it answers anything, a read
// included, and its checkpoint writes them back and empties the log.
func TestKeyspaceLogReplayedByTheNextHolder(t *testing.T) {
	ctx := context.Background()
	st, logs := openStore(t), newMemLogs()
	a := startLogNode(t, st, logs, 1)
	for i := range 5 {
		if err := a.e.Upsert(ctx, ks, fmt.Appendf(nil, "k%d", i), fmt.Appendf(nil, "a%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.e.Delete(ctx, ks, []byte("k4")); err != nil {
		t.Fatal(err)
	}
	a.crash()
	if v := storeVal(t, st, "k0"); v != "<absent>" {
		t.Fatalf("the store holds %q: the test needs the writes unflushed", v)
	}
	if n := len(logs.entries(ks)); n != 6 {
		t.Fatalf("%d entries in the log, want 6 (one per commit)", n)
	}
	b := startLogNode(t, st, logs, 2)
	for i, want := range []string{"a0", "a1", "a2", "a3", "<absent>"} {
		if got := getVal(t, b.e, fmt.Sprintf("k%d", i)); got != want {
			t.Fatalf("k%d through the next holder: %q, want %q", i, got, want)
		}
	}
	if err := b.e.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if v := storeVal(t, st, "k3"); v != "a3" {
		t.Fatalf("store after the checkpoint: %q", v)
	}
	if n := len(logs.entries(ks)); n != 0 {
		t.Fatalf("%d entries left after the checkpoint", n)
	}
}

// Once the next holder has opened the log at its epoch, the last one's
// commits are refused (nothing acknowledged, nothing installed): the fence.
func TestKeyspaceLogFencesTheLastHolder(t *testing.T) {
	ctx := context.Background()
	st, logs := openStore(t), newMemLogs()
	a := startLogNode(t, st, logs, 1)
	if err := a.e.Upsert(ctx, ks, []byte("k"), []byte("a")); err != nil {
		t.Fatal(err)
	}
	b := startLogNode(t, st, logs, 2)
	if got := getVal(t, b.e, "k"); got != "a" {
		t.Fatalf("read through the next holder: %q", got)
	}
	err := a.e.Upsert(ctx, ks, []byte("k"), []byte("late"))
	if !errors.Is(err, errFenced) || !errors.Is(err, ErrCommitLog) {
		t.Fatalf("a commit of the fenced holder: %v, want the log's refusal", err)
	}
	if got := getVal(t, a.e, "k"); got != "a" {
		t.Fatalf("the refused commit was installed: %q", got)
	}
	if err := b.e.Upsert(ctx, ks, []byte("k"), []byte("b")); err != nil {
		t.Fatal(err)
	}
}

// A transaction writes one keyspace with a log; two are refused whole.
func TestKeyspaceLogOneKeyspace(t *testing.T) {
	ctx := context.Background()
	st, logs := openStore(t), newMemLogs()
	a := startLogNode(t, st, logs, 1)
	err := a.e.Run(ctx, false, func(tx *Txn) error {
		if err := tx.Upsert(ctx, ks, []byte("k"), []byte("1")); err != nil {
			return err
		}
		return tx.Upsert(ctx, "other", []byte("k"), []byte("1"))
	})
	if !errors.Is(err, ErrOneKeyspace) {
		t.Fatalf("a transaction writing two keyspaces: %v, want ErrOneKeyspace", err)
	}
	if got := getVal(t, a.e, "k"); got != "<absent>" {
		t.Fatalf("the refused transaction's write is visible: %q", got)
	}
}

// A node whose lease passed to another node and came back at a new epoch
// forgets what it knew of the keyspace and replays the log: it reads the
// other node's writes, not its own stale ones (a value it held, and
// absence it knew of), also once the other node wrote them back and
// truncated the log.
func TestKeyspaceLogAfterTheLeaseCameBack(t *testing.T) {
	ctx := context.Background()
	st, logs := openStore(t), newMemLogs()
	a := startLogNode(t, st, logs, 1)
	if err := a.e.Upsert(ctx, ks, []byte("k"), []byte("a")); err != nil {
		t.Fatal(err)
	}
	a.lease.set(false, 0)
	b := startLogNode(t, st, logs, 2)
	if err := b.e.Upsert(ctx, ks, []byte("k"), []byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := b.e.Upsert(ctx, ks, []byte("k2"), []byte("b2")); err != nil {
		t.Fatal(err)
	}
	// Written back and truncated: the log no longer says what changed.
	if err := b.e.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.e.Get(ctx, ks, []byte("k"), ReadLatest); !errors.Is(err, ErrNotLeaseHolder) {
		t.Fatalf("a read without the lease: %v, want ErrNotLeaseHolder", err)
	}
	b.lease.set(false, 0)
	a.lease.set(true, 3)
	for key, want := range map[string]string{"k": "b", "k2": "b2"} {
		if got := getVal(t, a.e, key); got != want {
			t.Fatalf("%s after the lease came back: %q, want %q", key, got, want)
		}
	}
	if err := a.e.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if v := storeVal(t, st, "k"); v != "b" {
		t.Fatalf("store: %q", v)
	}
}

// Drain writes everything back and leaves every log empty; commits are
// group-committed by the log, not logged twice.
func TestKeyspaceLogDrain(t *testing.T) {
	ctx := context.Background()
	st, logs := openStore(t), newMemLogs()
	a := startLogNode(t, st, logs, 1)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 25 {
				if err := a.e.Upsert(ctx, ks, fmt.Appendf(nil, "w%d-%d", w, i), []byte("v")); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	logs.mu.Lock()
	appends := logs.appends
	logs.mu.Unlock()
	if appends != 100 {
		t.Fatalf("%d appends for 100 commits", appends)
	}
	if err := a.e.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(logs.entries(ks)); n != 0 {
		t.Fatalf("%d entries left after the drain", n)
	}
	if v := storeVal(t, st, "w3-24"); v != "v" {
		t.Fatalf("store after the drain: %q", v)
	}
}

// A log broken by a write left unsettled is opened again at the same epoch
// before the next operation, which sees that write if it landed; what the
// buffer already held is not replayed again.
func TestKeyspaceLogBrokenReopened(t *testing.T) {
	ctx := context.Background()
	st, logs := openStore(t), newMemLogs()
	a := startLogNode(t, st, logs, 1)
	for _, v := range []string{"a", "b"} {
		if err := a.e.Upsert(ctx, ks, []byte("k"), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	logs.mu.Lock()
	logs.lose = true
	logs.mu.Unlock()
	if err := a.e.Upsert(ctx, ks, []byte("x"), []byte("1")); err == nil {
		t.Fatal("an append left unsettled was acknowledged")
	}
	if got, want := getVal(t, a.e, "x"), "1"; got != want { // landed: replayed at the reopen
		t.Fatalf("x after the reopen: %q, want %q", got, want)
	}
	if got := getVal(t, a.e, "k"); got != "b" {
		t.Fatalf("k after the reopen: %q", got)
	}
	logs.mu.Lock()
	opens := logs.opens
	logs.mu.Unlock()
	if opens != 2 {
		t.Fatalf("%d opens, want 2 (the first, and again once broken)", opens)
	}
	if got := a.e.klogOf(ks).last.Load(); got != 3 {
		t.Fatalf("last seq %d after the reopen, want 3", got)
	}
	if err := a.e.Upsert(ctx, ks, []byte("y"), []byte("2")); err != nil {
		t.Fatal(err)
	}
}

// Recover replays and writes back a log its last holder left, with no
// client touching the keyspace; a drain waits for it, and reports what it
// could not recover (its lease held elsewhere) as unflushed, unless the
// holder kept its lease past heldFor (alive: the log is its own).
func TestKeyspaceLogRecover(t *testing.T) {
	ctx := context.Background()
	st, logs := openStore(t), newMemLogs()
	a := startLogNode(t, st, logs, 1)
	if err := a.e.Upsert(ctx, ks, []byte("k"), []byte("a")); err != nil {
		t.Fatal(err)
	}
	a.crash()
	b := startLogNode(t, st, logs, 2)
	b.lease.set(false, 0) // the dead holder's lease has not lapsed yet
	b.e.Recover([]adapters.Keyspace{ks}, time.Hour)
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := b.e.Drain(dctx)
	cancel()
	if !errors.Is(err, ErrUnflushed) {
		t.Fatalf("a drain while the recovery waits for the lease: %v, want ErrUnflushed", err)
	}
	// A holder that keeps its lease past heldFor is alive: the recovery
	// leaves the log to it, and a drain does not wait for it.
	live := startLogNode(t, st, logs, 3)
	live.lease.set(false, 0)
	live.e.Recover([]adapters.Keyspace{ks}, 100*time.Millisecond)
	dctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	began := time.Now()
	err = live.e.Drain(dctx)
	cancel()
	if err != nil || time.Since(began) > 5*time.Second {
		t.Fatalf("a drain while another node keeps the lease: %v after %v, want nil once the recovery leaves it", err, time.Since(began))
	}
	if n := len(logs.entries(ks)); n == 0 {
		t.Fatal("the log left to its live holder was emptied")
	}
	c := startLogNode(t, st, logs, 4)
	c.e.Recover([]adapters.Keyspace{ks}, time.Hour)
	if err := c.e.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if v := storeVal(t, st, "k"); v != "a" {
		t.Fatalf("store after the recovering drain: %q", v)
	}
	if n := len(logs.entries(ks)); n != 0 {
		t.Fatalf("%d entries left", n)
	}
}
