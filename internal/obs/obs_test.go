package obs

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"
)

func TestHistogram(t *testing.T) {
	h := NewDurationHistogram(time.Millisecond, 10*time.Millisecond)
	for _, d := range []time.Duration{0, time.Millisecond, 2 * time.Millisecond, 10 * time.Millisecond, time.Second} {
		h.ObserveDuration(d)
	}
	s := h.Snapshot()
	if s.Count != 5 || s.Raw != int64(1013*time.Millisecond) || math.Abs(s.Sum-1.013) > 1e-9 {
		t.Fatalf("count %d sum %v raw %d", s.Count, s.Sum, s.Raw)
	}
	// Bounds are inclusive: 0 and 1ms in the first bucket, 2ms and 10ms
	// in the second, 1s past both.
	if got := s.Counts; got[0] != 2 || got[1] != 2 || got[2] != 1 {
		t.Errorf("buckets %v", got)
	}
	if c := s.Cumulative(); c[0.001] != 2 || c[0.01] != 4 || len(c) != 2 {
		t.Errorf("cumulative %v", c)
	}
	h.Reset()
	if s := h.Snapshot(); s.Count != 0 || s.Sum != 0 || s.Mean() != 0 {
		t.Errorf("after reset: %+v", s)
	}
	g := NewHistogram(1, 2, 4)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 1000 {
				g.Observe(int64(i))
			}
		})
	}
	wg.Wait()
	if s := g.Snapshot(); s.Count != 8000 || s.Sum != 28000 || s.Counts[3] != 3000 {
		t.Errorf("concurrent: %+v", s)
	}
}

func TestRequest(t *testing.T) {
	ctx := context.Background()
	Note(ctx, "ks", Hit) // no request: nothing to note, no panic
	NoteRemote(ctx)
	r := &Request{}
	ctx = WithRequest(ctx, r)
	SetOp(ctx, "get")
	if r.Outcome() != "none" || r.Source() != "buffer" || r.Keyspace() != "" {
		t.Errorf("fresh: %s %s %q", r.Outcome(), r.Source(), r.Keyspace())
	}
	// Catalog reads are quiet: their events are not the request's, their
	// remote calls are.
	q := Quiet(ctx)
	Note(q, "__tables__", Hit)
	Touch(q, "__tables__")
	NoteRemote(q)
	if r.Keyspace() != "" || r.Count(Hit) != 0 || r.RemoteCalls() != 1 {
		t.Errorf("quiet: keyspace %q hits %d remote %d", r.Keyspace(), r.Count(Hit), r.RemoteCalls())
	}
	Note(ctx, "t1", NegativeHit)
	if r.Outcome() != "negative_hit" {
		t.Errorf("outcome %s", r.Outcome())
	}
	Note(ctx, "t2", Hit)
	if r.Outcome() != "hit" || r.Keyspace() != "t1" {
		t.Errorf("outcome %s keyspace %s", r.Outcome(), r.Keyspace())
	}
	Note(ctx, "t1", RangeFetch)
	NoteLockWait(ctx, time.Millisecond)
	NoteLockWait(ctx, 2*time.Millisecond)
	if n, d := r.LockWaits(); r.Outcome() != "miss" || r.Source() != "remote" || n != 2 || d != 3*time.Millisecond || r.Op() != "get" {
		t.Errorf("outcome %s source %s waits %d %v op %s", r.Outcome(), r.Source(), n, d, r.Op())
	}
}

// TestSpansOffCostNothing: with tracing off, or outside a traced request,
// the span helpers allocate nothing and record nothing.
func TestSpansOffCostNothing(t *testing.T) {
	ctx := WithRequest(context.Background(), &Request{})
	allocs := testing.AllocsPerRun(100, func() {
		c, span := StartChild(ctx, "remote get", 0)
		Note(c, "ks", Hit)
		NoteRemote(c)
		EndSpan(span, nil)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per call with tracing off", allocs)
	}
	if _, span := StartRequest(ctx, "x"); span.IsRecording() {
		t.Error("a request span records with tracing off")
	}
}

func TestMethodOp(t *testing.T) {
	for in, want := range map[string]string{
		"RunQuery": "run_query", "runQuery": "run_query", "AllocateIds": "allocate_ids",
		"RunAggregationQuery": "run_aggregation_query", "lookup": "lookup", "Commit": "commit", "": "",
	} {
		if got := MethodOp(in); got != want {
			t.Errorf("MethodOp(%q) = %q, want %q", in, got, want)
		}
	}
}
