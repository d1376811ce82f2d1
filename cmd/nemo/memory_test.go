package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"google.golang.org/api/iterator"
)

// TestBinaryMemoryWithinBound measures the nemo binary's anonymous RSS (the
// process's own memory: the embedded store's mmapped file pages are not in
// it) under a write, read and scan workload through the Datastore Go client
// that writes more data than the buffer holds, and holds it to issue 13's
// bound: at most 1.5 × cache.max_bytes + 64 MiB. NEMO_TEST_MEMORY_MIB sets
// the buffer (default 32 MiB here, so CI runs it in seconds; the README's
// figures come from 256), and the workload writes 1.2 times as much.
// NEMO_TEST_MEMORY_LIMIT=off runs without the derived GOMEMLIMIT, for the
// before figure.
func TestBinaryMemoryWithinBound(t *testing.T) {
	mib := 32
	if v := os.Getenv("NEMO_TEST_MEMORY_MIB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		mib = n
	}
	env := []string{fmt.Sprintf("NEMO_CACHE_MAX_BYTES=%dMiB", mib), "NEMO_CACHE_MAX_DIRTY_BYTES=" + fmt.Sprintf("%dMiB", max(mib/4, 1)),
		"NEMO_CACHE_MAX_DIRTY_AGE=1s"}
	if os.Getenv("NEMO_TEST_MEMORY_LIMIT") == "off" {
		env = append(env, "GOMEMLIMIT=off")
	}
	p := startNemo(t, t.TempDir(), env...)
	p.waitReady(t)
	_, dsAddr := frontendAddrs(t, p)
	const project = "memory"
	c := dsClient(t, project, dsAddr)
	ctx := context.Background()

	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if kb := rssAnonKB(t, p.cmd.Process.Pid); kb > peak.Load() {
				peak.Store(kb)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})

	type Doc struct {
		V string `datastore:",noindex"`
		N int64
	}
	const valueSize, batch = 1024, 500
	total := mib << 20 * 6 / 5 / valueSize // entities: 1.2 × the buffer
	val := strings.Repeat("x", valueSize)
	key := func(i int) *datastore.Key { return datastore.NameKey("Mem", fmt.Sprintf("k%09d", i), nil) }
	began := time.Now()
	for lo := 0; lo < total; lo += batch {
		n := min(batch, total-lo)
		keys := make([]*datastore.Key, n)
		docs := make([]Doc, n)
		for i := range keys {
			keys[i], docs[i] = key(lo+i), Doc{V: val, N: int64(lo + i)}
		}
		if _, err := c.PutMulti(ctx, keys, docs); err != nil {
			t.Fatal(err)
		}
	}
	wrote := time.Since(began)
	// Reads of random keys (half the buffer's worth) and short scans.
	rng := rand.New(rand.NewPCG(1, 2))
	for range total / 2 / 100 {
		keys := make([]*datastore.Key, 100)
		for i := range keys {
			keys[i] = key(rng.IntN(total))
		}
		if err := c.GetMulti(ctx, keys, make([]Doc, len(keys))); err != nil {
			t.Fatal(err)
		}
	}
	for range 200 {
		q := datastore.NewQuery("Mem").FilterField("__key__", ">=", key(rng.IntN(total))).Limit(8)
		it := c.Run(ctx, q)
		for {
			var d Doc
			if _, err := it.Next(&d); err == iterator.Done {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	limit := int64(mib)*1024*3/2 + 64*1024
	t.Logf("buffer %d MiB, wrote %d MiB in %v; peak anonymous RSS %d MiB = %.2f × max_bytes (bound 1.5 × max_bytes + 64 MiB = %d MiB)",
		mib, total*valueSize>>20, wrote.Round(time.Millisecond), peak.Load()/1024, float64(peak.Load())/float64(mib*1024), limit/1024)
	if os.Getenv("NEMO_TEST_MEMORY_LIMIT") != "off" && peak.Load() > limit {
		t.Errorf("peak anonymous RSS %d MiB exceeds the bound %d MiB", peak.Load()/1024, limit/1024)
	}
	drain(t, p)
}

// rssAnonKB reads a process's anonymous resident memory from /proc.
func rssAnonKB(t *testing.T, pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0 // exited
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "RssAnon:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}
