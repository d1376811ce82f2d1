// Package tmpfs mounts small real tmpfs volumes for tests that need a file
// system that fills up (the WAL's full-disk handling). Mounting needs root
// (.ci/test runs as root, since it installs packages): without it the test
// fails, saying why, or is skipped under -short outside CI
// (internal/testenv), so the full-disk tests never pass by being skipped.
package tmpfs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nemocache/nemo/internal/testenv"
)

// Mount mounts a tmpfs of size (mount's syntax, e.g. "1m") in a fresh
// directory under t.TempDir, unmounted at cleanup, and returns its path.
func Mount(t testing.TB, size string) string {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "vol")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", mnt).CombinedOutput(); err != nil {
		testenv.Missing(t, fmt.Sprintf("cannot mount a tmpfs: %v: %s", err, strings.TrimSpace(string(out))),
			"mounting needs root: run the test as root (CI does)")
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}
