package aztable

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/adapters/logtest"
)

// TestLogCodecRoundTrip: fences and entries of every size up to a record
// decode to what was encoded; the keys are the documented ones, entries
// order by (seq, part) inside EntryRange and the fence outside it; the
// table catalog and nemo's own tables have no log; a table's log is the
// same whatever the spelling of its name.
func TestLogCodecRoundTrip(t *testing.T) {
	c := LogCodec()
	ks := adapters.Keyspace("Orders")
	if c.Keyspace(ks) != LogTable || !bytes.Equal(c.FenceKey(ks), c.FenceKey("ORDERS")) {
		t.Fatalf("keyspace %q fence %x", c.Keyspace(ks), c.FenceKey(ks))
	}
	for _, none := range []adapters.Keyspace{"", tablecodec.TablesKeyspace, "NemoLog", "nemoleases"} {
		if c.Keyspace(none) != "" || c.FenceKey(none) != nil || c.EntryKey(none, 1, 0) != nil {
			t.Errorf("%q has a log", none)
		}
	}
	if pk, rk, _ := tablecodec.DecodeKey(c.FenceKey(ks)); pk != "orders" || rk != "fence" {
		t.Fatalf("fence key (%q, %q)", pk, rk)
	}
	if pk, rk, _ := tablecodec.DecodeKey(c.EntryKey(ks, 0x1f, 2)); pk != "orders" || rk != "e000000000000001f-0002" {
		t.Fatalf("entry key (%q, %q)", pk, rk)
	}

	for _, f := range []adapters.LogFence{{Epoch: 1, Token: 1, Holder: "node-a"}, {Epoch: 1<<63 - 1, Token: 1<<63 - 1, Holder: "", Last: 1<<63 - 1}} {
		b, err := c.EncodeFence(ks, f)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := c.DecodeFence(b); err != nil || back != (adapters.LogFence{Epoch: f.Epoch, Token: f.Token, Holder: f.Holder, Last: f.Last, Keyspace: ks}) {
			t.Fatalf("fence %+v of %q decodes to %+v, %v", f, ks, back, err)
		}
	}
	if _, err := c.EncodeFence(ks, adapters.LogFence{Epoch: 1 << 63}); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("an epoch past Int64: %v", err)
	}

	rb := c.Limits().RecordBytes
	for _, n := range []int{0, 1, tablecodec.MaxValueBytes, tablecodec.MaxValueBytes + 1, rb} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i * 7)
		}
		b, err := c.EncodeEntry(ks, 42, 3, data)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		e, err := tablecodec.DecodeEntity(b)
		if err != nil || e.Validate() != nil || e.AzureSize() > tablecodec.MaxEntityBytes {
			t.Fatalf("%d bytes: an invalid entity (%v)", n, err)
		}
		seq, part, back, err := c.DecodeEntry(b)
		if err != nil || seq != 42 || part != 3 || !bytes.Equal(back, data) {
			t.Fatalf("%d bytes decode to seq %d part %d %d bytes, %v", n, seq, part, len(back), err)
		}
	}
	if _, err := c.EncodeEntry(ks, 1, 0, make([]byte, rb+1)); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("an entry part over a record: %v", err)
	}
	if _, _, _, err := c.DecodeEntry(mustFence(t, c, ks)); !errors.Is(err, adapters.ErrBadLogRecord) {
		t.Fatalf("a fence read as an entry: %v", err)
	}

	start, end := c.EntryRange(ks)
	keys := [][]byte{c.EntryKey(ks, 1, 0), c.EntryKey(ks, 1, 1), c.EntryKey(ks, 1, 0xffff), c.EntryKey(ks, 2, 0), c.EntryKey(ks, 1<<63-1, 0)}
	if !slices.IsSortedFunc(keys, bytes.Compare) {
		t.Fatal("entry keys do not sort by (seq, part)")
	}
	for _, k := range keys {
		if bytes.Compare(k, start) < 0 || bytes.Compare(k, end) >= 0 {
			t.Fatalf("entry key %x outside the range", k)
		}
	}
	if fk := c.FenceKey(ks); bytes.Compare(fk, end) < 0 {
		t.Fatal("the fence is inside the entries' range")
	}
	if os, oe := c.EntryRange("ordersx"); bytes.Compare(oe, start) > 0 && bytes.Compare(os, end) < 0 {
		t.Fatal("two tables' entry ranges overlap")
	}
}

func mustFence(t *testing.T, c LogLayout, ks adapters.Keyspace) []byte {
	b, err := c.EncodeFence(ks, adapters.LogFence{Epoch: 3, Token: 9, Holder: "h", Last: 5})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzLogRecords feeds arbitrary stored values to the Azure log codec's
// decoders (logtest.Decode: no panic, ErrBadLogRecord, a round trip of
// what they accept).
func FuzzLogRecords(f *testing.F) {
	c := LogCodec()
	ks := adapters.Keyspace("Orders")
	fb, _ := c.EncodeFence(ks, adapters.LogFence{Epoch: 7, Token: 1 << 40, Holder: "node-1", Last: 99})
	f.Add(fb)
	for _, n := range []int{0, 5, tablecodec.MaxValueBytes + 3} {
		b, _ := c.EncodeEntry(ks, 12, 1, bytes.Repeat([]byte{0xab}, n))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { logtest.Decode(t, c, ks, b) })
}
