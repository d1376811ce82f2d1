package aztable

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/deadline"
)

// Point reads (Get) of a Store authenticated with an account key go out
// as one signed GET each, outside the SDK's pipeline. In coherence shared
// every miss and every refresh is such a read, and a profile of nemo on a
// long-tailed workload in front of Azurite put 13 % of nemo's CPU in the
// SDK around them (building the request from its URL template, its
// telemetry, logging, tracing and retry policies, each a copy of the
// request, and decoding the response headers into a struct nemo does not
// read), against 5 % for the HTTP exchange itself. directClient sends the
// request the SDK would send (same path, keys escaped the same way, the
// same x-ms-version, Accept and DataServiceVersion headers, the SDK's
// SharedKeyLite signature) through the same HTTP client, and retries as
// the pipeline does (Options.MaxRetries, RetryDelay, MaxRetryDelay,
// TryTimeout, the same status codes, Retry-After honoured). A refusal
// becomes the *azcore.ResponseError the SDK would return, so classify
// treats both paths alike. A Store opened with a SAS connection string
// reads so too, authenticated by its transport (sasTransport); one with a
// token credential (Microsoft Entra ID) reads through the SDK, but for
// the partition "" (tokenTransport).
//
// The SDK also refuses a point read with an empty PartitionKey before
// sending it (aztables v1.4.1: "parameter partitionKey cannot be empty"),
// although the service stores and reads such entities; the direct read
// has no such limit. The same client, its signature, transport and retry
// loop (send) carry the writes the SDK refuses (directwrite.go).

// apiVersion is the x-ms-version aztables v1.4.1 sends.
const apiVersion = "2019-02-02"

// directClient sends requests of its own, signed with Shared Key Lite
// (or, without a key, authenticated by its transport: tokenTransport,
// sasTransport):
// point reads, and the writes the SDK refuses (directwrite.go).
type directClient struct {
	endpoint string // the table endpoint, no trailing slash
	account  string
	key      []byte // the decoded account key; nil: the transport authenticates
	do       func(*http.Request) (*http.Response, error)
	// allPartitions: every partition's point reads and writes go out
	// here, not only the partition ""'s (a key or a shared access
	// signature: cheaper than the SDK's pipeline; a token's transport is
	// such a pipeline itself). See Store.sendsDirect.
	allPartitions bool
	// opQuery is the query each operation of a $batch carries in its URL
	// (a shared access signature, as written): the SDK's operations carry
	// its client's, so nemo's carry the same.
	opQuery string
	retry   policy.RetryOptions // MaxRetries < 0: none
	macs    sync.Pool           // hash.Hash: HMAC-SHA256 under key
	// closeIdle closes the idle connections do keeps (sendFunc).
	closeIdle func()
}

// newDirectClient returns a client signing with key (base64), or, with
// key "", leaving authentication to transport (tokenTransport,
// sasTransport).
func newDirectClient(endpoint, account, key string, transport policy.Transporter, retry policy.RetryOptions) (*directClient, error) {
	var k []byte
	if key != "" {
		var err error
		if k, err = base64.StdEncoding.DecodeString(key); err != nil {
			return nil, fmt.Errorf("decode account key: %w", err)
		}
	}
	if _, err := url.Parse(endpoint); err != nil {
		return nil, fmt.Errorf("table endpoint: %w", err)
	}
	d := &directClient{endpoint: strings.TrimSuffix(endpoint, "/"), account: account, key: k, retry: retry}
	d.do, d.closeIdle = sendFunc(endpoint, transport)
	d.macs.New = func() any { return hmac.New(sha256.New, d.key) }
	return d, nil
}

// sendFunc is how requests to endpoint go out through transport. The
// Store's own pooled client sends through its transport alone (the
// service does not redirect), without http.Client's per-request header
// copy and redirect bookkeeping, and its point reads take the lean
// transport in front of that (h1.go); any other transport (a test's, a
// fault injector's) sends through its Do. closeIdle closes the idle
// connections sending keeps (the lean transport's and the pooled one's).
func sendFunc(endpoint string, transport policy.Transporter) (send func(*http.Request) (*http.Response, error), closeIdle func()) {
	c, ok := transport.(*http.Client)
	if !ok || c.Transport == nil || c.Jar != nil || c.CheckRedirect != nil || c.Timeout != 0 {
		return transport.Do, idleCloser(transport)
	}
	if tr, ok := c.Transport.(*http.Transport); ok {
		if h1 := newH1Transport(endpoint, tr); h1 != nil {
			return h1.RoundTrip, h1.CloseIdleConnections
		}
	}
	return c.Transport.RoundTrip, c.CloseIdleConnections
}

// idleCloser is x's CloseIdleConnections, or nothing to do if it has none.
func idleCloser(x any) func() {
	if c, ok := x.(interface{ CloseIdleConnections() }); ok {
		return c.CloseIdleConnections
	}
	return func() {}
}

// doFunc is a send function as a policy.Transporter.
type doFunc func(*http.Request) (*http.Response, error)

func (f doFunc) Do(req *http.Request) (*http.Response, error) { return f(req) }

// errNoEntity is get's answer when the entity or its table does not exist.
var errNoEntity = errors.New("aztable: no such entity")

// entityURL is the address of the entity (pk, rk) of table, its keys
// escaped as the SDK escapes them.
func (d *directClient) entityURL(table, pk, rk string) string {
	var u strings.Builder
	u.Grow(len(d.endpoint) + len(table) + len(pk) + len(rk) + 40)
	u.WriteString(d.endpoint)
	u.WriteByte('/')
	u.WriteString(url.PathEscape(table))
	u.WriteString("(PartitionKey='")
	u.WriteString(url.PathEscape(strings.ReplaceAll(pk, "'", "''")))
	u.WriteString("',RowKey='")
	u.WriteString(url.PathEscape(strings.ReplaceAll(rk, "'", "''")))
	u.WriteString("')")
	return u.String()
}

// get returns the body and ETag header of the entity (pk, rk) of table,
// errNoEntity when the service answers 404, else the failure.
func (d *directClient) get(ctx context.Context, table, pk, rk string) ([]byte, string, error) {
	resp, body, err := d.send(ctx, http.MethodGet, d.entityURL(table, pk, rk), nil, nil, http.StatusOK, http.StatusNotFound)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, "", errNoEntity
	}
	return body, resp.Header.Get("ETag"), nil
}

// send sends a request (hdr and body added to the headers every request
// carries) and retries it as the SDK pipeline retries. An answer whose
// status is one of want is returned with its body read; any other is
// the *azcore.ResponseError the SDK would return (runtime.NewResponseError)
// once retries are over; a transport failure is returned as is. Every
// attempt is reported to the write call's unsureNote, if ctx carries one.
func (d *directClient) send(ctx context.Context, method, target string, hdr http.Header, body []byte, want ...int) (*http.Response, []byte, error) {
	for try := 1; ; try++ {
		resp, b, err := d.try(ctx, method, target, hdr, body, want)
		var lost error
		if resp == nil {
			lost = err // no answer; a refusal comes with its response
		}
		noteAttempt(ctx, resp, lost)
		if err == nil {
			return resp, b, nil
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		if resp != nil && !slices.Contains(d.retry.StatusCodes, resp.StatusCode) {
			return nil, nil, err
		}
		if try > int(d.retry.MaxRetries) || adapters.SingleAttempt(ctx) {
			return nil, nil, err
		}
		delay := retryAfter(resp)
		if delay <= 0 {
			delay = backoff(d.retry, try)
		} else if delay > d.retry.MaxRetryDelay {
			return nil, nil, err // the service asks for longer than the cap: the pipeline gives up too
		}
		if end, ok := deadline.Retry(ctx); ok && deadline.Extended(ctx) && time.Until(end) < delay {
			return nil, nil, err // a commit past the frontend's deadline starts no new attempt
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, nil, ctx.Err()
		}
	}
}

// try sends one attempt. On failure it returns the response (its body
// read and closed) when there was one.
func (d *directClient) try(ctx context.Context, method, target string, hdr http.Header, body []byte, want []int) (*http.Response, []byte, error) {
	if d.retry.TryTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.retry.TryTimeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, nil, err
	}
	date := time.Now().UTC().Format(http.TimeFormat)
	h := req.Header
	for k, v := range hdr {
		h[k] = v
	}
	h["X-Ms-Version"] = []string{apiVersion}
	h["Dataserviceversion"] = []string{"3.0"}
	h["Accept"] = []string{"application/json;odata=minimalmetadata"}
	h["X-Ms-Date"] = []string{date}
	if d.key != nil {
		h["Authorization"] = []string{d.authorization(date, req.URL.EscapedPath())}
	}
	resp, err := d.do(req)
	if err != nil {
		return nil, nil, err
	}
	if slices.Contains(want, resp.StatusCode) {
		b, err := readBody(resp)
		if err != nil {
			return nil, nil, err
		}
		return resp, b, nil
	}
	// NewResponseError reads the body (the service's error document) and
	// closes it.
	return resp, nil, runtime.NewResponseError(resp)
}

// tokenTransport sends each attempt of a directClient without an account
// key through an azcore pipeline whose job is the Microsoft Entra bearer
// token (the policy and scope aztables' NewServiceClient uses for Table
// storage), with retries off: the directClient retries.
func tokenTransport(cred azcore.TokenCredential, co *aztables.ClientOptions) policy.Transporter {
	pl := runtime.NewPipeline("aztable-direct", "", runtime.PipelineOptions{
		PerRetry: []policy.Policy{runtime.NewBearerTokenPolicy(cred, []string{"https://storage.azure.com/.default"}, nil)},
	}, &policy.ClientOptions{Transport: co.Transport, Retry: policy.RetryOptions{MaxRetries: -1}, Cloud: co.Cloud})
	return pipelineTransport{pl}
}

type pipelineTransport struct{ pl runtime.Pipeline }

func (p pipelineTransport) Do(req *http.Request) (*http.Response, error) {
	r, err := runtime.NewRequestFromRequest(req)
	if err != nil {
		return nil, err
	}
	return p.pl.Do(r)
}

// authorization is the SharedKeyLite header value of a request stamped
// date for path: aztables' signature, the HMAC-SHA256 of the date and
// "/account" + path.
func (d *directClient) authorization(date, path string) string {
	mac := d.macs.Get().(hash.Hash)
	mac.Reset()
	var buf [256]byte
	msg := append(buf[:0], date...)
	msg = append(msg, '\n', '/')
	msg = append(msg, d.account...)
	msg = append(msg, path...)
	mac.Write(msg)
	var sum [sha256.Size]byte
	sig := mac.Sum(sum[:0])
	d.macs.Put(mac)
	return "SharedKeyLite " + d.account + ":" + base64.StdEncoding.EncodeToString(sig)
}

// readBody reads and closes a response body.
func readBody(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	if b, ok := resp.Body.(*bodyBytes); ok && b.Len() == len(b.b) {
		return b.b, nil // read whole by h1Transport
	}
	if n := resp.ContentLength; n >= 0 && n <= 4<<20 {
		body := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, body); err != nil {
			return nil, err
		}
		return body, nil
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// backoff is the pipeline's delay before attempt try+1: (2^try - 1) ×
// RetryDelay, jittered by [0.8, 1.3), at most MaxRetryDelay.
func backoff(o policy.RetryOptions, try int) time.Duration {
	f := float64(int64(1)<<min(try, 30)-1) * float64(o.RetryDelay) * (0.8 + rand.Float64()/2)
	if f > float64(o.MaxRetryDelay) {
		return o.MaxRetryDelay
	}
	return time.Duration(f)
}

// retryAfter is the delay a throttling answer asks for (retry-after-ms,
// x-ms-retry-after-ms, or Retry-After in seconds or as an HTTP date); 0
// when it names none.
func retryAfter(resp *http.Response) time.Duration {
	if resp == nil {
		return 0
	}
	for _, h := range []string{"Retry-After-Ms", "X-Ms-Retry-After-Ms"} {
		if v := resp.Header.Get(h); v != "" {
			if ms, err := strconv.Atoi(v); err == nil && ms > 0 {
				return time.Duration(ms) * time.Millisecond
			}
		}
	}
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return time.Until(t)
	}
	return 0
}
