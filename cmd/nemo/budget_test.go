package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"github.com/nemocache/nemo/internal/aztest"
)

// startBare runs `nemo serve` over dataDir with its admin and HTTP
// listeners on free loopback ports, args and env, and nothing else: none of the test
// process's NEMO_ variables and none of startNemo's settings.
func startBare(t *testing.T, dataDir string, args []string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(nemoBinary(t), append([]string{"serve", "--data-dir", dataDir, "--listen-admin", "127.0.0.1:0", "--listen-http", "127.0.0.1:0"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NEMO_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	return startCmd(t, cmd)
}

// readyAddrs returns the listeners the "nemo ready" line names.
func readyAddrs(t *testing.T, p *proc) map[string]string {
	t.Helper()
	frontendAddrs(t, p) // waits for the line
	for _, line := range strings.Split(p.logs(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "nemo ready" {
			out := map[string]string{}
			for _, k := range []string{"aztable", "datastore", "admin"} {
				if s, ok := rec[k].(string); ok {
					out[k] = s
				}
			}
			return out
		}
	}
	t.Fatal("no nemo ready line")
	return nil
}

// metric reads one unlabelled sample from the admin listener's /metrics.
func (p *proc) metric(t *testing.T, name string) float64 {
	t.Helper()
	code, body := p.get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// waitMetric polls /metrics until ok(name's value) holds, for up to 10 s,
// and returns that value.
func (p *proc) waitMetric(t *testing.T, name string, ok func(float64) bool) float64 {
	t.Helper()
	var v float64
	if !eventually(10*time.Second, func() bool { v = p.metric(t, name); return ok(v) }) {
		t.Fatalf("%s still %v after 10 s", name, v)
	}
	return v
}

// TestBinaryMaxBytesAlone is issue 13 point 6: NEMO_CACHE_MAX_BYTES alone
// (no other cache setting) starts nemo at 64KiB, 1MiB and 32MiB, and it
// serves more entities than its budget holds through the aztables SDK;
// below 64KiB it refuses to start and says what to set.
func TestBinaryMaxBytesAlone(t *testing.T) {
	ports := []string{"--listen-azure-table", "127.0.0.1:0", "--listen-datastore", "127.0.0.1:0"}
	for _, tc := range []struct {
		budget   string
		bytes    float64
		tooLarge int // a value this large is refused (0: none tried)
	}{
		{"64KiB", 64 << 10, 20 << 10},
		{"1MiB", 1 << 20, 300 << 10},
		{"32MiB", 32<<20 - 32<<20/64, 0}, // the Azure body cache has max_bytes/64 of it
	} {
		t.Run(tc.budget, func(t *testing.T) {
			p := startBare(t, t.TempDir(), ports, "NEMO_CACHE_MAX_BYTES="+tc.budget)
			p.waitReady(t)
			if got := p.metric(t, "nemo_cache_max_bytes"); got != tc.bytes {
				t.Fatalf("nemo_cache_max_bytes %v, want %v", got, tc.bytes)
			}
			ctx := context.Background()
			svc := azNemoService(t, p)
			if _, err := svc.CreateTable(ctx, "budget", nil); err != nil {
				t.Fatal(err)
			}
			tc2 := svc.NewClient("budget")
			// 160 entities of 1 KiB: more than the smallest budget holds.
			const n = 160
			val := strings.Repeat("x", 1000)
			for i := range n {
				e, _ := json.Marshal(map[string]any{"PartitionKey": "p", "RowKey": fmt.Sprintf("r%03d", i), "V": val})
				if _, err := tc2.AddEntity(ctx, e, nil); err != nil {
					t.Fatalf("add %d: %v", i, err)
				}
			}
			for i := range n {
				got, err := tc2.GetEntity(ctx, "p", fmt.Sprintf("r%03d", i), nil)
				if err != nil {
					t.Fatalf("get %d: %v", i, err)
				}
				var e struct{ V string }
				if json.Unmarshal(got.Value, &e) != nil || e.V != val {
					t.Fatalf("get %d: %s", i, got.Value)
				}
			}
			if rows := countEntities(t, tc2); rows != n {
				t.Fatalf("query returned %d rows, want %d", rows, n)
			}
			// The query admitted the whole table at once; eviction brings
			// the buffer back within its budget.
			p.waitMetric(t, "nemo_cache_used_bytes", func(used float64) bool { return used <= tc.bytes })
			if tc.tooLarge > 0 {
				// Above max_bytes/4 the derived value limit refuses it as the
				// service refuses an entity over its limit. (Azure caps a
				// property at 64 KiB: the value is spread over several.)
				big := map[string]any{"PartitionKey": "p", "RowKey": "big"}
				for i := 0; i*10000 < tc.tooLarge; i++ {
					big[fmt.Sprintf("V%d", i)] = strings.Repeat("y", 10000)
				}
				e, _ := json.Marshal(big)
				_, err := tc2.AddEntity(ctx, e, nil)
				if st, code := aztest.Status(err); st != http.StatusBadRequest || code != "EntityTooLarge" {
					t.Errorf("a %d-byte entity in a %s buffer: %d %s, want 400 EntityTooLarge", tc.tooLarge, tc.budget, st, code)
				}
			}
			drain(t, p)
		})
	}

	t.Run("32KiB", func(t *testing.T) {
		cmd := exec.Command(nemoBinary(t), "serve", "--data-dir", t.TempDir(), "--listen-admin", "127.0.0.1:0", "--listen-http", "127.0.0.1:0",
			"--listen-azure-table", "127.0.0.1:0", "--listen-datastore", "127.0.0.1:0")
		cmd.Env = append(os.Environ(), "NEMO_CACHE_MAX_BYTES=32KiB")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitUsage {
			t.Fatalf("exit %v, want %d:\n%s", err, exitUsage, out)
		}
		want := "cache.max_bytes (NEMO_CACHE_MAX_BYTES): must be at least 64KiB unless cache.max_key_bytes and cache.max_value_bytes are both set"
		if !strings.Contains(string(out), want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	})
}

// TestBinaryEmptyListenerEnv: an empty NEMO_LISTEN_DATASTORE disables the
// Datastore listener (as the example YAML says), and
// NEMO_LISTEN_AZURE_TABLE=off the Azure one; the other frontend serves.
func TestBinaryEmptyListenerEnv(t *testing.T) {
	p := startBare(t, t.TempDir(), []string{"--listen-azure-table", "127.0.0.1:0"}, "NEMO_LISTEN_DATASTORE=")
	p.waitReady(t)
	if addrs := readyAddrs(t, p); addrs["datastore"] != "" || addrs["aztable"] == "" {
		t.Fatalf("listeners %v: want aztable only", addrs)
	}
	if _, err := azNemoService(t, p).CreateTable(context.Background(), "listeners", nil); err != nil {
		t.Fatal(err)
	}
	drain(t, p)

	p = startBare(t, t.TempDir(), []string{"--listen-datastore", "127.0.0.1:0"}, "NEMO_LISTEN_AZURE_TABLE=off")
	p.waitReady(t)
	addrs := readyAddrs(t, p)
	if addrs["aztable"] != "" || addrs["datastore"] == "" {
		t.Fatalf("listeners %v: want datastore only", addrs)
	}
	var e struct{ N int }
	c := dsClient(t, "listeners", addrs["datastore"])
	if _, err := c.Put(context.Background(), datastore.NameKey("K", "a", nil), &struct{ N int }{1}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), datastore.NameKey("K", "a", nil), &e); err != nil || e.N != 1 {
		t.Fatalf("get: %+v %v", e, err)
	}
	drain(t, p)
}
