package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/adapters/storetest"
)

// conflictEnv is a buffer over a versioned in-memory store that a test can
// also write directly, as another writer would.
type conflictEnv struct {
	t     *testing.T
	ctx   context.Context
	b     *Buffer
	store *memStore
	fs    *fault.Store
	mu    sync.Mutex
	got   []Conflict
}

func newConflictEnv(t *testing.T, p ConflictPolicy) *conflictEnv {
	t.Helper()
	e := &conflictEnv{t: t, ctx: context.Background(), store: newMemStore()}
	e.fs = fault.New(e.store, fault.Config{})
	b, err := New(e.fs, Options{DisableWorkers: true, OnConflict: p, Logger: quietLog,
		Conflicts: func(c Conflict) { e.mu.Lock(); e.got = append(e.got, c); e.mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	b.OpenKeyspace(testKS)
	e.b = b
	return e
}

// other writes key as another writer would: straight to the store.
func (e *conflictEnv) other(key, val string) adapters.Version {
	e.t.Helper()
	vers, err := e.store.Upsert(e.ctx, testKS, []adapters.Write{{Key: []byte(key), Value: []byte(val)}})
	if err != nil {
		e.t.Fatal(err)
	}
	return vers[0]
}

func (e *conflictEnv) apply(key, val string, del bool) {
	e.t.Helper()
	if err := e.b.Apply(e.ctx, testKS, []Write{{Key: []byte(key), Value: []byte(val), Delete: del}}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *conflictEnv) get(key string) (string, bool) {
	e.t.Helper()
	v, ok, err := e.b.Get(e.ctx, testKS, []byte(key))
	if err != nil {
		e.t.Fatal(err)
	}
	return string(v), ok
}

func (e *conflictEnv) inStore(key string) (string, bool) {
	e.t.Helper()
	recs, err := e.store.Get(e.ctx, testKS, [][]byte{[]byte(key)})
	if err != nil {
		e.t.Fatal(err)
	}
	return string(recs[0].Value), recs[0].Value != nil
}

func (e *conflictEnv) flush() {
	e.t.Helper()
	if err := flushAll(e.ctx, e.b); err != nil {
		e.t.Fatalf("flush: %v", err)
	}
}

func (e *conflictEnv) check() {
	e.t.Helper()
	if err := e.b.Check(e.ctx); err != nil {
		e.t.Fatal(err)
	}
}

// TestWriteBackNeverOverwritesAnUnseenChange: each way another writer can
// change a key behind the buffer makes the buffered write conflict; the
// store's version wins, the buffered record is dropped (the next read
// refetches), and the losing write is reported in full.
func TestWriteBackNeverOverwritesAnUnseenChange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(e *conflictEnv) // what the buffer saw
		change func(e *conflictEnv) // the other writer
		mine   func(e *conflictEnv) // the buffered write
		want   string               // the key's value afterwards ("" absent)
		exists bool                 // what the conflict says the store held
		expect adapters.ExpectKind
		del    bool
	}{
		{"update after an out-of-band update",
			func(e *conflictEnv) { e.other("k", "v1"); e.get("k") },
			func(e *conflictEnv) { e.other("k", "theirs") },
			func(e *conflictEnv) { e.apply("k", "mine", false) },
			"theirs", true, adapters.ExpectVersion, false},
		{"insert of a key read as absent, inserted meanwhile",
			func(e *conflictEnv) { e.get("k") },
			func(e *conflictEnv) { e.other("k", "theirs") },
			func(e *conflictEnv) { e.apply("k", "mine", false) },
			"theirs", true, adapters.ExpectAbsent, false},
		{"insert into a gap a scan sealed",
			func(e *conflictEnv) { e.other("a", "1"); e.other("z", "2"); e.scan() },
			func(e *conflictEnv) { e.other("k", "theirs") },
			func(e *conflictEnv) { e.apply("k", "mine", false) },
			"theirs", true, adapters.ExpectAbsent, false},
		{"delete after an out-of-band update",
			func(e *conflictEnv) { e.other("k", "v1"); e.get("k") },
			func(e *conflictEnv) { e.other("k", "theirs") },
			func(e *conflictEnv) { e.apply("k", "", true) },
			"theirs", true, adapters.ExpectVersion, true},
		{"update after an out-of-band delete",
			func(e *conflictEnv) { e.other("k", "v1"); e.get("k") },
			func(e *conflictEnv) {
				if err := e.store.Delete(e.ctx, testKS, storetest.Deletes([][]byte{[]byte("k")})); err != nil {
					t.Fatal(err)
				}
			},
			func(e *conflictEnv) { e.apply("k", "mine", false) },
			"", false, adapters.ExpectVersion, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newConflictEnv(t, ConflictStoreWins)
			tc.setup(e)
			tc.change(e)
			tc.mine(e)
			e.flush()
			v, ok := e.get("k")
			if v != tc.want || ok != (tc.want != "") {
				t.Fatalf("after the conflict nemo reads %q (%v), want the store's %q", v, ok, tc.want)
			}
			if sv, _ := e.inStore("k"); sv != tc.want {
				t.Fatalf("store holds %q, want %q (the other writer's change stands)", sv, tc.want)
			}
			if len(e.got) != 1 || e.b.Stats().WritebackConflicts != 1 {
				t.Fatalf("conflicts reported %+v (counter %d), want one", e.got, e.b.Stats().WritebackConflicts)
			}
			c := e.got[0]
			if string(c.Key) != "k" || c.Delete != tc.del || (!tc.del && string(c.Value) != "mine") ||
				c.Expected.Kind != tc.expect || c.Exists != tc.exists || c.Resolution != ConflictStoreWins {
				t.Fatalf("conflict %+v", c)
			}
			e.check()
		})
	}
}

func (e *conflictEnv) scan() {
	e.t.Helper()
	if _, _, err := e.b.Scan(e.ctx, testKS, nil, nil, 0); err != nil {
		e.t.Fatal(err)
	}
}

// TestWriteBackOverwritePolicy: with ConflictOverwrite the buffered write
// replaces the other writer's change, which is still reported.
func TestWriteBackOverwritePolicy(t *testing.T) {
	e := newConflictEnv(t, ConflictOverwrite)
	e.other("k", "v1")
	e.get("k")
	e.other("k", "theirs")
	e.apply("k", "mine", false)
	e.flush() // refused, requeued unconditionally
	e.flush()
	if v, _ := e.inStore("k"); v != "mine" {
		t.Fatalf("store holds %q, want the overwrite", v)
	}
	if len(e.got) != 1 || e.got[0].Resolution != ConflictOverwrite {
		t.Fatalf("conflicts %+v", e.got)
	}
	e.check()
}

// TestWriteBackOwnEarlierAttempt: a write-back whose call failed without
// an answer although the write landed is settled by reading the key back
// in the same write-back; when that read fails too, it is not a conflict
// when retried (the store holds the buffer's own value), nor when the
// record changed in between (the store holds an earlier attempt of its
// own: rebase and write the newer value).
func TestWriteBackOwnEarlierAttempt(t *testing.T) {
	lose := fault.Config{Seed: 1, Ops: map[adapters.Op]fault.OpConfig{adapters.OpUpsert: {ErrorRate: 1, PartialRate: 1}}}
	loseAndBlind := fault.Config{Seed: 1, Ops: map[adapters.Op]fault.OpConfig{adapters.OpUpsert: {ErrorRate: 1, PartialRate: 1},
		adapters.OpGet: {ErrorRate: 1}}}
	e := newConflictEnv(t, ConflictStoreWins)
	e.other("k", "v1")
	e.get("k")
	e.apply("k", "mine0", false)
	// The next upsert lands but reports failure: read back, it is done.
	e.fs.SetConfig(lose)
	if err := flushAll(e.ctx, e.b); err != nil {
		t.Fatalf("a lost answer settled by reading the key back: %v", err)
	}
	e.fs.SetConfig(fault.Config{})
	if v, _ := e.inStore("k"); v != "mine0" || e.b.Stats().DirtyBytes != 0 {
		t.Fatalf("store %q, dirty bytes %d: want mine0 written and clean", v, e.b.Stats().DirtyBytes)
	}
	e.apply("k", "mine1", false)
	// Lands, reports failure, and the key cannot be read back.
	e.fs.SetConfig(loseAndBlind)
	if err := flushAll(e.ctx, e.b); err == nil {
		t.Fatal("an unsettled write-back was not reported")
	}
	e.fs.SetConfig(fault.Config{})
	if v, _ := e.inStore("k"); v != "mine1" {
		t.Fatalf("the failed call did not land (store %q): the test needs it to", v)
	}
	e.flush() // refused (the base is mine0's version), but the store holds mine1
	if len(e.got) != 0 {
		t.Fatalf("own write reported as a conflict: %+v", e.got)
	}
	// Again, with a newer value committed after the ambiguous attempt.
	e.apply("k", "mine2", false)
	e.fs.SetConfig(loseAndBlind)
	_ = flushAll(e.ctx, e.b)
	e.fs.SetConfig(fault.Config{})
	if v, _ := e.inStore("k"); v != "mine2" {
		t.Fatalf("the second failed call did not land (store %q): the rebase case needs it to", v)
	}
	e.apply("k", "mine3", false)
	e.flush() // refused: the store holds mine2, an attempt of ours: rebase
	e.flush()
	if v, _ := e.inStore("k"); v != "mine3" || len(e.got) != 0 {
		t.Fatalf("store %q, conflicts %+v; want mine3 and none", v, e.got)
	}
	e.check()
}

// TestWriteBackLostBatchSettledByOneRead: a write-back batch applied with
// its answer lost is settled by one read of its keys, not retried and
// refused a record at a time.
func TestWriteBackLostBatchSettledByOneRead(t *testing.T) {
	e := newConflictEnv(t, ConflictStoreWins)
	counted := adapters.Count(e.store)
	e.fs = fault.New(counted, fault.Config{})
	// One call, so one lost answer (in parallel, each of the calls a
	// pass is spread over settles with the same one read).
	b, err := New(e.fs, Options{DisableWorkers: true, OnConflict: ConflictStoreWins, WriteBackParallelism: 1, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	b.OpenKeyspace(testKS)
	e.b = b
	for i := range 100 {
		e.apply(fmt.Sprintf("k%03d", i), "v", false)
	}
	e.fs.SetLoseNext(adapters.OpUpsert, 1)
	if err := flushAll(e.ctx, b); err != nil {
		t.Fatal(err)
	}
	st := counted.Stats()
	if st[adapters.OpUpsert].Requests != 1 || st[adapters.OpGet].Requests != 1 || b.Stats().DirtyBytes != 0 {
		t.Fatalf("%d upserts, %d gets, %d dirty bytes: want the lost batch settled by one read",
			st[adapters.OpUpsert].Requests, st[adapters.OpGet].Requests, b.Stats().DirtyBytes)
	}
	e.check()
}

// TestWriteBackConflictWhileLocked: a refused record a transaction holds
// stays dirty until released, then is dropped on the next write-back. The
// flush that left it unwritten fails: a checkpoint must not count it as
// in the store.
func TestWriteBackConflictWhileLocked(t *testing.T) {
	e := newConflictEnv(t, ConflictStoreWins)
	e.other("k", "v1")
	e.get("k")
	e.other("k", "theirs")
	e.apply("k", "mine", false)
	o := &Owner{ID: 1}
	if _, _, _, err := e.b.LockKey(e.ctx, testKS, []byte("k"), o, ModeS); err != nil {
		t.Fatal(err)
	}
	if err := flushAll(e.ctx, e.b); !errors.Is(err, ErrStore) {
		t.Fatalf("flush that left a locked refused record unwritten: %v, want ErrStore", err)
	}
	if len(e.got) != 0 || e.b.Stats().DirtyBytes == 0 {
		t.Fatalf("a locked record was dropped: conflicts %+v", e.got)
	}
	e.b.Release(o)
	e.flush()
	if v, _ := e.get("k"); v != "theirs" || len(e.got) != 1 {
		t.Fatalf("after release: %q, conflicts %+v", v, e.got)
	}
	e.check()
}

// TestWriteBackBlindWriteIsUnconditional: a write into a key the buffer
// never knew (a blind upsert) replaces whatever the store holds, as the
// client's insert-or-replace asked.
func TestWriteBackBlindWriteIsUnconditional(t *testing.T) {
	e := newConflictEnv(t, ConflictStoreWins)
	e.other("k", "theirs")
	e.apply("k", "mine", false) // the buffer never read k: base unknown
	e.flush()
	if v, _ := e.inStore("k"); v != "mine" || len(e.got) != 0 {
		t.Fatalf("store %q, conflicts %+v", v, e.got)
	}
	e.check()
}

// TestConflictErrorContract: errors.Is and the message.
func TestConflictErrorContract(t *testing.T) {
	err := error(&adapters.ConflictError{Conflicts: []adapters.Conflict{{Key: []byte("k"), Exists: true, Current: "7"}}})
	if !errors.Is(err, adapters.ErrConflict) || err.Error() == "" {
		t.Fatal(err)
	}
}

// poisonStore refuses, as invalid, any upsert batch holding a value that
// contains "poison" (a store refuses a whole batch for one bad record).
type poisonStore struct{ adapters.Store }

func (p poisonStore) Upsert(ctx context.Context, ks adapters.Keyspace, ws []adapters.Write) ([]adapters.Version, error) {
	for _, w := range ws {
		if bytes.Contains(w.Value, []byte("poison")) {
			return nil, fmt.Errorf("poison store: %w: property name too long", adapters.ErrInvalid)
		}
	}
	return p.Store.Upsert(ctx, ks, ws)
}

// TestPoisonedRecordIsIsolated: one record the store refuses as invalid,
// written back in one batch with valid ones, is isolated: the others reach
// the store, Flush succeeds, and the bad one is quarantined (reported with
// the store's refusal, counted) and dropped, not retried forever.
func TestPoisonedRecordIsIsolated(t *testing.T) {
	var mu sync.Mutex
	var got []Conflict
	raw := newMemStore()
	b, err := New(poisonStore{raw}, Options{DisableWorkers: true, Logger: quietLog, Conflicts: func(c Conflict) {
		mu.Lock()
		got = append(got, c)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.OpenKeyspace(testKS)
	ctx := context.Background()
	var ws []Write
	for i := range 9 {
		v := fmt.Sprintf("v%d", i)
		if i == 5 {
			v = "poison"
		}
		ws = append(ws, Write{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(v)})
	}
	if err := b.Apply(ctx, testKS, ws); err != nil {
		t.Fatal(err)
	}
	if err := flushAll(ctx, b); err != nil {
		t.Fatalf("Flush with one poisoned record: %v", err)
	}
	recs, err := raw.Get(ctx, testKS, [][]byte{[]byte("k0"), []byte("k5"), []byte("k8")})
	if err != nil {
		t.Fatal(err)
	}
	if string(recs[0].Value) != "v0" || recs[1].Value != nil || string(recs[2].Value) != "v8" {
		t.Fatalf("store holds k0=%q k5=%q k8=%q, want the valid ones only", recs[0].Value, recs[1].Value, recs[2].Value)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || string(got[0].Key) != "k5" || string(got[0].Value) != "poison" || !strings.Contains(got[0].Rejected, "property name too long") {
		t.Fatalf("quarantined %+v, want k5 with the store's refusal", got)
	}
	if st := b.Stats(); st.WritebackRejected != 1 || st.WritebackConflicts != 0 || st.DirtyBytes != 0 {
		t.Fatalf("stats %+v", st)
	}
	if v, ok, err := b.Get(ctx, testKS, []byte("k5")); err != nil || ok {
		t.Fatalf("the rejected record is still served: %q %v %v", v, ok, err)
	}
	if err := b.Check(ctx); err != nil {
		t.Fatal(err)
	}
}
