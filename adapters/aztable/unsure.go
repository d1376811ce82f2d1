package aztable

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/nemocache/nemo/adapters"
)

// Unknown outcomes. The SDK pipeline retries a write whose attempt failed
// with 500 (OperationTimedOut, InternalError), 502, 504 or in transport,
// and such an attempt may have been applied: the service documents that
// the operation may or may not have succeeded. A retry of an insert, an
// If-Match write or a transaction is then refused by the write's own first
// application (409, 412, 404, or the failed operation of a 202), and a
// retry that fails in turn says nothing either. So every write call is
// made with a note (sentWrite) that the pipeline's unsurePolicy marks when
// an attempt failed that way; after such an attempt a success is still
// definite (the earlier one did not apply, or the write is idempotent),
// but a refusal or error is not a conflict or a plain failure: it is
// adapters.ErrUnknownOutcome, wrapping the service's last answer. 503
// ServerBusy and 429 are documented as not applied.

// unsureNote is marked when one attempt of a call may have been applied
// without an answer.
type unsureNote struct{ unsure atomic.Bool }

type unsureKey struct{}

// sentWrite returns ctx carrying a new note for one write call.
func sentWrite(ctx context.Context) (context.Context, *unsureNote) {
	n := &unsureNote{}
	return context.WithValue(ctx, unsureKey{}, n), n
}

// unsurePolicy marks the call's note (a per-retry policy: it sees every
// attempt).
type unsurePolicy struct{}

func (unsurePolicy) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	noteAttempt(req.Raw().Context(), resp, err)
	return resp, err
}

// noteAttempt marks the note ctx carries, if any, when an attempt failed
// in a way that may have applied it: lost (the attempt got no complete
// answer: a transport error, or a body that failed to download, which
// the SDK returns beside its response), or a 500, 502 or 504. A
// connection that could not be made (a refused or unroutable dial, a
// name that did not resolve) sent nothing, so it marks nothing. The SDK's
// attempts report through unsurePolicy, the direct requests' (direct.go)
// call it themselves, with lost nil when the service answered.
func noteAttempt(ctx context.Context, resp *http.Response, lost error) {
	n, _ := ctx.Value(unsureKey{}).(*unsureNote)
	if n == nil {
		return
	}
	if lost != nil && notSent(lost) {
		return
	}
	if lost != nil || resp != nil && (resp.StatusCode == http.StatusInternalServerError ||
		resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusGatewayTimeout) {
		n.unsure.Store(true)
	}
}

// notSent reports whether a transport error happened before the request
// could be sent: dialing the service failed.
func notSent(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &op) && op.Op == "dial" || errors.As(err, &dns)
}

// unknownOutcome returns, for a write call that failed with err after its
// note was marked, the adapters.ErrUnknownOutcome error; nil otherwise.
func unknownOutcome(op string, n *unsureNote, err error) error {
	if err == nil || !n.unsure.Load() {
		return nil
	}
	return fmt.Errorf("aztable: %s: %w: %w", op, adapters.ErrUnknownOutcome, err)
}
