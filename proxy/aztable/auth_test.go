package aztable

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nemocache/nemo/internal/aztest"
)

// signed builds a request signed by hand. scheme is SharedKey or
// SharedKeyLite; fullPath selects the canonicalized resource spelling with
// the account segment repeated (what the SDKs send to path-style URLs).
func signed(t *testing.T, method, rawURL, body, scheme string, fullPath bool, date time.Time) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-ms-date", date.UTC().Format(http.TimeFormat))
	req.Header.Set("x-ms-version", "2019-02-02")
	req.Header.Set("Accept", "application/json;odata=nometadata")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	path := req.URL.EscapedPath()
	if !fullPath {
		path = strings.TrimPrefix(path, "/"+aztest.Account)
	}
	res := "/" + aztest.Account + path
	if c := req.URL.Query().Get("comp"); c != "" {
		res += "?comp=" + c
	}
	var sts string
	if scheme == "SharedKey" {
		sts = method + "\n\n" + req.Header.Get("Content-Type") + "\n" + req.Header.Get("x-ms-date") + "\n" + res
	} else {
		sts = req.Header.Get("x-ms-date") + "\n" + res
	}
	key, _ := base64.StdEncoding.DecodeString(aztest.Key)
	h := hmac.New(sha256.New, key)
	h.Write([]byte(sts))
	req.Header.Set("Authorization", scheme+" "+aztest.Account+":"+base64.StdEncoding.EncodeToString(h.Sum(nil)))
	return req
}

func do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := rawClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestSharedKeySchemes(t *testing.T) {
	n := overEmbedded(t)
	now := time.Now()
	for _, tc := range []struct {
		name     string
		scheme   string
		fullPath bool
		date     time.Time
		want     int
	}{
		{"SharedKey full path", "SharedKey", true, now, 201},
		{"SharedKey account-relative path", "SharedKey", false, now, 201},
		{"SharedKeyLite full path", "SharedKeyLite", true, now, 201},
		{"SharedKeyLite account-relative path", "SharedKeyLite", false, now, 201},
		{"date too old", "SharedKeyLite", true, now.Add(-20 * time.Minute), 403},
		{"date in the future", "SharedKey", true, now.Add(20 * time.Minute), 403},
		{"unknown scheme", "Bearer", true, now, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := aztest.TableName("auth")
			req := signed(t, "POST", n.URL+"/Tables", `{"TableName":"`+name+`"}`, tc.scheme, tc.fullPath, tc.date)
			resp, body := do(t, req)
			if resp.StatusCode != tc.want {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if tc.want == 403 && (resp.Header.Get("x-ms-error-code") != "AuthenticationFailed" || !strings.Contains(body, `"code":"AuthenticationFailed"`)) {
				t.Fatalf("403 without the Azure error: %v %s", resp.Header, body)
			}
			if tc.want == 201 && body != `{"TableName":"`+name+`"}` {
				t.Fatalf("nometadata create table body %s", body)
			}
		})
	}
	// A signature over a different resource (comp is part of it) fails.
	req := signed(t, "GET", n.URL+"/Tables", "", "SharedKey", true, now)
	req.URL.RawQuery = "comp=acl"
	if resp, _ := do(t, req); resp.StatusCode != 403 {
		t.Fatalf("signature replayed on another resource: %d", resp.StatusCode)
	}
	// No Authorization header at all.
	req, _ = http.NewRequest("GET", n.URL+"/Tables", nil)
	if resp, _ := do(t, req); resp.StatusCode != 403 {
		t.Fatalf("anonymous request: %d", resp.StatusCode)
	}
}

func TestAnonymousAndErrors(t *testing.T) {
	n := overEmbedded(t)
	n.Front.opts.AllowAnonymous = true
	get := func(method, path, body string, hdr ...string) (*http.Response, string) {
		req, _ := http.NewRequest(method, n.URL+path, strings.NewReader(body))
		if body != "" {
			// A payload needs its Content-Type (TestContentTypeRequired).
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		return do(t, req)
	}
	resp, body := get("POST", "/Tables", `{"TableName":"anon1"}`, "Prefer", "return-no-content")
	if resp.StatusCode != 204 || resp.Header.Get("Preference-Applied") != "return-no-content" {
		t.Fatalf("create with return-no-content: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if resp.Header.Get("x-ms-request-id") == "" || resp.Header.Get("x-ms-version") == "" || resp.Header.Get("Date") == "" {
		t.Fatalf("standard headers missing: %v", resp.Header)
	}
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/anon1", `{"PartitionKey":"p"`, 400, "InvalidInput"},
		{"POST", "/anon1", `[1,2]`, 400, "InvalidInput"},
		{"POST", "/anon1", `{"PartitionKey":"p"}`, 400, "PropertiesNeedValue"},
		{"POST", "/anon1", `{"PartitionKey":"p","RowKey":"r","bad-name":1}`, 400, "PropertyNameInvalid"},
		{"POST", "/anon1", `{"PartitionKey":"p","RowKey":"r","I":"x","I@odata.type":"Edm.Int32"}`, 400, "InvalidInput"},
		{"POST", "/anon1", `{"PartitionKey":"` + strings.Repeat("k", 600) + `","RowKey":"r"}`, 400, "PropertyValueTooLarge"},
		{"POST", "/nosuchtable", `{"PartitionKey":"p","RowKey":"r"}`, 404, "TableNotFound"},
		{"GET", "/anon1()?$filter=" + url.QueryEscape("startswith(S,'a')"), "", 400, "InvalidInput"},
		{"GET", "/anon1()?$top=1001", "", 400, "InvalidQueryParameterValue"},
		{"GET", "/anon1()?$select=" + url.QueryEscape("a-b"), "", 400, "InvalidInput"},
		{"GET", "/anon1(PartitionKey='p'", "", 400, "InvalidUri"},
		{"GET", "/anon1(PartitionKey='p',RowKey='r')", "", 404, "ResourceNotFound"},
		{"DELETE", "/anon1(PartitionKey='p',RowKey='r')", "", 400, "MissingRequiredHeader"},
		{"PUT", "/Tables", "", 405, "UnsupportedHttpVerb"},
		{"POST", "/Tables", `{"TableName":"1abc"}`, 400, "InvalidResourceName"},
		{"POST", "/Tables", `{"TableName":"ab"}`, 400, "OutOfRangeInput"},
		{"POST", "/Tables", `{"TableName":"tables"}`, 400, "InvalidInput"},
		{"POST", "/$batch", "junk", 400, "InvalidInput"},
		{"GET", "?restype=service&comp=nope", "", 400, "InvalidQueryParameterValue"},
	} {
		resp, body := get(tc.method, tc.path, tc.body)
		if resp.StatusCode != tc.status || resp.Header.Get("x-ms-error-code") != tc.code || !strings.Contains(body, `{"odata.error":{"code":"`+tc.code+`","message":{"lang":"en-US","value":"`) {
			t.Errorf("%s %s: %d %q %s; want %d %s", tc.method, tc.path, resp.StatusCode, resp.Header.Get("x-ms-error-code"), body, tc.status, tc.code)
		}
	}
	// Outside the account (a client configured with another account
	// name): the service's error document, naming the account served.
	base := strings.TrimSuffix(n.URL, "/"+aztest.Account)
	for _, path := range []string{"/", "/otheraccount/Tables", "/otheraccount/t1(PartitionKey='p',RowKey='r')"} {
		req, _ := http.NewRequest("GET", base+path, nil)
		resp, body := do(t, req)
		if resp.StatusCode != 400 || resp.Header.Get("x-ms-error-code") != "InvalidUri" ||
			!strings.Contains(body, `{"odata.error":{"code":"InvalidUri"`) || !strings.Contains(body, "serves the account "+aztest.Account+" only") {
			t.Errorf("GET %s outside the account: %d %v %s", path, resp.StatusCode, resp.Header, body)
		}
	}
	// CORS preflight: nemo keeps no CORS rules, so the service's refusal.
	for _, tc := range []struct {
		hdr    []string
		status int
		code   string
	}{
		{nil, 400, "InvalidHeaderValue"},
		{[]string{"Origin", "http://app.example"}, 400, "InvalidHeaderValue"},
		{[]string{"Origin", "http://app.example", "Access-Control-Request-Method", "GET"}, 403, "CorsPreflightFailure"},
	} {
		resp, body := get("OPTIONS", "/anon1", "", tc.hdr...)
		if resp.StatusCode != tc.status || resp.Header.Get("x-ms-error-code") != tc.code || resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("OPTIONS %v: %d %v %s; want %d %s", tc.hdr, resp.StatusCode, resp.Header, body, tc.status, tc.code)
		}
	}
	resp, body = get("POST", "/anon1", `{"PartitionKey":"p","RowKey":"r","D":2.0,"N":-5}`, "Accept", "application/json;odata=fullmetadata")
	if resp.StatusCode != 201 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json;odata=fullmetadata") ||
		!strings.Contains(body, `"odata.metadata":"`+n.URL+`/$metadata#anon1/@Element"`) || !strings.Contains(body, `"D":2.0`) {
		t.Fatalf("insert with full metadata: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	for _, q := range []string{"?restype=service&comp=properties", "?restype=service&comp=stats"} {
		if resp, body := get("GET", q, ""); resp.StatusCode != 200 || !strings.HasPrefix(body, "<?xml") {
			t.Errorf("service %s: %d %s", q, resp.StatusCode, body)
		}
	}
	if resp, body := get("GET", "/anon1?comp=acl", ""); resp.StatusCode != 200 || !strings.Contains(body, "SignedIdentifiers") {
		t.Errorf("acl: %d %s", resp.StatusCode, body)
	}
	// Settings nemo does not keep: a Set that sets nothing is accepted, one
	// that sets anything is refused (never dropped), bad XML is 400.
	policy := `<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers><SignedIdentifier><Id>p1</Id><AccessPolicy><Permission>r</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>`
	cors := `<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties><Cors><CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><MaxAgeInSeconds>5</MaxAgeInSeconds><ExposedHeaders>*</ExposedHeaders><AllowedHeaders>*</AllowedHeaders></CorsRule></Cors></StorageServiceProperties>`
	logging := strings.Replace(serviceProperties, "<Read>false</Read>", "<Read>true</Read>", 1)
	for _, tc := range []struct {
		path, body string
		status     int
		code       string
	}{
		{"/anon1?comp=acl", emptyACL, 204, ""},
		{"/anon1?comp=acl", "", 204, ""},
		{"/anon1?comp=acl", policy, 501, "NotImplemented"},
		{"/anon1?comp=acl", "<SignedIdentifiers><SignedIdentifier>", 400, "InvalidXmlDocument"},
		{"?restype=service&comp=properties", serviceProperties, 202, ""},
		{"?restype=service&comp=properties", cors, 501, "NotImplemented"},
		{"?restype=service&comp=properties", logging, 501, "NotImplemented"},
		{"?restype=service&comp=properties", "not xml", 400, "InvalidXmlDocument"},
	} {
		resp, body := get("PUT", tc.path, tc.body)
		if resp.StatusCode != tc.status || resp.Header.Get("x-ms-error-code") != tc.code {
			t.Errorf("PUT %s %.40q: %d %q %s; want %d %q", tc.path, tc.body, resp.StatusCode, resp.Header.Get("x-ms-error-code"), body, tc.status, tc.code)
		}
	}
	if resp, body := get("GET", "/anon1?comp=acl", ""); resp.StatusCode != 200 || strings.Contains(body, "p1") {
		t.Errorf("acl after a refused Set: %d %s", resp.StatusCode, body)
	}
	if resp, _ := get("MERGE", "/anon1(PartitionKey='p',RowKey='r')", `{"E":1}`, "If-Match", "*"); resp.StatusCode != 204 {
		t.Errorf("MERGE verb: %d", resp.StatusCode)
	}
	if _, body := get("GET", "/anon1(PartitionKey='p',RowKey='r')?$select=E,N,Missing", "", "Accept", "application/json;odata=nometadata"); body != `{"N":-5,"E":1,"Missing":null}` {
		t.Errorf("merged entity with $select: %s", body)
	}
}

func TestParseResource(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want resource
		bad  bool
	}{
		{in: "/Tables", want: resource{kind: resTables}},
		{in: "/Tables()", want: resource{kind: resTables}},
		{in: "/Tables('abc')", want: resource{kind: resTable, table: "abc"}},
		{in: "/$batch", want: resource{kind: resBatch}},
		{in: "/t1", want: resource{kind: resEntitySet, table: "t1"}},
		{in: "/t1()", want: resource{kind: resEntitySet, table: "t1"}},
		{in: "/t1(PartitionKey='a%20b',RowKey='o%27%27q%23%25%3F%C3%A9')", want: resource{kind: resEntity, table: "t1", pk: "a b", rk: "o'q#%?é"}},
		{in: "/t1(RowKey='r',PartitionKey='p')", want: resource{kind: resEntity, table: "t1", pk: "p", rk: "r"}},
		{in: "/t1(PartitionKey='',RowKey='')", want: resource{kind: resEntity, table: "t1"}},
		{in: "/t1(PartitionKey='p,RowKey=',RowKey=')')", want: resource{kind: resEntity, table: "t1", pk: "p,RowKey=", rk: ")"}},
		{in: "/t1(PartitionKey='o'q',RowKey='it's')", want: resource{kind: resEntity, table: "t1", pk: "o'q", rk: "it's"}}, // $batch URLs from the Go SDK
		{in: "/t1(PartitionKey='p')", bad: true},
		{in: "/t1(PartitionKey='p',RowKey='r'", bad: true},
		{in: "/t1(PartitionKey='p',RowKey='r',X='y')", bad: true},
		{in: "/t1(PartitionKey=p,RowKey='r')", bad: true},
		{in: "/a/b", bad: true},
		{in: "/%zz", bad: true},
	} {
		got, err := parseResource(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && got != tc.want) {
			t.Errorf("parseResource(%q) = %+v, %v", tc.in, got, err)
		}
	}
}
