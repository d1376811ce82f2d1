package aztable

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// Shared access signatures. A connection string may hold a signature
// instead of an account key ("TableEndpoint=...;SharedAccessSignature=
// sv=...&sig=..."). Such a request carries no Authorization header: the
// signature's query parameters, appended to its URL, authenticate it. The
// SDK's requests get them from the service URL, as aztables puts them
// there (sasServiceClient); the directClient's from its transport
// (sasTransport), so the partition "" is read and written with a SAS too.
// A transaction's operations carry the signature in their URLs too, as
// the SDK's do (its operations' URLs are built from the service URL,
// signature included), besides the $batch request's own: Azurite checks
// only the latter, and a service that checks each operation finds it.

// sasServiceClient is the SDK's client of a connection string holding a
// shared access signature: the endpoint parseConnectionString derives
// followed by "/?" and the signature, the service URL aztables builds
// itself. (aztables v1.4.1 addresses such a string at
// https://<AccountName>.table.core.windows.net whatever its TableEndpoint,
// DefaultEndpointsProtocol or EndpointSuffix say, so neither at Azurite
// nor in a sovereign cloud, and refuses one without AccountName, the form
// the Azure portal hands out.)
func sasServiceClient(cs connString, co *aztables.ClientOptions) (*aztables.ServiceClient, error) {
	return aztables.NewServiceClientWithNoCredential(strings.TrimSuffix(cs.endpoint, "/")+"/?"+cs.sas, co)
}

// errBadSAS: a connection string's signature is not a valid URL query.
var errBadSAS = errors.New("aztable: the connection string's SharedAccessSignature is not a valid URL query (a control character, space or '#', or a broken percent-escape)")

// checkSAS refuses a signature that is not a valid URL query, naming no
// part of it: the SDK would fail every request in its own URL parse with
// an error naming the signature (before redactSig sees it), drop a pair
// with a broken escape that the direct requests send, or take what
// follows a '#' for a fragment, which it does not send.
func checkSAS(sas string) error {
	if strings.ContainsFunc(sas, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '#' }) {
		return errBadSAS
	}
	if _, err := url.ParseQuery(sas); err != nil {
		return errBadSAS
	}
	return nil
}

// sasTransport authenticates requests with a shared access signature: it
// sends each request on through next with the signature's query
// parameters after those the URL already has, exactly as the connection
// string wrote them (already percent-encoded: sig is not encoded again).
type sasTransport struct {
	sas  string // the signature's query, without a leading '?'
	next policy.Transporter
}

// Do sends a copy of req whose URL carries the signature; req is not
// changed. A transport failure (*url.Error) names req's URL, without the
// signature.
func (t sasTransport) Do(req *http.Request) (*http.Response, error) {
	u := *req.URL
	u.RawQuery = withQuery(u.RawQuery, t.sas)
	r := req.WithContext(req.Context()) // a shallow copy
	r.URL = &u
	resp, err := t.next.Do(r)
	if ue, ok := err.(*url.Error); ok {
		err = &url.Error{Op: ue.Op, URL: req.URL.String(), Err: ue.Err}
	}
	return resp, err
}

// withQuery is the raw query q followed by the raw query more.
func withQuery(q, more string) string {
	switch {
	case q == "":
		return more
	case more == "":
		return q
	}
	return q + "&" + more
}

// redactSig is the SDK's transport for a Store opened with a shared access
// signature, whose requests carry it in their URLs: a transport failure
// (*url.Error, which names the URL) names it with the signature's sig
// replaced by REDACTED, so that no log line or answer carries the
// credential. Refusals need nothing: azcore's ResponseError names the
// request without its query.
type redactSig struct{ next policy.Transporter }

func (t redactSig) Do(req *http.Request) (*http.Response, error) {
	resp, err := t.next.Do(req)
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = redactedURL(ue.URL)
	}
	return resp, err
}

// redactedURL is the URL u with the value of its sig query parameter
// (any case) replaced by REDACTED; u itself if it has none (or does not
// parse). The raw query is read pair by pair, not through url.Values,
// whose parser drops a pair that is not valid percent-encoding.
func redactedURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(a URL that does not parse)"
	}
	pairs := strings.Split(p.RawQuery, "&")
	redacted := false
	for i, kv := range pairs {
		k, _, _ := strings.Cut(kv, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		if strings.EqualFold(name, "sig") {
			pairs[i], redacted = k+"=REDACTED", true
		}
	}
	if !redacted {
		return u
	}
	p.RawQuery = strings.Join(pairs, "&")
	return p.String()
}
