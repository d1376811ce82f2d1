package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/tmpfs"
	"github.com/nemocache/nemo/proxy/node"
)

// TestReadyzFollowsTheWAL: in coherence exclusive with write-back, nemo
// acknowledges writes from its WAL, so /readyz stays 200 with the backend
// down (nemo_backend_up 0) while the WAL takes writes; once the WAL's
// volume is full and no checkpoint can make room (the backend is down, so
// nothing dirty can be written back), /readyz answers 503 "wal full"; with
// the backend back a checkpoint frees the log and it is 200 again. On a
// real 1 MiB tmpfs (root only).
func TestReadyzFollowsTheWAL(t *testing.T) {
	vol := tmpfs.Mount(t, "1m")
	cfg := testConfig(t)
	cfg.WAL.Dir = filepath.Join(vol, "wal")
	cfg.Cache.MaxDirtyAge = time.Hour
	cfg.WAL.CheckpointInterval = time.Hour
	var faults *fault.Store
	open := func(cfg config.Config, log *slog.Logger) (*node.Node, error) {
		st, err := embedded.Open(cfg.Backend.Embedded.DataDir, embedded.Options{NoSync: true, Logger: log})
		if err != nil {
			return nil, err
		}
		faults = fault.New(st, fault.Config{})
		return node.New(faults, st.Close, cfg, log)
	}
	f := &kvFrontend{}
	s, err := New(Options{Config: cfg, Frontends: []Mount{kvMount(f)}, Open: open, Logger: testLogger(&syncBuffer{})})
	if err != nil {
		t.Fatal(err)
	}
	ready, front := "http://"+s.HTTPAddr()+"/readyz", "http://"+s.FrontendAddr("kv")
	ctx, cancel := context.WithCancel(context.Background())
	done := runServer(ctx, s)
	defer func() {
		faults.SetDown(false)
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitStatus(t, ready, http.StatusOK)

	put := func(i int) int {
		code, _ := do(t, http.MethodPut, fmt.Sprintf("%s/kv/t/k%05d", front, i), strings.NewReader(strings.Repeat("v", 200)))
		return code
	}
	if code := put(0); code != http.StatusNoContent {
		t.Fatalf("put: %d", code)
	}
	faults.SetDown(true)
	// The probes find the backend down within downAfter (10 s); all
	// along the WAL takes writes, and nemo is ready.
	n := 1
	for deadline := time.Now().Add(30 * time.Second); scrape(t, s.HTTPAddr())["nemo_backend_up"] != 0; n++ {
		if time.Now().After(deadline) {
			t.Fatal("nemo_backend_up still 1 30 s into the outage")
		}
		if code := put(n); code != http.StatusNoContent {
			t.Fatalf("put %d with the backend down: %d, want it acknowledged from the WAL", n, code)
		}
		if code, body := get(ready); code != http.StatusOK {
			t.Fatalf("/readyz with the backend down and the WAL taking writes: %d %q", code, body)
		}
		time.Sleep(50 * time.Millisecond) // a write every 50 ms, as a client might
	}
	tmpfs.Fill(t, vol)
	for ; put(n) == http.StatusNoContent; n++ {
		if n > 100_000 {
			t.Fatal("the WAL never refused a write on a full volume")
		}
	}
	if code, body := get(ready); code != http.StatusServiceUnavailable || body != "wal full\n" {
		t.Fatalf("/readyz with the WAL refusing writes: %d %q, want 503 wal full", code, body)
	}
	t.Logf("%d writes acknowledged before the volume was full", n)
	for _, p := range []string{"/healthz", "/startupz"} {
		if code, _ := get("http://" + s.HTTPAddr() + p); code != http.StatusOK {
			t.Errorf("%s with the WAL full: %d", p, code)
		}
	}

	faults.SetDown(false)
	waitStatus(t, ready, http.StatusOK)
	if code := put(n); code != http.StatusNoContent {
		t.Errorf("put after the checkpoint made room: %d", code)
	}
}
