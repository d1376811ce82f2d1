package aztable

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/internal/aztest"
)

// The service's rules for entities and tables ("Understanding the Table
// service data model"), and its answers when a write breaks one. Where
// the documentation is silent on the answer, the expectations follow what
// the service was observed to answer with the .NET client (a key with a
// forbidden character in an insert is OutOfRangeInput naming the key, one
// in a URL a query syntax error or OutOfRangeInput, a key over 1 KiB
// PropertyValueTooLarge, a DateTime before 1601 OutOfRangeInput naming the
// property and value in .NET's invariant format, the reserved table name
// InvalidInput).

// valEnv is one endpoint the validation cases run against, with a table
// of the case's own.
type valEnv struct {
	url   string
	svc   *aztables.ServiceClient
	table string // an existing table
}

// valCase is one write and the service's answer: "ok", or "status Code
// message" (the message's first line; a changeset failure is "202
// Code@index message"). notCompared, when set, says why the differential
// test leaves the case out: mostly how Azurite departs from the service
// (what Azurite does is written after "Azurite").
type valCase struct {
	name        string
	run         func(ctx context.Context, e *valEnv) error
	want        string
	notCompared string
}

func add(body string) func(context.Context, *valEnv) error {
	return func(ctx context.Context, e *valEnv) error {
		_, err := e.svc.NewClient(e.table).AddEntity(ctx, []byte(body), nil)
		return err
	}
}

func upsert(body string) func(context.Context, *valEnv) error {
	return func(ctx context.Context, e *valEnv) error {
		_, err := e.svc.NewClient(e.table).UpsertEntity(ctx, []byte(body), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
		return err
	}
}

func del(pk, rk string) func(context.Context, *valEnv) error {
	return func(ctx context.Context, e *valEnv) error {
		_, err := e.svc.NewClient(e.table).DeleteEntity(ctx, pk, rk, nil)
		return err
	}
}

func createTable(name string) func(context.Context, *valEnv) error {
	return func(ctx context.Context, e *valEnv) error {
		_, err := e.svc.CreateTable(ctx, name, nil)
		if err == nil {
			_, _ = e.svc.DeleteTable(ctx, name, nil)
		}
		return err
	}
}

func batchAdd(bodies ...string) func(context.Context, *valEnv) error {
	return func(ctx context.Context, e *valEnv) error {
		var acts []aztables.TransactionAction
		for _, b := range bodies {
			acts = append(acts, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: []byte(b)})
		}
		_, err := e.svc.NewClient(e.table).SubmitTransaction(ctx, acts, nil)
		return err
	}
}

// rawInsert posts body as it is, for payloads the SDK would rewrite
// (it decodes and re-encodes them, dropping duplicates and keys it needs).
func rawInsert(body string) func(context.Context, *valEnv) error {
	return func(ctx context.Context, e *valEnv) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/"+e.table, strings.NewReader(body))
		if err != nil {
			return err
		}
		signRequest(req, "application/json")
		resp, err := rawClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode < 300 {
			return nil
		}
		return &rawError{status: resp.StatusCode, code: resp.Header.Get("x-ms-error-code"), body: b}
	}
}

type rawError struct {
	status int
	code   string
	body   []byte
}

func (e *rawError) Error() string { return fmt.Sprintf("%d %s %s", e.status, e.code, e.body) }

// signRequest signs req with Shared Key for the development account.
func signRequest(req *http.Request, contentType string) {
	req.Header.Set("x-ms-date", time.Now().UTC().Format(http.TimeFormat))
	req.Header.Set("x-ms-version", "2019-02-02")
	req.Header.Set("Accept", "application/json;odata=nometadata")
	req.Header.Set("Content-Type", contentType)
	sts := req.Method + "\n\n" + contentType + "\n" + req.Header.Get("x-ms-date") + "\n/" + aztest.Account + req.URL.EscapedPath()
	req.Header.Set("Authorization", "SharedKey "+aztest.Account+":"+signWithKeyB64(sts))
}

func signWithKeyB64(s string) string {
	key, _ := base64.StdEncoding.DecodeString(aztest.Key)
	h := hmac.New(sha256.New, key)
	h.Write([]byte(s))
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

var batchCode = regexp.MustCompile(`"code":"([A-Za-z]+)","message":\{"lang":"en-US","value":"(\d+):([^\\"]*)`)

// valOutcome renders what a write got, in valCase.want's form.
func valOutcome(err error) string {
	if err == nil {
		return "ok"
	}
	var re *azcore.ResponseError
	var raw *rawError
	var status int
	var code string
	var body []byte
	switch {
	case errors.As(err, &raw):
		status, code, body = raw.status, raw.code, raw.body
	case errors.As(err, &re):
		status, code = re.StatusCode, re.ErrorCode
		if re.RawResponse != nil && re.RawResponse.Body != nil {
			body, _ = io.ReadAll(re.RawResponse.Body)
			re.RawResponse.Body = io.NopCloser(bytes.NewReader(body))
		}
	default:
		return "error " + err.Error()
	}
	if status == http.StatusAccepted {
		if m := batchCode.FindStringSubmatch(err.Error()); m != nil {
			return fmt.Sprintf("202 %s@%s %s", m[1], m[2], m[3])
		}
	}
	var doc struct {
		Err struct {
			Message struct {
				Value string `json:"value"`
			} `json:"message"`
		} `json:"odata.error"`
	}
	_ = json.Unmarshal(body, &doc)
	msg, _, _ := strings.Cut(doc.Err.Message.Value, "\n")
	return strings.TrimSpace(fmt.Sprintf("%d %s %s", status, code, msg))
}

// entityWithSize returns an entity ("p", "r") whose size by the data
// model's accounting is exactly n bytes: 4 + 2 per key character, and per
// string property 8 + 2 per name character + 4 + 2 per value character.
func entityWithSize(n int) string {
	var b strings.Builder
	b.WriteString(`{"PartitionKey":"p","RowKey":"r"`)
	left := n - (4 + 2 + 2)
	for i := 0; left > 0; i++ {
		overhead := 8 + 2*3 + 4
		chars := min(32768, (left-overhead)/2)
		fmt.Fprintf(&b, `,"P%02d":"%s"`, i, strings.Repeat("x", chars))
		left -= overhead + 2*chars
	}
	b.WriteString("}")
	return b.String()
}

func props(n int) string {
	var b strings.Builder
	b.WriteString(`{"PartitionKey":"p","RowKey":"r"`)
	for i := range n {
		fmt.Fprintf(&b, `,"P%d":1`, i)
	}
	return b.String() + "}"
}

func typed(name, typ, value string) string {
	return fmt.Sprintf(`{"PartitionKey":"p","RowKey":%q,%q:%s,"%s@odata.type":%q}`, name+typ, name, value, name, typ)
}

const (
	outOfRange = "400 OutOfRangeInput One of the request inputs is out of range."
	tooLarge   = "400 PropertyValueTooLarge The property value exceeds the maximum allowed size (64KB). If the property value is a string, it is UTF-16 encoded and the maximum number of characters should be 32K or less."
	badValue   = "400 InvalidInput One of the request inputs is not valid."
)

func keyOutOfRange(prop, val string) string {
	return "400 OutOfRangeInput The '" + prop + "' parameter of value '" + val + "' is out of range."
}

var validationCases = []valCase{
	// Keys in the payload.
	{"insert, slash in PartitionKey", add(`{"PartitionKey":"a/b","RowKey":"r"}`), keyOutOfRange("PartitionKey", "a/b"), "Azurite answers InvalidInput"},
	{"insert, backslash in RowKey", add(`{"PartitionKey":"p","RowKey":"a\\b"}`), keyOutOfRange("RowKey", `a\b`), "Azurite answers InvalidInput"},
	{"insert, # in RowKey", add(`{"PartitionKey":"p","RowKey":"a#b"}`), keyOutOfRange("RowKey", "a#b"), "Azurite answers InvalidInput"},
	{"insert, ? in PartitionKey", add(`{"PartitionKey":"a?b","RowKey":"r"}`), keyOutOfRange("PartitionKey", "a?b"), "Azurite answers InvalidInput"},
	{"insert, tab in RowKey", add(`{"PartitionKey":"p","RowKey":"a\tb"}`), keyOutOfRange("RowKey", "a\tb"), "Azurite answers InvalidInput"},
	{"insert, U+0000 in RowKey", add(`{"PartitionKey":"p","RowKey":"a\u0000b"}`), keyOutOfRange("RowKey", "a\x00b"), "Azurite answers InvalidInput"},
	{"insert, U+007F in RowKey", add(`{"PartitionKey":"p","RowKey":"a\u007fb"}`), keyOutOfRange("RowKey", "a\x7fb"), "Azurite answers InvalidInput"},
	{"insert, U+009F in RowKey", add(`{"PartitionKey":"p","RowKey":"a\u009fb"}`), keyOutOfRange("RowKey", "a\u009fb"), "Azurite answers InvalidInput"},
	{"insert, U+00A0 in RowKey", add(`{"PartitionKey":"p","RowKey":"a\u00a0b"}`), "ok", ""},
	{"insert, empty RowKey", add(`{"PartitionKey":"p","RowKey":""}`), "ok", ""},
	{"insert, empty keys", add(`{"PartitionKey":"","RowKey":""}`), "ok", ""},
	{"insert, PartitionKey of 512 characters", add(`{"PartitionKey":"` + strings.Repeat("k", 512) + `","RowKey":"r"}`), "ok", ""},
	{"insert, PartitionKey of 513 characters", add(`{"PartitionKey":"` + strings.Repeat("k", 513) + `","RowKey":"r"}`), tooLarge, "Azurite answers InvalidInput"},
	{"insert, RowKey of 256 surrogate pairs", add(`{"PartitionKey":"p","RowKey":"` + strings.Repeat("😀", 256) + `"}`), "ok", ""},
	{"insert, RowKey of 257 surrogate pairs", add(`{"PartitionKey":"p","RowKey":"` + strings.Repeat("😀", 257) + `"}`), tooLarge, "Azurite answers InvalidInput"},
	{"insert, no RowKey", rawInsert(`{"PartitionKey":"p"}`), "400 PropertiesNeedValue The values are not specified for all properties in the entity.", ""},
	{"insert, null RowKey", rawInsert(`{"PartitionKey":"p","RowKey":null}`), "400 PropertiesNeedValue The values are not specified for all properties in the entity.", ""},
	{"insert, numeric PartitionKey", add(`{"PartitionKey":1,"RowKey":"r"}`), badValue, "Azurite answers 500"},
	// Keys in the URL.
	{"upsert, slash in RowKey", upsert(`{"PartitionKey":"p","RowKey":"a/b"}`), "400 InvalidInput Bad Request - Error in query syntax.", "Azurite answers 500"},
	{"upsert, # in RowKey", upsert(`{"PartitionKey":"p","RowKey":"a#b"}`), outOfRange, "Azurite answers InvalidInput"},
	{"upsert, U+0085 in PartitionKey", upsert(`{"PartitionKey":"a\u0085","RowKey":"r"}`), outOfRange, "Azurite answers InvalidInput"},
	{"upsert, RowKey of 513 characters", upsert(`{"PartitionKey":"p","RowKey":"` + strings.Repeat("k", 513) + `"}`), tooLarge, "Azurite answers InvalidInput"},
	{"upsert, RowKey of 512 characters", upsert(`{"PartitionKey":"p","RowKey":"` + strings.Repeat("k", 512) + `"}`), "ok", ""},
	{"delete, ? in RowKey", del("p", "a?b"), outOfRange, "Azurite answers 404 ResourceNotFound: it does not check the keys of a delete"},
	// Property names.
	{"name starting with a digit", add(`{"PartitionKey":"p","RowKey":"n1","1abc":1}`), "400 PropertyNameInvalid The property name is invalid.", "Azurite stores it"},
	{"name with a hyphen", add(`{"PartitionKey":"p","RowKey":"n2","a-b":1}`), "400 PropertyNameInvalid The property name is invalid.", "Azurite stores it"},
	{"name with a dot", add(`{"PartitionKey":"p","RowKey":"n3","a.b":1}`), "400 PropertyNameInvalid The property name is invalid.", "Azurite stores it"},
	{"empty name", add(`{"PartitionKey":"p","RowKey":"n4","":1}`), "400 PropertyNameInvalid The property name is invalid.", "Azurite stores it"},
	{"identifier names", add(`{"PartitionKey":"p","RowKey":"n5","_x":1,"née":2,"Ⅻ":3,"a‿b":4}`), "ok", ""},
	{"name of 255 characters", add(`{"PartitionKey":"p","RowKey":"n6","` + strings.Repeat("n", 255) + `":1}`), "ok", ""},
	{"name of 256 characters", add(`{"PartitionKey":"p","RowKey":"n7","` + strings.Repeat("n", 256) + `":1}`), "400 PropertyNameTooLong The property name exceeds the maximum allowed length (255).", "Azurite stores it"},
	{"duplicate property", rawInsert(`{"PartitionKey":"p","RowKey":"n8","A":1,"A":2}`), "400 DuplicatePropertiesSpecified A property is specified more than one time.", "Azurite keeps the last value"},
	{"Timestamp is the service's", add(`{"PartitionKey":"p","RowKey":"n9","Timestamp":"2000-01-01T00:00:00Z"}`), "ok", ""},
	// Property count and sizes.
	{"252 properties", add(props(252)), "ok", ""},
	{"253 properties", add(props(253)), "400 TooManyProperties The entity contains more properties than allowed.", "Azurite stores it"},
	{"string of 32768 characters", add(`{"PartitionKey":"p","RowKey":"s1","S":"` + strings.Repeat("x", 32768) + `"}`), "ok", ""},
	{"string of 32769 characters", add(`{"PartitionKey":"p","RowKey":"s2","S":"` + strings.Repeat("x", 32769) + `"}`), tooLarge, ""},
	{"binary of 64 KiB", add(typed("B", "Edm.Binary", `"`+base64.StdEncoding.EncodeToString(make([]byte, 65536))+`"`)), "ok", ""},
	{"binary of 64 KiB + 1", add(typed("B", "Edm.Binary", `"`+base64.StdEncoding.EncodeToString(make([]byte, 65537))+`"`)), tooLarge, ""},
	{"entity of 1 MiB", add(entityWithSize(1 << 20)), "ok", "Azurite measures the UTF-8 body, not the data model's sizes"},
	{"entity of 1 MiB + 2 bytes", add(entityWithSize(1<<20 + 2)), "400 EntityTooLarge The entity is larger than the maximum allowed size (1MB).", "Azurite measures the UTF-8 body, not the data model's sizes"},
	// Types and ranges.
	{"Int32 maximum", add(typed("I", "Edm.Int32", "2147483647")), "ok", ""},
	{"Int32 over", add(typed("I", "Edm.Int32", "2147483648")), badValue, "Azurite stores it"},
	{"Int64 maximum", add(typed("L", "Edm.Int64", `"9223372036854775807"`)), "ok", ""},
	{"Int64 over", add(typed("L", "Edm.Int64", `"9223372036854775808"`)), badValue, "Azurite stores it"},
	{"Int64 not a number", add(typed("L", "Edm.Int64", `"12a"`)), badValue, "Azurite stores it"},
	{"Int64 as a JSON number", rawInsert(`{"PartitionKey":"p","RowKey":"i64n","L@odata.type":"Edm.Int64","L":12}`), badValue, ""},
	{"Int32 as a JSON string", rawInsert(`{"PartitionKey":"p","RowKey":"i32s","I@odata.type":"Edm.Int32","I":"12"}`), "ok", ""},
	{"Double NaN", add(typed("D", "Edm.Double", `"NaN"`)), "ok", ""},
	{"Double not a number", add(typed("D", "Edm.Double", `"x"`)), badValue, ""},
	{"Boolean as a string", add(typed("B", "Edm.Boolean", `"yes"`)), badValue, ""},
	{"Guid", add(typed("G", "Edm.Guid", `"0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"`)), "ok", ""},
	{"Guid malformed", add(typed("G", "Edm.Guid", `"0b1c2d3e4f506172"`)), badValue, "Azurite stores it"},
	{"Binary not base64", add(typed("B", "Edm.Binary", `"***"`)), badValue, "Azurite stores it"},
	{"DateTime minimum", add(typed("T", "Edm.DateTime", `"1601-01-01T00:00:00Z"`)), "ok", ""},
	{"DateTime before 1601", add(typed("T", "Edm.DateTime", `"1600-12-31T23:59:59Z"`)), "400 OutOfRangeInput The 'T' parameter of value '12/31/1600 23:59:59' is out of range.", "Azurite stores it"},
	{"DateTime maximum", add(typed("T", "Edm.DateTime", `"9999-12-31T23:59:59.9999999Z"`)), "ok", ""},
	{"DateTime malformed", add(typed("T", "Edm.DateTime", `"yesterday"`)), badValue, "Azurite stores it"},
	{"unknown type", add(typed("X", "Edm.Single", "1")), badValue, ""},
	{"typed PartitionKey", rawInsert(`{"PartitionKey":"p","PartitionKey@odata.type":"Edm.Int32","RowKey":"k1"}`), badValue, "Azurite stores it"},
	// Transactions name the failing operation.
	{"transaction, bad key second", batchAdd(`{"PartitionKey":"p","RowKey":"b1"}`, `{"PartitionKey":"p","RowKey":"b/2"}`), "202 OutOfRangeInput@1 The 'RowKey' parameter of value 'b/2' is out of range.", "Azurite answers InvalidInput"},
	{"transaction, long key first", batchAdd(`{"PartitionKey":"p","RowKey":"` + strings.Repeat("k", 513) + `"}`), "202 PropertyValueTooLarge@0 The property value exceeds the maximum allowed size (64KB). If the property value is a string, it is UTF-16 encoded and the maximum number of characters should be 32K or less.", "Azurite answers InvalidInput"},
	// Table names.
	{"table name of 2 characters", createTable("ab"), "400 OutOfRangeInput The specified resource name length is not within the permissible limits.", "Azurite answers the right message with no error code"},
	{"table name of 64 characters", createTable("t" + strings.Repeat("a", 63)), "400 OutOfRangeInput The specified resource name length is not within the permissible limits.", "Azurite answers the right message with no error code"},
	{"table name starting with a digit", createTable("1abc"), "400 InvalidResourceName The specifed resource name contains invalid characters.", "Azurite answers the right message with no error code"},
	{"table name with a hyphen", createTable("ab-cd"), "400 InvalidResourceName The specifed resource name contains invalid characters.", "Azurite answers the right message with no error code"},
	{"table name with a non-ASCII letter", createTable("abé"), "400 InvalidResourceName The specifed resource name contains invalid characters.", "Azurite answers the right message with no error code"},
	{"reserved table name", createTable("Tables"), badValue, "Azurite answers InvalidResourceName's message, without a code"},
}

// TestEntityValidation holds nemo to the service's validation of entity
// writes and table names, through the aztables SDK (raw requests where the
// SDK rewrites the payload).
func TestEntityValidation(t *testing.T) {
	n := overEmbedded(t)
	ctx := ctxT(t)
	for _, tc := range validationCases {
		if got := valOutcome(tc.run(ctx, newValEnv(t, n.URL))); got != tc.want {
			t.Errorf("%s:\n got %.300s\nwant %.300s", tc.name, got, tc.want)
		}
	}
}

// TestEntityValidationDifferential runs the cases where Azurite answers as
// the service does against Azurite and nemo in front of it: same status
// and error code.
func TestEntityValidationDifferential(t *testing.T) {
	azURL, nemoURL := aztest.Azurite(t), overAzurite(t).URL
	ctx := ctxT(t)
	code := func(o string) string {
		f := strings.Fields(o)
		if len(f) < 2 {
			return o
		}
		return f[0] + " " + f[1]
	}
	compared := 0
	for _, tc := range validationCases {
		if tc.notCompared != "" {
			continue
		}
		compared++
		a, b := valOutcome(tc.run(ctx, newValEnv(t, azURL))), valOutcome(tc.run(ctx, newValEnv(t, nemoURL)))
		if code(a) != code(b) || code(b) != code(tc.want) {
			t.Errorf("%s: azurite %.200s, nemo %.200s, service %.200s", tc.name, a, b, tc.want)
		}
	}
	if compared < 20 {
		t.Fatalf("only %d cases compared", compared)
	}
}

func newValEnv(t *testing.T, url string) *valEnv {
	t.Helper()
	svc := service(t, url, aztest.Key)
	table := aztest.TableName("val")
	if _, err := svc.CreateTable(ctxT(t), table, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = svc.DeleteTable(context.Background(), table, nil) })
	return &valEnv{url: url, svc: svc, table: table}
}
