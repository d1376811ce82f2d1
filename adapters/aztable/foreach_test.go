package aztable

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// TestForEachReportsWhatItDidNotRun: a context that ends before every
// call has started makes forEach fail, so that a write call never reports
// success for chunks it did not send (a drain's cancelled checkpoint once
// marked 900 of 1,000 unsent records written).
func TestForEachReportsWhatItDidNotRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var ran atomic.Int32
	err := forEach(ctx, 10, 1, func(ctx context.Context, i int) error {
		ran.Add(1)
		if i == 2 {
			cancel() // e.g. the drain stopped the checkpoint that made this call
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("forEach after its context ended with %d of 10 calls run: %v, want context.Canceled", ran.Load(), err)
	}
	if n := ran.Load(); n == 10 {
		t.Fatalf("all 10 calls ran after the cancel; the test proves nothing")
	}
	if err := forEach(context.Background(), 10, 3, func(context.Context, int) error { return nil }); err != nil {
		t.Fatalf("forEach with every call run: %v", err)
	}
}
