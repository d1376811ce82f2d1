package deadline

import (
	"context"
	"sync"
	"time"
)

type (
	key      struct{} // the request's *Request
	extended struct{} // a commit's context that outlives the request's: its *Request
)

// Request is one request's long deadline and whether it has sent a write.
type Request struct {
	long  context.Context
	short time.Time // the frontend's own deadline; zero if none

	mu      sync.Mutex
	writing bool // a write was sent: the request runs to long's end
	cut     bool // answered at the frontend's deadline: nothing more is sent
}

// With returns ctx, whose deadline is the frontend's own, carrying a new
// Request whose long deadline and cancellation are long's: long's end ends
// every write Write extends. The frontend cancels long when the request is
// over.
func With(ctx, long context.Context) (context.Context, *Request) {
	r := &Request{long: long}
	r.short, _ = ctx.Deadline()
	return context.WithValue(ctx, key{}, r), r
}

// Long returns the long context ctx's Request carries, or ctx itself when
// it carries none.
func Long(ctx context.Context) context.Context {
	if r, ok := ctx.Value(key{}).(*Request); ok {
		return r.long
	}
	return ctx
}

// Retry returns the deadline a store call's next attempt (a retry, a
// transaction's next run) must end before. For a commit's context from
// Write it is the frontend's own deadline: the write in flight runs on, but
// new work starts within the deadline that bounds waiting, so that what
// is answered then (ABORTED, 503) still reaches a client whose retry policy
// can use it. For any other context it is ctx's deadline.
func Retry(ctx context.Context) (time.Time, bool) {
	if r, ok := ctx.Value(extended{}).(*Request); ok && !r.short.IsZero() {
		return r.short, true
	}
	return ctx.Deadline()
}

// Extended reports whether ctx is a commit's context from Write, which
// outlives the frontend's own deadline.
func Extended(ctx context.Context) bool {
	_, ok := ctx.Value(extended{}).(*Request)
	return ok
}

// Write returns the context for sending a request's writes to the store:
// one with ctx's values that ends with the request's long context, so that
// the frontend's own deadline does not cut the write off. It returns ctx
// itself (and a no-op) when ctx carries no Request, when the frontend has
// already answered (Cut), or when ctx has ended before any write of the
// request was sent: such a write fails before it is sent, as it did; and
// when ctx's own deadline is no earlier than the long one, which it never
// shortens. Call the returned function when the writes are done.
func Write(ctx context.Context) (context.Context, context.CancelFunc) {
	r, ok := ctx.Value(key{}).(*Request)
	if !ok {
		return ctx, func() {}
	}
	r.mu.Lock()
	if r.cut || !r.writing && ctx.Err() != nil {
		r.mu.Unlock()
		return ctx, func() {}
	}
	r.writing = true
	r.mu.Unlock()
	if end, ok := r.long.Deadline(); ok {
		if own, ok := ctx.Deadline(); ok && !own.Before(end) {
			return ctx, func() {} // ctx already runs as long: nothing to extend
		}
	}
	wctx := context.WithoutCancel(ctx)
	var cancel context.CancelFunc
	if d, ok := r.long.Deadline(); ok {
		wctx, cancel = context.WithDeadline(wctx, d)
	} else {
		wctx, cancel = context.WithCancel(wctx)
	}
	stop := context.AfterFunc(r.long, cancel)
	return context.WithValue(wctx, extended{}, r), func() {
		stop()
		cancel()
	}
}

// Sending marks ctx's request as having sent a write whose outcome does
// not depend on ctx once it is sent (a commit the WAL has taken, which it
// writes whatever ctx says), so that the frontend waits for the handler's
// answer rather than answer at its own deadline. It reports false when the
// frontend has already answered (Cut): send nothing then. true for a ctx
// that carries no Request.
func Sending(ctx context.Context) bool {
	r, ok := ctx.Value(key{}).(*Request)
	if !ok {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cut {
		return false
	}
	r.writing = true
	return true
}

// Cut is the frontend's question at its own deadline, for a frontend that
// answers then without waiting for the handler: true when the request has
// sent no write (it may be answered now, and Write sends nothing more), false
// when it has (the frontend waits for the handler until the long context
// ends).
func (r *Request) Cut() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.writing {
		return false
	}
	r.cut = true
	return true
}
