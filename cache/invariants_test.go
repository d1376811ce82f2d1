//go:build invariants

package cache

import (
	"errors"
	"testing"

	"github.com/nemocache/nemo/internal/invariants"
)

// mustViolate runs fn and asserts it panics with an invariant violation.
func mustViolate(t *testing.T, what string, fn func()) {
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

// The assertions fire: a sample of broken rules, each caught where it
// breaks.
func TestInvariantsFire(t *testing.T) {
	e := newEnv(t, PolicyNemo, "a=1", `a=1 R g1 | b=2 R g1 d`)
	s, _ := e.b.space(testKS)
	mustViolate(t, "removing the head fence", func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		e.b.remove(s, s.head)
	})
	mustViolate(t, "removing a dirty record", func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		e.b.remove(s, e.recLocked(s, "b"))
	})
	o := &Owner{ID: 1}
	if _, _, _, err := e.b.LockKey(e.ctx, testKS, []byte("a"), o, ModeS); err != nil {
		t.Fatal(err)
	}
	mustViolate(t, "removing a locked record", func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		e.b.remove(s, e.recLocked(s, "a"))
	})
	e.b.Release(o)
	e.check()
	e.b.used.Add(1) // a counter that no longer matches the records
	mustViolate(t, "Close over a wrong counter", func() { _ = e.b.Close() })
}
