package aztable

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"testing"

	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/txn"
)

var fuzzMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, "MERGE", http.MethodPatch, http.MethodDelete, http.MethodHead, http.MethodOptions}

// FuzzRequest sends arbitrary requests (method, path, query, headers and
// body) to the Azure frontend over the embedded store, with anonymous
// requests allowed so that the fuzzer reaches past authentication, into
// a table "fzt" holding a few entities. No request may crash nemo or get a
// 5xx (the store never fails here: every fault is the request's) but 501
// for settings nemo does not keep, and
// every 4xx must carry the service's JSON error document with its code
// in x-ms-error-code too. At the end the buffer must still agree with
// the store (the harness checks it at cleanup).
func FuzzRequest(f *testing.F) {
	seeds := []struct {
		method      byte
		path, query string
		headers     string
		body        string
	}{
		{0, "/devstoreaccount1/fzt(PartitionKey='p',RowKey='1')", "", "Accept: application/json;odata=nometadata", ""},
		{0, "/devstoreaccount1/fzt()", "$filter=PartitionKey%20eq%20'p'%20and%20n%20gt%201&$top=2&$select=n", "Accept: application/json", ""},
		{0, "/devstoreaccount1/fzt()", "NextPartitionKey=cA%3D%3D&NextRowKey=Mg%3D%3D", "", ""},
		{1, "/devstoreaccount1/fzt", "", "Content-Type: application/json\nPrefer: return-no-content", `{"PartitionKey":"p","RowKey":"9","n":9}`},
		{2, "/devstoreaccount1/fzt(PartitionKey='p',RowKey='2')", "", "Content-Type: application/json\nIf-Match: *", `{"n@odata.type":"Edm.Int64","n":"5"}`},
		{3, "/devstoreaccount1/fzt(PartitionKey='p',RowKey='3')", "", "Content-Type: application/json\nIf-Match: W/\"datetime'2024-01-01T00%3A00%3A00.0000000Z'\"", `{"x":1.5}`},
		{5, "/devstoreaccount1/fzt(PartitionKey='p',RowKey='1')", "", "If-Match: *", ""},
		{1, "/devstoreaccount1/Tables", "", "Content-Type: application/json", `{"TableName":"fzt2"}`},
		{0, "/devstoreaccount1/Tables", "$filter=TableName%20ge%20'f'", "", ""},
		{5, "/devstoreaccount1/Tables('fzt2')", "", "", ""},
		{0, "/devstoreaccount1/fzt", "comp=acl", "", ""},
		{1, "/devstoreaccount1/$batch", "", "Content-Type: multipart/mixed; boundary=batch_1", "--batch_1\r\nContent-Type: multipart/mixed; boundary=changeset_1\r\n\r\n--changeset_1\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nPOST http://x/devstoreaccount1/fzt HTTP/1.1\r\nContent-Type: application/json\r\n\r\n{\"PartitionKey\":\"p\",\"RowKey\":\"b1\"}\r\n--changeset_1--\r\n--batch_1--\r\n"},
		{0, "/devstoreaccount1/", "restype=service&comp=properties", "", ""},
		{7, "/devstoreaccount1/fzt", "", "Origin: http://app.example\nAccess-Control-Request-Method: GET", ""},
		{0, "/", "0", "", ""},
		{0, "/otheraccount/Tables", "", "", ""},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.query, s.headers, []byte(s.body))
	}
	st, err := embedded.Open(f.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = st.Close() })
	n := startNemoFront(f, st, cache.Options{}, txn.Options{}, Options{Key: aztest.Key, AllowAnonymous: true, MaxRequestBytes: 64 << 10})
	svc := service(f, n.URL, aztest.Key)
	ctx := context.Background()
	if _, err := svc.CreateTable(ctx, "fzt", nil); err != nil {
		f.Fatal(err)
	}
	tc := svc.NewClient("fzt")
	for _, e := range []string{`{"PartitionKey":"p","RowKey":"1","n":1}`, `{"PartitionKey":"p","RowKey":"2","n":2,"s":"two"}`, `{"PartitionKey":"q","RowKey":"1"}`} {
		if _, err := tc.AddEntity(ctx, []byte(e), nil); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, method byte, path, query, headers string, body []byte) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n\x00") {
			return // not a request line any client can send
		}
		req := httptest.NewRequest(fuzzMethods[int(method)%len(fuzzMethods)], "/", bytes.NewReader(body))
		req.URL.Path, req.URL.RawPath, req.URL.RawQuery = path, "", query
		req.RequestURI = path
		if query != "" {
			req.RequestURI += "?" + query
		}
		hr := textproto.NewReader(bufio.NewReader(strings.NewReader(headers + "\r\n\r\n")))
		if h, err := hr.ReadMIMEHeader(); err == nil {
			for k, vs := range h {
				req.Header[k] = vs
			}
		}
		req.Header.Del("Authorization") // anonymous: a signature could only fail
		rec := httptest.NewRecorder()
		n.Handler.ServeHTTP(rec, req)
		code, got := rec.Code, rec.Body.Bytes()
		// 501: a Set of table ACLs or service settings nemo does not keep.
		if code >= 500 && (code != http.StatusNotImplemented || rec.Header().Get("x-ms-error-code") != "NotImplemented") {
			t.Fatalf("%s %s?%s: %d %s", req.Method, path, query, code, got)
		}
		if code < 400 || req.Method == http.MethodHead {
			return
		}
		var doc struct {
			Err struct {
				Code string `json:"code"`
			} `json:"odata.error"`
		}
		var err error
		if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/xml") {
			// A client that asked for a format other than JSON gets the
			// service's XML error document (AtomFormatNotSupported).
			var x struct {
				Code string `xml:"code"`
			}
			err = xml.Unmarshal(got, &x)
			doc.Err.Code = x.Code
		} else {
			err = json.Unmarshal(got, &doc)
		}
		if err != nil || doc.Err.Code == "" {
			t.Fatalf("%s %s?%s: %d with no error document: %q", req.Method, path, query, code, got)
		}
		if h := rec.Header().Get("x-ms-error-code"); h != doc.Err.Code {
			t.Fatalf("%s %s?%s: x-ms-error-code %q, body code %q", req.Method, path, query, h, doc.Err.Code)
		}
	})
}
