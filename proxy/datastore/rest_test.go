package datastore

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

func post(t *testing.T, base, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := restHTTP.Post(base+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: not JSON: %q", path, raw)
	}
	return resp.StatusCode, out
}

// TestREST runs the REST API's calls and error shapes against nemo over
// the embedded store and in front of the Firestore emulator, in both
// coherence modes.
func TestREST(t *testing.T) {
	for _, b := range append([]backend{embeddedBackend(t.TempDir())}, firestoreBackends(t)...) {
		t.Run(b.name, func(t *testing.T) {
			project := dstest.Project(t)
			restCalls(t, startNemo(t, b, project, cache.Options{}), project)
		})
	}
}

func restCalls(t *testing.T, n *nemo, project string) {
	base := restURL(n.addr)
	code, out := post(t, base, "/v1/projects/"+project+":commit", `{"mode":"NON_TRANSACTIONAL","mutations":[
		{"upsert":{"key":{"path":[{"kind":"K","name":"a"}]},"properties":{"n":{"integerValue":"7"},"s":{"stringValue":"x"}}}},
		{"insert":{"key":{"path":[{"kind":"K"}]},"properties":{"n":{"integerValue":"8"}}}}]}`)
	if code != 200 {
		t.Fatalf("commit: %d %v", code, out)
	}
	results := out["mutationResults"].([]any)
	if len(results) != 2 || results[1].(map[string]any)["key"] == nil {
		t.Fatalf("commit results: %v", out)
	}
	code, out = post(t, base, "/v1/projects/"+project+":lookup", `{"keys":[{"path":[{"kind":"K","name":"a"}]},{"path":[{"kind":"K","name":"zz"}]}]}`)
	if code != 200 || len(out["found"].([]any)) != 1 || len(out["missing"].([]any)) != 1 {
		t.Fatalf("lookup: %d %v", code, out)
	}
	found := out["found"].([]any)[0].(map[string]any)["entity"].(map[string]any)["properties"].(map[string]any)
	if found["n"].(map[string]any)["integerValue"] != "7" {
		t.Fatalf("lookup entity: %v", found)
	}
	code, out = post(t, base, "/v1/projects/"+project+":runQuery", `{"query":{"kind":[{"name":"K"}],"filter":{"propertyFilter":{"property":{"name":"n"},"op":"GREATER_THAN","value":{"integerValue":"7"}}}}}`)
	if code != 200 || len(out["batch"].(map[string]any)["entityResults"].([]any)) != 1 {
		t.Fatalf("runQuery: %d %v", code, out)
	}
	code, out = post(t, base, "/v1/projects/"+project+":runAggregationQuery", `{"aggregationQuery":{"nestedQuery":{"kind":[{"name":"K"}]},"aggregations":[{"alias":"c","count":{}},{"alias":"s","sum":{"property":{"name":"n"}}}]}}`)
	props := out["batch"].(map[string]any)["aggregationResults"].([]any)[0].(map[string]any)["aggregateProperties"].(map[string]any)
	if code != 200 || props["c"].(map[string]any)["integerValue"] != "2" || props["s"].(map[string]any)["integerValue"] != "15" {
		t.Fatalf("runAggregationQuery: %d %v", code, out)
	}
	code, out = post(t, base, "/v1/projects/"+project+":beginTransaction", `{}`)
	if code != 200 || out["transaction"] == nil {
		t.Fatalf("beginTransaction: %d %v", code, out)
	}
	code, _ = post(t, base, "/v1/projects/"+project+":rollback", `{"transaction":"`+out["transaction"].(string)+`"}`)
	if code != 200 {
		t.Fatalf("rollback: %d", code)
	}
	code, out = post(t, base, "/v1/projects/"+project+":allocateIds", `{"keys":[{"path":[{"kind":"K"}]}]}`)
	if code != 200 || len(out["keys"].([]any)) != 1 {
		t.Fatalf("allocateIds: %d %v", code, out)
	}
	code, _ = post(t, base, "/v1/projects/"+project+":reserveIds", `{"keys":[{"path":[{"kind":"K","id":"5"}]}]}`)
	if code != 200 {
		t.Fatalf("reserveIds: %d", code)
	}
	// Errors in Google's JSON shape.
	for _, tc := range []struct {
		path, body string
		code       int
		status     string
	}{
		{"/v1/projects/" + project + ":commit", `{"mode":"NON_TRANSACTIONAL","mutations":[{"insert":{"key":{"path":[{"kind":"K","name":"a"}]}}}]}`, 409, "ALREADY_EXISTS"},
		{"/v1/projects/" + project + ":commit", `{"mode":"NON_TRANSACTIONAL","mutations":[{"update":{"key":{"path":[{"kind":"K","name":"nope"}]}}}]}`, 404, "NOT_FOUND"},
		{"/v1/projects/" + project + ":lookup", `{"keys":[`, 400, "INVALID_ARGUMENT"},
		{"/v1/projects/" + project + ":lookup", `{"bogusField":1}`, 400, "INVALID_ARGUMENT"},
		{"/v1/projects/" + project + ":frobnicate", `{}`, 404, "NOT_FOUND"},
		{"/v1/projects/" + project + ":runQuery", `{"query":{},"explainOptions":{}}`, 501, "UNIMPLEMENTED"},
		{"/v1/projects/" + project + ":runQuery", `{"gqlQuery":{"queryString":"SELEKT * FROM K"}}`, 400, "INVALID_ARGUMENT"},
		{"/v1/projects/" + project + ":rollback", `{"transaction":"AAAA"}`, 400, "INVALID_ARGUMENT"},
		{"/", `{}`, 404, "NOT_FOUND"},
		{"/v2/projects/" + project + ":lookup", `{}`, 404, "NOT_FOUND"},
		{"/other", `{}`, 404, "NOT_FOUND"},
	} {
		code, out := post(t, base, tc.path, tc.body)
		e, _ := out["error"].(map[string]any)
		if code != tc.code || e == nil || e["status"] != tc.status || e["code"] != float64(tc.code) || e["message"] == "" {
			t.Errorf("%s %s: %d %v, want %d %s", tc.path, tc.body, code, out, tc.code, tc.status)
		}
	}
	resp, err := restHTTP.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != "Ok" {
		t.Errorf("health: %d %q", resp.StatusCode, body)
	}
	resp, err = restHTTP.Get(base + "/v1/projects/" + project + ":lookup")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("GET of a method: %d", resp.StatusCode)
	}
}

func TestParseRESTPath(t *testing.T) {
	for path, want := range map[string][2]string{
		"/v1/projects/p:lookup":         {"p", "lookup"},
		"/v1/projects/my-proj:runQuery": {"my-proj", "runQuery"},
	} {
		p, m, ok := parseRESTPath(path)
		if !ok || p != want[0] || m != want[1] {
			t.Errorf("%s: %q %q %v", path, p, m, ok)
		}
	}
	for _, path := range []string{"/v1/projects/:lookup", "/v1/projects/p", "/v2/projects/p:lookup", "/v1/projects/a/b:lookup"} {
		if _, _, ok := parseRESTPath(path); ok {
			t.Errorf("%s parsed", path)
		}
	}
}

var restMethodNames = []string{"lookup", "runQuery", "runAggregationQuery", "beginTransaction", "commit", "rollback", "allocateIds", "reserveIds"}

func FuzzDecodeREST(f *testing.F) {
	f.Add(uint8(0), []byte(`{"keys":[{"partitionId":{"namespaceId":"n"},"path":[{"kind":"K","id":"5"}]}]}`))
	f.Add(uint8(1), []byte(`{"query":{"kind":[{"name":"K"}],"filter":{"compositeFilter":{"op":"OR","filters":[{"propertyFilter":{"property":{"name":"a"},"op":"IN","value":{"arrayValue":{"values":[{"integerValue":"1"}]}}}}]}},"limit":3,"startCursor":"bkMx"}}`))
	f.Add(uint8(4), []byte(`{"mode":"TRANSACTIONAL","transaction":"AAE=","mutations":[{"upsert":{"key":{"path":[{"kind":"K","name":"a"}]},"properties":{"t":{"timestampValue":"2024-01-02T03:04:05.123456Z"},"g":{"geoPointValue":{"latitude":1,"longitude":2}}}},"baseVersion":"3"}]}`))
	f.Add(uint8(2), []byte(`{"aggregationQuery":{"aggregations":[{"count":{"upTo":"5"}}]}}`))
	f.Add(uint8(3), []byte(``))
	f.Fuzz(func(t *testing.T, m uint8, body []byte) {
		method := restMethodNames[int(m)%len(restMethodNames)]
		req, err := decodeREST(method, body)
		if err != nil {
			return
		}
		// What decoded re-encodes and decodes to the same message.
		out, err := protojson.Marshal(req)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := decodeREST(method, out)
		if err != nil {
			t.Fatalf("decode of re-encoded %s: %v", out, err)
		}
		if !proto.Equal(req, again) {
			t.Fatalf("round trip changed the request: %v vs %v", req, again)
		}
	})
}
