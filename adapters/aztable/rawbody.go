package aztable

import (
	"context"
	"io"
	"net/http"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	"github.com/nemocache/nemo/adapters"
)

// Reads take the service's own bytes. aztables v1.4.1 decodes an entity
// (GetEntity) or a query page (ListEntities) into maps and encodes each map
// again, which loses the difference between 2 and 2.0, so the adapter
// parses the body itself (tablecodec). The SDK's decoding and re-encoding
// were then wasted work: a profile of forwarded point reads put a quarter
// of GetEntity's CPU in them (encoding/json, and the SDK's JSON of every
// value). bodyPolicy, a per-call policy, keeps the body of a successful
// read in the rawReply its context carries and hands the SDK an empty
// JSON object instead; the SDK still reads the status and the headers
// (ETag, continuation) from the same response.

// rawReply receives a read's body.
type rawReply struct {
	body []byte
	ok   bool
}

type rawReplyKey struct{}

// withRawReply returns ctx carrying r: the read sent with it leaves its
// body in r.
func withRawReply(ctx context.Context, r *rawReply) context.Context {
	return context.WithValue(ctx, rawReplyKey{}, r)
}

// bodyPolicy keeps a 200 answer's body in the request's rawReply, if it
// has one, and gives the SDK "{}" in its place. Any other answer passes
// through whole: the SDK builds its ResponseError from it.
type bodyPolicy struct{}

func (bodyPolicy) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	r, _ := req.Raw().Context().Value(rawReplyKey{}).(*rawReply)
	if r == nil || err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	body, err := runtime.Payload(resp)
	if err != nil {
		return resp, err
	}
	r.body, r.ok = body, true
	resp.Body = io.NopCloser(strings.NewReader("{}"))
	resp.ContentLength = 2
	return resp, nil
}

// attemptPolicy makes a call whose context asks for a single attempt
// (adapters.WithSingleAttempt) skip the pipeline's retries, as the
// direct client's send does.
type attemptPolicy struct{}

func (attemptPolicy) Do(req *policy.Request) (*http.Response, error) {
	if ctx := req.Raw().Context(); adapters.SingleAttempt(ctx) {
		req = req.WithContext(policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1}))
	}
	return req.Next()
}
