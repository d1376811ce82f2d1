package deadline

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

type tag struct{}

func TestWriteOutlivesTheShortDeadline(t *testing.T) {
	long, cancelLong := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLong()
	short, cancel := context.WithTimeout(context.WithValue(long, tag{}, "v"), 20*time.Millisecond)
	defer cancel()
	ctx, r := With(short, long)
	w, done := Write(ctx)
	defer done()
	<-short.Done()
	if w.Err() != nil {
		t.Fatalf("the write's context ended with the short deadline: %v", w.Err())
	}
	if d, ok := w.Deadline(); !ok || !d.Equal(mustDeadline(t, long)) {
		t.Fatalf("write deadline %v %v, want the long one", d, ok)
	}
	if w.Value(tag{}) != "v" {
		t.Fatal("the write's context lost the request's values")
	}
	if r.Cut() {
		t.Fatal("Cut after a write was sent: the frontend would answer before the write's outcome")
	}
	// A second write of the same request (another keyspace of the
	// commit) is sent too, though the short deadline has passed.
	w2, done2 := Write(ctx)
	defer done2()
	if w2.Err() != nil {
		t.Fatalf("a later write of a request already writing: %v", w2.Err())
	}
	cancelLong()
	for _, c := range []context.Context{w, w2} {
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
		}
	}
	if !errors.Is(w.Err(), context.Canceled) || !errors.Is(w2.Err(), context.Canceled) {
		t.Fatalf("the writes' contexts outlived the long one: %v, %v", w.Err(), w2.Err())
	}
}

func mustDeadline(t *testing.T, ctx context.Context) time.Time {
	t.Helper()
	d, ok := ctx.Deadline()
	if !ok {
		t.Fatal("no deadline")
	}
	return d
}

func TestNoWriteAfterCutOrAfterTheDeadline(t *testing.T) {
	long, cancelLong := context.WithCancel(context.Background())
	defer cancelLong()
	short, cancel := context.WithCancel(long)
	ctx, r := With(short, long)
	if !r.Cut() {
		t.Fatal("Cut refused with no write sent")
	}
	w, done := Write(ctx)
	done()
	if w != ctx {
		t.Fatal("Write after Cut extended the request: the frontend has answered")
	}

	ctx, _ = With(short, long)
	cancel()
	if w, done := Write(ctx); w != ctx || w.Err() == nil {
		t.Fatal("a first write after the short deadline was extended: it must fail unsent")
	} else {
		done()
	}
}

func TestWithoutRequest(t *testing.T) {
	ctx := context.Background()
	w, done := Write(ctx)
	done()
	if w != ctx || Long(ctx) != ctx {
		t.Fatal("a context without a Request changed")
	}
}

// TestCutRacesWrite: whatever the interleaving, either the write is
// extended and Cut says false, or Cut says true and the write is not.
func TestCutRacesWrite(t *testing.T) {
	for range 2000 {
		long, cancelLong := context.WithCancel(context.Background())
		ctx, r := With(long, long)
		var w context.Context
		var cut bool
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			var done context.CancelFunc
			w, done = Write(ctx)
			done()
		}()
		go func() {
			defer wg.Done()
			cut = r.Cut()
		}()
		wg.Wait()
		if extended := w != ctx; extended == cut {
			t.Fatalf("extended %v and cut %v", extended, cut)
		}
		cancelLong()
	}
}

// TestRetryIsTheRequestDeadline: a commit's extended context starts new
// attempts within the frontend's own deadline; any other context, within
// its own.
func TestRetryIsTheRequestDeadline(t *testing.T) {
	long, cancelLong := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLong()
	short, cancel := context.WithTimeout(long, time.Minute)
	defer cancel()
	ctx, _ := With(short, long)
	if Extended(ctx) {
		t.Fatal("a request's context reported extended before any write")
	}
	if d, ok := Retry(ctx); !ok || !d.Equal(mustDeadline(t, short)) {
		t.Fatalf("Retry of the request's context: %v %v, want its own deadline", d, ok)
	}
	w, done := Write(ctx)
	defer done()
	if !Extended(w) {
		t.Fatal("the write's context is not reported extended")
	}
	if d, ok := Retry(w); !ok || !d.Equal(mustDeadline(t, short)) {
		t.Fatalf("Retry of the write's context: %v %v, want the request's deadline %v", d, ok, mustDeadline(t, short))
	}
	if _, ok := Retry(context.Background()); ok {
		t.Fatal("Retry found a deadline in a context without one")
	}
}

// TestWriteNeverShortens: a request whose own deadline is later than the
// long one (Azure's 30 s bound under a 59 s request deadline) keeps its
// own.
func TestWriteNeverShortens(t *testing.T) {
	long, cancelLong := context.WithTimeout(context.Background(), time.Minute)
	defer cancelLong()
	short, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	ctx, r := With(short, long)
	w, done := Write(ctx)
	defer done()
	if w != ctx {
		t.Fatal("Write replaced a context that already runs longer than the long one")
	}
	if r.Cut() {
		t.Fatal("Cut after a write was sent")
	}
}

// BenchmarkWrite is what a write-through pays for its long context, beside
// a forwarded write's 300-450 µs of nemo CPU (docs/benchmarks.md).
func BenchmarkWrite(b *testing.B) {
	long, cancelLong := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLong()
	short, cancel := context.WithTimeout(long, time.Minute)
	defer cancel()
	for b.Loop() {
		ctx, _ := With(short, long)
		_, done := Write(ctx)
		done()
	}
}

// TestSending: a write whose outcome does not depend on ctx (the WAL's)
// marks its request, so Cut says false; after Cut, nothing is sent.
func TestSending(t *testing.T) {
	if !Sending(context.Background()) {
		t.Fatal("Sending refused a context without a Request")
	}
	long, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx, r := With(long, long)
	if !Sending(ctx) || r.Cut() {
		t.Fatal("after Sending, Cut let the frontend answer before the write's outcome")
	}
	ctx, r = With(long, long)
	if !r.Cut() || Sending(ctx) {
		t.Fatal("Sending after Cut: the frontend has answered, nothing may be sent")
	}
}
