// Package testenv decides what a test does when something it needs from
// its environment is missing: a server (Azurite, the emulators), a client
// or tool (node packages, python3-azure, az), a privilege (mounting a
// tmpfs needs root) or a network address. A skipped test never counts as
// a pass, so the test fails, saying how to get what is missing; under
// -short it is skipped instead, unless NEMO_TEST_REQUIRE_ALL=1, which
// .ci/test sets so that nothing CI is meant to check can be skipped there
// whatever flags it is given.
package testenv

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// EnvRequireAll names the variable that makes Missing fail even under
// -short; .ci/test sets it to 1.
const EnvRequireAll = "NEMO_TEST_REQUIRE_ALL"

// RequireAll reports whether the run must not skip for a missing
// requirement (NEMO_TEST_REQUIRE_ALL=1).
func RequireAll() bool { return os.Getenv(EnvRequireAll) == "1" }

// EnvTLS names the variable that serves the client suites' frontends over
// TLS: with NEMO_TEST_TLS=1 the proxy/aztable and proxy/datastore
// harnesses serve nemo through internal/tlsserve, as listen.tls does,
// and give the SDK clients https endpoints and TLS credentials trusting
// the test CA (internal/tlsfront). .ci/test runs those suites once more
// with it set; by default they are served as plaintext on loopback, as
// production's default listener is.
const EnvTLS = "NEMO_TEST_TLS"

// TLS reports whether the client suites run over TLS (NEMO_TEST_TLS=1).
func TLS() bool { return os.Getenv(EnvTLS) == "1" }

// Missing ends tb because what it needs is missing: what says what (and
// why, if known), how how to get it. It skips tb under -short unless
// RequireAll, and fails it otherwise.
func Missing(tb testing.TB, what, how string) {
	tb.Helper()
	if testing.Short() && !RequireAll() {
		tb.Skipf("%s (skipped under -short)", what)
	}
	msg := fmt.Sprintf("%s: %s", what, how)
	if RequireAll() {
		msg += " (" + EnvRequireAll + "=1: nothing may be skipped)"
	}
	tb.Fatal(msg)
}

// WaitFor polls cond (every 2 ms) until it holds, failing tb if it does
// not within d: what names the event awaited. It is how a test waits for
// another goroutine or process to get somewhere it can observe, instead
// of sleeping and hoping it got there.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}

// AllocsAtMost fails tb when allocs, what testing.AllocsPerRun measured
// of what, is over ceiling; under the race detector, which changes
// allocations, it only logs them (as every run does).
func AllocsAtMost(tb testing.TB, what string, allocs float64, ceiling int) {
	tb.Helper()
	tb.Logf("%.0f allocations per %s (ceiling %d)", allocs, what, ceiling)
	if allocs > float64(ceiling) && !Race {
		tb.Fatalf("%.0f allocations per %s, over the ceiling of %d", allocs, what, ceiling)
	}
}
