package txn

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/wal"
)

// baseEnv is a write-back engine with a WAL over the embedded store (which
// keeps versions and honours preconditions), no background write-back and
// no checkpoints, recording the write-back conflicts it reports.
type baseEnv struct {
	store *embedded.Store
	buf   *cache.Buffer
	eng   *Engine

	mu        sync.Mutex
	conflicts []cache.Conflict
}

func openBaseEnv(t *testing.T, dir string) *baseEnv {
	t.Helper()
	return openBaseEnvWith(t, dir, nil)
}

// openBaseEnvWith is openBaseEnv with the buffer over wrap(store).
func openBaseEnvWith(t *testing.T, dir string, wrap func(adapters.Store) adapters.Store) *baseEnv {
	t.Helper()
	st, err := embedded.Open(filepath.Join(dir, "store"), embedded.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	d := &baseEnv{store: st}
	var under adapters.Store = st
	if wrap != nil {
		under = wrap(st)
	}
	d.buf, err = cache.New(under, cache.Options{MaxKeyBytes: 64, FlushInterval: time.Hour, MaxDirtyAge: time.Hour,
		Conflicts: func(c cache.Conflict) {
			d.mu.Lock()
			d.conflicts = append(d.conflicts, c)
			d.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	d.buf.OpenKeyspace("t")
	wo := wal.Options{Dir: filepath.Join(dir, "wal")}
	wo.SegmentSize = 64 << 10
	d.eng, err = New(d.buf, Options{WAL: &wo, CheckpointInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// crash closes without a drain: the store has only what was flushed, the
// WAL everything committed.
func (d *baseEnv) crash() {
	d.eng.Close()
	d.buf.Close()
	d.store.Close()
}

func (d *baseEnv) conflictKeys() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ks []string
	for _, c := range d.conflicts {
		ks = append(ks, string(c.Key))
	}
	return ks
}

func (d *baseEnv) storeValue(t *testing.T, key string) (string, bool) {
	t.Helper()
	recs, err := d.store.Get(context.Background(), "t", [][]byte{[]byte(key)})
	if err != nil || len(recs) != 1 {
		t.Fatalf("store get %q: %v %v", key, recs, err)
	}
	return string(recs[0].Value), recs[0].Value != nil
}

func storePut(t *testing.T, st *embedded.Store, key, val string) {
	t.Helper()
	if _, err := st.Upsert(context.Background(), "t", []adapters.Write{{Key: []byte(key), Value: []byte(val)}}); err != nil {
		t.Fatal(err)
	}
}

// readWrite reads each key in one transaction (so the buffer learns its
// base) and then writes it: a put of val, or a delete when val is "".
func readWrite(t *testing.T, e *Engine, writes map[string]string) {
	t.Helper()
	ctx := context.Background()
	err := e.Run(ctx, false, func(tx *Txn) error {
		for k, v := range writes {
			if _, _, err := tx.Get(ctx, "t", []byte(k)); err != nil {
				return err
			}
			var err error
			if v == "" {
				_, err = tx.Delete(ctx, "t", []byte(k))
			} else {
				err = tx.Upsert(ctx, "t", []byte(k), []byte(v))
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReplayedWritesKeepTheirBases: writes committed over a store, then a
// crash before any write-back; while nemo is down another writer changes
// one key. After the restart the replayed writes reach the store, except
// the changed key's, which is refused and reported as the one conflict:
// the other writer's value stays.
func TestReplayedWritesKeepTheirBases(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := openBaseEnv(t, dir)
	for _, k := range []string{"a", "b", "c", "e"} {
		storePut(t, d.store, k, "old-"+k)
	}
	// a, b, c updated over known versions; d inserted where the store has
	// nothing; e deleted.
	readWrite(t, d.eng, map[string]string{"a": "new-a", "b": "new-b", "c": "new-c", "d": "new-d", "e": ""})
	d.crash()

	st, err := embedded.Open(filepath.Join(dir, "store"), embedded.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := (&baseEnv{store: st}).storeValue(t, "b"); v != "old-b" {
		t.Fatalf("store b before the other writer: %q (the crash should have left it unflushed)", v)
	}
	storePut(t, st, "b", "other-b") // another writer, while nemo is down
	st.Close()

	d = openBaseEnv(t, dir)
	defer d.crash()
	if err := d.eng.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if got := d.conflictKeys(); len(got) != 1 || got[0] != "b" {
		t.Fatalf("conflicts after replay: %q, want exactly [b]", got)
	}
	if n := d.buf.Stats().WritebackConflicts; n != 1 {
		t.Fatalf("WritebackConflicts = %d, want 1", n)
	}
	d.mu.Lock()
	c := d.conflicts[0]
	d.mu.Unlock()
	if c.Expected.Kind != adapters.ExpectVersion || string(c.Value) != "new-b" || !c.Exists {
		t.Fatalf("conflict %+v: want the replayed write new-b refused against its logged version", c)
	}
	for k, want := range map[string]string{"a": "new-a", "b": "other-b", "c": "new-c", "d": "new-d"} {
		if v, ok := d.storeValue(t, k); !ok || v != want {
			t.Errorf("store %s = %q (%v), want %q", k, v, ok, want)
		}
	}
	if v, ok := d.storeValue(t, "e"); ok {
		t.Errorf("store e = %q, want deleted", v)
	}
	if st := d.buf.Stats(); st.DirtyBytes != 0 {
		t.Errorf("%d dirty bytes after the flush", st.DirtyBytes)
	}
}

// TestReplayRecognisesItsOwnWriteBack: v1 is committed and written back
// (a flush, no checkpoint), then v2 is committed and nemo crashes before
// writing it back. Replay rebuilds the record from both commits, on the
// base before v1; the store refuses it (it holds v1), but v1 is one of the
// replayed values, so the record is rebased and v2 written: no conflict.
// The same for a delete written back and then undone by a re-insert, and
// for an insert written back and then updated.
func TestReplayRecognisesItsOwnWriteBack(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := openBaseEnv(t, dir)
	storePut(t, d.store, "a", "v0")
	storePut(t, d.store, "b", "v0")
	readWrite(t, d.eng, map[string]string{"a": "v1", "b": "", "c": "v1"})
	if err := d.eng.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"a": "v1", "c": "v1"} {
		if v, _ := d.storeValue(t, k); v != want {
			t.Fatalf("store %s after the flush: %q, want %q", k, v, want)
		}
	}
	readWrite(t, d.eng, map[string]string{"a": "v2", "b": "v2", "c": "v2"})
	d.crash()

	d = openBaseEnv(t, dir)
	defer d.crash()
	if err := d.eng.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if got := d.conflictKeys(); len(got) != 0 {
		t.Fatalf("conflicts after replay: %q, want none", got)
	}
	for _, k := range []string{"a", "b", "c"} {
		if v, ok := d.storeValue(t, k); !ok || v != "v2" {
			t.Errorf("store %s = %q (%v), want v2", k, v, ok)
		}
	}
	if st := d.buf.Stats(); st.DirtyBytes != 0 {
		t.Errorf("%d dirty bytes after the flush", st.DirtyBytes)
	}
}

// TestCommitLogsBases checks what the commit log receives: each write's
// base as the buffer knows it (a fetched version, absence), ExpectAny for
// a blind write, and a caller's own Expect left as it was.
func TestCommitLogsBases(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := openBaseEnv(t, dir)
	defer d.crash()
	storePut(t, d.store, "a", "v0")
	recs, err := d.store.Get(ctx, "t", [][]byte{[]byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	va := recs[0].Version
	readWrite(t, d.eng, map[string]string{"a": "v1", "n": "v1"})
	var logged []Change
	inner := d.eng.opts.Log
	d.eng.opts.Log = logFunc(func(ctx context.Context, id uint64, cs []Change) error {
		logged = append(logged, cs...)
		return inner.Append(ctx, id, cs)
	})
	readWrite(t, d.eng, map[string]string{"a": "v2"})
	if err := d.eng.Upsert(ctx, "t", []byte("blind"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	preset := adapters.Expect{Kind: adapters.ExpectVersion, Version: "preset"}
	// A change whose Expect its caller set, through the pipeline's log
	// and install stages.
	tx, err := d.eng.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	c := &commit{t: tx, plan: commitPlan{writes: true, logged: true}, stage: stageAdmitted,
		changes: []Change{{Op: ChangePut, Keyspace: "t", Key: []byte("p"), Value: []byte("x"), Expect: preset}}}
	if err := c.sequenceAndInstall(ctx); err != nil {
		t.Fatal(err)
	}
	tx.Abort()
	want := []adapters.Expect{{Kind: adapters.ExpectVersion, Version: va}, {}, preset}
	if len(logged) != len(want) {
		t.Fatalf("logged %+v", logged)
	}
	for i, c := range logged {
		if c.Expect != want[i] {
			t.Errorf("change %d (%s): logged %+v, want %+v", i, c.Key, c.Expect, want[i])
		}
	}
}

type logFunc func(ctx context.Context, id uint64, cs []Change) error

func (f logFunc) Append(ctx context.Context, id uint64, cs []Change) error { return f(ctx, id, cs) }

// TestCheckpointRaceIsNotAConflict: v0 is committed over a key read from
// the store; a checkpoint begins (its LSN covers v0) and its write-back of
// v0 is slow; meanwhile v1 commits, logging the key's base as it was
// before v0 landed. The write-back lands, the checkpoint completes, and
// nemo crashes before v1 is written back. Replay has v1 alone, on the old
// base, and finds v0 in the store: that is nemo's own write (v1's log
// record carries v0's hash), so v1 is written, with no conflict.
func TestCheckpointRaceIsNotAConflict(t *testing.T) {
	dir := t.TempDir()
	gate := &writeGate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	d := openBaseEnvWith(t, dir, func(st adapters.Store) adapters.Store {
		gate.Store = st.(*embedded.Store)
		return gate
	})
	storePut(t, d.store, "k", "init")
	readWrite(t, d.eng, map[string]string{"k": "v0"})
	done := make(chan error, 1)
	go func() { done <- d.eng.Checkpoint(context.Background()) }()
	<-gate.entered // the checkpoint is writing v0 back
	readWrite(t, d.eng, map[string]string{"k": "v1"})
	close(gate.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v, _ := d.storeValue(t, "k"); v != "v0" {
		t.Fatalf("store holds %q after the checkpoint, want v0 (the race did not happen)", v)
	}
	d.crash()

	d = openBaseEnv(t, dir)
	defer d.crash()
	if err := d.eng.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ks := d.conflictKeys(); len(ks) != 0 {
		t.Fatalf("conflicts %v: the store's v0 is nemo's own write", ks)
	}
	if v, _ := d.storeValue(t, "k"); v != "v1" {
		t.Fatalf("store holds %q, want the replayed v1", v)
	}
}

// writeGate is the embedded store (every optional interface kept) whose
// writes say they began, on entered, and wait for release.
type writeGate struct {
	*embedded.Store
	entered chan struct{}
	release chan struct{}
}

func (g *writeGate) hold(ctx context.Context) error {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *writeGate) Upsert(ctx context.Context, ks adapters.Keyspace, writes []adapters.Write) ([]adapters.Version, error) {
	if err := g.hold(ctx); err != nil {
		return nil, err
	}
	return g.Store.Upsert(ctx, ks, writes)
}

func (g *writeGate) WriteAtomic(ctx context.Context, ks adapters.Keyspace, ms []adapters.Mutation) ([]adapters.Version, error) {
	if err := g.hold(ctx); err != nil {
		return nil, err
	}
	return g.Store.WriteAtomic(ctx, ks, ms)
}
