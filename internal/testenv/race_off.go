//go:build !race

package testenv

// Race reports whether the race detector is on: it changes allocations
// (sync.Pool drops what it is given at random) and timings.
const Race = false
