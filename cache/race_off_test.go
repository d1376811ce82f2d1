//go:build !race

package cache

// raceEnabled reports whether the race detector is on: it changes allocation
// sizes and timings, so memory and speed targets are only logged under it.
const raceEnabled = false
