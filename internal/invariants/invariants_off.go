//go:build !invariants

package invariants

// Enabled is false: the build lacks the invariants tag, and every block
// guarded by it compiles away.
const Enabled = false
