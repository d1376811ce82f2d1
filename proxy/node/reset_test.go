package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/txn"
)

// TestResetRefused: Reset refuses, saying why, a cloud backend (Azurite
// here: nemo does not own that data) and the embedded store on disk (its
// WAL would replay what a reset forgot), and empties an in-memory one.
func TestResetRefused(t *testing.T) {
	ctx := context.Background()
	cloud, err := Open(remoteConfig(t, config.BackendAzTable, txn.Shared, aztest.Key, ""), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer cloud.Close()
	if err := cloud.Reset(ctx); !errors.Is(err, ErrResetRefused) || !strings.Contains(err.Error(), "cloud store") {
		t.Errorf("Reset in front of Azure = %v, want ErrResetRefused naming the cloud store", err)
	}

	cfg := config.Defaults()
	cfg.Backend.Embedded.DataDir = t.TempDir()
	disk, err := Open(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	if err := disk.Reset(ctx); !errors.Is(err, ErrResetRefused) || !strings.Contains(err.Error(), "on disk") {
		t.Errorf("Reset on disk = %v, want ErrResetRefused naming the disk", err)
	}

	cfg.Backend.Embedded.InMemory = true
	mem, err := Open(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if err := mem.Engine.Upsert(ctx, "k", []byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := mem.Reset(ctx); err != nil {
		t.Fatalf("Reset in memory: %v", err)
	}
	if _, ok, err := mem.Engine.Get(ctx, "k", []byte("a"), txn.ReadLatest); ok || err != nil {
		t.Errorf("after the reset: %t %v, want absent", ok, err)
	}
}
