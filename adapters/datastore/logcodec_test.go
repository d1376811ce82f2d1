package datastore

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/adapters/logtest"
)

// TestLogCodecRoundTrip: fences and entries of every size up to a record
// decode to what was encoded; the log lives in the default namespace,
// keyed NemoLog/<namespace> ("(default)" for the default one) with
// NemoLogEntry children whose ids order by (seq, part) inside EntryRange,
// the fence and other namespaces' logs outside it; a value read back with
// another entity's key is refused.
func TestLogCodecRoundTrip(t *testing.T) {
	c := LogCodec()
	ns := dscodec.Partition{Project: "p", Database: "db", Namespace: "ns"}.Keyspace()
	def := dscodec.Partition{Project: "p", Database: "db"}.Keyspace()
	if c.Keyspace(ns) != def || c.Keyspace(def) != def || c.Keyspace("Orders") != "" || c.FenceKey("Orders") != nil {
		t.Fatalf("keyspaces %q %q %q", c.Keyspace(ns), c.Keyspace(def), c.Keyspace("Orders"))
	}
	for ks, name := range map[adapters.Keyspace]string{ns: "ns", def: "(default)"} {
		path, err := dscodec.DecodePath(c.FenceKey(ks))
		if err != nil || len(path) != 1 || path[0].GetKind() != LogKind || path[0].GetName() != name {
			t.Fatalf("fence of %q: %v %v", ks, path, err)
		}
	}
	path, err := dscodec.DecodePath(c.EntryKey(ns, 3, 5))
	if err != nil || len(path) != 2 || path[1].GetKind() != LogEntryKind || path[1].GetId() != 3<<12|5 {
		t.Fatalf("entry key %v %v", path, err)
	}
	for _, bad := range [][]byte{c.EntryKey(ns, 0, 0), c.EntryKey(ns, 1<<51, 0), c.EntryKey(ns, 1, 1<<12), c.EntryKey(ns, 1, -1)} {
		if bad != nil {
			t.Fatalf("an entry key out of range: %x", bad)
		}
	}

	for _, f := range []adapters.LogFence{{Epoch: 1, Token: 1, Holder: "node-a"}, {Epoch: 1<<63 - 1, Token: 1<<63 - 1, Last: 1<<63 - 1}} {
		b, err := c.EncodeFence(ns, f)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := c.DecodeFence(b); err != nil || back != (adapters.LogFence{Epoch: f.Epoch, Token: f.Token, Holder: f.Holder, Last: f.Last, Keyspace: ns}) {
			t.Fatalf("fence %+v of %q decodes to %+v, %v", f, ns, back, err)
		}
	}
	rb := c.Limits().RecordBytes
	for _, n := range []int{0, 1, rb} {
		data := bytes.Repeat([]byte{0x5a}, n)
		b, err := c.EncodeEntry(ns, 42, 3, data)
		if err != nil {
			t.Fatal(err)
		}
		seq, part, back, err := c.DecodeEntry(b)
		if err != nil || seq != 42 || part != 3 || !bytes.Equal(back, data) {
			t.Fatalf("%d bytes decode to seq %d part %d %d bytes, %v", n, seq, part, len(back), err)
		}
	}
	if _, err := c.EncodeEntry(ns, 1, 0, make([]byte, rb+1)); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("an entry part over a record: %v", err)
	}
	// Read back with its key, an entry must be the one its key names.
	b, _ := c.EncodeEntry(ns, 42, 3, []byte("x"))
	er, _ := dscodec.DecodeValue(b)
	parent := &datastorepb.Key_PathElement{Kind: LogKind, IdType: &datastorepb.Key_PathElement_Name{Name: "ns"}}
	for id, ok := range map[int64]bool{42<<12 | 3: true, 42<<12 | 4: false} {
		er.Entity.Key = &datastorepb.Key{Path: []*datastorepb.Key_PathElement{parent, {Kind: LogEntryKind, IdType: &datastorepb.Key_PathElement_Id{Id: id}}}}
		v, _ := dscodec.EncodeValue(er)
		if _, _, _, err := c.DecodeEntry(v); (err == nil) != ok || err != nil && !errors.Is(err, adapters.ErrBadLogRecord) {
			t.Fatalf("entry read back under id %d: %v", id, err)
		}
	}

	start, end := c.EntryRange(ns)
	keys := [][]byte{c.EntryKey(ns, 1, 0), c.EntryKey(ns, 1, 1), c.EntryKey(ns, 1, 1<<12-1), c.EntryKey(ns, 2, 0), c.EntryKey(ns, 1<<51-1, 1<<12-1)}
	if !slices.IsSortedFunc(keys, bytes.Compare) {
		t.Fatal("entry keys do not sort by (seq, part)")
	}
	for _, k := range keys {
		if bytes.Compare(k, start) < 0 || bytes.Compare(k, end) >= 0 {
			t.Fatalf("entry key %x outside the range", k)
		}
	}
	if bytes.Compare(c.FenceKey(ns), start) >= 0 {
		t.Fatal("the fence is inside the entries' range")
	}
	ns2 := dscodec.Partition{Project: "p", Database: "db", Namespace: "ns2"}.Keyspace()
	for _, k := range [][]byte{c.FenceKey(ns2), c.EntryKey(ns2, 1, 0), c.FenceKey(def), c.EntryKey(def, 1, 0)} {
		if bytes.Compare(k, start) >= 0 && bytes.Compare(k, end) < 0 {
			t.Fatalf("another namespace's log record %x is inside the range", k)
		}
	}
}

// FuzzLogRecords feeds arbitrary stored values to the Datastore log
// codec's decoders (logtest.Decode: no panic, ErrBadLogRecord, a round
// trip of what they accept).
func FuzzLogRecords(f *testing.F) {
	c := LogCodec()
	ks := dscodec.Partition{Project: "p", Namespace: "ns"}.Keyspace()
	fb, _ := c.EncodeFence(ks, adapters.LogFence{Epoch: 7, Token: 1 << 40, Holder: "node-1", Last: 99})
	f.Add(fb)
	for _, n := range []int{0, 5, 300} {
		b, _ := c.EncodeEntry(ks, 12, 1, bytes.Repeat([]byte{0xab}, n))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { logtest.Decode(t, c, ks, b) })
}
