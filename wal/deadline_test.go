package wal

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nemocache/nemo/internal/deadline"
)

// TestAppendMarksItsRequest: an append marks its request as sending a
// write (internal/deadline), so that a frontend answering at its own
// deadline waits for the fsync instead; an append whose frontend has
// already answered enters nothing into the log.
func TestAppendMarksItsRequest(t *testing.T) {
	l := mustOpen(t, testOptions(t, t.TempDir()))
	defer l.Close()
	ctx, r, cancel := deadline.Start(context.Background(), time.Minute, 0)
	defer cancel()
	if _, err := l.Append(ctx, 1, []Record{putRec("a", "k", "v")}); err != nil {
		t.Fatal(err)
	}
	if r.Cut() {
		t.Fatal("the frontend may answer at its deadline after the append was taken")
	}

	ctx, r, cancel2 := deadline.Start(context.Background(), time.Minute, 0)
	defer cancel2()
	next := l.NextLSN()
	if !r.Cut() {
		t.Fatal("Cut refused before any append")
	}
	if _, err := l.Append(ctx, 2, []Record{putRec("a", "k", "w")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an append after its frontend answered: %v, want DeadlineExceeded", err)
	}
	if _, _, err := l.AppendEarly(ctx, 3, []Record{putRec("a", "k", "x")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an early append after its frontend answered: %v, want DeadlineExceeded", err)
	}
	if got := l.NextLSN(); got != next {
		t.Fatalf("the log took appends whose frontend had answered: next LSN %d, want %d", got, next)
	}
}
