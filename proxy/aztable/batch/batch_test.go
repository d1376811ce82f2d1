package batch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// contentTypeOf recovers the Content-Type header of a captured body from
// its first boundary line.
func contentTypeOf(body []byte) string {
	line, _, _ := bytes.Cut(body, []byte("\r\n"))
	return "multipart/mixed; boundary=" + strings.TrimPrefix(string(line), "--")
}

func reference(t testing.TB, name string) []byte {
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseReference(t *testing.T) {
	body := reference(t, "batch-060-request.bin")
	req, err := Parse(contentTypeOf(body), body, 100)
	if err != nil {
		t.Fatal(err)
	}
	if req.Boundary != "batch_92c3a101-1484-48a6-6d4f-eff00b4004fc" || req.Changeset != "changeset_91cda50f-2667-4b52-6efd-fdc4dd37fd69" {
		t.Fatalf("boundaries %q %q", req.Boundary, req.Changeset)
	}
	var got []string
	for _, op := range req.Ops {
		got = append(got, op.Method+" "+op.URL.EscapedPath()+" "+op.Header.Get("If-Match")+" "+string(op.Body))
	}
	want := []string{
		`POST /devstoreaccount1/probe98986  {"PartitionKey":"batch","RowKey":"a1","V":1}`,
		`POST /devstoreaccount1/probe98986  {"Big":"1099511627776","Big@odata.type":"Edm.Int64","PartitionKey":"batch","RowKey":"a2"}`,
		`PATCH /devstoreaccount1/probe98986(PartitionKey='batch',RowKey='m1')  {"PartitionKey":"batch","RowKey":"m1","V":3}`,
		`PUT /devstoreaccount1/probe98986(PartitionKey='batch',RowKey='r1')  {"PartitionKey":"batch","RowKey":"r1","V":4}`,
		`PATCH /devstoreaccount1/probe98986(PartitionKey='batch',RowKey='upd') W/"datetime'2026-12-02T08%3A09%3A46.5013247Z'" {"PartitionKey":"batch","RowKey":"upd","V":5}`,
		`DELETE /devstoreaccount1/probe98986(PartitionKey='batch',RowKey='del') * `,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("operations:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if req.Ops[0].Header.Get("Prefer") != "return-no-content" {
		t.Fatalf("Prefer header lost: %v", req.Ops[0].Header)
	}
	// The JavaScript SDK's spelling: lower-case part headers, no
	// Content-Length, a blank line before each body.
	js := reference(t, "js-request.bin")
	req, err = Parse(contentTypeOf(js), js, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Ops) != 2 || string(req.Ops[0].Body) != `{"PartitionKey":"tx","RowKey":"a","v":1}` || req.Ops[1].Method != "PUT" || string(req.Ops[1].Body) != `{"PartitionKey":"tx","RowKey":"b","v":2}` {
		t.Fatalf("JS batch: %+v", req.Ops)
	}
	for _, name := range []string{"batch-061-request.bin", "batch-063-request.bin", "batch-064-request.bin"} {
		body := reference(t, name)
		if _, err := Parse(contentTypeOf(body), body, 100); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// readResponse parses a response body the way the aztables SDK does.
func readResponse(t *testing.T, body []byte, batch string) []*http.Response {
	t.Helper()
	mr := multipart.NewReader(bytes.NewReader(body), batch)
	outer, err := mr.NextPart()
	if err != nil {
		t.Fatal(err)
	}
	inner, _ := io.ReadAll(outer)
	line, _, _ := bytes.Cut(inner, []byte("\r\n"))
	ir := multipart.NewReader(bytes.NewReader(inner), strings.TrimPrefix(string(line), "--"))
	var out []*http.Response
	for {
		p, err := ir.NextPart()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(p)
		r, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
		if err != nil {
			t.Fatalf("%v in %q", err, raw)
		}
		out = append(out, r)
	}
}

func TestResponseShape(t *testing.T) {
	req := &Request{Boundary: "batch_X", Changeset: "changeset_Y"}
	b, cs := req.Boundaries()
	if b != "batchresponse_X" || cs != "changesetresponse_Y" {
		t.Fatalf("boundaries %q %q", b, cs)
	}
	ok := AppendResponse(nil, b, cs, []Result{
		{Status: 204, Header: http.Header{"Etag": {`W/"datetime'1'"`}, "Dataserviceversion": {"3.0;"}}},
		{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"PartitionKey":"p"}`)},
	})
	rs := readResponse(t, ok, b)
	if len(rs) != 2 || rs[0].StatusCode != 204 || rs[0].Header.Get("ETag") != `W/"datetime'1'"` || rs[1].StatusCode != 201 {
		t.Fatalf("responses %v", rs)
	}
	if body, _ := io.ReadAll(rs[1].Body); string(body) != `{"PartitionKey":"p"}` {
		t.Fatalf("body %q", body)
	}
	// The failure shape of batch-061-response.bin, byte for byte.
	ref := reference(t, "batch-061-response.bin")
	errBody := `{"odata.error":{"code":"EntityAlreadyExists","message":{"lang":"en-US","value":"1:The specified entity already exists.\nRequestId:caf9c0d7-b1e6-4ae8-aef6-86a3f3ec30f4\nTime:2026-12-02T08:09:46.535Z"}}}`
	got := AppendResponse(nil, "batchresponse_434d7c85-758e-4a41-5587-104e5359a764", "changesetresponse_bf608a18-0345-41b4-59cd-b86e60a34184", []Result{{
		Status: 409,
		Header: http.Header{"Content-ID": {"2"}, "DataServiceVersion": {"3.0;"}, "Content-Type": {"application/json;odata=minimalmetadata;charset=utf-8"}},
		Body:   []byte(errBody),
	}})
	if norm(got) != norm(ref) {
		t.Fatalf("failure response differs from the service's:\n%s\nwant\n%s", got, ref)
	}
}

// norm sorts the header lines of each part so header order does not matter.
func norm(b []byte) string {
	lines := strings.Split(string(b), "\r\n")
	var out, run []string
	for _, l := range lines {
		if strings.Contains(l, ": ") && !strings.HasPrefix(l, "{") {
			run = append(run, l)
			continue
		}
		sort.Strings(run)
		out = append(out, run...)
		run = nil
		out = append(out, l)
	}
	return strings.Join(append(out, run...), "\r\n")
}

func TestParseErrors(t *testing.T) {
	good := reference(t, "batch-063-request.bin")
	ct := contentTypeOf(good)
	for _, tc := range []struct {
		name string
		ct   string
		body string
	}{
		{"not multipart", "application/json", string(good)},
		{"no boundary", "multipart/mixed", string(good)},
		{"wrong boundary", "multipart/mixed; boundary=nope", string(good)},
		{"empty", ct, ""},
		{"truncated", ct, string(good[:len(good)/2])},
		{"changeset not multipart", ct, strings.Replace(string(good), "Content-Type: multipart/mixed; boundary=changeset", "Content-Type: text/plain; boundary=changeset", 1)},
		{"part not http", ct, strings.Replace(string(good), "Content-Type: application/http", "Content-Type: text/plain", 1)},
		{"bad request line", ct, strings.Replace(string(good), "PATCH http", "PATCH", 1)},
		{"body shorter than Content-Length", ct, strings.Replace(string(good), "Content-Length: 45", "Content-Length: 4500", 1)},
		{"empty changeset", ct, "--" + strings.TrimPrefix(ct, "multipart/mixed; boundary=") + "\r\nContent-Type: multipart/mixed; boundary=cs\r\n\r\n--cs--\r\n--" + strings.TrimPrefix(ct, "multipart/mixed; boundary=") + "--\r\n"},
	} {
		if _, err := Parse(tc.ct, []byte(tc.body), 100); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", tc.name, err)
		}
	}
	six := reference(t, "batch-060-request.bin")
	_, err := Parse(contentTypeOf(six), six, 5)
	var tm *TooManyError
	if !errors.As(err, &tm) || tm.Index != 5 || !errors.Is(err, ErrMalformed) {
		t.Fatalf("six operations with a limit of five: %v", err)
	}
}

// encode writes req back as a $batch body (what a client sends).
func encode(req *Request) []byte {
	var b bytes.Buffer
	parts := req.Changeset
	if req.Retrieve {
		parts = req.Boundary
	} else {
		fmt.Fprintf(&b, "--%s\r\nContent-Type: multipart/mixed; boundary=%s\r\n\r\n", req.Boundary, req.Changeset)
	}
	for _, op := range req.Ops {
		fmt.Fprintf(&b, "--%s\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n", parts)
		fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", op.Method, op.URL.String())
		keys := make([]string, 0, len(op.Header))
		for k := range op.Header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == "Content-Length" {
				continue
			}
			for _, v := range op.Header[k] {
				fmt.Fprintf(&b, "%s: %s\r\n", k, v)
			}
		}
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(op.Body))
		b.Write(op.Body)
		b.WriteString("\r\n")
	}
	if req.Retrieve {
		fmt.Fprintf(&b, "--%s--\r\n", req.Boundary)
		return b.Bytes()
	}
	fmt.Fprintf(&b, "--%s--\r\n\r\n--%s--\r\n", req.Changeset, req.Boundary)
	return b.Bytes()
}

// FuzzParse: Parse never panics, respects the operation limit, and what it
// accepts survives an encode/parse round trip unchanged.
func FuzzParse(f *testing.F) {
	for _, n := range []string{"batch-060-request.bin", "batch-061-request.bin", "batch-063-request.bin", "batch-064-request.bin", "js-request.bin"} {
		b := reference(f, n)
		f.Add(contentTypeOf(b), b)
	}
	f.Add("multipart/mixed; boundary=batch_r", []byte(retrieveBody))
	f.Fuzz(func(t *testing.T, ct string, body []byte) {
		req, err := Parse(ct, body, 8)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if len(req.Ops) == 0 || len(req.Ops) > 8 {
			t.Fatalf("%d operations accepted", len(req.Ops))
		}
		for _, op := range req.Ops {
			if strings.ContainsAny(op.Method, " \r\n") || strings.ContainsAny(op.URL.String(), " \r\n") {
				return // not re-encodable as a request line; nothing to compare
			}
			for k, vs := range op.Header {
				for _, v := range vs {
					if strings.ContainsAny(k+v, "\r\n") || strings.TrimSpace(v) != v {
						return
					}
				}
			}
			if bytes.Contains(op.Body, []byte("--"+req.Changeset)) || bytes.Contains(op.Body, []byte("--"+req.Boundary)) {
				return
			}
		}
		again, err := Parse("multipart/mixed; boundary="+req.Boundary, encode(req), 8)
		if err != nil {
			t.Fatalf("re-encoded batch does not parse: %v", err)
		}
		if len(again.Ops) != len(req.Ops) || again.Retrieve != req.Retrieve {
			t.Fatalf("%d operations became %d", len(req.Ops), len(again.Ops))
		}
		for i := range req.Ops {
			a, b := req.Ops[i], again.Ops[i]
			if a.Method != b.Method || a.URL.String() != b.URL.String() || !bytes.Equal(a.Body, b.Body) {
				t.Fatalf("operation %d changed: %s %s %q -> %s %s %q", i, a.Method, a.URL, a.Body, b.Method, b.URL, b.Body)
			}
		}
	})
}

// retrieveBody is a batch holding one query operation outside any
// changeset (what the service takes as a retrieve).
const retrieveBody = "--batch_r\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n" +
	"GET http://127.0.0.1:10002/devstoreaccount1/t1(PartitionKey='p',RowKey='r')?$select=A HTTP/1.1\r\nAccept: application/json;odata=nometadata\r\nContent-ID: 4\r\n\r\n\r\n--batch_r--\r\n"

// TestParseRetrieve: a batch whose only part is a GET outside a changeset
// is a retrieve; a write outside a changeset, or a retrieve beside other
// parts, is malformed. Its response is the batch's only part.
func TestParseRetrieve(t *testing.T) {
	req, err := Parse("multipart/mixed; boundary=batch_r", []byte(retrieveBody), 100)
	if err != nil {
		t.Fatal(err)
	}
	if !req.Retrieve || len(req.Ops) != 1 || req.Ops[0].Method != "GET" || req.Ops[0].URL.Query().Get("$select") != "A" ||
		req.Ops[0].Header.Get("Content-ID") != "4" || req.Changeset != "" {
		t.Fatalf("retrieve: %+v", req)
	}
	for name, body := range map[string]string{
		"write outside a changeset": strings.Replace(retrieveBody, "GET ", "DELETE ", 1),
		"retrieve beside a part":    strings.Replace(retrieveBody, "--batch_r--", "--batch_r\r\nContent-Type: application/http\r\n\r\nGET http://h/a/t() HTTP/1.1\r\n\r\n\r\n--batch_r--", 1),
	} {
		if _, err := Parse("multipart/mixed; boundary=batch_r", []byte(body), 100); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	b, _ := req.Boundaries()
	resp := AppendRetrieveResponse(nil, b, Result{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"A":1}`)})
	mr := multipart.NewReader(bytes.NewReader(resp), "batchresponse_r")
	p, err := mr.NextRawPart()
	if err != nil || p.Header.Get("Content-Type") != "application/http" {
		t.Fatalf("response part: %v %v", err, p)
	}
	r, err := http.ReadResponse(bufio.NewReader(p), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r.Body)
	if r.StatusCode != 200 || strings.TrimSpace(string(got)) != `{"A":1}` {
		t.Fatalf("response: %d %q", r.StatusCode, got)
	}
	if _, err := mr.NextRawPart(); err != io.EOF {
		t.Fatalf("more than one response part: %v", err)
	}
}
