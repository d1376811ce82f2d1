package deadline

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

type (
	key      struct{} // the request's *Request
	extended struct{} // a commit's context that outlives the request's: its *Request
)

// Request is one request's long deadline and whether it has sent a write.
type Request struct {
	client context.Context // the client's context: its cancellation ends every extended write
	end    time.Time       // the long deadline: the client's, capped; zero if none
	short  time.Time       // the frontend's own deadline; zero if none

	mu      sync.Mutex
	writing bool // a write was sent: the request runs to the long deadline
	cut     bool // answered at the frontend's deadline: nothing more is sent
}

// Start returns client's context bounded by the frontend's own deadline,
// request from now, carrying a Request whose long deadline is client's own,
// capped at write from now (0: no cap). The frontend's deadline costs a
// timer only once something waits for it (the context's Done): a request
// that never waits (a buffer hit) is answered without one; the long
// deadline gets one only when a write is extended (Write) or a frontend
// waits for it (Long). cancel releases the request's context.
func Start(client context.Context, request, write time.Duration) (context.Context, *Request, context.CancelFunc) {
	now := time.Now()
	c := &requestContext{client: client, end: now.Add(request), r: Request{client: client}}
	r := &c.r
	r.end, _ = client.Deadline()
	if !r.end.IsZero() && r.end.Before(c.end) {
		c.end = r.end
	}
	if write > 0 && (r.end.IsZero() || now.Add(write).Before(r.end)) {
		r.end = now.Add(write)
	}
	r.short = c.end
	return c, r, c.cancel
}

// requestContext is the context Start returns, carrying its Request: the
// client's, ending at end. Until something asks for its Done channel it
// has no timer (Err compares the clock with end); the first Done makes
// one, context.WithDeadline(client, end), which answers from then on.
type requestContext struct {
	client context.Context
	end    time.Time
	r      Request

	timed atomic.Pointer[timed] // from the first Done

	mu        sync.Mutex // serialises making timed, Err and cancel
	cancelled bool
	err       error // the first error Err reported before timed was made
}

type timed struct {
	ctx  context.Context
	stop context.CancelFunc
}

func (c *requestContext) Deadline() (time.Time, bool) { return c.end, true }

func (c *requestContext) Done() <-chan struct{} {
	if t := c.timed.Load(); t != nil {
		return t.ctx.Done()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.timed.Load()
	if t == nil {
		t = &timed{}
		t.ctx, t.stop = context.WithDeadline(c.client, c.end)
		if c.cancelled {
			t.stop()
		}
		c.timed.Store(t)
	}
	return t.ctx.Done()
}

func (c *requestContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if t := c.timed.Load(); t != nil {
		return t.ctx.Err()
	}
	switch {
	case c.client.Err() != nil:
		c.err = c.client.Err()
	case c.cancelled:
		c.err = context.Canceled
	case !time.Now().Before(c.end):
		c.err = context.DeadlineExceeded
	}
	return c.err
}

func (c *requestContext) Value(k any) any {
	if k == (key{}) {
		return &c.r
	}
	// Once timed is made, its cancelCtx is what the context package finds
	// for a child, so that the child follows it without a goroutine.
	if t := c.timed.Load(); t != nil {
		return t.ctx.Value(k)
	}
	return c.client.Value(k)
}

func (c *requestContext) cancel() {
	c.mu.Lock()
	c.cancelled = true
	t := c.timed.Load()
	c.mu.Unlock()
	if t != nil {
		t.stop()
	}
}

// Bound lowers both of ctx's deadlines to at most d from now (Azure's
// timeout parameter: the service's bound for the request), for the rest of
// the request. A ctx without a Request gets d as its deadline only.
func Bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	limit := time.Now().Add(d)
	bounded, cancel := context.WithDeadline(ctx, limit)
	old, ok := ctx.Value(key{}).(*Request)
	if !ok {
		return bounded, cancel
	}
	r := &Request{client: old.client, end: old.end}
	r.short, _ = bounded.Deadline()
	if r.end.IsZero() || limit.Before(r.end) {
		r.end = limit
	}
	return context.WithValue(bounded, key{}, r), cancel
}

// Long returns a context that ends at the request's long deadline, for a
// frontend that waits for the handler past its own (Cut said false).
func (r *Request) Long() (context.Context, context.CancelFunc) {
	if r.end.IsZero() {
		return context.WithCancel(r.client)
	}
	return context.WithDeadline(r.client, r.end)
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
// one with ctx's values that ends at the request's long deadline or when
// the client goes, so that the frontend's own deadline does not cut the
// write off. It returns ctx itself (and a no-op) when ctx carries no
// Request, when the request may not send (see Sending: such a write fails
// before it is sent, as it did), or when ctx's own deadline is no earlier
// than the long one, which it never shortens. Call the returned function
// when the writes are done.
func Write(ctx context.Context) (context.Context, context.CancelFunc) {
	r, ok := ctx.Value(key{}).(*Request)
	if !ok || !r.mark(ctx) {
		return ctx, func() {}
	}
	own, bounded := ctx.Deadline()
	if bounded && !r.end.IsZero() && !own.Before(r.end) {
		return ctx, func() {} // ctx already runs as long: nothing to extend
	}
	wctx := context.WithoutCancel(ctx)
	var cancel context.CancelFunc
	if r.end.IsZero() {
		wctx, cancel = context.WithCancel(wctx)
	} else {
		wctx, cancel = context.WithDeadline(wctx, r.end)
	}
	stop := context.AfterFunc(r.client, cancel)
	return context.WithValue(wctx, extended{}, r), func() {
		stop()
		cancel()
	}
}

// Sending marks ctx's request as having sent a write whose outcome does
// not depend on ctx once it is sent (a commit the WAL has taken, which it
// writes whatever ctx says), so that the frontend waits for the handler's
// answer rather than answer at its own deadline. It reports false, and
// marks nothing, when the frontend has already answered (Cut) or ctx ended
// before any write of the request was sent: send nothing then. true for a
// ctx that carries no Request.
func Sending(ctx context.Context) bool {
	r, ok := ctx.Value(key{}).(*Request)
	return !ok || r.mark(ctx)
}

// mark is the one rule for sending a write: not once the frontend has
// answered, nor, for a request's first write, once ctx has ended.
func (r *Request) mark(ctx context.Context) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cut || !r.writing && ctx.Err() != nil {
		return false
	}
	r.writing = true
	return true
}

// Cut is the frontend's question at its own deadline, for a frontend that
// answers then without waiting for the handler: true when the request has
// sent no write (it may be answered now, and nothing more is sent), false
// when it has (the frontend waits for the handler until Long ends).
func (r *Request) Cut() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.writing {
		return false
	}
	r.cut = true
	return true
}

// Within is how much of d, the time left before a deadline, a server may
// spend on a request: d less what it keeps to send the answer, a fifth of
// d, at most a second. 0 for d <= 0.
func Within(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d - min(d/5, time.Second)
}
