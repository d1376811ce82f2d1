package adapters

import (
	"bytes"
	"context"
	"sync"
)

// A RangeReport is what one GetRange learned from the backend's own
// answers about where it is complete. It exists for the record buffer's
// invariant checks (internal/invariants): the buffer asks for one with
// WithRangeReport before a GetRange, and before it seals a gap or caches
// an empty range from the answer it asserts that the backend vouched for
// that stretch, so an adapter that ends a paged read early (taking a short
// or empty batch for the last one) is caught where the damage would
// start. Adapters that page through the backend call ReportBatch once per
// batch or page; a store that reports nothing (the embedded one, wrappers
// over nothing remote) is not checked.
type RangeReport struct {
	mu       sync.Mutex
	reported bool
	final    bool   // a batch said no more results follow in the read's range
	through  []byte // every key below this (exclusive) was vouched for
}

type rangeReportKey struct{}

// WithRangeReport returns ctx carrying a new RangeReport for the GetRange
// called with it.
func WithRangeReport(ctx context.Context) (context.Context, *RangeReport) {
	r := &RangeReport{}
	return context.WithValue(ctx, rangeReportKey{}, r), r
}

// ReportBatch records one batch of a paged range read in the RangeReport
// ctx carries, if any. final says the backend answered that no more
// results follow in the read's range (Datastore: a batch that is its
// query's last, neither NOT_FINISHED nor a limit reached; Azure: a page
// without continuation headers). Otherwise
// last is the engine key of the batch's last result (nil for an empty
// batch): the backend vouches that nothing up to it is missing. A batch
// may reach past the read's end (the adapter trims it), which vouches for
// the whole range.
func ReportBatch(ctx context.Context, final bool, last []byte) {
	r, _ := ctx.Value(rangeReportKey{}).(*RangeReport)
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reported = true
	if final {
		r.final = true
		return
	}
	if last != nil {
		if next := Successor(last); bytes.Compare(next, r.through) > 0 {
			r.through = next
		}
	}
}

// Covers reports whether the backend vouched for every key below hi (nil:
// up to the read's own end). ok is false when the adapter reported
// nothing, so nothing can be said.
func (r *RangeReport) Covers(hi []byte) (covers, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.reported {
		return false, false
	}
	if r.final {
		return true, true
	}
	return hi != nil && bytes.Compare(r.through, hi) >= 0, true
}
