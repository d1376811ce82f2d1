package cache

import (
	"strconv"
	"testing"

	"github.com/nemocache/nemo/adapters"
)

// TestScanSeesACommitWhole: a scan's plan reads the buffered records
// outside the range it fetches; its merge reads the buffer inside that
// range again. A commit landing in between, with one write on each side
// (an Azure batch moving money between two accounts), must show whole or
// not at all: the pass runs again, and finds the range it admitted.
func TestScanSeesACommitWhole(t *testing.T) {
	h := &hookStore{}
	e := newStaleEnv(t, PolicyNemo, testStaleness, h) // its clock stands still: nothing goes stale
	h.Store = e.m
	ctx, b, m := e.ctx, e.b, e.m
	if _, err := m.Upsert(ctx, testKS, []adapters.Write{{Key: []byte("a"), Value: []byte("100")}, {Key: []byte("z"), Value: []byte("100")}}); err != nil {
		t.Fatal(err)
	}
	// ["", "b") known, with a; from "b" on a hole.
	if recs, _, err := b.Scan(ctx, testKS, nil, []byte("b"), 0); err != nil || len(recs) != 1 {
		t.Fatalf("scan [\"\", b): %v, %v", recs, err)
	}
	h.after(adapters.OpGetRange, func() {
		if err := b.Apply(ctx, testKS, []Write{{Key: []byte("a"), Value: []byte("50")}, {Key: []byte("z"), Value: []byte("150")}}); err != nil {
			t.Error(err)
		}
	})
	before := b.Stats().RangeRetries
	recs, _, err := b.Scan(ctx, testKS, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, r := range recs {
		n, err := strconv.Atoi(string(r.Value))
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if total != 200 || len(recs) != 2 || string(recs[0].Value) != "50" {
		t.Fatalf("scan across the commit: %s (total %d), want a=50 z=150", dumpRecs(recs), total)
	}
	if got := b.Stats().RangeRetries - before; got != 1 {
		t.Errorf("%d passes run again, want 1", got)
	}
}
