package batch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// ErrMalformed is wrapped by every parse error (400 InvalidInput).
var ErrMalformed = errors.New("batch: malformed $batch request")

// TooManyError reports a changeset holding more operations than allowed;
// it wraps ErrMalformed. Index is the first operation past the limit.
type TooManyError struct{ Index int }

func (e *TooManyError) Error() string {
	return fmt.Sprintf("batch: operation %d exceeds the %d-operation limit of a changeset", e.Index, e.Index)
}

// Unwrap makes errors.Is(err, ErrMalformed) hold.
func (e *TooManyError) Unwrap() error { return ErrMalformed }

// Operation is one request of the changeset.
type Operation struct {
	Method string
	// URL is the request target as written (usually absolute:
	// http://host/account/table(PartitionKey='p',RowKey='r')).
	URL    *url.URL
	Header http.Header
	Body   []byte
}

// Request is a parsed $batch body.
type Request struct {
	// Boundary and Changeset are the multipart boundaries the client
	// chose; the response reuses their suffixes, as the service does.
	// Changeset is empty for a retrieve (Retrieve).
	Boundary, Changeset string
	Ops                 []Operation
	// Retrieve is set for a batch holding one query operation (a GET)
	// outside any changeset, its only operation (Ops[0]): the service
	// answers it as the batch's only response part.
	Retrieve bool
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// multipartBoundary returns the boundary of a multipart/mixed content type.
func multipartBoundary(contentType string) (string, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return "", malformed("content type %q: %v", contentType, err)
	}
	if mt != "multipart/mixed" {
		return "", malformed("content type %q: want multipart/mixed", mt)
	}
	b := params["boundary"]
	if b == "" {
		return "", malformed("content type %q has no boundary", contentType)
	}
	return b, nil
}

// Parse reads a $batch body sent with contentType. It accepts one changeset
// of at most maxOps operations (a *TooManyError beyond), each an
// application/http part holding one request line, headers and an optional
// body of exactly Content-Length bytes; or, instead of the changeset, one
// application/http part holding a GET (a retrieve, Request.Retrieve), the
// one query operation the service takes in a batch, alone.
func Parse(contentType string, body []byte, maxOps int) (*Request, error) {
	outer, err := multipartBoundary(contentType)
	if err != nil {
		return nil, err
	}
	req := &Request{Boundary: outer}
	mr := multipart.NewReader(bytes.NewReader(body), outer)
	part, err := mr.NextRawPart()
	if err != nil {
		return nil, malformed("no changeset: %v", err)
	}
	if ct, _, _ := mime.ParseMediaType(part.Header.Get("Content-Type")); ct == "application/http" {
		return parseRetrieve(req, mr, part)
	}
	if req.Changeset, err = multipartBoundary(part.Header.Get("Content-Type")); err != nil {
		return nil, err
	}
	cs, err := io.ReadAll(part)
	if err != nil {
		return nil, malformed("changeset: %v", err)
	}
	if _, err := mr.NextRawPart(); err != io.EOF {
		return nil, malformed("a $batch holds exactly one changeset")
	}
	inner := multipart.NewReader(bytes.NewReader(cs), req.Changeset)
	for {
		p, err := inner.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, malformed("changeset part %d: %v", len(req.Ops), err)
		}
		if len(req.Ops) == maxOps {
			return nil, &TooManyError{Index: maxOps}
		}
		ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		if ct != "application/http" {
			return nil, malformed("changeset part %d has content type %q, want application/http", len(req.Ops), ct)
		}
		raw, err := io.ReadAll(p)
		if err != nil {
			return nil, malformed("changeset part %d: %v", len(req.Ops), err)
		}
		op, err := parseOperation(raw)
		if err != nil {
			return nil, malformed("operation %d: %v", len(req.Ops), err)
		}
		req.Ops = append(req.Ops, op)
	}
	if len(req.Ops) == 0 {
		return nil, malformed("the changeset is empty")
	}
	return req, nil
}

// parseRetrieve reads a batch whose first part, part, is a request of its
// own rather than a changeset: a GET, and the batch's only part.
func parseRetrieve(req *Request, mr *multipart.Reader, part *multipart.Part) (*Request, error) {
	raw, err := io.ReadAll(part)
	if err != nil {
		return nil, malformed("query operation: %v", err)
	}
	op, err := parseOperation(raw)
	if err != nil {
		return nil, malformed("query operation: %v", err)
	}
	if op.Method != http.MethodGet {
		return nil, malformed("%s outside a changeset: only a query operation (GET) may be", op.Method)
	}
	if _, err := mr.NextRawPart(); err != io.EOF {
		return nil, malformed("a query operation must be alone in its batch")
	}
	req.Ops, req.Retrieve = []Operation{op}, true
	return req, nil
}

// parseOperation reads one application/http part. With Content-Length
// the body is exactly that many bytes (the Go SDK); without it the body is
// the rest of the part, blank lines around it dropped (the JavaScript SDK
// sends no Content-Length and an extra blank line before the body).
func parseOperation(raw []byte) (Operation, error) {
	br := bufio.NewReader(bytes.NewReader(raw))
	r, err := http.ReadRequest(br)
	if err != nil {
		return Operation{}, err
	}
	var body []byte
	if r.Header.Get("Content-Length") != "" {
		body, err = io.ReadAll(r.Body)
	} else {
		body, err = io.ReadAll(br)
		body = bytes.TrimSpace(body)
	}
	if err != nil {
		return Operation{}, err
	}
	return Operation{Method: r.Method, URL: r.URL, Header: r.Header, Body: body}, nil
}

// Result is the outcome of one operation, or of the failed one.
type Result struct {
	Status int
	Header http.Header
	Body   []byte
}

// Boundaries returns the response boundaries for req: the client's with
// "batch"/"changeset" turned into "batchresponse"/"changesetresponse".
func (req *Request) Boundaries() (batch, changeset string) {
	resp := func(b, prefix string) string {
		if rest, ok := strings.CutPrefix(b, prefix+"_"); ok {
			return prefix + "response_" + rest
		}
		return prefix + "response_" + b
	}
	return resp(req.Boundary, "batch"), resp(req.Changeset, "changeset")
}

// AppendResponse appends the multipart body of a $batch response holding
// results (every operation's on success, the failed one's alone on
// failure) to dst. Headers are written in sorted order.
func AppendResponse(dst []byte, batch, changeset string, results []Result) []byte {
	b := bytes.NewBuffer(dst)
	fmt.Fprintf(b, "--%s\r\nContent-Type: multipart/mixed; boundary=%s\r\n\r\n", batch, changeset)
	for _, r := range results {
		appendPart(b, changeset, r)
	}
	fmt.Fprintf(b, "--%s--\r\n--%s--\r\n", changeset, batch)
	return b.Bytes()
}

// AppendRetrieveResponse appends the multipart body of the response to a
// retrieve (Request.Retrieve) to dst: r as the batch's only part.
func AppendRetrieveResponse(dst []byte, batch string, r Result) []byte {
	b := bytes.NewBuffer(dst)
	appendPart(b, batch, r)
	fmt.Fprintf(b, "--%s--\r\n", batch)
	return b.Bytes()
}

// appendPart writes r as an application/http part after the boundary,
// its headers in sorted order.
func appendPart(b *bytes.Buffer, boundary string, r Result) {
	fmt.Fprintf(b, "--%s\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n", boundary)
	fmt.Fprintf(b, "HTTP/1.1 %s %s\r\n", strconv.Itoa(r.Status), http.StatusText(r.Status))
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range r.Header[k] {
			fmt.Fprintf(b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	b.Write(r.Body)
	b.WriteString("\r\n")
}

// ContentType is the Content-Type of a response with outer boundary batch.
func ContentType(batch string) string { return "multipart/mixed; boundary=" + batch }
