package txn

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/wal"
)

// TestReset: Reset aborts a live transaction, forgets flushed and dirty
// records, the catalog entry and its resident handle, and empties the
// store through wipe; afterwards the same names start empty and work. An
// engine with a WAL refuses it (a restart would replay what it forgot).
func TestReset(t *testing.T) {
	v := newEnv(t, cache.Options{}, Options{})
	ctx := context.Background()
	if err := createKS(t, v.e, "t1"); err != nil {
		t.Fatal(err)
	}
	if err := v.e.Upsert(ctx, "t1", []byte("flushed"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := v.e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := v.e.Upsert(ctx, "t1", []byte("dirty"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := v.e.LookupKeyspace(ctx, testCatalog, []byte("t1")); !ok || err != nil {
		t.Fatalf("lookup before the reset: %t %v", ok, err)
	}
	live, err := v.e.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	if err := live.Upsert(ctx, "t1", []byte("uncommitted"), []byte("3")); err != nil {
		t.Fatal(err)
	}

	if err := v.e.Reset(ctx, v.st.Reset); err != nil {
		t.Fatal(err)
	}
	if err := live.Commit(ctx); err == nil {
		t.Error("a transaction live across the reset committed")
	}
	if _, ok, err := v.e.LookupKeyspace(ctx, testCatalog, []byte("t1")); ok || err != nil {
		t.Errorf("lookup after the reset: %t %v, want absent", ok, err)
	}
	for _, key := range []string{"flushed", "dirty", "uncommitted"} {
		if _, ok, err := v.e.Get(ctx, "t1", []byte(key), ReadLatest); ok || err != nil {
			t.Errorf("get %s after the reset: %t %v, want absent", key, ok, err)
		}
	}
	if kss, err := v.st.Keyspaces(); err != nil || len(kss) != 0 {
		t.Errorf("store keyspaces after the reset: %v %v", kss, err)
	}
	if err := createKS(t, v.e, "t1"); err != nil {
		t.Fatalf("create t1 again: %v", err)
	}
	if err := v.e.Insert(ctx, "t1", []byte("dirty"), []byte("4")); err != nil {
		t.Errorf("insert after the reset: %v", err)
	}

	wo := wal.Options{Dir: filepath.Join(t.TempDir(), "wal"), Logger: quiet}
	w := newEnv(t, cache.Options{}, Options{WAL: &wo})
	wiped := false
	err = w.e.Reset(ctx, func(context.Context) error { wiped = true; return nil })
	if err == nil || wiped || errors.Is(err, ErrClosed) {
		t.Errorf("Reset with a WAL = %v (wiped %t), want a refusal", err, wiped)
	}
}
