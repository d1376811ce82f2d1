package txn

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/wal"
)

// TestSnapshotImageFetchOutsideApplyLock: with a read-only snapshot open,
// a commit of a key the buffer does not hold must fetch the key's
// before-image from the store. That fetch happens before the commit takes
// the engine's apply lock, so a checkpoint (which takes it exclusively,
// and so would hold up every commit behind it) does not wait for the
// store. The snapshot still reads the key as it was, and the commit's
// write lands.
func TestSnapshotImageFetchOutsideApplyLock(t *testing.T) {
	ctx := context.Background()
	wo := wal.Options{Dir: filepath.Join(t.TempDir(), "wal")}
	wo.Logger = quiet
	v := newEnv(t, cache.Options{}, Options{WAL: &wo, CheckpointInterval: time.Hour})
	if _, err := v.st.Upsert(ctx, ks, []adapters.Write{{Key: k(1), Value: []byte("old")}}); err != nil {
		t.Fatal(err)
	}
	ro, err := v.e.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Abort()

	v.gate.arm(false)
	done := make(chan error, 1)
	go func() {
		w, err := v.e.Begin(false)
		if err == nil {
			if err = w.Upsert(ctx, ks, k(1), []byte("new")); err == nil {
				err = w.Commit(ctx)
			}
		}
		done <- err
	}()
	select {
	case <-v.gate.entered: // the commit reads k(1)'s before-image
	case err := <-done:
		t.Fatalf("the commit ended (%v) without reading the key's before-image from the store", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the commit never read the key's before-image")
	}
	ckpt := make(chan error, 1)
	go func() { ckpt <- v.e.Checkpoint(ctx) }()
	select {
	case err := <-ckpt:
		if err != nil {
			v.gate.open()
			t.Fatalf("a checkpoint while a commit waits for the store: %v", err)
		}
	case <-time.After(5 * time.Second):
		v.gate.open()
		<-ckpt
		t.Fatal("a checkpoint waited for a commit's store fetch: the commit held the apply lock across it")
	}
	v.gate.open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if val, ok, err := ro.Get(ctx, ks, k(1)); err != nil || !ok || string(val) != "old" {
		t.Fatalf("the snapshot reads k1 = %q %v %v, want the value before the commit", val, ok, err)
	}
	if val, ok, err := v.e.Get(ctx, ks, k(1), ReadLatest); err != nil || !ok || string(val) != "new" {
		t.Fatalf("k1 after the commit: %q %v %v", val, ok, err)
	}
}

// TestSnapshotOpenedAfterPreread: a snapshot opened between a commit's
// preread (which found none open, so read no before-image) and its keep
// gets the key's earlier state from the buffer when the buffer holds it,
// with no store call; only a key the buffer does not hold (a blind write
// of a key nemo never read) is read from the store then, and counted.
func TestSnapshotOpenedAfterPreread(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, cache.Options{}, Options{})
	sn := v.e.snaps
	if _, err := v.st.Upsert(ctx, ks, []adapters.Write{{Key: k(2), Value: []byte("stored")}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.e.Get(ctx, ks, k(1), ReadLatest); err != nil { // k(1): known absent
		t.Fatal(err)
	}
	commit := func(id uint64, key []byte, opened func()) {
		t.Helper()
		o := &cache.Owner{ID: id}
		defer v.buf.Release(o)
		if err := v.buf.LockKeyBlind(ks, key, o); err != nil {
			t.Fatal(err)
		}
		changes := []Change{{Op: ChangePut, Keyspace: ks, Key: key, Value: []byte("v")}}
		pre := sn.preread(ctx, v.e, changes)
		if pre.taken {
			t.Fatal("preread read before-images with no snapshot open")
		}
		opened()
		_, installed := sn.keep(ctx, v.e, o, changes, pre)
		installed()
	}
	commit(1000, k(1), func() { sn.begin(99) })
	if im, found, err := sn.before(99, ks, k(1)); err != nil || !found || im.exists {
		t.Fatalf("the before-image the buffer held: %+v %v %v, want k1 absent", im, found, err)
	}
	if n := v.e.Stats().LateImageFetches; n != 0 {
		t.Fatalf("%d store reads for an image the buffer held", n)
	}
	sn.end(99)
	commit(1001, k(2), func() { sn.begin(100) }) // k(2) is in the store only
	if im, found, err := sn.before(100, ks, k(2)); err != nil || !found || string(im.val) != "stored" {
		t.Fatalf("the before-image only the store held: %+v %v %v", im, found, err)
	}
	if n := v.e.Stats().LateImageFetches; n != 1 {
		t.Fatalf("%d late store reads, want 1", n)
	}
	sn.end(100)
}
