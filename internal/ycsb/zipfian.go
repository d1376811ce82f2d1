package ycsb

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// ErrBadParam is returned (wrapped) for an item count or skew a generator
// cannot use.
var ErrBadParam = errors.New("ycsb: bad generator parameter")

// Generator draws item numbers in [0, Items()).
type Generator interface {
	Next(r *rand.Rand) uint64
	Items() uint64
}

// Zipfian draws item i with probability (1/(i+1)^theta) / zeta(n, theta):
// item 0 is the most popular. It is Gray et al.'s constant-time
// approximation as YCSB's ZipfianGenerator implements it: items 0 and 1 are
// drawn exactly, the tail through a closed-form inverse of an approximate
// CDF. That approximation (YCSB's too) over-weights the next few items, item
// 2 by about 17% falling to a few percent by item 10, while the mass of the
// top k items stays within 5% of the exact value (within 1% once k is a
// tenth of n). zeta(n, theta) is summed once at construction (O(n)); every
// draw is O(1).
type Zipfian struct {
	n          uint64
	theta      float64
	zetan      float64 // zeta(n, theta) = sum_{i=1..n} 1/i^theta
	alpha      float64 // 1 / (1 - theta)
	eta        float64
	halfPowTh  float64 // 0.5^theta: the upper edge of item 1 in units of 1/zetan
	zeta2theta float64
}

// DefaultTheta is YCSB's default Zipfian constant.
const DefaultTheta = 0.99

// NewZipfian returns a generator over n >= 1 items with skew theta in
// (0, 1) (Gray's method needs theta < 1; YCSB's default is 0.99).
func NewZipfian(n uint64, theta float64) (*Zipfian, error) {
	if err := checkZipf(n, theta); err != nil {
		return nil, err
	}
	return newZipfianZeta(n, theta, zeta(0, n, theta, 0)), nil
}

func checkZipf(n uint64, theta float64) error {
	if n == 0 {
		return fmt.Errorf("%w: zero items", ErrBadParam)
	}
	if !(theta > 0 && theta < 1) {
		return fmt.Errorf("%w: theta %v outside (0, 1)", ErrBadParam, theta)
	}
	return nil
}

// newZipfianZeta derives the draw constants from a known zeta(n, theta).
func newZipfianZeta(n uint64, theta, zetan float64) *Zipfian {
	z := &Zipfian{n: n, theta: theta, zetan: zetan}
	z.alpha = 1 / (1 - theta)
	z.zeta2theta = zeta(0, 2, theta, 0)
	z.halfPowTh = math.Pow(0.5, theta)
	// With one or two items the tail formula is never reached (every u
	// lands on an exact item), and for n == 2 its denominator is 0.
	if n > 2 {
		z.eta = (1 - math.Pow(2/float64(n), 1-theta)) / (1 - z.zeta2theta/zetan)
	}
	return z
}

// zeta returns zeta(to, theta) given sum = zeta(from, theta): the sum of
// 1/i^theta for i in 1..to. Passing a known prefix makes growing n cost only
// the new terms.
func zeta(from, to uint64, theta, sum float64) float64 {
	for i := from + 1; i <= to; i++ {
		sum += 1 / math.Pow(float64(i), theta)
	}
	return sum
}

// Next implements Generator.
func (z *Zipfian) Next(r *rand.Rand) uint64 {
	u := r.Float64()
	uz := u * z.zetan
	if uz < 1 {
		return 0
	}
	if uz < 1+z.halfPowTh {
		return 1 % z.n
	}
	i := uint64(float64(z.n) * math.Pow(z.eta*u-z.eta+1, z.alpha))
	return min(i, z.n-1) // float rounding must not leave the item space
}

// Items implements Generator.
func (z *Zipfian) Items() uint64 { return z.n }

// Theta returns the skew.
func (z *Zipfian) Theta() float64 { return z.theta }

// Zeta returns zeta(n, theta), the normalization constant: item i is drawn
// with probability (1/(i+1)^theta) / Zeta().
func (z *Zipfian) Zeta() float64 { return z.zetan }

// ScrambledZipfian has the popularity profile of a Zipfian over the same
// items, but the rank-r item is FNV-64(r) mod n instead of r, so the hot
// items are scattered over the item (and key) space rather than clustered at
// its start. Like YCSB's generator it hashes with FNV-1a over the 8
// little-endian bytes of the rank; unlike YCSB, which draws ranks from a
// fixed space of 10^10 items so that only theta 0.99 has a precomputed zeta,
// it draws ranks over the n items themselves, so any theta works and the
// skew is exactly that of a Zipfian over n. Distinct ranks can hash to the
// same item (as in YCSB), so a few items are a little hotter and about 1/e
// of them are never drawn.
type ScrambledZipfian struct{ z *Zipfian }

// NewScrambledZipfian returns a scrambled generator over n >= 1 items with
// skew theta in (0, 1).
func NewScrambledZipfian(n uint64, theta float64) (*ScrambledZipfian, error) {
	z, err := NewZipfian(n, theta)
	if err != nil {
		return nil, err
	}
	return &ScrambledZipfian{z: z}, nil
}

// Next implements Generator.
func (s *ScrambledZipfian) Next(r *rand.Rand) uint64 { return s.Item(s.z.Next(r)) }

// Item returns the item that popularity rank rank (0 = hottest) maps to.
func (s *ScrambledZipfian) Item(rank uint64) uint64 { return FNV64(rank) % s.z.n }

// Items implements Generator.
func (s *ScrambledZipfian) Items() uint64 { return s.z.n }

// FNV64 is the 64-bit FNV-1a hash of the 8 little-endian bytes of v, the
// scrambling function YCSB applies to Zipfian ranks.
func FNV64(v uint64) uint64 {
	const (
		offset = 0xcbf29ce484222325
		prime  = 0x100000001b3
	)
	h := uint64(offset)
	for range 8 {
		h ^= v & 0xff
		h *= prime
		v >>= 8
	}
	return h
}
