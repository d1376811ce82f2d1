package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// The service's messages for the errors the contract injects (as nemo's
// own Azure frontend words them).
const (
	msgBusy     = "The server is currently unable to receive requests. Please retry your request."
	msgTimedOut = "The operation could not be completed within the permitted time."
)

// startToken is the continuation token of an empty first page: the
// contract's own, taken off the next request (which then starts the query
// again), since an empty page needs a token and the backend has none for
// "the start".
const startToken = "nemo-contract-start"

// The continuation parameters (query string) and headers (answer).
const (
	paramNextPK    = "NextPartitionKey"
	paramNextRK    = "NextRowKey"
	paramNextTable = "NextTableName"
	headerNextPK   = "x-ms-continuation-NextPartitionKey"
	headerNextRK   = "x-ms-continuation-NextRowKey"
	headerNextTab  = "x-ms-continuation-NextTableName"
	maxPageSize    = 1000
)

// Transport returns an azcore transport that sends requests through next
// (nil: a plain net/http client) under the contract (see the package
// documentation). Pass it as the aztables client's ClientOptions.Transport
// (adapters/aztable Options.Transport): it sits below the retry policy,
// which then meets every injected error.
func (c *Contract) Transport(next policy.Transporter) policy.Transporter {
	if next == nil {
		next = &http.Client{Transport: http.DefaultTransport}
	}
	return &azTransport{c: c, next: next}
}

type azTransport struct {
	c    *Contract
	next policy.Transporter
}

// queryKind says what a request lists: entities, tables, or nothing (a
// point read, a write).
type queryKind uint8

const (
	notQuery queryKind = iota
	entityQuery
	tableQuery
)

func kindOf(req *http.Request) queryKind {
	if req.Method != http.MethodGet {
		return notQuery
	}
	seg := req.URL.Path[strings.LastIndexByte(req.URL.Path, '/')+1:]
	switch {
	case seg == "Tables" || seg == "Tables()":
		return tableQuery
	case strings.HasSuffix(seg, "()"):
		return entityQuery
	}
	return notQuery
}

// Do implements policy.Transporter.
func (t *azTransport) Do(req *http.Request) (*http.Response, error) {
	write := req.Method != http.MethodGet && req.Method != http.MethodHead
	f, safe := t.c.decide(write)
	if f == failBefore {
		t.c.failed.Add(1)
		if safe {
			return azError(req, http.StatusServiceUnavailable, "ServerBusy", msgBusy, t.c.calls.Load()), nil
		}
		if write {
			t.c.ambiguous.Add(1)
		}
		return azError(req, http.StatusInternalServerError, "OperationTimedOut", msgTimedOut, t.c.calls.Load()), nil
	}
	kind := kindOf(req)
	if kind != notQuery {
		q := req.URL.Query()
		top := maxPageSize
		if n, err := strconv.Atoi(q.Get("$top")); err == nil && n > 0 && n < top {
			top = n
		}
		asked := req
		empty := false
		if f == pass {
			if newTop, e, ok := t.c.pageCut(top); ok {
				t.c.cut.Add(1)
				if empty = e; !empty {
					q.Set("$top", strconv.Itoa(newTop))
				}
			}
		}
		if q.Get(paramNextPK) == startToken || q.Get(paramNextTable) == startToken {
			q.Del(paramNextPK)
			q.Del(paramNextRK)
			q.Del(paramNextTable)
		}
		req = req.Clone(req.Context())
		req.URL.RawQuery = q.Encode()
		if empty {
			return t.emptyPage(req, asked, kind)
		}
	}
	resp, err := t.next.Do(req)
	if err != nil || f != loseAfter {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	t.c.lost.Add(1)
	if write {
		t.c.ambiguous.Add(1)
	}
	return azError(req, http.StatusInternalServerError, "OperationTimedOut", msgTimedOut, t.c.calls.Load()), nil
}

// emptyPage sends req, the query as the backend takes it, and, when the
// backend answers it (200), answers asked, the query as the client sent
// it, with emptyPageFor instead: the service leaves a page empty, but
// only when it is reached at all. A backend that cannot be reached, or
// refuses the query, answers itself.
func (t *azTransport) emptyPage(req, asked *http.Request, kind queryKind) (*http.Response, error) {
	resp, err := t.next.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	t.c.empty.Add(1)
	return emptyPageFor(asked, kind, asked.URL.Query()), nil
}

// emptyPageFor answers a query with no entities (or tables) and
// continuation headers: the request's own tokens, which ask for the same
// page again, or at the start of the query the contract's start token.
func emptyPageFor(req *http.Request, kind queryKind, q url.Values) *http.Response {
	h := serviceHeaders(req)
	h.Set("Content-Type", "application/json;odata=minimalmetadata;streaming=true;charset=utf-8")
	base := req.URL.Path[:strings.LastIndexByte(req.URL.Path, '/')]
	meta := "Tables"
	if kind == tableQuery {
		if tok := q.Get(paramNextTable); tok != "" {
			h.Set(headerNextTab, tok)
		} else {
			h.Set(headerNextTab, startToken)
		}
	} else {
		meta = strings.TrimSuffix(req.URL.Path[len(base)+1:], "()")
		pk, rk := q.Get(paramNextPK), q.Get(paramNextRK)
		if pk == "" && rk == "" {
			pk, rk = startToken, startToken
		}
		h.Set(headerNextPK, pk)
		if rk != "" {
			h.Set(headerNextRK, rk)
		}
	}
	md := (&url.URL{Scheme: req.URL.Scheme, Host: req.URL.Host, Path: base + "/$metadata"}).String() + "#" + meta
	body, _ := json.Marshal(map[string]any{"odata.metadata": md, "value": []any{}})
	return response(req, http.StatusOK, h, body)
}

// azError is the service's answer for an error: its status, error code
// header and JSON error body.
func azError(req *http.Request, status int, code, msg string, n uint64) *http.Response {
	h := serviceHeaders(req)
	h.Set("Content-Type", "application/json;odata=minimalmetadata;streaming=true;charset=utf-8")
	h.Set("x-ms-error-code", code)
	id := fmt.Sprintf("00000000-0000-0000-0000-%012d", n)
	h.Set("x-ms-request-id", id)
	body, _ := json.Marshal(map[string]any{"odata.error": map[string]any{"code": code, "message": map[string]string{
		"lang": "en-US", "value": msg + "\nRequestId:" + id + "\nTime:" + time.Now().UTC().Format("2006-01-02T15:04:05.0000000Z")}}})
	return response(req, status, h, body)
}

func serviceHeaders(req *http.Request) http.Header {
	h := http.Header{}
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	if v := req.Header.Get("x-ms-version"); v != "" {
		h.Set("x-ms-version", v)
	}
	if v := req.Header.Get("x-ms-client-request-id"); v != "" {
		h.Set("x-ms-client-request-id", v)
	}
	return h
}

func response(req *http.Request, status int, h http.Header, body []byte) *http.Response {
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return &http.Response{
		Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: req,
	}
}
