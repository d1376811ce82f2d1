// Package contracttest holds what the test suites that run nemo under
// contract mode (adapters/contract) share: which seeds to run, from
// NEMO_CONTRACT_SEEDS.
package contracttest

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// EnvSeeds names the contract seeds the suites run: a count n (seeds 1 to
// n) or a comma-separated list ("3,17"). Unset, DefaultSeeds.
const EnvSeeds = "NEMO_CONTRACT_SEEDS"

// DefaultSeeds is how many seeds CI runs per backend and coherence mode:
// under the race detector the Datastore differential takes about 17 s a
// seed and mode (each against both emulators), the Azure one about 15 s.
// NEMO_CONTRACT_SEEDS=5 is the full check.
const DefaultSeeds = 1

// Seeds returns the contract seeds to run.
func Seeds(tb testing.TB) []uint64 {
	tb.Helper()
	env := strings.TrimSpace(os.Getenv(EnvSeeds))
	if env == "" {
		env = strconv.Itoa(DefaultSeeds)
	}
	if !strings.Contains(env, ",") {
		n, err := strconv.Atoi(env)
		if err != nil || n < 0 {
			tb.Fatalf("%s=%q: want a count or a comma-separated list of seeds", EnvSeeds, env)
		}
		out := make([]uint64, n)
		for i := range out {
			out[i] = uint64(i + 1)
		}
		return out
	}
	var out []uint64
	for _, f := range strings.Split(env, ",") {
		s, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil {
			tb.Fatalf("%s=%q: %q is not a seed", EnvSeeds, env, f)
		}
		out = append(out, s)
	}
	return out
}
