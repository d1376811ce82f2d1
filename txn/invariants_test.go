//go:build invariants || race

package txn

import (
	"context"
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

// TestCommitStageInvariants: the commit pipeline's assertions catch a
// stage out of order, a release before the install or before the log has
// the commit, an acknowledgement before the commit (or what it read) is
// durable, and a stage that needs the locks after they are gone; the
// stages of a real commit pass them.
func TestCommitStageInvariants(t *testing.T) {
	ctx := context.Background()
	d := openBaseEnv(t, t.TempDir())
	defer d.crash()
	readWrite(t, d.eng, map[string]string{"a": "1"}) // every stage, asserted
	tx, err := d.eng.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Upsert(ctx, "t", []byte("b"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	c := &commit{t: tx, plan: commitPlan{writes: true, logged: true}, stage: stageAdmitted}
	mustViolate(t, "a stage twice", func() { c.advance(stageAdmitted) })
	mustViolate(t, "release before the install", func() { c.advance(stageReleased) })
	c.stage = stageInstalled
	mustViolate(t, "release before the log has it", func() { c.advance(stageReleased) })
	c.synced = true
	c.advance(stageReleased)
	mustViolate(t, "acknowledged before durable", func() { c.advance(stageAcknowledged) })
	c.stage, c.lsn = stageDurable, d.eng.wal.NextLSN()
	mustViolate(t, "acknowledged with its LSN not durable", func() { c.advance(stageAcknowledged) })
	c.lsn, c.dep = 0, d.eng.wal.NextLSN()+5
	mustViolate(t, "acknowledged with what it read not durable", func() { c.advance(stageAcknowledged) })
	c.dep = 0
	c.advance(stageAcknowledged)
	tx.Abort() // its locks go
	late := &commit{t: tx, plan: commitPlan{writes: true, logged: true}, stage: stageAdmitted}
	mustViolate(t, "sequenced without its locks", func() { late.advance(stageSequenced) })
}
