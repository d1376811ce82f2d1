// Package invariants switches on expensive or panicking self-checks, in
// the style of cockroachdb/pebble's internal/invariants. Build with
//
//	go test -tags invariants ./...
//
// or with the race detector (go test -race: the go command sets the race
// build tag), and Enabled is true: code guarded by it asserts the rules its
// package relies on and panics (through Errorf) when one is broken. Every
// race run therefore checks them. Without either Enabled is the constant
// false, so the compiler drops every guarded block and release builds pay
// nothing. An assertion reads
//
//	if invariants.Enabled && !cond {
//		panic(invariants.Errorf("what broke: %v", x))
//	}
//
// Keep assertions cheap and local: every race run, CI's included, pays for
// them. Tests that assert a violation fires build under the same
// constraint (//go:build invariants || race).
package invariants

import (
	"errors"
	"fmt"
)

// ErrViolated is wrapped by every error Errorf returns, so a recovered
// panic can be recognized with errors.Is.
var ErrViolated = errors.New("invariant violated")

// Errorf returns the error to panic with when an assertion fails: the
// formatted message wrapped in ErrViolated.
func Errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrViolated, fmt.Sprintf(format, args...))
}
