package main

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/nemocache/nemo/internal/aztest"
)

func TestReproRestartDrain(t *testing.T) {
	for _, d := range []time.Duration{20 * time.Millisecond, 200 * time.Millisecond} {
		t.Run(d.String(), func(t *testing.T) {
			conn, direct, table := azuriteTable(t, "repro")
			_ = aztest.Key
			dataDir := t.TempDir()
			env := []string{"NEMO_BACKEND_TYPE=aztable", "NEMO_BACKEND_AZTABLE_CONNECTION_STRING=" + conn, "NEMO_COHERENCE_MODE=exclusive"}
			p := startNemo(t, dataDir, env...)
			p.waitReady(t)
			tc := azNemoService(t, p).NewClient(table)
			ctx := context.Background()
			for i := range 1000 {
				e := fmt.Sprintf(`{"PartitionKey":"p%d","RowKey":"r%04d","V":"v%d"}`, i%100, i, i)
				if _, err := tc.UpsertEntity(ctx, []byte(e), nil); err != nil {
					t.Fatalf("%v\n%s", err, p.logs())
				}
			}
			p.cmd.Process.Signal(syscall.SIGKILL)
			p.waitExit(t)
			q := startNemo(t, dataDir, env...)
			q.waitReady(t)
			time.Sleep(d)
			q.cmd.Process.Signal(syscall.SIGTERM)
			code := q.waitExit(t)
			n := countEntities(t, direct.NewClient(table))
			t.Logf("exit %d, azurite holds %d", code, n)
			if n != 1000 {
				os.WriteFile("/tmp/i21/repro-"+d.String()+".log", []byte(q.logs()), 0o644)
				t.Errorf("lost %d", 1000-n)
			}
		})
	}
}
