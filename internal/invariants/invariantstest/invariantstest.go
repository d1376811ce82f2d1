// Package invariantstest helps tests check that an assertion of package
// invariants fires: the tests that break a rule on purpose, in packages
// built with invariants on (//go:build invariants || race).
package invariantstest

import (
	"errors"
	"testing"

	"github.com/nemocache/nemo/internal/invariants"
)

// MustViolate runs fn and fails t unless fn panics with an invariant
// violation (an error wrapping invariants.ErrViolated); what names the
// broken rule in the failure.
func MustViolate(t testing.TB, what string, fn func()) {
	t.Helper()
	defer func() {
		t.Helper()
		err, _ := recover().(error)
		if !errors.Is(err, invariants.ErrViolated) {
			t.Errorf("%s: recovered %v, want an invariant violation", what, err)
		}
	}()
	fn()
}
