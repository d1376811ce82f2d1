package bench

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/nemocache/nemo/internal/ycsb"
)

// parseKey is the inverse of ycsb.Key: it returns the index of a key Key
// made and false for anything else. The harness reads a scan's position
// back from its last key with it.
func parseKey(k []byte) (uint64, bool) {
	if len(k) != ycsb.KeyLen || string(k[:len(ycsb.KeyPrefix)]) != ycsb.KeyPrefix {
		return 0, false
	}
	digits := k[len(ycsb.KeyPrefix):]
	for _, c := range digits {
		if c < '0' || c > '9' { // ParseUint would also accept a sign
			return 0, false
		}
	}
	i, err := strconv.ParseUint(string(digits), 10, 64)
	return i, err == nil
}

func TestParseKeyInvertsKey(t *testing.T) {
	edges := []uint64{0, 1, 9, 10, 99, 100, 12345, 1 << 32, ycsb.MaxKeyIndex - 1, ycsb.MaxKeyIndex}
	r := rand.New(rand.NewPCG(1, 1))
	for range 10000 {
		edges = append(edges, r.Uint64N(ycsb.MaxKeyIndex+1), r.Uint64N(100000))
	}
	for _, a := range edges {
		if back, ok := parseKey(ycsb.Key(a)); !ok || back != a {
			t.Fatalf("parseKey(%q) = %d, %v; want %d", ycsb.Key(a), back, ok, a)
		}
	}
}

func TestParseKeyRejects(t *testing.T) {
	for _, k := range []string{"", "user", "user00000000004", "user0000000000042", "usr0000000000042", "user00000000004x", "user+00000000042", "USER000000000042"} {
		if i, ok := parseKey([]byte(k)); ok {
			t.Errorf("parseKey(%q) = %d, true; want false", k, i)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	f.Add([]byte("user000000000042"))
	f.Add([]byte("user-00000000042"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, k []byte) {
		i, ok := parseKey(k)
		if !ok {
			return
		}
		if !bytes.Equal(ycsb.Key(i), k) {
			t.Fatalf("parseKey(%q) = %d but Key(%d) = %q", k, i, i, ycsb.Key(i))
		}
	})
}

// value returns n random bytes drawn from r (YCSB fills fields with random
// data; the bytes here are not restricted to printable characters).
func value(r *rand.Rand, n int) []byte {
	v := make([]byte, n)
	for i := 0; i < n; i += 8 {
		x := r.Uint64()
		for j := i; j < min(i+8, n); j++ {
			v[j] = byte(x)
			x >>= 8
		}
	}
	return v
}

func TestValue(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, n := range []int{0, 1, 7, 8, 9, 1024} {
		if v := value(r, n); len(v) != n {
			t.Errorf("value(%d) has %d bytes", n, len(v))
		}
	}
	// Random, not constant: 1 KiB of random bytes shows most byte values.
	seen := map[byte]bool{}
	for _, c := range value(r, 1024) {
		seen[c] = true
	}
	if len(seen) < 200 {
		t.Errorf("1 KiB value uses only %d distinct bytes", len(seen))
	}
	if !bytes.Equal(value(rand.New(rand.NewPCG(5, 5)), 100), value(rand.New(rand.NewPCG(5, 5)), 100)) {
		t.Error("value: same seed, different bytes")
	}
}
