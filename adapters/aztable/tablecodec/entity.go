package tablecodec

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// EdmType is the type of one entity property.
type EdmType uint8

// The Edm types Azure Table supports. The numeric values are part of the
// binary value format: never renumber them.
const (
	EdmString   EdmType = 1
	EdmInt32    EdmType = 2
	EdmInt64    EdmType = 3
	EdmDouble   EdmType = 4
	EdmBoolean  EdmType = 5
	EdmDateTime EdmType = 6
	EdmGuid     EdmType = 7
	EdmBinary   EdmType = 8
)

var edmNames = [...]string{
	EdmString:   "Edm.String",
	EdmInt32:    "Edm.Int32",
	EdmInt64:    "Edm.Int64",
	EdmDouble:   "Edm.Double",
	EdmBoolean:  "Edm.Boolean",
	EdmDateTime: "Edm.DateTime",
	EdmGuid:     "Edm.Guid",
	EdmBinary:   "Edm.Binary",
}

// String returns the OData name, e.g. "Edm.Int64".
func (t EdmType) String() string {
	if t.valid() {
		return edmNames[t]
	}
	return fmt.Sprintf("EdmType(%d)", uint8(t))
}

func (t EdmType) valid() bool { return t >= EdmString && t <= EdmBinary }

// ParseEdmType maps an OData type name ("Edm.Guid") to its EdmType.
func ParseEdmType(s string) (EdmType, bool) {
	for t := EdmString; t <= EdmBinary; t++ {
		if edmNames[t] == s {
			return t, true
		}
	}
	return 0, false
}

// GUID is an Edm.Guid in the byte order of its textual form, so comparing
// GUIDs bytewise equals comparing their canonical lowercase strings.
type GUID [16]byte

// String returns the canonical lowercase hyphenated form.
func (g GUID) String() string { return string(appendGUID(make([]byte, 0, 36), g)) }

// appendGUID appends g's canonical lowercase hyphenated form.
func appendGUID(b []byte, g GUID) []byte {
	n := len(b)
	b = append(b, "00000000-0000-0000-0000-000000000000"...)
	o := b[n:]
	hex.Encode(o[0:8], g[0:4])
	hex.Encode(o[9:13], g[4:6])
	hex.Encode(o[14:18], g[6:8])
	hex.Encode(o[19:23], g[8:10])
	hex.Encode(o[24:36], g[10:16])
	return b
}

// ParseGUID parses the 36-character hyphenated form, in either case.
func ParseGUID(s string) (GUID, error) {
	var g GUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return g, fmt.Errorf("guid %q: want xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", s)
	}
	src := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	if _, err := hex.Decode(g[:], []byte(src)); err != nil {
		return GUID{}, fmt.Errorf("guid %q: %w", s, err)
	}
	return g, nil
}

// Property is one typed entity property. Value's Go type is fixed by Type:
//
//	EdmString   string
//	EdmInt32    int32
//	EdmInt64    int64
//	EdmDouble   float64 (NaN and ±Inf allowed)
//	EdmBoolean  bool
//	EdmDateTime time.Time (UTC, 100 ns precision: see TruncateTicks)
//	EdmGuid     GUID
//	EdmBinary   []byte
type Property struct {
	Name  string
	Type  EdmType
	Value any
}

// Entity is one Azure Table entity. Timestamp and ETag are the service's
// metadata: the frontend sets them on every write.
type Entity struct {
	PartitionKey, RowKey string
	Timestamp            time.Time
	ETag                 string
	Props                []Property
}

// Get returns the property named name (case-sensitive) and whether it exists.
// System properties are not in Props; callers treat PartitionKey, RowKey and
// Timestamp themselves.
func (e *Entity) Get(name string) (Property, bool) {
	for _, p := range e.Props {
		if p.Name == name {
			return p, true
		}
	}
	return Property{}, false
}

// Azure's documented limits.
const (
	MaxProperties     = 255 // including PartitionKey, RowKey and Timestamp
	MaxNameLen        = 255 // characters (UTF-16 code units)
	MaxValueBytes     = 64 << 10
	MaxEntityBytes    = 1 << 20
	MaxKeyBytes       = 1 << 10 // UTF-16 bytes of a PartitionKey or RowKey
	systemProperties  = 3
	ticksPerSecond    = 10_000_000
	unixToTicksOffset = 62135596800 // seconds from 0001-01-01 to 1970-01-01
)

// minDateTime is the smallest Edm.DateTime Azure stores.
var minDateTime = time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC)

// Sentinel errors. Each names the Azure error code the frontend should
// answer with; they reach callers wrapped in a *PropertyError when a single
// property is at fault.
var (
	// ErrInvalidValue (InvalidInput): a value does not match its type, a
	// payload is not a JSON object, or an annotation is wrong.
	ErrInvalidValue = errors.New("tablecodec: invalid property value")
	// ErrPropertyNameInvalid (PropertyNameInvalid).
	ErrPropertyNameInvalid = errors.New("tablecodec: invalid property name")
	// ErrPropertyNameTooLong (PropertyNameTooLong).
	ErrPropertyNameTooLong = errors.New("tablecodec: property name longer than 255 characters")
	// ErrTooManyProperties (TooManyProperties).
	ErrTooManyProperties = errors.New("tablecodec: more than 255 properties")
	// ErrPropertyValueTooLarge (PropertyValueTooLarge).
	ErrPropertyValueTooLarge = errors.New("tablecodec: property value larger than 64 KiB")
	// ErrEntityTooLarge (EntityTooLarge).
	ErrEntityTooLarge = errors.New("tablecodec: entity larger than 1 MiB")
	// ErrInvalidKey (OutOfRangeInput; PropertyValueTooLarge when too
	// long): a PartitionKey or RowKey has a forbidden character or is over
	// 1 KiB. Its PropertyError carries the key as Value.
	ErrInvalidKey = errors.New("tablecodec: invalid key value")
	// ErrKeyTooLong (PropertyValueTooLarge) is the ErrInvalidKey of a key
	// over 1 KiB.
	ErrKeyTooLong = fmt.Errorf("%w: longer than 1 KiB", ErrInvalidKey)
	// ErrValueOutOfRange (OutOfRangeInput): a value of the right type
	// outside the range the service stores (an Edm.DateTime before
	// 1601). Its PropertyError carries the value as the service quotes it.
	ErrValueOutOfRange = errors.New("tablecodec: property value out of range")
	// ErrDuplicateProperty (DuplicatePropertiesSpecified): a payload
	// names a property (or annotation) twice.
	ErrDuplicateProperty = errors.New("tablecodec: property specified more than once")
	// ErrCorrupt: a binary value that EncodeEntity cannot have produced.
	ErrCorrupt = errors.New("tablecodec: corrupt encoded entity")
)

// PropertyError names the property an error is about. errors.Is sees the
// sentinel through Unwrap.
type PropertyError struct {
	Property string
	Err      error
	// Value is the offending value as the service quotes it in an
	// OutOfRangeInput message ("The 'P' parameter of value 'v' is out of
	// range."), when the service does.
	Value string
}

func (e *PropertyError) Error() string { return fmt.Sprintf("property %q: %v", e.Property, e.Err) }

// Unwrap returns the underlying (sentinel-wrapping) error.
func (e *PropertyError) Unwrap() error { return e.Err }

func propErr(name string, sentinel error, format string, args ...any) error {
	if format == "" {
		return &PropertyError{Property: name, Err: sentinel}
	}
	return &PropertyError{Property: name, Err: fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))}
}

// utf16Len is the length of s in UTF-16 code units, the unit of Azure's
// string limits.
func utf16Len(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			n := i // one unit per ASCII byte
			for _, r := range s[i:] {
				n += utf16.RuneLen(r)
			}
			return n
		}
	}
	return len(s)
}

// ValidName reports whether name is a legal property name: a C# identifier,
// as Azure's data model requires: a letter (categories Lu, Ll, Lt, Lm, Lo,
// Nl) or underscore, then letters, decimal digits (Nd), connectors (Pc),
// combining marks (Mn, Mc) and formatting characters (Cf). Length is
// checked separately.
func ValidName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		switch {
		case r == '_' || unicode.IsLetter(r) || unicode.Is(unicode.Nl, r):
		case i > 0 && unicode.In(r, unicode.Nd, unicode.Pc, unicode.Mn, unicode.Mc, unicode.Cf):
		default:
			return false
		}
	}
	return true
}

// ValidateKey checks a PartitionKey or RowKey value against Azure's rules:
// at most 1 KiB as UTF-16 (512 code units: the unit of the data model's
// size accounting, and Azurite's limit), none of / \ # ?, no control
// characters U+0000–U+001F or U+007F–U+009F. name is used in the error.
func ValidateKey(name, value string) error {
	if !utf8.ValidString(value) {
		return &PropertyError{Property: name, Err: fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey), Value: value}
	}
	if 2*utf16Len(value) > MaxKeyBytes {
		return propErr(name, ErrKeyTooLong, "")
	}
	for _, r := range value {
		if InvalidKeyRune(r) {
			return &PropertyError{Property: name, Err: fmt.Errorf("%w: contains %U", ErrInvalidKey, r), Value: value}
		}
	}
	return nil
}

// InvalidKeyRune reports whether r may not appear in a PartitionKey or
// RowKey.
func InvalidKeyRune(r rune) bool {
	return r == '/' || r == '\\' || r == '#' || r == '?' || r <= 0x1F || (r >= 0x7F && r <= 0x9F)
}

// Validate checks the entity against Azure's limits: keys, property names,
// value types and sizes, property count, total size. It does not require
// PartitionKey or RowKey to be set (an update names them in the URL).
func (e *Entity) Validate() error {
	if err := ValidateKey("PartitionKey", e.PartitionKey); err != nil {
		return err
	}
	if err := ValidateKey("RowKey", e.RowKey); err != nil {
		return err
	}
	if len(e.Props)+systemProperties > MaxProperties {
		return fmt.Errorf("%w: %d custom properties (at most %d)", ErrTooManyProperties, len(e.Props), MaxProperties-systemProperties)
	}
	var seen map[string]struct{} // past smallObject properties; fewer are scanned
	if len(e.Props) > smallObject {
		seen = make(map[string]struct{}, len(e.Props))
	}
	for i, p := range e.Props {
		if err := p.validate(); err != nil {
			return err
		}
		dup := false
		if seen != nil {
			_, dup = seen[p.Name]
			seen[p.Name] = struct{}{}
		} else {
			dup = slices.ContainsFunc(e.Props[:i], func(q Property) bool { return q.Name == p.Name })
		}
		if dup {
			return propErr(p.Name, ErrDuplicateProperty, "")
		}
	}
	if n := e.AzureSize(); n > MaxEntityBytes {
		return fmt.Errorf("%w: %d bytes", ErrEntityTooLarge, n)
	}
	return nil
}

func (p Property) validate() error {
	if utf16Len(p.Name) > MaxNameLen {
		return propErr(p.Name, ErrPropertyNameTooLong, "")
	}
	if isSystemName(p.Name) || !ValidName(p.Name) {
		return propErr(p.Name, ErrPropertyNameInvalid, "")
	}
	if err := checkValueType(p); err != nil {
		return err
	}
	switch v := p.Value.(type) {
	case string:
		if !utf8.ValidString(v) {
			return propErr(p.Name, ErrInvalidValue, "string is not valid UTF-8")
		}
		if 2*utf16Len(v) > MaxValueBytes {
			return propErr(p.Name, ErrPropertyValueTooLarge, "")
		}
	case []byte:
		if len(v) > MaxValueBytes {
			return propErr(p.Name, ErrPropertyValueTooLarge, "")
		}
	case time.Time:
		if v.Before(minDateTime) || v.Year() > 9999 {
			// The service quotes the value in .NET's invariant format.
			return &PropertyError{Property: p.Name, Err: fmt.Errorf("%w: DateTime outside 1601-01-01..9999-12-31", ErrValueOutOfRange),
				Value: v.UTC().Format("01/02/2006 15:04:05")}
		}
	}
	return nil
}

// checkValueType verifies that Value has the Go type Type demands.
func checkValueType(p Property) error {
	ok := false
	switch p.Value.(type) {
	case string:
		ok = p.Type == EdmString
	case int32:
		ok = p.Type == EdmInt32
	case int64:
		ok = p.Type == EdmInt64
	case float64:
		ok = p.Type == EdmDouble
	case bool:
		ok = p.Type == EdmBoolean
	case time.Time:
		ok = p.Type == EdmDateTime
	case GUID:
		ok = p.Type == EdmGuid
	case []byte:
		ok = p.Type == EdmBinary
	}
	if !ok {
		return propErr(p.Name, ErrInvalidValue, "Go value %T does not fit %v", p.Value, p.Type)
	}
	return nil
}

func isSystemName(n string) bool {
	return n == "PartitionKey" || n == "RowKey" || n == "Timestamp"
}

// AzureSize is the entity's size by Azure's accounting: 4 bytes, plus
// 2 bytes per key character, plus per property 8 bytes, 2 per name
// character and the value's size (strings 4 + 2 per character, binary
// 4 + length, fixed sizes otherwise). It is what the 1 MiB limit applies to.
func (e *Entity) AzureSize() int {
	n := 4 + 2*utf16Len(e.PartitionKey) + 2*utf16Len(e.RowKey)
	for _, p := range e.Props {
		n += 8 + 2*utf16Len(p.Name)
		switch v := p.Value.(type) {
		case string:
			n += 4 + 2*utf16Len(v)
		case []byte:
			n += 4 + len(v)
		case int32:
			n += 4
		case bool:
			n++
		case GUID:
			n += 16
		default: // int64, float64, time.Time
			n += 8
		}
	}
	return n
}

// Ticks returns t as 100 ns ticks since 0001-01-01 UTC (.NET DateTime.Ticks),
// dropping anything finer than 100 ns.
func Ticks(t time.Time) int64 {
	return (t.Unix()+unixToTicksOffset)*ticksPerSecond + int64(t.Nanosecond()/100)
}

// FromTicks inverts Ticks, returning a UTC time.
func FromTicks(ticks int64) time.Time {
	sec := ticks / ticksPerSecond
	rem := ticks % ticksPerSecond
	if rem < 0 {
		sec--
		rem += ticksPerSecond
	}
	return time.Unix(sec-unixToTicksOffset, rem*100).UTC()
}

// TruncateTicks returns t in UTC truncated to Azure's 100 ns precision, the
// form every DateTime this package produces has.
func TruncateTicks(t time.Time) time.Time { return FromTicks(Ticks(t)) }

// Unstamped returns an encoded entity without the service's stamps
// (Timestamp and ETag) and with its properties in name order: two values
// SameEntity finds the same (an entity nemo wrote, and the same entity
// read back from the service) give the same bytes, except for doubles
// and times SameEntity equates in other forms. A value that does not
// decode is returned as it is.
func Unstamped(v []byte) []byte {
	e, err := DecodeEntity(v)
	if err != nil {
		return v
	}
	e.ETag, e.Timestamp = "", time.Time{}
	slices.SortFunc(e.Props, func(x, y Property) int { return strings.Compare(x.Name, y.Name) })
	return EncodeEntity(e)
}

// SameEntity reports whether two encoded entities hold the same keys and
// properties, in any order, ignoring the service's stamps (Timestamp and
// ETag): an entity written through nemo and the same entity read back from
// the service differ only there. Doubles compare by value, except that NaN
// equals NaN (an entity holding a NaN is the same as itself); times compare
// as instants. Values that do not decode are compared as bytes.
func SameEntity(a, b []byte) bool {
	ea, err1 := DecodeEntity(a)
	eb, err2 := DecodeEntity(b)
	if err1 != nil || err2 != nil {
		return bytes.Equal(a, b)
	}
	if ea.PartitionKey != eb.PartitionKey || ea.RowKey != eb.RowKey || len(ea.Props) != len(eb.Props) {
		return false
	}
	byName := func(x, y Property) int { return strings.Compare(x.Name, y.Name) }
	slices.SortFunc(ea.Props, byName)
	slices.SortFunc(eb.Props, byName)
	for i, pa := range ea.Props {
		pb := eb.Props[i]
		if pa.Name != pb.Name || pa.Type != pb.Type || !sameValue(pa.Value, pb.Value) {
			return false
		}
	}
	return true
}

// sameValue compares two decoded property values of one type.
func sameValue(a, b any) bool {
	switch av := a.(type) {
	case float64:
		bv, ok := b.(float64)
		return ok && (av == bv || math.IsNaN(av) && math.IsNaN(bv))
	case time.Time:
		bv, ok := b.(time.Time)
		return ok && av.Equal(bv)
	case []byte:
		bv, ok := b.([]byte)
		return ok && bytes.Equal(av, bv)
	}
	return a == b
}
