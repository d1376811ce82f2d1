package obs

import (
	"context"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
)

// Request is what one client request did, noted by the layers it passed
// through. The proxy makes one per request and puts it in the request's
// context (WithRequest); the frontend names the operation (SetOp); the
// buffer notes hits and misses, the adapters remote calls, the engine lock
// waits. Safe for concurrent use: a handler that runs on past its answer
// (a Datastore call answered at its deadline) may still note.
type Request struct {
	self     ref // what WithRequest puts in the context
	op       string
	keyspace atomic.Pointer[string]
	events   [numEvents]atomic.Uint32
	remote   atomic.Uint32
	waits    atomic.Uint32
	waited   atomic.Int64
}

// Event is something the buffer did for a request.
type Event uint8

// The buffer's events.
const (
	// Hit: a point read answered from the buffer with a value.
	Hit Event = iota
	// NegativeHit: a point read answered "absent" from the buffer.
	NegativeHit
	// Miss: a point read that asked the store.
	Miss
	// RangeHit: a range scan answered entirely from the buffer.
	RangeHit
	// RangeFetch: a range scan that read holes from the store.
	RangeFetch
	numEvents
)

type requestKey struct{}

// ref is a context's handle on its Request; quiet ones take no buffer
// events (Quiet).
type ref struct {
	r     *Request
	quiet bool
}

// WithRequest returns ctx carrying r.
func WithRequest(ctx context.Context, r *Request) context.Context {
	r.self = ref{r: r}
	return context.WithValue(ctx, requestKey{}, &r.self)
}

// Quiet returns ctx whose buffer events (Note, Touch) are not the
// request's, while its remote calls and lock waits still are: the engine
// reads its catalogs (which table a name is) with it, so a request's
// keyspace and cache outcome are those of its data.
func Quiet(ctx context.Context) context.Context {
	if r := RequestFrom(ctx); r != nil {
		return context.WithValue(ctx, requestKey{}, &ref{r: r, quiet: true})
	}
	return ctx
}

func refFrom(ctx context.Context) *ref {
	x, _ := ctx.Value(requestKey{}).(*ref)
	return x
}

// RequestFrom returns the Request ctx carries, or nil.
func RequestFrom(ctx context.Context) *Request {
	if x := refFrom(ctx); x != nil {
		return x.r
	}
	return nil
}

// SetOp names the operation of the request ctx carries (a metric label:
// "get", "lookup", "run_query", ...: snake_case, see MethodOp). Call it
// before the handler's work, from the request's own goroutine.
func SetOp(ctx context.Context, op string) {
	if r := RequestFrom(ctx); r != nil {
		r.op = op
	}
}

// MethodOp is an RPC method's name as an operation label spells it, in
// the one convention of the op label (docs/metrics.md): snake_case, so
// "RunQuery" (gRPC) and "runQuery" (REST) both become "run_query",
// "AllocateIds" "allocate_ids".
func MethodOp(method string) string {
	i := strings.IndexFunc(method, unicode.IsUpper)
	if i < 0 {
		return method
	}
	var b strings.Builder
	b.Grow(len(method) + 4)
	b.WriteString(method[:i])
	for j, r := range method[i:] {
		if unicode.IsUpper(r) {
			if i+j > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// SetOp names r's operation.
func (r *Request) SetOp(op string) { r.op = op }

// Op is the operation's name, "" if none was set.
func (r *Request) Op() string { return r.op }

// Note records e in keyspace ks for the request ctx carries, if any. The
// first keyspace noted is the request's.
func Note(ctx context.Context, ks string, e Event) {
	x := refFrom(ctx)
	if x == nil || x.quiet {
		return
	}
	x.r.events[e].Add(1)
	x.r.touch(ks)
}

// Touch notes that the request ctx carries used keyspace ks (a write that
// read nothing, say).
func Touch(ctx context.Context, ks string) {
	if x := refFrom(ctx); x != nil && !x.quiet {
		x.r.touch(ks)
	}
}

func (r *Request) touch(ks string) {
	if r.keyspace.Load() == nil {
		p := new(string) // allocated only the first time
		*p = ks
		r.keyspace.CompareAndSwap(nil, p)
	}
}

// NoteRemote records a call to the backend store for the request ctx
// carries.
func NoteRemote(ctx context.Context) {
	if r := RequestFrom(ctx); r != nil {
		r.remote.Add(1)
	}
}

// NoteLockWait records a wait for a conflicting lock that took d.
func NoteLockWait(ctx context.Context, d time.Duration) {
	if r := RequestFrom(ctx); r != nil {
		r.waits.Add(1)
		r.waited.Add(int64(d))
	}
}

// Keyspace is the first keyspace the request used, "" if none.
func (r *Request) Keyspace() string {
	if p := r.keyspace.Load(); p != nil {
		return *p
	}
	return ""
}

// Count is how many times e happened.
func (r *Request) Count(e Event) uint32 { return r.events[e].Load() }

// RemoteCalls is how many calls the request made to the backend store.
func (r *Request) RemoteCalls() uint32 { return r.remote.Load() }

// LockWaits is how many times the request waited for a lock, and for how
// long in all.
func (r *Request) LockWaits() (uint32, time.Duration) {
	return r.waits.Load(), time.Duration(r.waited.Load())
}

// Outcome is the cache policy's outcome for the request: "miss" if any
// read went to the store, else "hit" if any was answered with a value,
// else "negative_hit" if one was answered "absent", else "none" (a request
// that read nothing through the buffer, such as a blind write).
func (r *Request) Outcome() string {
	switch {
	case r.Count(Miss) > 0 || r.Count(RangeFetch) > 0:
		return "miss"
	case r.Count(Hit) > 0 || r.Count(RangeHit) > 0:
		return "hit"
	case r.Count(NegativeHit) > 0:
		return "negative_hit"
	}
	return "none"
}

// Source is "remote" when the request called the backend store and
// "buffer" when nemo answered it alone.
func (r *Request) Source() string {
	if r.RemoteCalls() > 0 {
		return "remote"
	}
	return "buffer"
}
