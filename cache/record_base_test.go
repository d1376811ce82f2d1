package cache

import (
	"testing"

	"github.com/nemocache/nemo/adapters"
)

// TestRecordBaseSurvivesValueChanges: the base version rides at the end of
// the record's buffer; every way set() reshapes the buffer keeps it, and
// setBase changes it without touching key or value.
func TestRecordBaseSurvivesValueChanges(t *testing.T) {
	r := newRecord([]byte("key"), []byte("value"), Regular)
	if e := r.baseExpect(); e.Kind != adapters.ExpectAny {
		t.Fatalf("new record base %+v, want unknown", e)
	}
	v := adapters.Expect{Kind: adapters.ExpectVersion, Version: "W/\"etag-1\""}
	if d := r.setBase(v); d != int64(len(v.Version)) {
		t.Fatalf("setBase charged %d bytes, want %d", d, len(v.Version))
	}
	for _, val := range []string{"value", "same!", "a much longer value than before", "sh", "", "x"} {
		r.set(Regular, []byte(val))
		if string(r.key()) != "key" || string(r.value()) != val || r.baseExpect() != v {
			t.Fatalf("after set(%q): key %q value %q base %+v", val, r.key(), r.value(), r.baseExpect())
		}
	}
	r.set(Tombstone, nil)
	if len(r.value()) != 0 || r.baseExpect() != v || r.kind() != Tombstone {
		t.Fatalf("tombstone: value %q base %+v", r.value(), r.baseExpect())
	}
	absent := adapters.Expect{Kind: adapters.ExpectAbsent}
	r.setBase(absent)
	if r.baseExpect() != absent || string(r.key()) != "key" || r.bytes() != 3 {
		t.Fatalf("absent base: %+v, buf %q", r.baseExpect(), r.all())
	}
	r.set(Regular, []byte("back"))
	r.setBase(adapters.Expect{Kind: adapters.ExpectVersion, Version: adapters.Version(make([]byte, maxBaseLen+1))})
	if r.baseExpect().Kind != adapters.ExpectAny || string(r.value()) != "back" {
		t.Fatalf("an over-long version must leave the base unknown: %+v", r.baseExpect())
	}
	r.setBase(v)
	r.setDirty(true)
	r.setGap(true)
	if r.baseExpect() != v || !r.dirty() || !r.gap() || r.kind() != Regular {
		t.Fatal("flags and base interfere")
	}
}
