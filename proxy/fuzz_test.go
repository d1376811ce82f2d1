package proxy

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzDebugRecordsQuery feeds arbitrary query strings to GET /debug/records:
// the answer is always JSON with status 200, 400 or 404, and a 200 lists
// only records inside the requested range, in key order.
func FuzzDebugRecordsQuery(f *testing.F) {
	for _, q := range []string{
		"keyspace=t", "keyspace=t&start=b&end=d", "keyspace=t&start_hex=63&end_hex=ff",
		"keyspace=t&limit=2", "keyspace=t&start=a&start_hex=61", "keyspace=nope", "", "keyspace=t&end_hex=zz",
	} {
		f.Add(q)
	}
	fx := newAdminFixture(f)
	fx.start()
	ctx := context.Background()
	fx.n.Buffer.OpenKeyspace("t")
	for _, k := range []string{"a", "b", "c", "d", "\xff\x00", "zz"} {
		if err := fx.n.Engine.Upsert(ctx, "t", []byte(k), []byte("v")); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, q string) {
		// Set the raw query directly: arbitrary bytes would not survive
		// being parsed as part of a request line.
		req := httptest.NewRequest(http.MethodGet, "/debug/records", nil)
		req.URL.RawQuery = q
		rec := httptest.NewRecorder()
		fx.h.ServeHTTP(rec, req)
		code, body := rec.Code, rec.Body.String()
		if code != http.StatusOK && code != http.StatusBadRequest && code != http.StatusNotFound {
			t.Fatalf("status %d for %q: %s", code, q, body)
		}
		if !json.Valid([]byte(body)) {
			t.Fatalf("not JSON for %q: %s", q, body)
		}
		if code != http.StatusOK {
			return
		}
		var out struct {
			Records []recordView `json:"records"`
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatal(err)
		}
		r := req.URL.Query()
		start, _ := bound(r.Get("start"), r.Get("start_hex"), "start")
		end, _ := bound(r.Get("end"), r.Get("end_hex"), "end")
		var prev []byte
		for i, rec := range out.Records {
			k, err := hex.DecodeString(rec.KeyHex)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Compare(k, start) < 0 || end != nil && bytes.Compare(k, end) >= 0 {
				t.Fatalf("%q: key %x outside [%x, %x)", q, k, start, end)
			}
			if i > 0 && bytes.Compare(prev, k) >= 0 {
				t.Fatalf("%q: keys out of order: %x then %x", q, prev, k)
			}
			prev = k
		}
	})
}
