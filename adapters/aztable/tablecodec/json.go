package tablecodec

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
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
	if y := t.Year(); y < 0 || y > 9999 {
		dst = t.AppendFormat(dst, "2006-01-02T15:04:05")
	} else {
		_, mo, d := t.Date()
		h, mi, s := t.Clock()
		dst = append(dst, byte('0'+y/1000), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10), '-',
			byte('0'+int(mo)/10), byte('0'+int(mo)%10), '-', byte('0'+d/10), byte('0'+d%10), 'T',
			byte('0'+h/10), byte('0'+h%10), ':', byte('0'+mi/10), byte('0'+mi%10), ':', byte('0'+s/10), byte('0'+s%10))
	}
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

// ParseJSONEntity parses an entity from an Azure JSON payload (any metadata
// level). Types follow Azure's rules: a "Name@odata.type" annotation fixes
// the type (Edm.Int64 as a JSON string only, Edm.Int32 a number or a
// string, Edm.Binary base64, Edm.DateTime and Edm.Guid as strings,
// Edm.Double a number or "NaN", "Infinity", "-Infinity"); without one a JSON string is Edm.String, a boolean
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
	var space [smallObject]jsonMember // a small object's members live on the stack
	members, err := readJSONObject(body, space[:0])
	if err != nil {
		return nil, 0, err
	}
	return entityOf(members)
}

// entityOf is the validated entity the payload's members give, and how
// many of PartitionKey and RowKey they named.
func entityOf(members []jsonMember) (*Entity, int, error) {
	e, keys, err := entityFromMembers(members)
	if err != nil {
		return nil, 0, err
	}
	if err := e.Validate(); err != nil {
		return nil, 0, err
	}
	return e, keys, nil
}

// entityFromMembers builds the entity from the payload's members (their
// annotations resolved), and counts the PartitionKey and RowKey members
// with a value. "odata.etag" gives the ETag, other "odata.*" members,
// annotations and null-valued properties are dropped.
func entityFromMembers(members []jsonMember) (*Entity, int, error) {
	e := &Entity{}
	if n := countProperties(members); n > 0 {
		e.Props = make([]Property, 0, n)
	}
	keys := 0
	for _, m := range members {
		switch {
		case m.annotation:
		case m.name == "odata.etag":
			if m.val.kind == jsonString {
				e.ETag = m.val.text
			}
		case strings.HasPrefix(m.name, "odata."):
		case m.name == "PartitionKey" || m.name == "RowKey":
			set, err := setJSONKey(e, m)
			if err != nil {
				return nil, 0, err
			}
			if set {
				keys++
			}
		case m.name == "Timestamp":
			// Read-only for clients: Azure ignores what they send, so only
			// a well-formed value (from a service response) is kept.
			if m.val.kind == jsonString {
				if t, err := ParseDateTime(m.val.text); err == nil {
					e.Timestamp = t
				}
			}
		case m.val.kind == jsonNull:
		default:
			p, err := jsonProperty(m)
			if err != nil {
				return nil, 0, err
			}
			e.Props = append(e.Props, p)
		}
	}
	return e, keys, nil
}

// countProperties is how many of members entityFromMembers makes
// properties of.
func countProperties(members []jsonMember) int {
	n := 0
	for _, m := range members {
		if !m.annotation && m.val.kind != jsonNull && !isSystemName(m.name) && !strings.HasPrefix(m.name, "odata.") {
			n++
		}
	}
	return n
}

// setJSONKey sets e's PartitionKey or RowKey (m.name) from m, a string
// (annotated Edm.String if at all), and reports whether it did: a null
// key is no key (an insert lacks it: PropertiesNeedValue).
func setJSONKey(e *Entity, m jsonMember) (bool, error) {
	if m.val.kind == jsonNull {
		return false, nil
	}
	if m.val.kind != jsonString || (m.annotated && m.typ != "Edm.String") {
		return false, propErr(m.name, ErrInvalidValue, "must be a string")
	}
	if m.name == "PartitionKey" {
		e.PartitionKey = m.val.text
	} else {
		e.RowKey = m.val.text
	}
	return true, nil
}

func isIntegerSyntax(s string) bool { return !strings.ContainsAny(s, ".eE") }

// jsonProperty is the property member m gives, typed by its annotation
// if it has one.
func jsonProperty(m jsonMember) (Property, error) {
	name, val := m.name, m.val
	if !m.annotated {
		return jsonUntyped(name, val)
	}
	p := Property{Name: name}
	t, ok := ParseEdmType(m.typ)
	if !ok {
		return p, propErr(name, ErrInvalidValue, "unknown type %q", m.typ)
	}
	p.Type = t
	bad := func(why string) (Property, error) {
		return p, propErr(name, ErrInvalidValue, "invalid %v value %v: %s", t, val.display(), why)
	}
	isStr := val.kind == jsonString
	switch t {
	case EdmString:
		if !isStr {
			return bad("want a JSON string")
		}
		p.Value = val.text
	case EdmBoolean:
		if val.kind != jsonBool {
			return bad("want true or false")
		}
		p.Value = val.b
	case EdmInt32, EdmInt64:
		v, why := jsonInteger(t, val)
		if why != "" {
			return bad(why)
		}
		p.Value = v
	case EdmDouble:
		f, why := jsonDouble(val)
		if why != "" {
			return bad(why)
		}
		p.Value = f
	case EdmDateTime:
		if !isStr {
			return bad("want an ISO 8601 string")
		}
		tm, err := ParseDateTime(val.text)
		if err != nil {
			return bad(err.Error())
		}
		p.Value = tm
	case EdmGuid:
		if !isStr {
			return bad("want a string")
		}
		g, err := ParseGUID(val.text)
		if err != nil {
			return bad(err.Error())
		}
		p.Value = g
	case EdmBinary:
		if !isStr {
			return bad("want a base64 string")
		}
		b, err := base64.StdEncoding.DecodeString(val.text)
		if err != nil {
			return bad("not base64")
		}
		p.Value = b
	}
	return p, nil
}

// jsonUntyped is property name with JSON value val and no type
// annotation: a string, a boolean, an Edm.Int32 if the number is an
// integer that fits, else an Edm.Double. Other values (null) have no type.
func jsonUntyped(name string, val jsonValue) (Property, error) {
	p := Property{Name: name}
	switch val.kind {
	case jsonString:
		p.Type, p.Value = EdmString, val.text
	case jsonBool:
		p.Type, p.Value = EdmBoolean, val.b
	case jsonNumber:
		if isIntegerSyntax(val.text) {
			if i, err := strconv.ParseInt(val.text, 10, 32); err == nil {
				p.Type, p.Value = EdmInt32, int32(i)
				return p, nil
			}
		}
		f, err := strconv.ParseFloat(val.text, 64)
		if err != nil {
			return p, propErr(name, ErrInvalidValue, "number %s out of range", val.text)
		}
		p.Type, p.Value = EdmDouble, f
	}
	return p, nil
}

// jsonInteger is the Edm.Int32 or Edm.Int64 (t) value of val, or why it
// is none: an Edm.Int32 is a JSON number or string, an Edm.Int64 a JSON
// string only, as OData JSON writes it (a JavaScript number cannot hold
// every 64-bit integer); Azure and Azurite refuse a number there (400
// InvalidInput), which nemo once stored.
func jsonInteger(t EdmType, val jsonValue) (any, string) {
	if t == EdmInt64 && val.kind != jsonString {
		return nil, "want a JSON string (OData JSON writes Edm.Int64 as a string)"
	}
	if val.kind != jsonNumber && val.kind != jsonString {
		return nil, "want an integer"
	}
	bits := 64
	if t == EdmInt32 {
		bits = 32
	}
	i, err := strconv.ParseInt(val.text, 10, bits)
	if err != nil {
		return nil, "not a base-10 integer in range"
	}
	if t == EdmInt32 {
		return int32(i), ""
	}
	return i, ""
}

// jsonDouble is the Edm.Double value of val: a JSON number, "NaN",
// "Infinity", "-Infinity" or a number in a string; or why it is none.
func jsonDouble(val jsonValue) (float64, string) {
	s := ""
	if val.kind == jsonString {
		s = val.text
	}
	var f float64
	var err error
	switch {
	case val.kind == jsonNumber:
		f, err = strconv.ParseFloat(val.text, 64)
	case s == "NaN":
		return math.NaN(), ""
	case s == "Infinity":
		return math.Inf(1), ""
	case s == "-Infinity":
		return math.Inf(-1), ""
	case s != "" && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9')) && json.Valid([]byte(s)):
		f, err = strconv.ParseFloat(s, 64)
	default:
		return 0, `want a number, "NaN", "Infinity" or "-Infinity"`
	}
	if err != nil {
		return 0, "out of range"
	}
	return f, ""
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
	switch format { // what the SDKs send, without the allocations below
	case "application/json;odata=minimalmetadata", "application/json":
		return MinimalMetadata, nil
	case "application/json;odata=nometadata":
		return NoMetadata, nil
	case "application/json;odata=fullmetadata":
		return FullMetadata, nil
	}
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
