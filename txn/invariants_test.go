//go:build invariants || race

package txn

import (
	"context"
	"testing"

	"github.com/nemocache/nemo/internal/invariants/invariantstest"
)

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
	invariantstest.MustViolate(t, "a stage twice", func() { c.advance(stageAdmitted) })
	invariantstest.MustViolate(t, "release before the install", func() { c.advance(stageReleased) })
	c.stage = stageInstalled
	invariantstest.MustViolate(t, "release before the log has it", func() { c.advance(stageReleased) })
	c.synced = true
	c.advance(stageReleased)
	invariantstest.MustViolate(t, "acknowledged before durable", func() { c.advance(stageAcknowledged) })
	c.stage, c.lsn = stageDurable, d.eng.wal.NextLSN()
	invariantstest.MustViolate(t, "acknowledged with its LSN not durable", func() { c.advance(stageAcknowledged) })
	c.lsn, c.dep = 0, d.eng.wal.NextLSN()+5
	invariantstest.MustViolate(t, "acknowledged with what it read not durable", func() { c.advance(stageAcknowledged) })
	c.dep = 0
	c.advance(stageAcknowledged)
	tx.Abort() // its locks go
	late := &commit{t: tx, plan: commitPlan{writes: true, logged: true}, stage: stageAdmitted}
	invariantstest.MustViolate(t, "sequenced without its locks", func() { late.advance(stageSequenced) })
}
