//go:build !invariants && !race

package invariants

// Enabled is false: the build has neither the invariants tag nor the race
// detector, and every block guarded by it compiles away.
const Enabled = false
