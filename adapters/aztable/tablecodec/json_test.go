package tablecodec

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

// Shapes below are taken from reference/azure-table-wire.log (aztables
// v1.4.1 against Azurite 3.37.0).
const (
	wireAddBody = `{"Bin":"AAEC+g==","Bin@odata.type":"Edm.Binary","Bool":true,"Dbl":3.25,"Guid":"0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0","Guid@odata.type":"Edm.Guid","I32":42,"I64":"1234567890123","I64@odata.type":"Edm.Int64","PartitionKey":"pk1","RowKey":"rk1","Str":"hello","When":"2024-05-06T07:08:09.1234567Z","When@odata.type":"Edm.DateTime","Whole":7}`
	wireMinimal = `{"odata.metadata":"http://127.0.0.1:46399/devstoreaccount1/$metadata#probe98986/@Element","odata.etag":"W/\"datetime'2026-12-02T08%3A09%3A46.2133931Z'\"","PartitionKey":"pk1","RowKey":"rk1","Bin@odata.type":"Edm.Binary","Bin":"AAEC+g==","Bool":true,"Dbl":3.25,"Guid@odata.type":"Edm.Guid","Guid":"0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0","I32":42,"I64@odata.type":"Edm.Int64","I64":"1234567890123","Str":"hello","When@odata.type":"Edm.DateTime","When":"2024-05-06T07:08:09.1234567Z","Whole":7,"Timestamp":"2026-12-02T08:09:46.2133931Z"}`
	wireFull    = `{"odata.metadata":"http://127.0.0.1:46399/devstoreaccount1/$metadata#probe98986/@Element","odata.type":"devstoreaccount1.probe98986","odata.id":"http://127.0.0.1:46399/devstoreaccount1/probe98986(PartitionKey='pk1',RowKey='rk1')","odata.etag":"W/\"datetime'2026-12-02T08%3A09%3A46.2133931Z'\"","odata.editLink":"probe98986(PartitionKey='pk1',RowKey='rk1')","PartitionKey":"pk1","RowKey":"rk1","Bin@odata.type":"Edm.Binary","Bin":"AAEC+g==","Bool":true,"Dbl":3.25,"Guid@odata.type":"Edm.Guid","Guid":"0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0","I32":42,"I64@odata.type":"Edm.Int64","I64":"1234567890123","Str":"hello","When@odata.type":"Edm.DateTime","When":"2024-05-06T07:08:09.1234567Z","Whole":7,"Timestamp@odata.type":"Edm.DateTime","Timestamp":"2026-12-02T08:09:46.2133931Z"}`
	wireNone    = `{"PartitionKey":"pk1","RowKey":"rk1","Bin":"AAEC+g==","Bool":true,"Dbl":3.25,"Guid":"0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0","I32":42,"I64":"1234567890123","Str":"hello","When":"2024-05-06T07:08:09.1234567Z","Whole":7,"Timestamp":"2026-12-02T08:09:46.2133931Z"}`
	wireETag    = `W/"datetime'2026-12-02T08%3A09%3A46.2133931Z'"`
	wireContext = "http://127.0.0.1:46399/devstoreaccount1/$metadata#probe98986/@Element"
)

func wireEntity(t *testing.T) *Entity {
	t.Helper()
	e, err := ParseJSONEntity([]byte(wireAddBody))
	if err != nil {
		t.Fatal(err)
	}
	e.ETag = wireETag
	e.Timestamp = mustTime("2026-12-02T08:09:46.2133931Z")
	return e
}

func TestParseJSONEntityWireAdd(t *testing.T) {
	e, err := ParseJSONEntity([]byte(wireAddBody))
	if err != nil {
		t.Fatal(err)
	}
	g, _ := ParseGUID("0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0")
	want := &Entity{PartitionKey: "pk1", RowKey: "rk1", Props: []Property{
		{"Bin", EdmBinary, []byte{0, 1, 2, 0xfa}},
		{"Bool", EdmBoolean, true},
		{"Dbl", EdmDouble, 3.25},
		{"Guid", EdmGuid, g},
		{"I32", EdmInt32, int32(42)},
		{"I64", EdmInt64, int64(1234567890123)},
		{"Str", EdmString, "hello"},
		{"When", EdmDateTime, mustTime("2024-05-06T07:08:09.1234567Z")},
		{"Whole", EdmInt32, int32(7)},
	}}
	equalEntity(t, e, want)
}

// The service responses parse too (the aztables adapter reads them), with
// ETag and Timestamp filled and the same typed properties.
func TestParseJSONEntityWireResponses(t *testing.T) {
	want := wireEntity(t)
	for name, body := range map[string]string{"minimal": wireMinimal, "full": wireFull} {
		got, err := ParseJSONEntity([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		equalEntity(t, got, want)
	}
}

func decodeMap(t *testing.T, s []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(s, &m); err != nil {
		t.Fatalf("invalid JSON %s: %v", s, err)
	}
	return m
}

func TestAppendJSONMatchesWire(t *testing.T) {
	e := wireEntity(t)
	for _, tc := range []struct {
		name string
		meta Metadata
		wire string
		// exact is our byte-for-byte output: Azure's member order (Timestamp
		// right after RowKey), which differs from Azurite's.
		exact string
	}{
		{"nometadata", Metadata{Level: NoMetadata, Context: wireContext}, wireNone,
			`{"PartitionKey":"pk1","RowKey":"rk1","Timestamp":"2026-12-02T08:09:46.2133931Z","Bin":"AAEC+g==","Bool":true,"Dbl":3.25,"Guid":"0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0","I32":42,"I64":"1234567890123","Str":"hello","When":"2024-05-06T07:08:09.1234567Z","Whole":7}`},
		{"minimal", Metadata{Level: MinimalMetadata, Context: wireContext}, wireMinimal,
			`{"odata.metadata":"` + wireContext + `","odata.etag":"W/\"datetime'2026-12-02T08%3A09%3A46.2133931Z'\"","PartitionKey":"pk1","RowKey":"rk1","Timestamp":"2026-12-02T08:09:46.2133931Z","Bin@odata.type":"Edm.Binary","Bin":"AAEC+g==","Bool":true,"Dbl":3.25,"Guid@odata.type":"Edm.Guid","Guid":"0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0","I32":42,"I64@odata.type":"Edm.Int64","I64":"1234567890123","Str":"hello","When@odata.type":"Edm.DateTime","When":"2024-05-06T07:08:09.1234567Z","Whole":7}`},
		{"full", Metadata{Level: FullMetadata, Context: wireContext, BaseURL: "http://127.0.0.1:46399/devstoreaccount1/", Account: "devstoreaccount1", Table: "probe98986"}, wireFull, ""},
	} {
		got := AppendJSON(nil, e, tc.meta, nil)
		if !reflect.DeepEqual(decodeMap(t, got), decodeMap(t, []byte(tc.wire))) {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.wire)
		}
		if tc.exact != "" && string(got) != tc.exact {
			t.Errorf("%s exact:\n got %s\nwant %s", tc.name, got, tc.exact)
		}
	}
}

// Wire log #53: $select=RowKey,N,Missing. Azure answers a selected property
// the entity lacks with null (Azurite omits it: Azure/Azurite#2535).
func TestAppendJSONSelect(t *testing.T) {
	e := &Entity{PartitionKey: "range", RowKey: "r005", ETag: `W/"datetime'2026-12-02T08%3A09%3A46.3782011Z'"`,
		Timestamp: mustTime("2026-12-02T08:09:46.3782011Z"),
		Props:     []Property{{"N", EdmInt32, int32(5)}, {"Tag", EdmString, "odd"}}}
	got := string(AppendJSON(nil, e, Metadata{Level: MinimalMetadata}, []string{"RowKey", "N", "Missing", "N"}))
	want := `{"odata.etag":"W/\"datetime'2026-12-02T08%3A09%3A46.3782011Z'\"","RowKey":"r005","N":5,"Missing":null}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// An explicit Timestamp selection is honoured.
	got = string(AppendJSON(nil, e, Metadata{Level: NoMetadata}, []string{"Timestamp"}))
	if want := `{"Timestamp":"2026-12-02T08:09:46.3782011Z"}`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestAppendJSONValues(t *testing.T) {
	for _, tc := range []struct {
		p       Property
		minimal string // member text at minimal metadata
		none    string
	}{
		{Property{"D", EdmDouble, 2.0}, `"D":2.0`, `"D":2.0`},
		{Property{"D", EdmDouble, 0.0}, `"D":0.0`, `"D":0.0`},
		{Property{"D", EdmDouble, math.Copysign(0, -1)}, `"D":-0.0`, `"D":-0.0`},
		{Property{"D", EdmDouble, 1e21}, `"D":1e+21`, `"D":1e+21`},
		{Property{"D", EdmDouble, 1234567.5}, `"D":1234567.5`, `"D":1234567.5`},
		{Property{"D", EdmDouble, 1e-7}, `"D":1e-07`, `"D":1e-07`},
		{Property{"D", EdmDouble, math.NaN()}, `"D@odata.type":"Edm.Double","D":"NaN"`, `"D":"NaN"`},
		{Property{"D", EdmDouble, math.Inf(1)}, `"D@odata.type":"Edm.Double","D":"Infinity"`, `"D":"Infinity"`},
		{Property{"D", EdmDouble, math.Inf(-1)}, `"D@odata.type":"Edm.Double","D":"-Infinity"`, `"D":"-Infinity"`},
		{Property{"T", EdmDateTime, mustTime("2024-01-01T00:00:00Z")}, `"T@odata.type":"Edm.DateTime","T":"2024-01-01T00:00:00Z"`, `"T":"2024-01-01T00:00:00Z"`},
		{Property{"T", EdmDateTime, mustTime("2024-01-01T00:00:00.1200000Z")}, `"T@odata.type":"Edm.DateTime","T":"2024-01-01T00:00:00.12Z"`, `"T":"2024-01-01T00:00:00.12Z"`},
		{Property{"S", EdmString, "q\"\\\n<&>\x01é"}, `"S":"q\"\\\n<&>\u0001é"`, `"S":"q\"\\\n<&>\u0001é"`},
		{Property{"I", EdmInt32, int32(-5)}, `"I":-5`, `"I":-5`},
		{Property{"L", EdmInt64, int64(-5)}, `"L@odata.type":"Edm.Int64","L":"-5"`, `"L":"-5"`},
		{Property{"B", EdmBoolean, false}, `"B":false`, `"B":false`},
	} {
		e := &Entity{Props: []Property{tc.p}}
		for _, lv := range []struct {
			level MetadataLevel
			want  string
		}{{MinimalMetadata, tc.minimal}, {NoMetadata, tc.none}} {
			got := string(AppendJSON(nil, e, Metadata{Level: lv.level}, []string{tc.p.Name}))
			if want := "{" + lv.want + "}"; got != want {
				t.Errorf("level %d %v: got %s, want %s", lv.level, tc.p.Value, got, want)
			}
		}
	}
}

func TestFullMetadataEscapesKeysInLinks(t *testing.T) {
	e := &Entity{PartitionKey: "a b", RowKey: "it's"}
	m := decodeMap(t, AppendJSON(nil, e, Metadata{Level: FullMetadata, BaseURL: "http://h/acct/", Account: "acct", Table: "t"}, nil))
	if got, want := m["odata.editLink"], "t(PartitionKey='a%20b',RowKey='it%27%27s')"; got != want {
		t.Errorf("editLink = %v, want %v", got, want)
	}
	if got, want := m["odata.id"], "http://h/acct/t(PartitionKey='a%20b',RowKey='it%27%27s')"; got != want {
		t.Errorf("id = %v, want %v", got, want)
	}
}

func TestParseJSONEntityTypes(t *testing.T) {
	for _, tc := range []struct {
		body string
		typ  EdmType
		val  any
	}{
		{`{"X":7}`, EdmInt32, int32(7)},
		{`{"X":-2147483648}`, EdmInt32, int32(math.MinInt32)},
		{`{"X":2147483648}`, EdmDouble, 2147483648.0}, // too big for Int32, no annotation
		{`{"X":7.0}`, EdmDouble, 7.0},
		{`{"X":1e3}`, EdmDouble, 1000.0},
		{`{"X":"7"}`, EdmString, "7"},
		{`{"X":false}`, EdmBoolean, false},
		{`{"X":"9223372036854775807","X@odata.type":"Edm.Int64"}`, EdmInt64, int64(math.MaxInt64)},
		{`{"X":"12","X@odata.type":"Edm.Int32"}`, EdmInt32, int32(12)},
		{`{"X":5,"X@odata.type":"Edm.Double"}`, EdmDouble, 5.0},
		{`{"X":"NaN","X@odata.type":"Edm.Double"}`, EdmDouble, math.NaN()},
		{`{"X":"-Infinity","X@odata.type":"Edm.Double"}`, EdmDouble, math.Inf(-1)},
		{`{"X":"2.5","X@odata.type":"Edm.Double"}`, EdmDouble, 2.5},
		{`{"X":"2024-01-01T01:00:00+01:00","X@odata.type":"Edm.DateTime"}`, EdmDateTime, mustTime("2024-01-01T00:00:00Z")},
		{`{"X":"2024-01-01T00:00:00.123456789Z","X@odata.type":"Edm.DateTime"}`, EdmDateTime, mustTime("2024-01-01T00:00:00.1234567Z")},
		{`{"X":"0B1C2D3E-4F50-6172-8394-A5B6C7D8E9F0","X@odata.type":"Edm.Guid"}`, EdmGuid, GUID{0x0b, 0x1c, 0x2d, 0x3e, 0x4f, 0x50, 0x61, 0x72, 0x83, 0x94, 0xa5, 0xb6, 0xc7, 0xd8, 0xe9, 0xf0}},
		{`{"X":"","X@odata.type":"Edm.Binary"}`, EdmBinary, []byte{}},
		{`{"X":"s","X@odata.type":"Edm.String"}`, EdmString, "s"},
	} {
		e, err := ParseJSONEntity([]byte(tc.body))
		if err != nil {
			t.Errorf("%s: %v", tc.body, err)
			continue
		}
		if len(e.Props) != 1 || e.Props[0].Type != tc.typ || !equalValue(e.Props[0].Value, tc.val) {
			t.Errorf("%s: got %+v, want %v %#v", tc.body, e.Props, tc.typ, tc.val)
		}
	}
}

func TestParseJSONEntityIgnores(t *testing.T) {
	e, err := ParseJSONEntity([]byte(`{"odata.metadata":"x","odata.type":"a.b","N":null,"Timestamp":"garbage","PartitionKey":"p","V":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if e.PartitionKey != "p" || len(e.Props) != 1 || e.Props[0].Name != "V" || !e.Timestamp.IsZero() {
		t.Fatalf("got %+v", e)
	}
}

func TestParseJSONEntityErrors(t *testing.T) {
	many := make([]string, 253)
	for i := range many {
		many[i] = fmt.Sprintf(`"P%d":1`, i)
	}
	bigProps := make([]string, 20)
	for i := range bigProps {
		bigProps[i] = fmt.Sprintf(`"P%d":"%s"`, i, strings.Repeat("x", 30000))
	}
	for _, tc := range []struct {
		body     string
		sentinel error
		prop     string // "" when the error is not about one property
	}{
		{``, ErrInvalidValue, ""},
		{`[]`, ErrInvalidValue, ""},
		{`{"A":1`, ErrInvalidValue, ""},
		{`{"A":1} {}`, ErrInvalidValue, ""},
		{`{"A":{"x":1}}`, ErrInvalidValue, "A"},
		{`{"A":[1]}`, ErrInvalidValue, "A"},
		{`{"A":1,"A":2}`, ErrDuplicateProperty, "A"},
		{`{"A":1,"A@odata.type":"Edm.Int32","A@odata.type":"Edm.Int32"}`, ErrDuplicateProperty, "A"},
		{`{"A":"x","A@odata.type":"Edm.Int64"}`, ErrInvalidValue, "A"},
		{`{"A":"1.5","A@odata.type":"Edm.Int64"}`, ErrInvalidValue, "A"},
		{`{"A":"99999999999999999999","A@odata.type":"Edm.Int64"}`, ErrInvalidValue, "A"},
		{`{"A@odata.type":"Edm.Int64","A":12}`, ErrInvalidValue, "A"}, // a JSON number: Azure's Int64 is a string
		{`{"A":3000000000,"A@odata.type":"Edm.Int32"}`, ErrInvalidValue, "A"},
		{`{"A":"x","A@odata.type":"Edm.Guid"}`, ErrInvalidValue, "A"},
		{`{"A":"***","A@odata.type":"Edm.Binary"}`, ErrInvalidValue, "A"},
		{`{"A":"yesterday","A@odata.type":"Edm.DateTime"}`, ErrInvalidValue, "A"},
		{`{"A":"1600-12-31T23:59:59Z","A@odata.type":"Edm.DateTime"}`, ErrValueOutOfRange, "A"},
		{`{"A":"inf","A@odata.type":"Edm.Double"}`, ErrInvalidValue, "A"},
		{`{"A":1,"A@odata.type":"Edm.Boolean"}`, ErrInvalidValue, "A"},
		{`{"A":1,"A@odata.type":"Edm.String"}`, ErrInvalidValue, "A"},
		{`{"A":1,"A@odata.type":"Edm.Decimal"}`, ErrInvalidValue, "A"},
		{`{"A":1,"A@odata.type":5}`, ErrInvalidValue, "A"},
		{`{"A@odata.type":"Edm.Int64"}`, ErrInvalidValue, "A"},
		{`{"A":1e999}`, ErrInvalidValue, "A"},
		{`{"PartitionKey":5}`, ErrInvalidValue, "PartitionKey"},
		{`{"PartitionKey":"a/b"}`, ErrInvalidKey, "PartitionKey"},
		{`{"RowKey":"a\u0007"}`, ErrInvalidKey, "RowKey"},
		{`{"RowKey":"a\u0085"}`, ErrInvalidKey, "RowKey"},
		{`{"RowKey":"` + strings.Repeat("k", 513) + `"}`, ErrKeyTooLong, "RowKey"},
		{`{"RowKey":"` + strings.Repeat("😀", 257) + `"}`, ErrKeyTooLong, "RowKey"},
		{`{"1abc":1}`, ErrPropertyNameInvalid, "1abc"},
		{`{"a-b":1}`, ErrPropertyNameInvalid, "a-b"},
		{`{"":1}`, ErrPropertyNameInvalid, ""},
		{`{"` + strings.Repeat("n", 256) + `":1}`, ErrPropertyNameTooLong, strings.Repeat("n", 256)},
		{`{"S":"` + strings.Repeat("x", 32769) + `"}`, ErrPropertyValueTooLarge, "S"},
		{`{"S":"` + strings.Repeat("x", 87392) + `","S@odata.type":"Edm.Binary"}`, ErrPropertyValueTooLarge, "S"},
		{`{` + strings.Join(many, ",") + `}`, ErrTooManyProperties, ""},
		{`{` + strings.Join(bigProps, ",") + `}`, ErrEntityTooLarge, ""},
	} {
		_, err := ParseJSONEntity([]byte(tc.body))
		if !errors.Is(err, tc.sentinel) {
			t.Errorf("%.80s: error = %v, want %v", tc.body, err, tc.sentinel)
			continue
		}
		var pe *PropertyError
		if tc.prop != "" {
			if !errors.As(err, &pe) || pe.Property != tc.prop || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.prop)) {
				t.Errorf("%.80s: error %v does not name property %.20q", tc.body, err, tc.prop)
			}
		}
	}
}

// TestOutOfRangeValues checks the values the service quotes when it
// refuses a key or a DateTime as out of range.
func TestOutOfRangeValues(t *testing.T) {
	for body, want := range map[string]string{
		`{"PartitionKey":"a#b"}`: "a#b",
		`{"A":"1600-12-31T23:59:59.5Z","A@odata.type":"Edm.DateTime"}`: "12/31/1600 23:59:59",
		`{"A":"0001-01-01T00:00:00Z","A@odata.type":"Edm.DateTime"}`:   "01/01/0001 00:00:00",
	} {
		_, err := ParseJSONEntity([]byte(body))
		var pe *PropertyError
		if !errors.As(err, &pe) || pe.Value != want {
			t.Errorf("%s: %v, want the value %q", body, err, want)
		}
	}
	// A null key is no key.
	if _, err := ParseNewEntity([]byte(`{"PartitionKey":"p","RowKey":null}`)); !errors.Is(err, ErrMissingKey) {
		t.Errorf("null RowKey: %v", err)
	}
	if e, err := ParseJSONEntity([]byte(`{"PartitionKey":null,"A":1}`)); err != nil || e.PartitionKey != "" {
		t.Errorf("null PartitionKey in an update: %v", err)
	}
	// A key of 512 UTF-16 code units (1 KiB) is legal.
	if _, err := ParseNewEntity([]byte(`{"PartitionKey":"` + strings.Repeat("😀", 256) + `","RowKey":"` + strings.Repeat("k", 512) + `"}`)); err != nil {
		t.Error(err)
	}
}

func TestValidNameAcceptsIdentifiers(t *testing.T) {
	for _, n := range []string{"a", "_", "A1", "née", "x_y", "Ünïcode9", "Ⅻ", "aⅫ", "a\u200db", "a\u0301", "a‿b"} {
		if !ValidName(n) {
			t.Errorf("ValidName(%q) = false", n)
		}
	}
	for _, n := range []string{"9a", "\u200da", "a-b", "a.b", "a b", "a$", "\u0301a"} {
		if ValidName(n) {
			t.Errorf("ValidName(%q) = true", n)
		}
	}
	// A name of exactly 255 characters is legal.
	if _, err := ParseJSONEntity([]byte(`{"` + strings.Repeat("n", 255) + `":1}`)); err != nil {
		t.Error(err)
	}
}

func TestParseMetadataLevel(t *testing.T) {
	for in, want := range map[string]MetadataLevel{
		"application/json;odata=nometadata":               NoMetadata,
		"application/json; odata=fullmetadata":            FullMetadata,
		"application/json;odata=minimalmetadata":          MinimalMetadata,
		"application/json":                                MinimalMetadata,
		"Application/JSON;charset=utf-8;odata=nometadata": NoMetadata,
	} {
		if got, err := ParseMetadataLevel(in); err != nil || got != want {
			t.Errorf("ParseMetadataLevel(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseMetadataLevel("application/atom+xml"); !errors.Is(err, ErrUnsupportedFormat) {
		t.Errorf("atom: %v", err)
	}
}

// FuzzParseJSONEntity checks the scanner against the reference reader
// (json_ref_test.go): for any body both refuse it, with the same sentinel
// and the same property named, or both give the same entity and key
// count. An entity it gives survives the JSON writer at every metadata
// level and the binary codec.
func FuzzParseJSONEntity(f *testing.F) {
	for _, s := range []string{wireAddBody, wireMinimal, wireFull, wireNone, `{"N":2,"PartitionKey":"pk1","RowKey":"rk2","Str":"two"}`,
		`{"D":"NaN","D@odata.type":"Edm.Double","Z":-0.0,"E":1e300}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		e, keys, err := parseJSONEntity(body)
		want, wantKeys, wantErr := refParseJSONEntity(body)
		sameError(t, err, wantErr)
		if err != nil {
			return
		}
		equalEntity(t, e, want)
		if keys != wantKeys {
			t.Fatalf("%d keys, the reference %d", keys, wantKeys)
		}
		for _, level := range []MetadataLevel{MinimalMetadata, FullMetadata} {
			out := AppendJSON(nil, e, Metadata{Level: level, Context: "c", Table: "t"}, nil)
			again, err := ParseJSONEntity(out)
			if err != nil {
				t.Fatalf("re-parse of %s: %v", out, err)
			}
			equalEntity(t, again, e)
		}
		// The binary codec agrees.
		dec, err := DecodeEntity(EncodeEntity(e))
		if err != nil {
			t.Fatal(err)
		}
		equalEntity(t, dec, e)
	})
}

// sameError fails unless err and want are both nil, or wrap the same
// sentinels and name the same property (or none).
func sameError(t *testing.T, err, want error) {
	t.Helper()
	if (err == nil) != (want == nil) {
		t.Fatalf("error %v, the reference %v", err, want)
	}
	for _, sentinel := range []error{ErrInvalidValue, ErrPropertyNameInvalid, ErrPropertyNameTooLong, ErrTooManyProperties,
		ErrPropertyValueTooLarge, ErrEntityTooLarge, ErrInvalidKey, ErrKeyTooLong, ErrValueOutOfRange, ErrDuplicateProperty} {
		if errors.Is(err, sentinel) != errors.Is(want, sentinel) {
			t.Fatalf("error %v, the reference %v", err, want)
		}
	}
	var pe, wantPE *PropertyError
	if errors.As(err, &pe) != errors.As(want, &wantPE) || pe != nil && (pe.Property != wantPE.Property || pe.Value != wantPE.Value) {
		t.Fatalf("error %v, the reference %v", err, want)
	}
}

// Bodies as Azurite returns them at minimal metadata (GetEntity, aztables
// v1.4.1 against Azurite 3.37.0; testdata/fuzz/FuzzParseJSONEntity holds
// them at every level).
const (
	// benchStrings is a 1 KiB entity: ten string properties of 89 bytes.
	benchStrings = `{"odata.metadata":"http://127.0.0.1:10072/devstoreaccount1/$metadata#seeds/@Element","odata.etag":"W/\"datetime'2026-12-04T03%3A21%3A13.2325710Z'\"","PartitionKey":"user0000012345","RowKey":"profile","Field0":"00-abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijxyzuvw","Field1":"01-abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijxyzuvw","Field2":"02-abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijxyzuvw","Field3":"03-abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijxyzuvw","Field4":"04-abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijxyzuvw","Field5":"05-abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijxyzuvw","Field6":"06-abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijxyzuvw","Field7":"07-abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijxyzuvw","Field8":"08-abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijxyzuvw","Field9":"09-abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijxyzuvw","Timestamp":"2026-12-04T03:21:13.2325710Z"}`
	// benchTyped has one property of every annotated type.
	benchTyped = `{"odata.metadata":"http://127.0.0.1:10072/devstoreaccount1/$metadata#seeds/@Element","odata.etag":"W/\"datetime'2026-12-04T03%3A21%3A13.2455828Z'\"","PartitionKey":"typed","RowKey":"r1","Blob@odata.type":"Edm.Binary","Blob":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8g/f7/","Count@odata.type":"Edm.Int64","Count":"9223372036854775807","Flag":false,"Id@odata.type":"Edm.Guid","Id":"0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0","Name":"typed","Neg@odata.type":"Edm.Int64","Neg":"-9223372036854775808","Ratio":2.0,"Small":-2147483648,"When@odata.type":"Edm.DateTime","When":"2024-05-06T07:08:09.1234567Z","Timestamp":"2026-12-04T03:21:13.2455828Z"}`
)

// BenchmarkParseJSONEntity compares the scanner with the reference reader
// (json_ref_test.go), each followed by the same typing and validation.
func BenchmarkParseJSONEntity(b *testing.B) {
	for _, body := range []struct{ name, text string }{{"strings-1KiB", benchStrings}, {"typed", benchTyped}} {
		for _, reader := range []struct {
			name  string
			parse func([]byte) (*Entity, int, error)
		}{{"scanner", parseJSONEntity}, {"reference", refParseJSONEntity}} {
			b.Run(body.name+"/"+reader.name, func(b *testing.B) {
				in := []byte(body.text)
				b.SetBytes(int64(len(in)))
				b.ReportAllocs()
				for b.Loop() {
					if _, _, err := reader.parse(in); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkAppendJSON(b *testing.B) {
	e, _ := ParseJSONEntity([]byte(wireMinimal))
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendJSON(buf[:0], e, Metadata{Level: MinimalMetadata}, nil)
	}
}

func TestAppendJSONTypedDoubles(t *testing.T) {
	e := &Entity{PartitionKey: "p", RowKey: "r", Props: []Property{
		{Name: "D", Type: EdmDouble, Value: 2.0},
		{Name: "I", Type: EdmInt32, Value: int32(2)},
	}}
	got := string(AppendJSON(nil, e, Metadata{Level: MinimalMetadata, TypedDoubles: true}, nil))
	want := `{"PartitionKey":"p","RowKey":"r","D@odata.type":"Edm.Double","D":2.0,"I":2}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// The annotation keeps the type even after a re-encoding drops ".0".
	back, err := ParseJSONEntity([]byte(`{"PartitionKey":"p","RowKey":"r","D":2,"D@odata.type":"Edm.Double"}`))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := back.Get("D"); p.Type != EdmDouble || p.Value.(float64) != 2 {
		t.Fatalf("re-encoded double came back as %v %v", p.Type, p.Value)
	}
	if got := string(AppendJSON(nil, e, Metadata{Level: NoMetadata, TypedDoubles: true}, nil)); strings.Contains(got, "odata.type") {
		t.Fatalf("nometadata carries annotations: %s", got)
	}
}

func TestParseNewEntityNeedsKeys(t *testing.T) {
	for _, body := range []string{`{"RowKey":"r","V":1}`, `{"PartitionKey":"p"}`, `{}`} {
		if _, err := ParseNewEntity([]byte(body)); !errors.Is(err, ErrMissingKey) {
			t.Errorf("%s: %v, want ErrMissingKey", body, err)
		}
	}
	e, err := ParseNewEntity([]byte(`{"PartitionKey":"","RowKey":""}`))
	if err != nil || e.PartitionKey != "" || e.RowKey != "" {
		t.Fatalf("empty keys are legal: %v %v", e, err)
	}
	if _, err := ParseNewEntity([]byte(`{"PartitionKey":"` + strings.Repeat("k", 513) + `","RowKey":""}`)); !errors.Is(err, ErrKeyTooLong) || !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("1026-byte key: %v, want ErrKeyTooLong (an ErrInvalidKey)", err)
	}
}
