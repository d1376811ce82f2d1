package tablecodec

import (
	"bytes"
	"cmp"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

type keyPair struct{ pk, rk string }

func cmpPair(a, b keyPair) int {
	if c := strings.Compare(a.pk, b.pk); c != 0 {
		return c
	}
	return strings.Compare(a.rk, b.rk)
}

// keyAlphabet is biased towards the bytes that matter to the escaping: the
// escape byte, the terminator and end bytes, 0xFF, and multibyte UTF-8.
var keyAlphabet = []string{"\x00", "\x01", "\x02", "\xff", "a", "b", "é", "€", "😀", "\x00\xff"}

func randKeyString(r *rand.Rand) string {
	var sb strings.Builder
	for n := r.IntN(5); n > 0; n-- {
		sb.WriteString(keyAlphabet[r.IntN(len(keyAlphabet))])
	}
	return sb.String()
}

func TestKeyOrderRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pairs := make([]keyPair, 3000)
	for i := range pairs {
		pairs[i] = keyPair{randKeyString(r), randKeyString(r)}
	}
	for i := 0; i+1 < len(pairs); i++ {
		a, b := pairs[i], pairs[i+1]
		want := cmpPair(a, b)
		if got := bytes.Compare(EncodeKey(a.pk, a.rk), EncodeKey(b.pk, b.rk)); got != want {
			t.Fatalf("order of %q vs %q: encoded %d, want %d", a, b, got, want)
		}
	}
	// Sorting by encoded key must give the tuple order.
	byKey := slices.Clone(pairs)
	slices.SortFunc(byKey, func(a, b keyPair) int {
		return bytes.Compare(EncodeKey(a.pk, a.rk), EncodeKey(b.pk, b.rk))
	})
	byTuple := slices.Clone(pairs)
	slices.SortFunc(byTuple, cmpPair)
	for i := range byKey {
		if cmpPair(byKey[i], byTuple[i]) != 0 {
			t.Fatalf("sorted position %d: by key %q, by tuple %q", i, byKey[i], byTuple[i])
		}
	}
}

func TestKeyOrderCases(t *testing.T) {
	// Each list is in strictly ascending Azure order.
	ordered := []keyPair{
		{"", ""},
		{"", "\x00"},
		{"", "a"},
		{"\x00", ""},
		{"\x00", "\x00"},
		{"\x00\x00", ""},
		{"\x00\x01", ""},
		{"\x01", ""},
		{"a", ""},
		{"a", "a"},
		{"a", "b"},
		{"a\x00", ""}, // a PK that extends another sorts after all of the shorter one's rows
		{"ab", ""},
		{"b", "\xff\xff"},
		{"é", ""},
		{"€", ""},
		{"😀", ""},
		{"\xff", ""},
	}
	for i := 0; i+1 < len(ordered); i++ {
		a, b := ordered[i], ordered[i+1]
		if cmpPair(a, b) >= 0 {
			t.Fatalf("test table not ascending at %d", i)
		}
		ka, kb := EncodeKey(a.pk, a.rk), EncodeKey(b.pk, b.rk)
		if bytes.Compare(ka, kb) >= 0 {
			t.Errorf("EncodeKey(%q) = %x not below EncodeKey(%q) = %x", a, ka, b, kb)
		}
	}
}

func TestPartitionBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		pk, other := randKeyString(r), randKeyString(r)
		rk := randKeyString(r)
		prefix, end := PartitionPrefix(pk), PartitionEnd(pk)
		k := EncodeKey(pk, rk)
		if !bytes.HasPrefix(k, prefix) {
			t.Fatalf("key %x of %q lacks prefix %x", k, pk, prefix)
		}
		if bytes.Compare(k, prefix) < 0 || bytes.Compare(k, end) >= 0 {
			t.Fatalf("key %x of %q outside [%x, %x)", k, pk, prefix, end)
		}
		if !bytes.Equal(EncodeKey(pk, ""), prefix) {
			t.Fatalf("prefix of %q is not the key of the empty row key", pk)
		}
		if other == pk {
			continue
		}
		ko := EncodeKey(other, rk)
		if bytes.HasPrefix(ko, prefix) {
			t.Fatalf("key of partition %q has prefix of %q", other, pk)
		}
		inside := bytes.Compare(ko, prefix) >= 0 && bytes.Compare(ko, end) < 0
		if inside {
			t.Fatalf("key of partition %q inside range of %q", other, pk)
		}
		if (other < pk) != (bytes.Compare(ko, prefix) < 0) {
			t.Fatalf("partition %q vs %q on wrong side", other, pk)
		}
	}
}

func TestDecodeKeyRoundTrip(t *testing.T) {
	for _, p := range []keyPair{{"", ""}, {"p", ""}, {"", "r"}, {"\x00", "\x00\x00"}, {"a\x00b", "é😀\xff"}} {
		gotPK, gotRK, err := DecodeKey(EncodeKey(p.pk, p.rk))
		if err != nil || gotPK != p.pk || gotRK != p.rk {
			t.Errorf("DecodeKey(EncodeKey(%q)) = %q, %q, %v", p, gotPK, gotRK, err)
		}
	}
}

func TestDecodeKeyRejects(t *testing.T) {
	for _, k := range [][]byte{
		nil,
		[]byte("abc"),            // no terminator
		{'a', 0x00},              // dangling escape
		{0x00, 0x05, 0x00, 0x01}, // bad escape in PK
		{0x00, 0x01, 'r', 0x00},  // dangling escape in RK
		{0x00, 0x01, 0x00, 0x01}, // terminator inside RK
		{0x00, 0x02},             // PartitionEnd is a bound, not a key
	} {
		if _, _, err := DecodeKey(k); !errors.Is(err, ErrBadKey) {
			t.Errorf("DecodeKey(%x) error = %v, want ErrBadKey", k, err)
		}
	}
}

func FuzzKeyRoundTrip(f *testing.F) {
	f.Add("", "")
	f.Add("p\x00", "\x00\x01")
	f.Add("é", "😀")
	f.Fuzz(func(t *testing.T, pk, rk string) {
		k := EncodeKey(pk, rk)
		gotPK, gotRK, err := DecodeKey(k)
		if err != nil || gotPK != pk || gotRK != rk {
			t.Fatalf("DecodeKey(EncodeKey(%q, %q)) = %q, %q, %v", pk, rk, gotPK, gotRK, err)
		}
		// Arbitrary bytes: either rejected or canonical.
		if p2, r2, err := DecodeKey([]byte(pk)); err == nil && !bytes.Equal(EncodeKey(p2, r2), []byte(pk)) {
			t.Fatalf("DecodeKey(%x) accepted a non-canonical key", pk)
		}
	})
}

func FuzzKeyOrder(f *testing.F) {
	f.Add("a", "", "a\x00", "")
	f.Add("", "\x00", "\x00", "")
	f.Add("p", "r\xff", "p", "r\x00")
	f.Fuzz(func(t *testing.T, pk1, rk1, pk2, rk2 string) {
		a, b := keyPair{pk1, rk1}, keyPair{pk2, rk2}
		want := cmpPair(a, b)
		got := bytes.Compare(EncodeKey(pk1, rk1), EncodeKey(pk2, rk2))
		if got != want {
			t.Fatalf("%q vs %q: encoded order %d, want %d", a, b, got, want)
		}
		inPartition := func(k []byte, pk string) bool {
			return bytes.Compare(k, PartitionPrefix(pk)) >= 0 && bytes.Compare(k, PartitionEnd(pk)) < 0
		}
		if inPartition(EncodeKey(pk2, rk2), pk1) != (pk1 == pk2) {
			t.Fatalf("key of %q in partition range of %q: %v", pk2, pk1, !(pk1 == pk2))
		}
		if c := cmp.Compare(pk1, pk2); c < 0 && bytes.Compare(PartitionEnd(pk1), EncodeKey(pk2, rk2)) > 0 {
			t.Fatalf("PartitionEnd(%q) above a key of larger partition %q", pk1, pk2)
		}
	})
}
