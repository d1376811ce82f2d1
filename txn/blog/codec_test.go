package blog

import (
	"bytes"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/logtest"
)

// TestRawCodec: RawCodec's keys order by (seq, part) inside EntryRange, the
// fence and other keyspaces' logs outside it (also when one keyspace's
// name is a prefix of another's), and its records round-trip.
func TestRawCodec(t *testing.T) {
	c := RawCodec(logKS)
	start, end := c.EntryRange("ab")
	keys := [][]byte{c.EntryKey("ab", 1, 0), c.EntryKey("ab", 1, 1), c.EntryKey("ab", 2, 0), c.EntryKey("ab", 1<<64-1, 1<<31-1)}
	if !slices.IsSortedFunc(keys, bytes.Compare) {
		t.Fatal("entry keys do not sort by (seq, part)")
	}
	for _, k := range keys {
		if bytes.Compare(k, start) < 0 || bytes.Compare(k, end) >= 0 {
			t.Fatalf("entry key %x outside the range", k)
		}
	}
	for _, k := range [][]byte{c.FenceKey("ab"), c.FenceKey("a"), c.EntryKey("a", 1, 0), c.EntryKey("abc", 1, 0), c.FenceKey("abc")} {
		if bytes.Compare(k, start) >= 0 && bytes.Compare(k, end) < 0 {
			t.Fatalf("key %x is inside the range of ab's entries", k)
		}
	}
	f := Fence{Epoch: 3, Token: 1<<63 - 1, Holder: "n", Last: 9}
	b, err := c.EncodeFence("ab", f)
	if err != nil {
		t.Fatal(err)
	}
	f.Keyspace = "ab" // the codec names the fence's keyspace
	if back, err := c.DecodeFence(b); err != nil || back != f {
		t.Fatalf("fence %+v, %v", back, err)
	}
	b, err = c.EncodeEntry("ab", 7, 2, []byte("data"))
	if err != nil {
		t.Fatal(err)
	}
	if seq, part, data, err := c.DecodeEntry(b); err != nil || seq != 7 || part != 2 || string(data) != "data" {
		t.Fatalf("entry %d %d %q, %v", seq, part, data, err)
	}
}

// FuzzRawCodec: RawCodec's decoders never panic, refuse with ErrBadRecord,
// and what they accept encodes again to a record that decodes the same
// (logtest.Decode); an entry, to the same bytes.
func FuzzRawCodec(f *testing.F) {
	c := RawCodec(logKS)
	fb, _ := c.EncodeFence("t", Fence{Epoch: 2, Token: 77, Holder: "node-1", Last: 5})
	eb, _ := c.EncodeEntry("t", 5, 1, []byte("commit"))
	f.Add(fb)
	f.Add(eb)
	f.Fuzz(func(t *testing.T, b []byte) {
		logtest.Decode(t, c, "t", b)
		// And the raw encoding is canonical.
		if seq, part, data, err := c.DecodeEntry(b); err == nil {
			if again, _ := c.EncodeEntry("t", seq, part, data); !bytes.Equal(again, b) {
				t.Fatalf("%x decodes and encodes to %x", b, again)
			}
		}
	})
}

// TestImportsNoBackend: txn knows no backend: the log package imports the
// adapters' shared types, never an adapter (each provides its Codec).
func TestImportsNoBackend(t *testing.T) {
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	const mod = "github.com/nemocache/nemo/"
	for _, fi := range files {
		n := fi.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), n, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, mod+"adapters/") {
				t.Errorf("%s imports %s: a backend's log codec belongs to its adapter", n, p)
			}
		}
	}
	var _ adapters.LogFence = Fence{} // the codecs' record type is the adapters'
}
