package main

import (
	"strings"
	"testing"

	"github.com/nemocache/nemo/config"
)

func TestMemoryLimit(t *testing.T) {
	cfg := config.Defaults()
	cfg.Cache.MaxBytes = 256 * config.MiB
	none := func(string) string { return "" }
	for _, tc := range []struct {
		name    string
		env     func(string) string
		set     config.ByteSize
		cgroup  int64
		want    int64
		because string
	}{
		{"derived", none, 0, 0, 448 << 20, "1.5 × cache.max_bytes"},
		{"roomy container", none, 0, 1 << 30, 448 << 20, "1.5 × cache.max_bytes"},
		{"tight container", none, 0, 400 << 20, 360 << 20, "90% of the container"},
		{"configured", none, 300 * config.MiB, 1 << 30, 300 << 20, "cache.memory_limit"},
		{"environment", func(k string) string {
			if k == "GOMEMLIMIT" {
				return "1GiB"
			}
			return ""
		}, 300 * config.MiB, 0, 0, "GOMEMLIMIT"},
	} {
		c := cfg
		c.Cache.MemoryLimit = tc.set
		got, why := memoryLimit(c, tc.env, tc.cgroup)
		if got != tc.want || !strings.Contains(why, tc.because) {
			t.Errorf("%s: %d (%s), want %d (%s)", tc.name, got, why, tc.want, tc.because)
		}
	}
}

// TestGCPercent: nemo raises GOGC to 400 (the memory limit bounds the
// heap) unless the environment sets GOGC.
func TestGCPercent(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	if got := gcPercent(env(nil)); got != 400 {
		t.Errorf("no GOGC: %d, want 400", got)
	}
	if got := gcPercent(env(map[string]string{"GOGC": "50"})); got != 0 {
		t.Errorf("GOGC=50: %d, want 0 (left to the environment)", got)
	}
}
