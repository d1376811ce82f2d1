package tablecodec

import (
	"math"
	"slices"
	"testing"
	"time"
)

// sameEntityCase compares two fresh everyTypeEntity values, the second
// one edited.
type sameEntityCase struct {
	name string
	edit func(e *Entity) // applied to the second entity
	want bool
}

// setProp gives the property name the value v, keeping its type.
func setProp(name string, v any) func(e *Entity) {
	return func(e *Entity) {
		p, _ := e.Get(name)
		retype(name, p.Type, v)(e)
	}
}

// retype gives the property name the type typ and the value v.
func retype(name string, typ EdmType, v any) func(e *Entity) {
	return func(e *Entity) {
		for i := range e.Props {
			if e.Props[i].Name == name {
				e.Props[i].Type, e.Props[i].Value = typ, v
				return
			}
		}
		panic("no property " + name)
	}
}

func TestSameEntity(t *testing.T) {
	for _, tc := range []sameEntityCase{
		{"identical", func(*Entity) {}, true}, // NaN included
		{"other stamps", func(e *Entity) {
			e.Timestamp = mustTime("2030-01-02T03:04:05.0000001Z")
			e.ETag = `W/"datetime'2030-01-02T03%3A04%3A05.0000001Z'"`
		}, true},
		{"no stamps", func(e *Entity) { e.Timestamp, e.ETag = time.Time{}, "" }, true},
		{"properties reordered", func(e *Entity) { slices.Reverse(e.Props) }, true},
		{"reordered with other stamps", func(e *Entity) {
			slices.Reverse(e.Props)
			e.Timestamp, e.ETag = time.Now(), "x"
		}, true},

		{"other PartitionKey", func(e *Entity) { e.PartitionKey = "pk" }, false},
		{"other RowKey", func(e *Entity) { e.RowKey = "r" }, false},
		{"other string", setProp("Str", "hello e"), false},
		{"empty string set", setProp("Empty", " "), false},
		{"other int32", setProp("I32", int32(0)), false},
		{"other int64", setProp("I64max", int64(math.MaxInt64-1)), false},
		{"other double", setProp("Dbl", 3.5), false},
		{"NaN replaced", setProp("NaN", 0.0), false},
		{"infinity flipped", setProp("Inf", math.Inf(-1)), false},
		{"other boolean", setProp("T", false), false},
		{"other time", setProp("When", mustTime("2024-05-06T07:08:09.1234568Z")), false},
		{"other guid", setProp("G", GUID{1}), false},
		{"other binary", setProp("Bin", []byte{0, 1, 2, 0xfb}), false},
		{"binary set", setProp("NoBin", []byte{0}), false},
		{"other name", func(e *Entity) { e.Props[0].Name = "Str2" }, false},
		{"property missing", func(e *Entity) { e.Props = e.Props[1:] }, false},
		{"property added", func(e *Entity) { e.Props = append(e.Props, Property{"Extra", EdmString, ""}) }, false},
		{"no properties", func(e *Entity) { e.Props = nil }, false},
		// The same number or bytes under another type.
		{"int32 as int64", retype("I32", EdmInt64, int64(math.MinInt32)), false},
		{"int64 as double", retype("I64max", EdmDouble, float64(math.MaxInt64)), false},
		{"binary as string", retype("Bin", EdmString, "\x00\x01\x02\xfa"), false},
		{"empty string as empty binary", retype("Empty", EdmBinary, []byte{}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := everyTypeEntity(), everyTypeEntity()
			tc.edit(b)
			ea, eb := EncodeEntity(a), EncodeEntity(b)
			if got := SameEntity(ea, eb); got != tc.want {
				t.Errorf("SameEntity(a, b) = %v, want %v", got, tc.want)
			}
			if got := SameEntity(eb, ea); got != tc.want {
				t.Errorf("SameEntity(b, a) = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSameEntityNaN: an entity holding a NaN double is the same as
// itself (it once was not, which failed the buffer check of any clean
// record holding one).
func TestSameEntityNaN(t *testing.T) {
	e := EncodeEntity(&Entity{PartitionKey: "p", RowKey: "r", Props: []Property{{"X", EdmDouble, math.NaN()}}})
	if !SameEntity(e, slices.Clone(e)) {
		t.Error("an entity holding NaN differs from itself")
	}
	other := EncodeEntity(&Entity{PartitionKey: "p", RowKey: "r", Props: []Property{{"X", EdmDouble, math.Inf(1)}}})
	if SameEntity(e, other) {
		t.Error("NaN is the same as +Inf")
	}
}

func TestSameEntityDoesNotReorderItsInput(t *testing.T) {
	a, b := everyTypeEntity(), everyTypeEntity()
	slices.Reverse(b.Props)
	ea, eb := EncodeEntity(a), EncodeEntity(b)
	ea0, eb0 := slices.Clone(ea), slices.Clone(eb)
	if !SameEntity(ea, eb) {
		t.Fatal("reordered properties: not the same")
	}
	if !slices.Equal(ea, ea0) || !slices.Equal(eb, eb0) {
		t.Error("SameEntity modified its arguments")
	}
}

func TestSameEntityUndecodableComparesBytes(t *testing.T) {
	valid := EncodeEntity(everyTypeEntity())
	junk := []byte("not an entity")
	truncated := valid[:len(valid)-1]
	for _, tc := range []struct {
		name string
		a, b []byte
		want bool
	}{
		{"equal junk", junk, slices.Clone(junk), true},
		{"different junk", junk, []byte("not an entity!"), false},
		{"nil and nil", nil, nil, true},
		{"nil and empty", nil, []byte{}, true},
		{"junk and entity", junk, valid, false},
		{"truncated and entity", truncated, valid, false},
		{"equal truncated", truncated, slices.Clone(truncated), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SameEntity(tc.a, tc.b); got != tc.want {
				t.Errorf("SameEntity(a, b) = %v, want %v", got, tc.want)
			}
			if got := SameEntity(tc.b, tc.a); got != tc.want {
				t.Errorf("SameEntity(b, a) = %v, want %v", got, tc.want)
			}
		})
	}
}
