//go:build invariants || race

package invariants

// Enabled is true: the build has the invariants tag or the race detector.
const Enabled = true
