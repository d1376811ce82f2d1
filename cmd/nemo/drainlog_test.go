package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// The background write-back's log lines (txn/writeback.go): a failed
// round, and a round the workers' own stop cut short.
const (
	writeBackFailed   = "write-back failed; dirty records kept"
	writeBackCutShort = "write-back cut short: the background workers stop; dirty records kept"
)

// TestBinaryDrainDoesNotWarnAboutItself: a drain under load, in coherence
// exclusive in front of Azurite, lets the background write-back in flight
// finish for up to half its time (the engine's write-back driver:
// txn/writeback.go, stopWorkers), then cancels it and redoes it; that cancellation is logged at DEBUG, not as the WARN
// "write-back failed; dirty records kept" (which every clean shutdown under
// load logged, context canceled), while a real backend failure still logs
// that WARN. The write-back is caught in flight by hanging the backend
// behind the fault proxy until a call is held (a grace of 8 s: the drain
// cancels it after about 3.6 s, before the buffer's own 10 s store
// timeout), and the drain finishes once the proxy passes again.
func TestBinaryDrainDoesNotWarnAboutItself(t *testing.T) {
	env := []string{"NEMO_COHERENCE_MODE=exclusive", "NEMO_CACHE_MAX_DIRTY_AGE=20ms", "NEMO_CACHE_FLUSH_INTERVAL=10ms",
		"NEMO_LISTEN_SHUTDOWN_GRACE=8s",
		"NEMO_COHERENCE_LEASE_TTL=5m"} // no lease renewal during the test: the held call is a write-back
	// loaded starts nemo with four clients writing through it, and
	// returns once 200 writes are acknowledged.
	loaded := func(t *testing.T, prefix string) (*faultProxy, *proc, func()) {
		fp, p, svc, table := azBehindFaultProxy(t, prefix, env...)
		acked, stop := writeLoad(t, svc.NewClient(table))
		waitFor(t, acked, "200 acknowledged writes")
		return fp, p, stop
	}
	t.Run("drain", func(t *testing.T) {
		fp, p, stop := loaded(t, "drainlog")
		defer stop()
		fp.set(faultHang)
		waitFor(t, fp.held, "a call to the store held by the hung backend")
		from := len(p.logs())
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.logged(writeBackCutShort):
		case <-p.logged(writeBackFailed):
			t.Errorf("the drain's cancellation of the background write-back was logged as %q", writeBackFailed)
		case <-time.After(30 * time.Second):
			t.Fatalf("no write-back was cut short by the drain in 30 s:\n%s", p.logs()[from:])
		}
		fp.set(faultPass)
		if code := p.waitExit(t); code != 0 {
			t.Fatalf("exit %d, want 0:\n%s", code, p.logs()[from:])
		}
		for _, l := range logLines(p.logs()[from:]) {
			if l.Msg == writeBackFailed {
				t.Errorf("after SIGTERM: %s %q, err %s", l.Level, l.Msg, l.Err)
			}
			if l.Msg == writeBackCutShort && (l.Level != "DEBUG" || !strings.Contains(l.Err, "context canceled")) {
				t.Errorf("%s %q, err %s; want DEBUG and context canceled", l.Level, l.Msg, l.Err)
			}
		}
	})
	t.Run("backend failure", func(t *testing.T) {
		fp, p, stop := loaded(t, "drainlogfail")
		defer stop()
		fp.set(faultRefuse)
		waitFor(t, p.logged(writeBackFailed), "the write-back failure log line")
		var warned bool
		for _, l := range logLines(p.logs()) {
			warned = warned || l.Msg == writeBackFailed && l.Level == "WARN"
		}
		if !warned {
			t.Errorf("%q was not logged at WARN with the backend refusing connections", writeBackFailed)
		}
		fp.set(faultPass)
		stop()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.waitExit(t); code != 0 {
			t.Fatalf("exit %d, want 0", code)
		}
	})
}

// writeLoad runs four clients upserting their own entities through c until
// stop; loaded is closed once 200 writes are acknowledged. Failures are
// ignored: the clients keep writing through the drain, which refuses them.
func writeLoad(t *testing.T, c *aztables.Client) (loaded <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var acked atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				e := cohAzEntity(fmt.Sprintf("w%d/r%03d", w, i%100), fmt.Sprint(i))
				if _, err := c.UpsertEntity(ctx, e, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}); err == nil && acked.Add(1) == 200 {
					once.Do(func() { close(done) })
				}
			}
		})
	}
	var stopOnce sync.Once
	stop = func() { stopOnce.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return done, stop
}

// waitFor waits up to 30 s for c.
func waitFor[T any](t *testing.T, c <-chan T, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s in 30 s", what)
	}
}

// logLine is the part of a JSON log line these tests read.
type logLine struct {
	Level string `json:"level"`
	Msg   string `json:"msg"`
	Err   string `json:"err"`
}

// logLines decodes the JSON lines of a log.
func logLines(log string) []logLine {
	var out []logLine
	for _, s := range strings.Split(log, "\n") {
		var l logLine
		if json.Unmarshal([]byte(s), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}
