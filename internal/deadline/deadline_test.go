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
	long, cancelLong := context.WithTimeout(context.WithValue(context.Background(), tag{}, "v"), time.Hour)
	defer cancelLong()
	short, r, cancel := Start(long, 20*time.Millisecond, 0)
	defer cancel()
	ctx := short
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
	ctx, r, cancel := Start(long, time.Hour, 0)
	if !r.Cut() {
		t.Fatal("Cut refused with no write sent")
	}
	w, done := Write(ctx)
	done()
	if w != ctx {
		t.Fatal("Write after Cut extended the request: the frontend has answered")
	}

	cancel()
	ctx, _, cancel = Start(long, time.Hour, 0)
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
	if w != ctx || !Sending(ctx) || Extended(ctx) {
		t.Fatal("a context without a Request changed")
	}
	b, cancel := Bound(ctx, time.Minute)
	defer cancel()
	if _, ok := b.Value(key{}).(*Request); ok {
		t.Fatal("Bound gave a context without a Request one")
	}
}

// TestCutRacesWrite: whatever the interleaving, either the write is
// extended and Cut says false, or Cut says true and the write is not.
func TestCutRacesWrite(t *testing.T) {
	for range 2000 {
		long, cancelLong := context.WithCancel(context.Background())
		ctx, r, cancel := Start(long, time.Hour, 0)
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
		cancel()
		cancelLong()
	}
}

// TestRetryIsTheRequestDeadline: a commit's extended context starts new
// attempts within the frontend's own deadline; any other context, within
// its own.
func TestRetryIsTheRequestDeadline(t *testing.T) {
	long, cancelLong := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLong()
	short, _, cancel := Start(long, time.Minute, 0)
	defer cancel()
	ctx := short
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
// long one keeps its own.
func TestWriteNeverShortens(t *testing.T) {
	ctx, r, cancel := Start(context.Background(), time.Hour, time.Minute)
	defer cancel()
	w, done := Write(ctx)
	defer done()
	if w != ctx {
		t.Fatal("Write replaced a context that already runs longer than the long one")
	}
	if r.Cut() {
		t.Fatal("Cut after a write was sent")
	}
}

// BenchmarkWrite is what a write-through request pays for its two
// deadlines (Start) and its long context (Write), beside a forwarded
// write's 300-450 µs of nemo CPU (docs/benchmarks.md).
func BenchmarkWrite(b *testing.B) {
	long, cancelLong := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLong()
	for b.Loop() {
		ctx, _, cancel := Start(long, time.Minute, 0)
		_, done := Write(ctx)
		done()
		cancel()
	}
}

// TestSending: a write whose outcome does not depend on ctx (the WAL's)
// marks its request, so Cut says false; after Cut, nothing is sent.
func TestSending(t *testing.T) {
	if !Sending(context.Background()) {
		t.Fatal("Sending refused a context without a Request")
	}
	ctx, r, cancel := Start(context.Background(), time.Hour, 0)
	defer cancel()
	if !Sending(ctx) || r.Cut() {
		t.Fatal("after Sending, Cut let the frontend answer before the write's outcome")
	}
	ctx, r, cancel2 := Start(context.Background(), time.Hour, 0)
	defer cancel2()
	if !r.Cut() || Sending(ctx) {
		t.Fatal("Sending after Cut: the frontend has answered, nothing may be sent")
	}
}

// BenchmarkStart is what every request pays (reads too), against
// BenchmarkRequestTimeout, the frontend's own deadline alone, which every
// request paid before.
func BenchmarkStart(b *testing.B) {
	for b.Loop() {
		_, _, cancel := Start(context.Background(), 5*time.Second, 59*time.Second)
		cancel()
	}
}

func BenchmarkRequestTimeout(b *testing.B) {
	for b.Loop() {
		_, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cancel()
	}
}

// TestLongDeadline: the long deadline is the client's, capped at the write
// timeout; Long ends there, or when the client goes.
func TestLongDeadline(t *testing.T) {
	client, cancelClient := context.WithTimeout(context.Background(), time.Hour)
	defer cancelClient()
	ctx, r, cancel := Start(client, time.Millisecond, time.Minute)
	defer cancel()
	<-ctx.Done()
	w, done := Write(ctx) // the short deadline has passed: nothing to extend
	done()
	if w != ctx {
		t.Fatal("a first write after the short deadline was extended")
	}
	long, cancelLong := r.Long()
	defer cancelLong()
	if d := time.Until(mustDeadline(t, long)); d < 50*time.Second || d > time.Minute {
		t.Fatalf("long deadline in %v, want the one-minute cap under the client's hour", d)
	}

	_, r, cancel = Start(client, time.Hour, 0)
	defer cancel()
	long, cancelLong = r.Long()
	defer cancelLong()
	if !mustDeadline(t, long).Equal(mustDeadline(t, client)) {
		t.Fatal("without a cap the long deadline is not the client's")
	}
	cancelClient()
	select {
	case <-long.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Long outlived the client")
	}
}

// TestBoundLowersBoth: Azure's timeout parameter bounds the request's own
// deadline and the long one; a commit's write then runs to it.
func TestBoundLowersBoth(t *testing.T) {
	ctx, _, cancel := Start(context.Background(), time.Minute, time.Hour)
	defer cancel()
	b, cancelB := Bound(ctx, 10*time.Second)
	defer cancelB()
	short := mustDeadline(t, b)
	if d := time.Until(short); d > 10*time.Second {
		t.Fatalf("bounded request deadline in %v, want at most 10 s", d)
	}
	w, done := Write(b)
	defer done()
	if w != b {
		t.Fatalf("Write extended past a bound of 10 s: deadline %v", mustDeadline(t, w))
	}
	ctx, _, cancel = Start(context.Background(), time.Second, time.Hour)
	defer cancel()
	b, cancelB = Bound(ctx, 20*time.Second)
	defer cancelB()
	w, done = Write(b)
	defer done()
	if d := time.Until(mustDeadline(t, w)); d < 15*time.Second || d > 20*time.Second {
		t.Fatalf("a write under a 20 s bound and a 1 s request deadline runs %v more, want about 20 s", d)
	}
}

// TestWithin: a server spends what is left before a deadline less a fifth
// of it, at most a second, kept to answer in.
func TestWithin(t *testing.T) {
	for _, tc := range []struct{ left, want time.Duration }{
		{60 * time.Second, 59 * time.Second},
		{5 * time.Second, 4 * time.Second},
		{3 * time.Second, 2400 * time.Millisecond},
		{500 * time.Millisecond, 400 * time.Millisecond},
		{0, 0},
		{-time.Second, 0},
	} {
		if got := Within(tc.left); got != tc.want {
			t.Errorf("Within(%v) = %v, want %v", tc.left, got, tc.want)
		}
	}
}

// TestStartContext: Start's context behaves as context.WithDeadline's,
// whether or not anything has waited on it (its timer is made by the
// first Done): its deadline is the earlier of the client's and its own,
// its error the first of the client's end, cancel and the deadline, and a
// context made from it ends with it.
func TestStartContext(t *testing.T) {
	client, cancelClient := context.WithTimeout(context.WithValue(context.Background(), tag{}, "v"), time.Hour)
	defer cancelClient()

	ctx, _, cancel := Start(client, 0, 0) // already past, nothing waited
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("past its deadline with no timer: %v", ctx.Err())
	}
	<-ctx.Done() // its timer, made now, has fired too
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("after Done: %v", ctx.Err())
	}
	cancel()

	ctx, _, cancel = Start(client, 20*time.Millisecond, 0)
	if d, _ := ctx.Deadline(); time.Until(d) > 20*time.Millisecond || ctx.Err() != nil {
		t.Fatalf("deadline in %v, err %v", time.Until(d), ctx.Err())
	}
	if ctx.Value(tag{}) != "v" {
		t.Fatal("the client's values are lost")
	}
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("after its deadline: %v", ctx.Err())
	}
	cancel()

	for _, waited := range []bool{false, true} {
		ctx, _, cancel := Start(client, time.Hour, 0)
		if d, _ := ctx.Deadline(); !d.Equal(deadlineOf(client)) {
			t.Fatalf("deadline %v, want the client's %v", d, deadlineOf(client))
		}
		if waited {
			_ = ctx.Done()
		}
		cancel()
		<-ctx.Done()
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("waited %v, cancelled: %v", waited, ctx.Err())
		}
	}

	for _, waited := range []bool{false, true} {
		client, cancelClient := context.WithCancel(context.Background())
		ctx, _, cancel := Start(client, time.Hour, 0)
		if waited {
			_ = ctx.Done()
		}
		child, cancelChild := context.WithCancel(ctx)
		cancelClient()
		<-child.Done()
		if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(child.Err(), context.Canceled) {
			t.Fatalf("waited %v, the client gone: %v, a child %v", waited, ctx.Err(), child.Err())
		}
		cancelChild()
		cancel()
	}
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}
