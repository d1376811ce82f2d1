package txn

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// Every key in [start, end) lies in a partition lockRange locks, and a
// range that ends where a partition begins does not lock that partition.
func TestPCLRangeCoversItsKeys(t *testing.T) {
	p := newPCL(4)
	if got := p.lastPartition(k(48)); got != 11 {
		t.Errorf("lastPartition(48) = %d, want 11 (keys below 48 end in partition 11)", got)
	}
	if got := p.lastPartition(append(k(48), 0)); got != 12 {
		t.Errorf("lastPartition(48 ‖ 0) = %d, want 12 (48 itself is below it)", got)
	}
	if got := p.lastPartition(k(49)); got != 12 {
		t.Errorf("lastPartition(49) = %d, want 12", got)
	}
	rng := rand.New(rand.NewPCG(1+seedShift(t), 2))
	// Short keys over a small alphabet, so prefixes, zero bytes and
	// partition boundaries all come up.
	key := func() []byte {
		b := make([]byte, 1+rng.IntN(9))
		for i := range b {
			b[i] = []byte{0, 1, 4, 8, 0xff}[rng.IntN(5)]
		}
		return b
	}
	for _, size := range []uint64{1, 4, 1 << 8, 1 << 56} {
		p := newPCL(size)
		for i := 0; i < 20000; i++ {
			a, b, x := key(), key(), key()
			if bytes.Compare(a, b) > 0 {
				a, b = b, a
			}
			if !(bytes.Compare(a, x) <= 0 && bytes.Compare(x, b) < 0) {
				continue
			}
			lo, hi, px := p.partition(a), p.lastPartition(b), p.partition(x)
			if px < lo || px > hi {
				t.Fatalf("size %d: key %x in [%x, %x) is in partition %d, outside the locked %d..%d", size, x, a, b, px, lo, hi)
			}
		}
	}
}
