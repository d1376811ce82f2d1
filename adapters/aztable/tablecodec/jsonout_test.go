package tablecodec

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// referenceJSON is AppendJSON as it was before it wrote from the encoded
// value (it walked a decoded Entity): the differential tests below hold
// AppendValueJSON to its bytes.
func referenceJSON(dst []byte, e *Entity, meta Metadata, sel []string) []byte {
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
	w := refWriter{b: append(dst, '{')}
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
		if isSystemName(n) || slices.Contains(sel[:i], n) {
			continue
		}
		if _, ok := e.Get(n); !ok {
			w.key(n)
			w.b = append(w.b, "null"...)
		}
	}
	return append(w.b, '}')
}

type refWriter struct {
	b []byte
	n int
}

func (w *refWriter) key(k string) {
	if w.n > 0 {
		w.b = append(w.b, ',')
	}
	w.n++
	w.b = refJSONString(w.b, k)
	w.b = append(w.b, ':')
}

func (w *refWriter) str(k, v string) {
	w.key(k)
	w.b = refJSONString(w.b, v)
}

func (w *refWriter) prop(p Property, annotate, typedDoubles bool) {
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
		w.b = refJSONString(w.b, v)
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
		w.b = refJSONString(w.b, v.String())
	case []byte:
		w.b = append(w.b, '"')
		w.b = base64.StdEncoding.AppendEncode(w.b, v)
		w.b = append(w.b, '"')
	}
}

// refJSONString quotes s as JSON without HTML escaping (Azure does not
// escape < > &); invalid UTF-8 becomes U+FFFD.
func refJSONString(b []byte, s string) []byte {
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

// jsonCases are the metadata levels and selections the differential
// tests try on every entity.
func jsonCases(e *Entity) []struct {
	meta Metadata
	sel  []string
} {
	type c = struct {
		meta Metadata
		sel  []string
	}
	var out []c
	base := Metadata{BaseURL: "http://h/acct/", Account: "acct", Table: "t", Context: "http://h/acct/$metadata#t/@Element"}
	sels := [][]string{nil, {"RowKey"}, {"Timestamp", "missing", "RowKey", "missing"}}
	if len(e.Props) > 0 {
		sels = append(sels, []string{e.Props[0].Name, "PartitionKey"}, []string{e.Props[len(e.Props)-1].Name, "nope"})
	}
	for _, l := range []MetadataLevel{NoMetadata, MinimalMetadata, FullMetadata} {
		for _, typed := range []bool{false, true} {
			for _, s := range sels {
				m := base
				m.Level, m.TypedDoubles = l, typed
				out = append(out, c{m, s})
			}
		}
	}
	return out
}

func TestAppendValueJSONMatchesReference(t *testing.T) {
	ents := []*Entity{everyTypeEntity(), {PartitionKey: "p'q", RowKey: "r/ü\x01\"", ETag: "W/\"x\""},
		{PartitionKey: "p", RowKey: "r", Props: []Property{{"s", EdmString, "a\tb\u2028c\xff<>&"}, {"d", EdmDouble, 2.0}, {"n", EdmDouble, math.NaN()}, {"i", EdmDouble, math.Inf(-1)}}}}
	for _, e := range ents {
		for _, c := range jsonCases(e) {
			want := referenceJSON([]byte("x"), e, c.meta, c.sel)
			got, err := AppendValueJSON([]byte("x"), EncodeEntity(e), c.meta, c.sel)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%+v %v:\n got %s (%v)\nwant %s", c.meta, c.sel, got, err, want)
			}
		}
	}
}

func TestAppendValueJSONRejectsCorrupt(t *testing.T) {
	v := EncodeEntity(everyTypeEntity())
	for i := 0; i < len(v); i++ {
		cut := v[:i]
		_, derr := DecodeEntity(cut)
		got, err := AppendValueJSON([]byte("keep"), cut, Metadata{Level: MinimalMetadata}, nil)
		if (err == nil) != (derr == nil) {
			t.Fatalf("prefix %d: AppendValueJSON %v, DecodeEntity %v", i, err, derr)
		}
		if err != nil && string(got) != "keep" {
			t.Fatalf("prefix %d: dst changed to %q on error", i, got)
		}
	}
}

func TestAppendValueJSONAllocations(t *testing.T) {
	v := EncodeEntity(everyTypeEntity())
	dst := make([]byte, 0, 4096)
	meta := Metadata{Level: MinimalMetadata, Context: "http://h/acct/$metadata#t/@Element"}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := AppendValueJSON(dst[:0], v, meta, nil); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per entity, want 0", n)
	}
}

// FuzzValueJSON: on any input AppendValueJSON fails exactly when
// DecodeEntity does, and otherwise writes referenceJSON's bytes for the
// decoded entity; generated entities take every level and selection.
func FuzzValueJSON(f *testing.F) {
	f.Add([]byte{})
	f.Add(EncodeEntity(everyTypeEntity()))
	f.Add([]byte("\x01\x01p\x01r\x00\x00\x01\x01s\x01\x02\xff\\"))
	f.Fuzz(func(t *testing.T, data []byte) {
		meta := Metadata{Level: MinimalMetadata, TypedDoubles: true}
		got, err := AppendValueJSON(nil, data, meta, nil)
		d, derr := DecodeEntity(data)
		if (err == nil) != (derr == nil) {
			t.Fatalf("AppendValueJSON %v, DecodeEntity %v", err, derr)
		}
		if derr == nil {
			if want := referenceJSON(nil, d, meta, nil); !bytes.Equal(got, want) {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
		}
		e := genEntity(data)
		for _, c := range jsonCases(e) {
			want := referenceJSON(nil, e, c.meta, c.sel)
			if got := AppendJSON(nil, e, c.meta, c.sel); !bytes.Equal(got, want) {
				t.Fatalf("%+v %v:\n got %s\nwant %s", c.meta, c.sel, got, want)
			}
		}
	})
}

func TestAppendDateTimeAsFormat(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		tm := FromTicks(r.Int64N(Ticks(time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC)) + 1))
		if i%3 == 0 {
			tm = tm.Truncate(time.Second)
		}
		want := tm.AppendFormat(nil, "2006-01-02T15:04:05")
		if frac := tm.Nanosecond() / 100; frac != 0 {
			want = append(want, strings.TrimRight(fmt.Sprintf(".%07d", frac), "0")...)
		}
		want = append(want, 'Z')
		if got := AppendDateTime(nil, tm); !bytes.Equal(got, want) {
			t.Fatalf("%v: got %s want %s", tm, got, want)
		}
	}
}

func TestPlainWordAsTable(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	special := []byte{0, 0x1f, 0x20, 0x21, '"', '\\', 0x7f, 0x80, 0xff, 'a', 0x5b, 0x5d}
	for i := 0; i < 200000; i++ {
		var w [8]byte
		for j := range w {
			if r.IntN(4) == 0 {
				w[j] = special[r.IntN(len(special))]
			} else {
				w[j] = byte(0x20 + r.IntN(0x60))
			}
		}
		want := true
		for _, c := range w {
			want = want && plainJSON[c]
		}
		if got := plainWord(binary.LittleEndian.Uint64(w[:])); got != want {
			t.Fatalf("%q: plainWord %v, table %v", w, got, want)
		}
	}
}

// BenchmarkAppendValueJSON writes a 1 KiB entity (eight 100-byte strings
// and one property of every other type) at minimal metadata.
func BenchmarkAppendValueJSON(b *testing.B) {
	e := everyTypeEntity()
	for i := 0; i < 8; i++ {
		e.Props = append(e.Props, Property{fmt.Sprintf("S%d", i), EdmString, strings.Repeat("x", 100)})
	}
	v := EncodeEntity(e)
	meta := Metadata{Level: MinimalMetadata, Context: "http://127.0.0.1:10002/devstoreaccount1/$metadata#hit/@Element"}
	dst := make([]byte, 0, 4096)
	b.SetBytes(int64(len(v)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := AppendValueJSON(dst[:0], v, meta, nil); err != nil {
			b.Fatal(err)
		}
	}
}
