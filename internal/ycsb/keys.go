package ycsb

import "fmt"

const (
	// KeyPrefix starts every key, as in YCSB's "user…" keys.
	KeyPrefix = "user"
	// KeyDigits is the width of the zero-padded decimal index.
	KeyDigits = 12
	// KeyLen is the length of every key Key returns.
	KeyLen = len(KeyPrefix) + KeyDigits
	// MaxKeyIndex is the largest index Key accepts: the largest that fits
	// in KeyDigits digits.
	MaxKeyIndex uint64 = 999_999_999_999
)

// Key returns the key of item i: "user" followed by i in KeyDigits
// zero-padded decimal digits, e.g. Key(42) = "user000000000042". Every key has
// the same length, so bytes.Compare(Key(i), Key(j)) orders exactly as i and j
// do and a scan of n keys from Key(i) visits items i … i+n-1. Human-readable
// decimal was chosen over 8-byte big-endian so keys print legibly in logs and
// store dumps; both preserve order. Key panics if i > MaxKeyIndex, since a
// wider number would break the ordering.
func Key(i uint64) []byte {
	if i > MaxKeyIndex {
		panic(fmt.Sprintf("ycsb: key index %d exceeds %d", i, MaxKeyIndex))
	}
	k := make([]byte, KeyLen)
	copy(k, KeyPrefix)
	for p := KeyLen - 1; p >= len(KeyPrefix); p-- {
		k[p] = byte('0' + i%10)
		i /= 10
	}
	return k
}
