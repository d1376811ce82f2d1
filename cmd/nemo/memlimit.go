package main

import (
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/nemocache/nemo/config"
)

// The Go runtime's soft memory limit (GOMEMLIMIT). Without one the heap
// may grow to twice what is live before a collection (GOGC=100), so a full
// buffer would take about twice cache.max_bytes; with it the collector
// works harder as the process nears the limit instead. nemo sets it from
// its budget unless the environment does.

// memoryLimit returns the soft limit to set and why: cache.memory_limit
// when set; else the budget's bound, 1.5 × cache.max_bytes + 64 MiB,
// lowered to 90% of the container's memory limit (cgroupLimit) when that
// is smaller. 0 means leave the runtime alone (GOMEMLIMIT is set).
func memoryLimit(cfg config.Config, getenv func(string) string, cgroupLimit int64) (int64, string) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, "GOMEMLIMIT is set"
	}
	if l := int64(cfg.Cache.MemoryLimit); l > 0 {
		return l, "cache.memory_limit"
	}
	want := int64(cfg.Cache.MaxBytes)*3/2 + 64<<20
	if cgroupLimit > 0 && cgroupLimit*9/10 < want {
		return cgroupLimit * 9 / 10, "90% of the container's memory limit (below 1.5 × cache.max_bytes + 64 MiB: raise the limit)"
	}
	return want, "1.5 × cache.max_bytes + 64 MiB"
}

// applyMemoryLimit sets the runtime's soft memory limit (see memoryLimit).
// gcPercent is the GOGC nemo runs with unless the environment sets one,
// and 0 when it does. The memory limit bounds the heap, so once the buffer
// holds much of the budget a higher GOGC changes nothing (the limit, not
// twice the live heap, is the target either way); while the live heap is
// small (a cold or pass-through buffer, a few MiB) the collector runs a
// quarter as often: it was 12-15% of nemo's CPU per forwarded request at
// GOGC 100, and 400 took 15% off that CPU in a profile.
func gcPercent(getenv func(string) string) int {
	if getenv("GOGC") != "" {
		return 0
	}
	return 400
}

func applyMemoryLimit(cfg config.Config, log *slog.Logger) {
	if p := gcPercent(os.Getenv); p > 0 {
		debug.SetGCPercent(p)
	}
	limit, why := memoryLimit(cfg, os.Getenv, cgroupMemoryLimit())
	if limit == 0 {
		log.Info("memory limit left to the environment", "GOMEMLIMIT", os.Getenv("GOMEMLIMIT"))
		return
	}
	debug.SetMemoryLimit(limit)
	log.Info("memory limit set", "bytes", config.ByteSize(limit).String(), "from", why)
}

// cgroupMemoryLimit reads the container's memory limit (cgroup v2, then
// v1); 0 when there is none or it cannot be read.
func cgroupMemoryLimit() int64 {
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 { // v1 says "no limit" with a huge number
			return 0
		}
		return n
	}
	return 0
}
