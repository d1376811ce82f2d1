//go:build invariants || race

package cache

import (
	"context"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/invariants/invariantstest"
)

// The assertions fire: a sample of broken rules, each caught where it
// breaks.
func TestInvariantsFire(t *testing.T) {
	e := newEnv(t, PolicyNemo, "a=1", `a=1 R g1 | b=2 R g1 d`)
	s, _ := e.b.space(testKS)
	invariantstest.MustViolate(t, "removing the head fence", func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		e.b.remove(s, s.head)
	})
	invariantstest.MustViolate(t, "removing a dirty record", func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		e.b.remove(s, e.recLocked(s, "b"))
	})
	o := &Owner{ID: 1}
	if _, _, _, err := e.b.LockKey(e.ctx, testKS, []byte("a"), o, ModeS); err != nil {
		t.Fatal(err)
	}
	invariantstest.MustViolate(t, "removing a locked record", func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		e.b.remove(s, e.recLocked(s, "a"))
	})
	e.b.Release(o)
	e.check()
	e.b.used.Add(1) // a counter that no longer matches the records
	invariantstest.MustViolate(t, "Close over a wrong counter", func() { _ = e.b.Close() })
}

// unfinishedStore answers a range read with the first record of the
// range only, claiming it complete (more false), while its batches
// reported that the backend had not finished: the adapter bug of ending
// a paged read on a short or empty batch. With final it reports the
// backend's last batch instead (an honest short answer: nothing after).
type unfinishedStore struct {
	*memStore
	final bool
}

func (s *unfinishedStore) GetRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	recs, _, err := s.memStore.GetRange(ctx, ks, start, end, 1)
	var last []byte
	if len(recs) > 0 {
		last = recs[0].Key
	}
	adapters.ReportBatch(ctx, s.final, last)
	return recs, false, err
}

// A range is never sealed from batches the backend did not mark final.
func TestSealOnlyFinalBatches(t *testing.T) {
	ctx := context.Background()
	for _, final := range []bool{false, true} {
		ms := newMemStore()
		if _, err := ms.Upsert(ctx, testKS, adapters.Puts([]adapters.Record{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}})); err != nil {
			t.Fatal(err)
		}
		b, err := New(&unfinishedStore{memStore: ms, final: final}, Options{Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		b.OpenKeyspace(testKS)
		scan := func() {
			if _, _, err := b.Scan(ctx, testKS, []byte("a"), []byte("z"), 0); err != nil {
				t.Fatal(err)
			}
		}
		if final {
			scan() // the backend said so: no violation
		} else {
			invariantstest.MustViolate(t, "sealing [a, z) from an unfinished batch", scan)
		}
		_ = b.Close()
	}
}
