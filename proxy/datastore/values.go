package datastore

import (
	"bytes"
	"cmp"
	"math"
	"strings"
	"unicode/utf8"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/proto"

	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

// Datastore's value order, as observed on Google's emulator
// (shared/reference/datastore-value-order-emulator.txt): null; integers and
// timestamps together by their integer value (timestamps in microseconds);
// booleans; strings and byte strings together by their bytes; doubles; geo
// points; keys. Inequality filters compare across types in this one order
// (`v > 0` also matches strings). The index keeps no finer type than the
// class: an integer equals the timestamp with as many microseconds, and a
// string the byte string with its bytes (for filters, distinct-on and
// ordering alike; a projection returns timestamps as integers and byte
// strings as strings), as differential runs against the emulator show.
const (
	rankNull = iota
	rankNumber
	rankBool
	rankString
	rankDouble
	rankGeo
	rankKey
	rankUnindexed // entity and array values have no place in an index
)

func rank(v *datastorepb.Value) int {
	switch v.GetValueType().(type) {
	case *datastorepb.Value_NullValue, nil:
		return rankNull
	case *datastorepb.Value_IntegerValue, *datastorepb.Value_TimestampValue:
		return rankNumber
	case *datastorepb.Value_BooleanValue:
		return rankBool
	case *datastorepb.Value_StringValue, *datastorepb.Value_BlobValue:
		return rankString
	case *datastorepb.Value_DoubleValue:
		return rankDouble
	case *datastorepb.Value_GeoPointValue:
		return rankGeo
	case *datastorepb.Value_KeyValue:
		return rankKey
	}
	return rankUnindexed
}

func micros(v *datastorepb.Value) int64 {
	if ts := v.GetTimestampValue(); ts != nil {
		return ts.GetSeconds()*1_000_000 + int64(ts.GetNanos())/1000
	}
	return v.GetIntegerValue()
}

func stringBytes(v *datastorepb.Value) []byte {
	if s, ok := v.GetValueType().(*datastorepb.Value_StringValue); ok {
		return []byte(s.StringValue)
	}
	return v.GetBlobValue()
}

// compareDouble orders NaN first and treats -0 and +0 as equal.
func compareDouble(a, b float64) int {
	switch an, bn := math.IsNaN(a), math.IsNaN(b); {
	case an && bn:
		return 0
	case an:
		return -1
	case bn:
		return 1
	}
	return cmp.Compare(a, b)
}

// compareValues orders two indexable values in Datastore's value order.
func compareValues(a, b *datastorepb.Value) int {
	ca, cb := rank(a), rank(b)
	if ca != cb {
		return cmp.Compare(ca, cb)
	}
	c := 0
	switch ca {
	case rankNumber:
		c = cmp.Compare(micros(a), micros(b))
	case rankBool:
		c = cmp.Compare(b2i(a.GetBooleanValue()), b2i(b.GetBooleanValue()))
	case rankString:
		c = bytes.Compare(stringBytes(a), stringBytes(b))
	case rankDouble:
		c = compareDouble(a.GetDoubleValue(), b.GetDoubleValue())
	case rankGeo:
		c = cmp.Or(compareDouble(a.GetGeoPointValue().GetLatitude(), b.GetGeoPointValue().GetLatitude()),
			compareDouble(a.GetGeoPointValue().GetLongitude(), b.GetGeoPointValue().GetLongitude()))
	case rankKey:
		c = compareKeys(a.GetKeyValue(), b.GetKeyValue())
	}
	return c
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// compareKeys orders keys by partition, then path in key order.
func compareKeys(a, b *datastorepb.Key) int {
	pa, pb := a.GetPartitionId(), b.GetPartitionId()
	if c := cmp.Or(strings.Compare(pa.GetProjectId(), pb.GetProjectId()),
		strings.Compare(pa.GetDatabaseId(), pb.GetDatabaseId()),
		strings.Compare(pa.GetNamespaceId(), pb.GetNamespaceId())); c != 0 {
		return c
	}
	ea, _ := dscodec.EncodeKey(a)
	eb, _ := dscodec.EncodeKey(b)
	return bytes.Compare(ea, eb)
}

// indexValues are the values of a property the index holds for an entity:
// every indexed element of an array, the value itself otherwise; nothing
// for values excluded from indexes and for entity values. A dotted name
// reaches into entity values (a.b), as Datastore indexes embedded entities.
//
// An empty array has no index entry, so it matches no filter (not even
// = null or != 1) and an order on its property skips the entity, as the
// Firestore emulator in Datastore mode and production behave; the legacy
// Datastore emulator indexes an empty array as one null instead
// (shared/reference/datastore-array-semantics-emulator.txt).
func indexValues(e *datastorepb.Entity, name string) []*datastorepb.Value {
	if name == keyProperty {
		return []*datastorepb.Value{{ValueType: &datastorepb.Value_KeyValue{KeyValue: e.GetKey()}}}
	}
	var out []*datastorepb.Value
	collect(e, name, &out)
	return out
}

const keyProperty = "__key__"

func collect(e *datastorepb.Entity, name string, out *[]*datastorepb.Value) {
	if v, ok := e.GetProperties()[name]; ok {
		appendIndexed(v, out)
		return
	}
	for i := strings.IndexByte(name, '.'); i >= 0; i = nextDot(name, i) {
		v, ok := e.GetProperties()[name[:i]]
		if !ok {
			continue
		}
		rest := name[i+1:]
		if sub := v.GetEntityValue(); sub != nil {
			collect(sub, rest, out)
		}
		for _, el := range v.GetArrayValue().GetValues() {
			if sub := el.GetEntityValue(); sub != nil {
				collect(sub, rest, out)
			}
		}
	}
}

func nextDot(s string, i int) int {
	j := strings.IndexByte(s[i+1:], '.')
	if j < 0 {
		return -1
	}
	return i + 1 + j
}

func appendIndexed(v *datastorepb.Value, out *[]*datastorepb.Value) {
	if arr, ok := v.GetValueType().(*datastorepb.Value_ArrayValue); ok {
		if v.GetExcludeFromIndexes() {
			return // a vector (meaning 31): never indexed
		}
		for _, el := range arr.ArrayValue.GetValues() {
			if !el.GetExcludeFromIndexes() && rank(el) != rankUnindexed {
				*out = append(*out, el)
			}
		}
		return
	}
	if v.GetExcludeFromIndexes() || rank(v) == rankUnindexed {
		return
	}
	*out = append(*out, v)
}

// indexForm is a value as the index holds it, which is what projections
// return: timestamps as integer microseconds, byte strings as strings
// (when they are UTF-8, as a string must be).
func indexForm(v *datastorepb.Value) *datastorepb.Value {
	out := proto.Clone(v).(*datastorepb.Value)
	switch x := v.GetValueType().(type) {
	case *datastorepb.Value_TimestampValue:
		out.ValueType = &datastorepb.Value_IntegerValue{IntegerValue: micros(v)}
	case *datastorepb.Value_BlobValue:
		if utf8.Valid(x.BlobValue) {
			out.ValueType = &datastorepb.Value_StringValue{StringValue: string(x.BlobValue)}
		}
	}
	out.ExcludeFromIndexes = false
	out.Meaning = 0
	return out
}
