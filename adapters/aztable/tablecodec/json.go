package tablecodec

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

const typeSuffix = "@odata.type"

// ParseDateTime parses an Edm.DateTime in the ISO 8601 forms Azure accepts:
// yyyy-mm-ddThh:mm[:ss[.fffffff]] followed by Z, an offset, or nothing
// (UTC). The result is UTC, truncated to 100 ns.
func ParseDateTime(s string) (time.Time, error) {
	for _, layout := range [...]string{
		"2006-01-02T15:04:05.999999999Z07:00",
		"2006-01-02T15:04:05.999999999",
		"2006-01-02T15:04Z07:00",
		"2006-01-02T15:04",
	} {
		if t, err := time.Parse(layout, s); err == nil {
			return TruncateTicks(t), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not an ISO 8601 date-time", s)
}

// AppendDateTime appends t as Azure writes it: UTC, seconds always present,
// up to 7 fractional digits with trailing zeros dropped, then "Z".
func AppendDateTime(dst []byte, t time.Time) []byte {
	t = t.UTC()
	dst = t.AppendFormat(dst, "2006-01-02T15:04:05")
	if frac := t.Nanosecond() / 100; frac != 0 {
		var d [8]byte
		d[0] = '.'
		for i := 7; i >= 1; i-- {
			d[i] = byte('0' + frac%10)
			frac /= 10
		}
		dst = append(dst, bytes.TrimRight(d[:], "0")...)
	}
	return append(dst, 'Z')
}

// FormatDateTime is AppendDateTime as a string.
func FormatDateTime(t time.Time) string { return string(AppendDateTime(nil, t)) }

// jsonMember is one name/value pair of the request object, in body order.
type jsonMember struct {
	name string
	val  any // string, json.Number, bool or nil
}

// ParseJSONEntity parses an entity from an Azure JSON payload (any metadata
// level). Types follow Azure's rules: a "Name@odata.type" annotation fixes
// the type (Edm.Int64 as a JSON string, Edm.Binary base64, Edm.DateTime and
// Edm.Guid as strings, Edm.Double a number or "NaN", "Infinity",
// "-Infinity"); without one a JSON string is Edm.String, a boolean
// Edm.Boolean, an integer that fits in 32 bits Edm.Int32 and any other
// number Edm.Double. Null-valued properties are dropped, as Azure does.
// "odata.etag" and "Timestamp" fill ETag and Timestamp (so the aztables
// adapter can read service responses); other "odata.*" members are ignored.
// Errors wrap ErrInvalidValue or one of the limit sentinels, inside a
// *PropertyError when one property is at fault; the entity is validated
// with Entity.Validate.
func ParseJSONEntity(body []byte) (*Entity, error) {
	e, _, err := parseJSONEntity(body)
	return e, err
}

// ErrMissingKey (PropertiesNeedValue): an insert payload without a
// PartitionKey or RowKey member. Updates name the keys in the URL instead.
var ErrMissingKey = errors.New("tablecodec: the payload lacks PartitionKey or RowKey")

// ParseNewEntity is ParseJSONEntity for an insert: the payload must carry
// both PartitionKey and RowKey (empty strings are legal values).
func ParseNewEntity(body []byte) (*Entity, error) {
	e, keys, err := parseJSONEntity(body)
	if err == nil && keys != 2 {
		return nil, ErrMissingKey
	}
	return e, err
}

// parseJSONEntity also reports how many of PartitionKey and RowKey the
// payload named.
func parseJSONEntity(body []byte) (*Entity, int, error) {
	e, keys, err := parseJSONMembers(body)
	if err != nil {
		return nil, 0, err
	}
	if err := e.Validate(); err != nil {
		return nil, 0, err
	}
	return e, keys, nil
}

func parseJSONMembers(body []byte) (*Entity, int, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, 0, fmt.Errorf("%w: payload is not a JSON object", ErrInvalidValue)
	}
	var members []jsonMember
	types := map[string]string{}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, 0, fmt.Errorf("%w: %v", ErrInvalidValue, err)
		}
		name := tok.(string) // json.Decoder only yields string keys inside an object
		if seen[name] {
			return nil, 0, propErr(strings.TrimSuffix(name, typeSuffix), ErrDuplicateProperty, "")
		}
		seen[name] = true
		val, err := dec.Token()
		if err != nil {
			return nil, 0, propErr(name, ErrInvalidValue, "%v", err)
		}
		if _, ok := val.(json.Delim); ok {
			return nil, 0, propErr(name, ErrInvalidValue, "objects and arrays are not property values")
		}
		if base, ok := strings.CutSuffix(name, typeSuffix); ok {
			s, isStr := val.(string)
			if !isStr {
				return nil, 0, propErr(base, ErrInvalidValue, "odata.type annotation must be a string")
			}
			types[base] = s
			continue
		}
		members = append(members, jsonMember{name: name, val: val})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, 0, fmt.Errorf("%w: %v", ErrInvalidValue, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, 0, fmt.Errorf("%w: data after the JSON object", ErrInvalidValue)
	}
	for base := range types {
		if !seen[base] {
			return nil, 0, propErr(base, ErrInvalidValue, "type annotation without a value")
		}
	}

	e := &Entity{}
	keys := 0
	for _, m := range members {
		typeName, annotated := types[m.name]
		switch {
		case m.name == "odata.etag":
			if s, ok := m.val.(string); ok {
				e.ETag = s
			}
		case strings.HasPrefix(m.name, "odata."):
		case (m.name == "PartitionKey" || m.name == "RowKey") && m.val == nil:
			// A null key is no key: an insert lacks it (PropertiesNeedValue).
		case m.name == "PartitionKey" || m.name == "RowKey":
			s, ok := m.val.(string)
			if !ok || (annotated && typeName != "Edm.String") {
				return nil, 0, propErr(m.name, ErrInvalidValue, "must be a string")
			}
			keys++
			if m.name == "PartitionKey" {
				e.PartitionKey = s
			} else {
				e.RowKey = s
			}
		case m.name == "Timestamp":
			// Read-only for clients: Azure ignores what they send, so only
			// a well-formed value (from a service response) is kept.
			if s, ok := m.val.(string); ok {
				if t, err := ParseDateTime(s); err == nil {
					e.Timestamp = t
				}
			}
		case m.val == nil:
		default:
			p, err := jsonProperty(m.name, m.val, typeName, annotated)
			if err != nil {
				return nil, 0, err
			}
			e.Props = append(e.Props, p)
		}
	}
	return e, keys, nil
}

func isIntegerSyntax(s string) bool { return !strings.ContainsAny(s, ".eE") }

func jsonProperty(name string, val any, typeName string, annotated bool) (Property, error) {
	p := Property{Name: name}
	if !annotated {
		switch v := val.(type) {
		case string:
			p.Type, p.Value = EdmString, v
		case bool:
			p.Type, p.Value = EdmBoolean, v
		case json.Number:
			if isIntegerSyntax(string(v)) {
				if i, err := strconv.ParseInt(string(v), 10, 32); err == nil {
					p.Type, p.Value = EdmInt32, int32(i)
					return p, nil
				}
			}
			f, err := strconv.ParseFloat(string(v), 64)
			if err != nil {
				return p, propErr(name, ErrInvalidValue, "number %s out of range", v)
			}
			p.Type, p.Value = EdmDouble, f
		}
		return p, nil
	}
	t, ok := ParseEdmType(typeName)
	if !ok {
		return p, propErr(name, ErrInvalidValue, "unknown type %q", typeName)
	}
	p.Type = t
	bad := func(why string) (Property, error) {
		return p, propErr(name, ErrInvalidValue, "invalid %v value %v: %s", t, val, why)
	}
	s, isStr := val.(string)
	num, isNum := val.(json.Number)
	switch t {
	case EdmString:
		if !isStr {
			return bad("want a JSON string")
		}
		p.Value = s
	case EdmBoolean:
		b, isBool := val.(bool)
		if !isBool {
			return bad("want true or false")
		}
		p.Value = b
	case EdmInt32, EdmInt64:
		text := s
		if isNum {
			text = string(num)
		} else if !isStr {
			return bad("want an integer")
		}
		bits := 64
		if t == EdmInt32 {
			bits = 32
		}
		i, err := strconv.ParseInt(text, 10, bits)
		if err != nil {
			return bad("not a base-10 integer in range")
		}
		if t == EdmInt32 {
			p.Value = int32(i)
		} else {
			p.Value = i
		}
	case EdmDouble:
		var f float64
		switch {
		case isNum:
			var err error
			if f, err = strconv.ParseFloat(string(num), 64); err != nil {
				return bad("out of range")
			}
		case s == "NaN":
			f = math.NaN()
		case s == "Infinity":
			f = math.Inf(1)
		case s == "-Infinity":
			f = math.Inf(-1)
		case isStr && s != "" && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9')) && json.Valid([]byte(s)):
			var err error
			if f, err = strconv.ParseFloat(s, 64); err != nil {
				return bad("out of range")
			}
		default:
			return bad(`want a number, "NaN", "Infinity" or "-Infinity"`)
		}
		p.Value = f
	case EdmDateTime:
		if !isStr {
			return bad("want an ISO 8601 string")
		}
		tm, err := ParseDateTime(s)
		if err != nil {
			return bad(err.Error())
		}
		p.Value = tm
	case EdmGuid:
		if !isStr {
			return bad("want a string")
		}
		g, err := ParseGUID(s)
		if err != nil {
			return bad(err.Error())
		}
		p.Value = g
	case EdmBinary:
		if !isStr {
			return bad("want a base64 string")
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return bad("not base64")
		}
		p.Value = b
	}
	return p, nil
}

// MetadataLevel is the OData JSON metadata level a client asked for.
type MetadataLevel uint8

// The three JSON metadata levels.
const (
	NoMetadata MetadataLevel = iota
	MinimalMetadata
	FullMetadata
)

// ErrUnsupportedFormat: an Accept / $format value that is not one of the
// three JSON levels.
var ErrUnsupportedFormat = errors.New("tablecodec: unsupported payload format")

// ParseMetadataLevel reads the level from an Accept header or $format value
// such as "application/json;odata=fullmetadata". A bare "application/json"
// (or "json") means minimal metadata, as in Azure.
func ParseMetadataLevel(format string) (MetadataLevel, error) {
	mt, params, _ := strings.Cut(strings.ToLower(strings.ReplaceAll(format, " ", "")), ";")
	if mt != "application/json" && mt != "json" {
		return 0, fmt.Errorf("%w: %q", ErrUnsupportedFormat, format)
	}
	for _, kv := range strings.Split(params, ";") {
		switch kv {
		case "odata=nometadata":
			return NoMetadata, nil
		case "odata=minimalmetadata":
			return MinimalMetadata, nil
		case "odata=fullmetadata":
			return FullMetadata, nil
		}
	}
	return MinimalMetadata, nil
}

// Metadata says how AppendJSON decorates an entity.
type Metadata struct {
	Level MetadataLevel
	// Context, when non-empty, is written first as "odata.metadata" (only
	// for minimal and full levels). Single-entity responses set it
	// (".../$metadata#<table>/@Element"); entities inside a query's
	// "value" array leave it empty.
	Context string
	// BaseURL (e.g. "http://127.0.0.1:10002/devstoreaccount1/", with the
	// trailing slash), Account and Table build full metadata's odata.type
	// ("<account>.<table>"), odata.id and odata.editLink.
	BaseURL, Account, Table string
	// TypedDoubles annotates every Edm.Double, not only non-finite ones
	// (minimal and full levels). A writer that decodes and re-encodes the
	// JSON (the aztables SDK turns a body into map[string]any and back, so
	// 2.0 leaves as 2) would otherwise turn an integral Double into Int32.
	TypedDoubles bool
}

// AppendJSON appends e as one JSON object in Azure's shape for meta.Level:
// odata.metadata (when meta.Context is set), then for full metadata
// odata.type and odata.id, odata.etag (not at nometadata), odata.editLink
// (full), PartitionKey, RowKey, Timestamp, then the properties in stored
// order. Type annotations precede their value: Edm.Int64, Edm.DateTime,
// Edm.Guid, Edm.Binary and non-finite Edm.Double get one at minimal and
// full levels, Timestamp only at full level, nothing at nometadata (values
// are unchanged, so an Int64 is still a JSON string).
//
// sel is a $select list: when non-empty only the named properties are
// written (system ones included only if named) and a named property the
// entity lacks is written as null, as Azure does; odata.* metadata is
// always written.
func AppendJSON(dst []byte, e *Entity, meta Metadata, sel []string) []byte {
	annotate := meta.Level != NoMetadata
	full := meta.Level == FullMetadata
	want := func(string) bool { return true }
	if len(sel) > 0 {
		want = func(n string) bool {
			for _, s := range sel {
				if s == n {
					return true
				}
			}
			return false
		}
	}
	w := objWriter{b: append(dst, '{')}
	if annotate && meta.Context != "" {
		w.str("odata.metadata", meta.Context)
	}
	var link string
	if full {
		link = meta.Table + "(PartitionKey='" + keyLiteral(e.PartitionKey) + "',RowKey='" + keyLiteral(e.RowKey) + "')"
		w.str("odata.type", meta.Account+"."+meta.Table)
		w.str("odata.id", meta.BaseURL+link)
	}
	if annotate && e.ETag != "" {
		w.str("odata.etag", e.ETag)
	}
	if full {
		w.str("odata.editLink", link)
	}
	if want("PartitionKey") {
		w.str("PartitionKey", e.PartitionKey)
	}
	if want("RowKey") {
		w.str("RowKey", e.RowKey)
	}
	if want("Timestamp") && !e.Timestamp.IsZero() {
		if full {
			w.str("Timestamp"+typeSuffix, "Edm.DateTime")
		}
		w.key("Timestamp")
		w.b = append(w.b, '"')
		w.b = AppendDateTime(w.b, e.Timestamp)
		w.b = append(w.b, '"')
	}
	for _, p := range e.Props {
		if want(p.Name) {
			w.prop(p, annotate, meta.TypedDoubles)
		}
	}
	for i, n := range sel {
		if isSystemName(n) || slicesContains(sel[:i], n) {
			continue
		}
		if _, ok := e.Get(n); !ok {
			w.key(n)
			w.b = append(w.b, "null"...)
		}
	}
	return append(w.b, '}')
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// keyLiteral spells a key inside an OData key predicate in a URL: quotes
// doubled, then percent-escaped like a path segment.
func keyLiteral(k string) string {
	return url.PathEscape(strings.ReplaceAll(k, "'", "''"))
}

type objWriter struct {
	b []byte
	n int
}

func (w *objWriter) key(k string) {
	if w.n > 0 {
		w.b = append(w.b, ',')
	}
	w.n++
	w.b = appendJSONString(w.b, k)
	w.b = append(w.b, ':')
}

func (w *objWriter) str(k, v string) {
	w.key(k)
	w.b = appendJSONString(w.b, v)
}

func (w *objWriter) prop(p Property, annotate, typedDoubles bool) {
	needType := false
	switch p.Type {
	case EdmInt64, EdmDateTime, EdmGuid, EdmBinary:
		needType = true
	case EdmDouble:
		f := p.Value.(float64)
		needType = typedDoubles || math.IsNaN(f) || math.IsInf(f, 0)
	}
	if annotate && needType {
		w.str(p.Name+typeSuffix, p.Type.String())
	}
	w.key(p.Name)
	switch v := p.Value.(type) {
	case string:
		w.b = appendJSONString(w.b, v)
	case int32:
		w.b = strconv.AppendInt(w.b, int64(v), 10)
	case int64:
		w.b = append(w.b, '"')
		w.b = strconv.AppendInt(w.b, v, 10)
		w.b = append(w.b, '"')
	case float64:
		w.b = appendDouble(w.b, v)
	case bool:
		w.b = strconv.AppendBool(w.b, v)
	case time.Time:
		w.b = append(w.b, '"')
		w.b = AppendDateTime(w.b, v)
		w.b = append(w.b, '"')
	case GUID:
		w.b = appendJSONString(w.b, v.String())
	case []byte:
		w.b = append(w.b, '"')
		w.b = base64.StdEncoding.AppendEncode(w.b, v)
		w.b = append(w.b, '"')
	}
}

// appendDouble writes a finite double so that it reads back as a double:
// integral values get ".0" (a bare "2" would come back as Edm.Int32), large
// and tiny magnitudes use an exponent, like .NET's round-trip format.
// Non-finite values are Azure's strings.
func appendDouble(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Infinity"`...)
	}
	start := len(b)
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		b = strconv.AppendFloat(b, f, 'e', -1, 64)
	} else {
		b = strconv.AppendFloat(b, f, 'f', -1, 64)
	}
	if !bytes.ContainsAny(b[start:], ".e") {
		b = append(b, ".0"...)
	}
	return b
}

// appendJSONString quotes s as JSON without HTML escaping (Azure does not
// escape < > &); invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, "\ufffd"...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
