package cache

import "testing"

// A tombstone that was hit survives tombstoneCredit extra clock sweeps; a
// regular record survives one (its ref bit). An admitted tombstone that
// was never hit has no credit.
func TestEvictTombstoneCredit(t *testing.T) {
	runRules(t, []ruleCase{
		{name: "a hit tombstone outlives a hit regular record by its credit", store: "a=1",
			state: `"" T g0 | a=1 R g0 | b T g1`,
			op: func(e *env) {
				e.get("a", "1", true)
				e.get("b", "", false) // tombstone hit: ref bit and credit
				e.evict(0)            // sweep 1: both lose the ref bit
				e.evict(66)           // sweep 2: a goes, b spends a credit
				e.evict(0)  // sweep 3: b spends its last credit
				e.evict(65) // sweep 4: b goes
			},
			want: `"" T g1`},
		{name: "a tombstone never hit has no credit", store: "",
			state: `"" T g0 | b T g0`,
			op:    func(e *env) { e.evict(65) },
			want:  `"" T g0`},
	})
}
