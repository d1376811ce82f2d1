package tablecodec

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// AppendJSON appends e as one JSON object in Azure's shape for meta.Level;
// see AppendValueJSON, which writes the same bytes from e's encoded value.
func AppendJSON(dst []byte, e *Entity, meta Metadata, sel []string) []byte {
	out, err := AppendValueJSON(dst, EncodeEntity(e), meta, sel)
	if err != nil {
		// EncodeEntity's output always decodes.
		panic("tablecodec: AppendJSON: " + err.Error())
	}
	return out
}

// AppendValueJSON appends the entity whose binary value is v (see
// EncodeEntity) as one JSON object in Azure's shape for meta.Level,
// straight from the value: nothing is decoded into an Entity, so a read
// answered from the buffer allocates only dst's growth. The object holds
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
// always written. A malformed v returns dst unchanged and an error
// wrapping ErrCorrupt.
func AppendValueJSON(dst, v []byte, meta Metadata, sel []string) ([]byte, error) {
	h, err := readHeader(v)
	if err != nil {
		return dst, err
	}
	annotate := meta.Level != NoMetadata
	w := objWriter{b: append(dst, '{')}
	w.header(h, meta, sel)
	d := &decoder{b: v, off: h.props}
	for i := uint64(0); i < h.n && d.err == nil; i++ {
		name := d.bytes(d.uvarint())
		typ := EdmType(d.byte1())
		if !selected(sel, name) {
			skipValue(d, typ)
			continue
		}
		w.prop(d, name, typ, annotate, meta.TypedDoubles)
	}
	if d.err == nil && d.off != len(v) {
		d.fail("%d trailing bytes", len(v)-d.off)
	}
	if d.err != nil {
		return dst, d.err
	}
	for i, n := range sel {
		if isSystemName(n) || slicesContains(sel[:i], n) || hasProp(v, h, n) {
			continue
		}
		w.key(n)
		w.b = append(w.b, "null"...)
	}
	return append(w.b, '}'), nil
}

// selected reports whether $select list sel (all properties when empty)
// names property n.
func selected(sel []string, n []byte) bool {
	if len(sel) == 0 {
		return true
	}
	for _, s := range sel {
		if s == string(n) {
			return true
		}
	}
	return false
}

// header writes the object's odata.* metadata and the system properties
// of h that sel selects, in AppendValueJSON's order.
func (w *objWriter) header(h header, meta Metadata, sel []string) {
	annotate := meta.Level != NoMetadata
	full := meta.Level == FullMetadata
	if annotate && meta.Context != "" {
		w.str("odata.metadata", meta.Context)
	}
	var link string
	if full {
		link = meta.Table + "(PartitionKey='" + keyLiteral(string(h.pk)) + "',RowKey='" + keyLiteral(string(h.rk)) + "')"
		w.str("odata.type", meta.Account+"."+meta.Table)
		w.str("odata.id", meta.BaseURL+link)
	}
	if annotate && len(h.etag) > 0 {
		w.key("odata.etag")
		w.b = appendJSONString(w.b, h.etag)
	}
	if full {
		w.str("odata.editLink", link)
	}
	if selected(sel, []byte("PartitionKey")) {
		w.key("PartitionKey")
		w.b = appendJSONString(w.b, h.pk)
	}
	if selected(sel, []byte("RowKey")) {
		w.key("RowKey")
		w.b = appendJSONString(w.b, h.rk)
	}
	if selected(sel, []byte("Timestamp")) && h.ts != zeroTicks {
		if full {
			w.str("Timestamp"+typeSuffix, "Edm.DateTime")
		}
		w.key("Timestamp")
		w.b = append(w.b, '"')
		w.b = AppendDateTime(w.b, FromTicks(h.ts))
		w.b = append(w.b, '"')
	}
}

// ValueETag is the ETag stored in the encoded entity v.
func ValueETag(v []byte) (string, error) {
	h, err := readHeader(v)
	return string(h.etag), err
}

// header is an encoded entity's fixed part, its fields aliasing the value.
type header struct {
	pk, rk, etag []byte
	ts           int64
	n            uint64 // property count
	props        int    // offset of the first property
}

func readHeader(v []byte) (header, error) {
	d := &decoder{b: v}
	if ver := d.byte1(); d.err == nil && ver != formatV1 {
		d.fail("unknown format version %d", ver)
	}
	h := header{pk: d.bytes(d.uvarint()), rk: d.bytes(d.uvarint()), ts: d.varint(), etag: d.bytes(d.uvarint())}
	h.n = d.uvarint()
	if d.err == nil && h.n > uint64(len(v)-d.off) { // every property takes at least 2 bytes
		d.fail("property count %d exceeds input", h.n)
	}
	h.props = d.off
	return h, d.err
}

// skipValue steps d over one property value of type t.
func skipValue(d *decoder, t EdmType) {
	switch t {
	case EdmString, EdmBinary:
		d.bytes(d.uvarint())
	case EdmInt32, EdmInt64, EdmDateTime:
		d.varint()
	case EdmDouble:
		d.bytes(8)
	case EdmBoolean:
		d.byte1()
	case EdmGuid:
		d.bytes(16)
	default:
		d.fail("unknown type %d", t)
	}
}

// hasProp reports whether the entity v (whose header is h) has a property
// named name.
func hasProp(v []byte, h header, name string) bool {
	d := &decoder{b: v, off: h.props}
	for i := uint64(0); i < h.n && d.err == nil; i++ {
		n := d.bytes(d.uvarint())
		if string(n) == name {
			return true
		}
		skipValue(d, EdmType(d.byte1()))
	}
	return false
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

// prop writes the property name of type t whose value d is at, with its
// type annotation first where the level and type want one.
func (w *objWriter) prop(d *decoder, name []byte, t EdmType, annotate, typedDoubles bool) {
	var f float64
	needType := false
	switch t {
	case EdmInt64, EdmDateTime, EdmGuid, EdmBinary:
		needType = true
	case EdmDouble:
		f = math.Float64frombits(binary.BigEndian.Uint64(pad8(d.bytes(8))))
		needType = typedDoubles || math.IsNaN(f) || math.IsInf(f, 0)
	}
	if annotate && needType && t.valid() {
		w.key2(name, typeSuffix)
		w.b = appendJSONString(w.b, t.String())
	}
	if !t.valid() {
		d.fail("unknown type %d", t)
		return
	}
	w.key2(name, "")
	switch t {
	case EdmString:
		w.b = appendJSONString(w.b, d.bytes(d.uvarint()))
	case EdmInt32:
		i := d.varint()
		if i < math.MinInt32 || i > math.MaxInt32 {
			d.fail("Int32 %d out of range", i)
		}
		w.b = strconv.AppendInt(w.b, i, 10)
	case EdmInt64:
		w.b = append(w.b, '"')
		w.b = strconv.AppendInt(w.b, d.varint(), 10)
		w.b = append(w.b, '"')
	case EdmDouble:
		w.b = appendDouble(w.b, f)
	case EdmBoolean:
		switch d.byte1() {
		case 0:
			w.b = append(w.b, "false"...)
		case 1:
			w.b = append(w.b, "true"...)
		default:
			d.fail("bad boolean")
		}
	case EdmDateTime:
		w.b = append(w.b, '"')
		w.b = AppendDateTime(w.b, FromTicks(d.varint()))
		w.b = append(w.b, '"')
	case EdmGuid:
		var g GUID
		copy(g[:], d.bytes(16))
		w.b = append(w.b, '"')
		w.b = appendGUID(w.b, g)
		w.b = append(w.b, '"')
	case EdmBinary:
		w.b = append(w.b, '"')
		w.b = base64.StdEncoding.AppendEncode(w.b, d.bytes(d.uvarint()))
		w.b = append(w.b, '"')
	}
}

// key2 writes the member name name‖suffix.
func (w *objWriter) key2(name []byte, suffix string) {
	if w.n > 0 {
		w.b = append(w.b, ',')
	}
	w.n++
	w.b = append(w.b, '"')
	w.b = appendJSONRaw(w.b, name)
	w.b = appendJSONRaw(w.b, suffix)
	w.b = append(w.b, '"', ':')
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
func appendJSONString[S string | []byte](b []byte, s S) []byte {
	b = append(b, '"')
	b = appendJSONRaw(b, s)
	return append(b, '"')
}

// plainJSON marks the bytes a JSON string holds as they are: printable
// ASCII other than the quote and the backslash.
var plainJSON = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return
}()

// plainWord reports whether all eight bytes of x are plainJSON: none below
// 0x20, none from 0x80, no '"' and no '\\' (the usual SWAR tests for a
// byte below a bound and for a zero byte).
func plainWord(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	below20 := (x - 0x20*ones) &^ x
	quote := x ^ ('"' * ones)
	backslash := x ^ ('\\' * ones)
	zero := ((quote - ones) &^ quote) | ((backslash - ones) &^ backslash)
	return (x|below20|zero)&highs == 0
}

// appendJSONRaw is appendJSONString without the quotes. Runs of bytes
// that need no escape are copied whole.
func appendJSONRaw[S string | []byte](b []byte, s S) []byte {
	const hexDigits = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		// Eight plain bytes at a time (the common case: ASCII text).
		for i+8 <= len(s) && plainWord(binary.LittleEndian.Uint64([]byte(s[i:i+8]))) {
			i += 8
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if plainJSON[c] {
			i++
			continue
		}
		b = append(b, s[start:i]...)
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
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		var rb [utf8.UTFMax]byte
		r, size := utf8.DecodeRune(rb[:copy(rb[:], s[i:])])
		if r == utf8.RuneError && size == 1 {
			b = append(b, "\ufffd"...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
		start = i
	}
	return append(b, s[start:]...)
}
