package cache

import (
	"fmt"
	"strings"
	"testing"
)

// A range fetch into a full buffer does not flush out a hot point record:
// the range admission filter (Options.RangeAdmitSlots) answers the first
// scan of a cold range from the store without admitting it; the second is
// admitted, cold (no ref bit), and the evictor takes it, as one run,
// before the point record that was read.
func TestRangeFetchKeepsHotPointRecord(t *testing.T) {
	val := strings.Repeat("v", 100)
	var store strings.Builder
	fmt.Fprintf(&store, "p=%s ", val)
	for i := range 16 {
		fmt.Fprintf(&store, "q%02d=%s ", i, val)
	}
	var want []string
	for i := range 100 {
		fmt.Fprintf(&store, "k%03d=%s ", i, val)
		want = append(want, fmt.Sprintf("k%03d=%s", i, val))
	}
	e := newEnv(t, PolicyNemo, store.String(), "", func(o *Options) { o.MaxBytes = 2000 })
	e.get("p", val, true) // miss: admitted
	e.get("p", val, true) // hit: the ref bit
	for i := 0; e.b.used.Load() < e.b.low(); i++ {
		e.get(fmt.Sprintf("q%02d", i), val, true)
	}
	used := e.b.used.Load()
	all := strings.Join(want, " ")

	e.scan("k", "l", 0, all, "") // first sight: answered, not admitted
	if got := e.b.Stats().RangeFiltered; got != 1 {
		t.Errorf("RangeFiltered = %d after the first scan, want 1", got)
	}
	if got := e.b.used.Load(); got != used {
		t.Errorf("resident bytes %d after the first scan, want %d (nothing admitted)", got, used)
	}

	e.scan("k", "l", 0, all, "") // second sight: admitted
	if got := e.b.Stats().RangeFiltered; got != 1 {
		t.Errorf("RangeFiltered = %d after the second scan, want still 1", got)
	}
	if e.b.used.Load() <= e.b.opts.MaxBytes {
		t.Fatalf("resident bytes %d after the second scan: the range was not admitted", e.b.used.Load())
	}
	evictUntil(e.ctx, e.b, e.b.low())
	recs, err := e.b.Records(testKS, []byte("p"), []byte("q"))
	if err != nil || len(recs) != 1 {
		t.Fatalf("Records(p): %v %v: the hot point record was evicted", recs, err)
	}
	if got := e.b.used.Load(); got > e.b.low() {
		t.Errorf("resident bytes %d after EvictUntil, want at most %d", got, e.b.low())
	}
	e.check()
}
