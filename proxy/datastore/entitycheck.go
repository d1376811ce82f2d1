package datastore

import (
	"maps"
	"math"
	"slices"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/genproto/googleapis/type/latlng"
)

// Entity validation at commit: nemo refuses what the service refuses, with
// its code (INVALID_ARGUMENT) and message, so it never acknowledges a write
// the backend will not take (TestInvalidEntitiesAsTheEmulator compares the
// emulators and nemo). Where the Datastore emulator and the Firestore
// emulator in Datastore mode disagree, nemo follows Firestore, which runs
// production Datastore now:
//
//   - entity size: Firestore refuses an entity whose storage size is over
//     1 MiB ("maximum entity size is 1048576 bytes"), computed as the
//     storage-size page documents it, and an unindexed string or blob over
//     1,048,487 bytes; the legacy emulator takes far larger entities;
//   - indexed values: Firestore refuses more than 5,000 indexed values on
//     one entity, or on one embedded entity ("Too many indexed
//     properties"); the legacy emulator has no limit;
//   - meanings: Firestore calls the retired meanings 9, 14, 21 and 24-28
//     "Unexpected" where the legacy emulator says "Unknown", takes vectors
//     (meaning 31 on an array of doubles excluded from indexes), which the
//     legacy emulator refuses like any meaning on an array, and refuses
//     meaning 23 on a geo point, which the legacy emulator takes.
const (
	maxValueBytes    = 1048487 // an unindexed string or blob
	maxEntitySize    = 1048576 // storage size
	maxIndexedValues = 5000    // per entity, and per embedded entity
	maxVectorDims    = 2048
)

// Meanings (the legacy entity meanings the v1 API carries in Value.meaning).
const (
	meaningTimestamp  = 7  // GD_WHEN: an integer timestamp, allowed only outside Datastore's timestamp range
	meaningText       = 15 // TEXT: an unindexed string
	meaningIndexValue = 18 // INDEX_VALUE: what projections return; never written
	meaningBlobKey    = 19 // BLOBKEY
	meaningUser       = 20 // an embedded user entity
	meaningBlob       = 22 // BLOB: an unindexed blob
	meaningPoint      = 23 // GEORSS_POINT
	meaningVector     = 31 // a vector: an array of doubles
)

// meaningField is the value field each known meaning goes with, spelled as
// the service's messages spell it.
var meaningField = map[int32]string{
	1: "string_value", 2: "string_value", 3: "string_value", 4: "string_value", 5: "string_value",
	6: "string_value", 8: "string_value", 10: "string_value", 11: "string_value", 12: "string_value",
	meaningText: "string_value", 17: "string_value",
	meaningTimestamp: "integer_value", 13: "integer_value", 29: "integer_value", 30: "integer_value",
	16: "blob_value", meaningBlobKey: "blob_value", meaningBlob: "blob_value",
	meaningUser:   "entity_value",
	meaningPoint:  "geo_point_value",
	meaningVector: "vector",
}

// retiredMeanings are refused as "Unexpected" by Firestore ("Unknown" on the
// legacy emulator, like any meaning it does not know).
var retiredMeanings = map[int32]bool{9: true, 14: true, 21: true, 24: true, 25: true, 26: true, 27: true, 28: true}

// userProperties are the properties an embedded user entity may have, in
// the order the service checks them.
var userProperties = []string{"email", "auth_domain", "user_id", "federated_identity", "federated_provider"}

// Datastore's timestamp range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z.
const (
	minTimestampSeconds = -62135596800
	maxTimestampSeconds = 253402300799
)

// checkEntity enforces the service's rules on a written entity.
func checkEntity(e *datastorepb.Entity) error {
	if err := checkProperties(e); err != nil {
		return err
	}
	if err := checkIndexedValues(e); err != nil {
		return err
	}
	if entitySize(e) > maxEntitySize {
		return invalid("maximum entity size is %d bytes", maxEntitySize)
	}
	return nil
}

func checkProperties(e *datastorepb.Entity) error {
	for name, v := range e.GetProperties() {
		if name == "" {
			return invalid("The property.name is the empty string.")
		}
		if reserved.MatchString(name) {
			return invalid("The property.name %q is reserved.", name)
		}
		if len(name) > maxNameBytes {
			return invalid("The property.name is longer than %d bytes.", maxNameBytes)
		}
		if err := checkValue(name, v, false); err != nil {
			return err
		}
	}
	return nil
}

func checkValue(name string, v *datastorepb.Value, inArray bool) error {
	if _, isArray := v.GetValueType().(*datastorepb.Value_ArrayValue); !isArray && v.GetMeaning() == meaningIndexValue {
		return checkIndexValueMeaning(name, v)
	}
	if v.GetValueType() == nil {
		return invalid("The value %q does not contain a value.", name)
	}
	if err := checkMeaning(name, v); err != nil {
		return err
	}
	if err := checkScalar(v); err != nil {
		return err
	}
	switch x := v.GetValueType().(type) {
	case *datastorepb.Value_KeyValue:
		if err := checkPath(x.KeyValue, false, false); err != nil {
			return err
		}
		return checkNamespace(x.KeyValue.GetPartitionId().GetNamespaceId(), false)
	case *datastorepb.Value_ArrayValue:
		return checkArrayValue(name, v, x.ArrayValue, inArray)
	case *datastorepb.Value_StringValue:
		return checkLength(name, len(x.StringValue), v.GetExcludeFromIndexes())
	case *datastorepb.Value_BlobValue:
		return checkLength(name, len(x.BlobValue), v.GetExcludeFromIndexes())
	case *datastorepb.Value_EntityValue:
		if v.GetMeaning() == meaningUser {
			return nil // checkMeaning checked the user entity
		}
		return checkProperties(x.EntityValue)
	}
	return nil
}

// checkScalar checks a timestamp value is within Datastore's range
// and a geo point's coordinates are numbers in theirs, as the service does
// for a written value and for a value a filter compares with.
func checkScalar(v *datastorepb.Value) error {
	switch x := v.GetValueType().(type) {
	case *datastorepb.Value_TimestampValue:
		if s := x.TimestampValue.GetSeconds(); s < minTimestampSeconds || s > maxTimestampSeconds {
			return invalid("Timestamp seconds exceeds limit for field")
		}
		if n := x.TimestampValue.GetNanos(); n < 0 || n > 999_999_999 {
			return invalid("Timestamp nanos exceeds limit for field")
		}
	case *datastorepb.Value_GeoPointValue:
		return checkGeoPoint(x.GeoPointValue)
	}
	return nil
}

// checkGeoPoint checks a geo point's latitude and longitude.
func checkGeoPoint(p *latlng.LatLng) error {
	if math.IsNaN(p.GetLatitude()) {
		return invalid("Geo point latitude is not a number.")
	}
	if math.IsNaN(p.GetLongitude()) {
		return invalid("Geo point longitude is not a number.")
	}
	if lat := p.GetLatitude(); lat < -90 || lat > 90 {
		return invalid("Geo point latitude outside permitted range -90.0 to 90.0.")
	}
	if lng := p.GetLongitude(); lng < -180 || lng > 180 {
		return invalid("Geo point longitude outside permitted range -180.0 to 180.0.")
	}
	return nil
}

// checkArrayValue checks an array value v (arr) and its elements: no
// array inside an array, no exclude_from_indexes on the array itself.
func checkArrayValue(name string, v *datastorepb.Value, arr *datastorepb.ArrayValue, inArray bool) error {
	if inArray {
		return invalid("list_value cannot contain a Value containing another list_value.")
	}
	if v.GetMeaning() == meaningVector {
		return nil // checkMeaning checked its elements
	}
	if v.GetExcludeFromIndexes() {
		return invalid("Exclude from indexes cannot be set on a list value")
	}
	for _, el := range arr.GetValues() {
		if err := checkValue(name, el, true); err != nil {
			return err
		}
	}
	return nil
}

// checkLength limits a string or blob: 1500 bytes when indexed, just under
// 1 MiB otherwise (Firestore's limit; the legacy emulator has none).
func checkLength(name string, n int, excluded bool) error {
	if !excluded && n > maxIndexedBytes {
		return invalid("The value of property %q is longer than %d bytes.", name, maxIndexedBytes)
	}
	if n > maxValueBytes {
		return invalid("The value of property %q is longer than %d bytes.", name, maxValueBytes)
	}
	return nil
}

// valueField names a value's field as the service's messages do.
func valueField(v *datastorepb.Value) string {
	switch v.GetValueType().(type) {
	case *datastorepb.Value_NullValue:
		return "null_value"
	case *datastorepb.Value_BooleanValue:
		return "boolean_value"
	case *datastorepb.Value_IntegerValue:
		return "integer_value"
	case *datastorepb.Value_DoubleValue:
		return "double_value"
	case *datastorepb.Value_TimestampValue:
		return "timestamp_value"
	case *datastorepb.Value_KeyValue:
		return "key_value"
	case *datastorepb.Value_StringValue:
		return "string_value"
	case *datastorepb.Value_BlobValue:
		return "blob_value"
	case *datastorepb.Value_GeoPointValue:
		return "geo_point_value"
	case *datastorepb.Value_EntityValue:
		return "entity_value"
	case *datastorepb.Value_ArrayValue:
		return "array_value"
	}
	return ""
}

func mismatch(name string, meaning int32, field string) error {
	return invalid("Value %q has a meaning %d which does not match %s field.", name, meaning, field)
}

// checkIndexValueMeaning refuses meaning 18, which only projections return.
// The service names the value's own field for timestamps and entities.
func checkIndexValueMeaning(name string, v *datastorepb.Value) error {
	switch v.GetValueType().(type) {
	case *datastorepb.Value_TimestampValue, *datastorepb.Value_EntityValue:
		return mismatch(name, meaningIndexValue, valueField(v))
	}
	return invalid("Projection property cannot be used.")
}

// checkMeaning checks a value's meaning against its type, as the service
// does.
func checkMeaning(name string, v *datastorepb.Value) error {
	m := v.GetMeaning()
	if m == 0 {
		return nil
	}
	if arr, ok := v.GetValueType().(*datastorepb.Value_ArrayValue); ok {
		if m == meaningVector {
			return checkVector(v, arr.ArrayValue)
		}
		return invalid("A Value containing a list_value cannot specify a meaning.")
	}
	field, known := meaningField[m]
	switch {
	case !known && retiredMeanings[m]:
		return invalid("Unexpected value meaning %d.", m)
	case !known:
		return invalid("Unknown value meaning %d.", m)
	case valueField(v) != field:
		return mismatch(name, m, field)
	}
	switch m {
	case meaningTimestamp:
		if us := v.GetIntegerValue(); us >= minTimestampSeconds*1_000_000 && us <= maxTimestampSeconds*1_000_000+999_999 {
			return invalid("A timestamp in range [0001-01-01T00:00:00Z, 9999-12-31T23:59:59.999999Z] must be stored as a timestamp value.")
		}
	case meaningText, meaningBlob:
		if !v.GetExcludeFromIndexes() {
			return invalid("Indexed value has meaning %d.", m)
		}
	case meaningBlobKey:
		return invalid("Unknown meaning %d.", m)
	case meaningUser:
		return checkUser(v.GetEntityValue())
	case meaningPoint:
		// The legacy emulator takes it; Firestore refuses it.
		return invalid("OnestoreEntity.PropertyValue meaning does not match value fields.")
	}
	return nil
}

// checkVector checks a vector: a non-empty array of at most 2048 doubles,
// excluded from indexes (Firestore's rules; its elements' own meanings and
// flags are not looked at).
func checkVector(v *datastorepb.Value, arr *datastorepb.ArrayValue) error {
	if !v.GetExcludeFromIndexes() {
		return invalid("Vector's must be excluded from indexes.")
	}
	if len(arr.GetValues()) == 0 {
		return invalid("Cannot have a zero length vector.")
	}
	for _, el := range arr.GetValues() {
		if _, ok := el.GetValueType().(*datastorepb.Value_DoubleValue); !ok {
			return invalid("Vector must only contain values of type 'double'.")
		}
	}
	if len(arr.GetValues()) > maxVectorDims {
		return invalid("Vectors must be at most %d dimensions.", maxVectorDims)
	}
	return nil
}

// checkUser checks an embedded user entity (meaning 20): no key, only the
// user properties, each an unindexed string without a meaning, email and
// auth_domain present.
func checkUser(e *datastorepb.Entity) error {
	if e.GetKey() != nil {
		return invalid("The user entity has a key.")
	}
	for _, name := range slices.Sorted(maps.Keys(e.GetProperties())) {
		if !slices.Contains(userProperties, name) {
			return invalid("The user entity property %q is not allowed.", name)
		}
	}
	for _, name := range userProperties {
		p, ok := e.GetProperties()[name]
		if !ok {
			continue
		}
		if _, ok := p.GetValueType().(*datastorepb.Value_StringValue); !ok {
			return invalid("The user entity property %q is the wrong type.", name)
		}
		if p.GetMeaning() != 0 {
			return invalid("The user entity property %q has a meaning.", name)
		}
		if !p.GetExcludeFromIndexes() {
			return invalid("The user entity property %q is indexed.", name)
		}
	}
	for _, name := range []string{"email", "auth_domain"} {
		if _, ok := e.GetProperties()[name]; !ok {
			return invalid("The user entity is missing required property %q.", name)
		}
	}
	return nil
}

// checkIndexedValues limits the indexed values of an entity, and of each
// embedded entity on its own, to maxIndexedValues: each indexed value
// counts one (an array's indexed elements each, an embedded entity one).
func checkIndexedValues(e *datastorepb.Entity) error {
	n := 0
	var count func(name string, v *datastorepb.Value) error
	count = func(name string, v *datastorepb.Value) error {
		switch x := v.GetValueType().(type) {
		case *datastorepb.Value_ArrayValue:
			if v.GetExcludeFromIndexes() {
				return nil // a vector
			}
			for _, el := range x.ArrayValue.GetValues() {
				if err := count(name, el); err != nil {
					return err
				}
			}
			return nil
		case *datastorepb.Value_EntityValue:
			if err := checkIndexedValues(x.EntityValue); err != nil {
				if v.GetExcludeFromIndexes() {
					return invalid("Property %s contains an invalid nested entity.", name)
				}
				return err
			}
		}
		if !v.GetExcludeFromIndexes() {
			n++
		}
		return nil
	}
	for name, v := range e.GetProperties() {
		if err := count(name, v); err != nil {
			return err
		}
	}
	if n > maxIndexedValues {
		return invalid("Too many indexed properties")
	}
	return nil
}

// entitySize is an entity's storage size as Datastore documents it: its
// key, each property's name and value, and 32 bytes.
func entitySize(e *datastorepb.Entity) int {
	n := 32
	if e.GetKey() != nil {
		n += keySize(e.GetKey())
	}
	for name, v := range e.GetProperties() {
		n += len(name) + 1 + valueSize(v)
	}
	return n
}

// keySize: the namespace (unless the default one), each path element's
// kind and name (len + 1) or id (8), and 16 bytes.
func keySize(k *datastorepb.Key) int {
	n := 16
	if ns := k.GetPartitionId().GetNamespaceId(); ns != "" {
		n += len(ns) + 1
	}
	for _, el := range k.GetPath() {
		n += len(el.GetKind()) + 1
		if _, named := el.GetIdType().(*datastorepb.Key_PathElement_Name); named {
			n += len(el.GetName()) + 1
		} else {
			n += 8
		}
	}
	return n
}

func valueSize(v *datastorepb.Value) int {
	switch x := v.GetValueType().(type) {
	case *datastorepb.Value_ArrayValue:
		n := 0
		for _, el := range x.ArrayValue.GetValues() {
			n += valueSize(el)
		}
		return n
	case *datastorepb.Value_BlobValue:
		return len(x.BlobValue)
	case *datastorepb.Value_StringValue:
		return len(x.StringValue) + 1
	case *datastorepb.Value_BooleanValue, *datastorepb.Value_NullValue:
		return 1
	case *datastorepb.Value_GeoPointValue:
		return 16
	case *datastorepb.Value_KeyValue:
		return keySize(x.KeyValue)
	case *datastorepb.Value_EntityValue:
		return entitySize(x.EntityValue)
	}
	return 8 // integers, doubles, timestamps
}
