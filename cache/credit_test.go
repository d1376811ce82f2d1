package cache

import (
	"strings"
	"testing"
)

// Size-aware CLOCK: a hit grants credit = the typical regular record's size
// / the record's size - 1 extra sweeps (capped at maxCredit); a record of
// typical size gets plain second chance. An admission earns the credit
// too (GreedyDual-Size ranks on insertion), but only a hit sets ref. Here a (a 1000-byte value, 1065
// bytes resident) is admitted by a miss and sets the typical size; the
// tombstone b (65 bytes) then earns the full credit.
func TestEvictSizeAwareCredit(t *testing.T) {
	big := strings.Repeat("x", 1000)
	runRules(t, []ruleCase{
		{name: "a hit small record outlives a hit large one by its credit", store: "a=" + big,
			state: `"" T g1 | b T g1`,
			op: func(e *env) {
				e.get("a", big, true) // miss: a is admitted
				e.get("a", big, true) // hit: ref bit, no credit
				e.get("b", "", false) // hit: ref bit and credit
				e.evict(0)            // sweep 1: both lose the ref bit
				e.evict(1065)         // sweep 2: a goes, b spends a credit
				for i := 1; i < maxCredit; i++ {
					e.evict(0) // b spends the rest
				}
				e.evict(65) // then b goes
			},
			want: `"" T g1`, reqs: "get:1"},
		{name: "an admitted tombstone earns its credit without a ref bit", store: "a=" + big,
			state: `"" T g1`,
			op: func(e *env) {
				e.get("a", big, true) // miss: a is admitted, setting the typical size
				e.get("b", "", false) // miss: tombstone b admitted with credit
				e.evict(1065)         // sweep 1: a goes, b spends a credit
				for i := 1; i < maxCredit; i++ {
					e.evict(0)
				}
				e.evict(65)
			},
			want: `"" T g1`, reqs: "get:2"},
		{name: "with no typical size yet there is no credit", store: "",
			state: `"" T g0 | b T g0`,
			tweak: func(o *Options) { o.EvictRun = 1 }, // b alone, not as the head's run
			op:    func(e *env) { e.get("b", "", false); e.evict(0); e.evict(65) },
			want:  `"" T g0`},
	})
}
