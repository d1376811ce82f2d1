package ycsb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x5bd1e995)) }

// counts draws samples from g and returns how often each item came up.
func counts(t *testing.T, g Generator, samples int) []int {
	t.Helper()
	c := make([]int, g.Items())
	r := newRand(7)
	for range samples {
		i := g.Next(r)
		if i >= g.Items() {
			t.Fatalf("drew %d, want < %d", i, g.Items())
		}
		c[i]++
	}
	return c
}

func TestZipfianMatchesTheory(t *testing.T) {
	const n, samples = 5000, 1_000_000
	for _, theta := range []float64{0.9, 0.99} {
		z, err := NewZipfian(n, theta)
		if err != nil {
			t.Fatal(err)
		}
		if want := zetaDirect(n, theta); math.Abs(z.Zeta()-want) > 1e-9*want {
			t.Fatalf("theta %v: zeta %v, want %v", theta, z.Zeta(), want)
		}
		c := counts(t, z, samples)
		p := func(i int) float64 { return 1 / math.Pow(float64(i+1), theta) / z.Zeta() }
		freq := func(i int) float64 { return float64(c[i]) / samples }
		// Items 0 and 1 are drawn exactly: only sampling noise (under 1%
		// relative at these counts) separates them from theory.
		for i := range 2 {
			if rel := freq(i)/p(i) - 1; math.Abs(rel) > 0.03 {
				t.Errorf("theta %v item %d: frequency %.5f, theory %.5f (%+.1f%%)", theta, i, freq(i), p(i), 100*rel)
			}
		}
		// Items 2..9 carry the approximation's known over-weighting.
		for i := 2; i < 10; i++ {
			if rel := freq(i)/p(i) - 1; rel < -0.03 || rel > 0.22 {
				t.Errorf("theta %v item %d: frequency %.5f, theory %.5f (%+.1f%%)", theta, i, freq(i), p(i), 100*rel)
			}
		}
		// The hot set's total mass is what caching results depend on.
		for _, top := range []struct {
			k   int
			tol float64
		}{{10, 0.06}, {n / 10, 0.02}} {
			var got, want float64
			for i := range top.k {
				got += freq(i)
				want += p(i)
			}
			if rel := got/want - 1; math.Abs(rel) > top.tol {
				t.Errorf("theta %v top %d: mass %.4f, theory %.4f (%+.1f%%)", theta, top.k, got, want, 100*rel)
			}
		}
		// Popularity falls with rank.
		if !(c[0] > c[1] && c[1] > c[2] && c[2] > c[10] && c[10] > c[1000]) {
			t.Errorf("theta %v: counts not decreasing with rank: %d %d %d %d %d", theta, c[0], c[1], c[2], c[10], c[1000])
		}
	}
}

func zetaDirect(n int, theta float64) float64 {
	var s float64
	for i := 1; i <= n; i++ {
		s += math.Pow(float64(i), -theta)
	}
	return s
}

func TestZipfianSmallItemCounts(t *testing.T) {
	for _, n := range []uint64{1, 2, 3} {
		z, err := NewZipfian(n, 0.99)
		if err != nil {
			t.Fatal(err)
		}
		c := counts(t, z, 10000)
		for i, v := range c {
			if v == 0 {
				t.Errorf("n %d: item %d never drawn", n, i)
			}
		}
	}
}

func TestBadParams(t *testing.T) {
	for _, tc := range []struct {
		n     uint64
		theta float64
	}{{0, 0.9}, {10, 0}, {10, 1}, {10, 1.5}, {10, -0.1}, {10, math.NaN()}} {
		if _, err := NewZipfian(tc.n, tc.theta); !errors.Is(err, ErrBadParam) {
			t.Errorf("NewZipfian(%d, %v): err %v, want ErrBadParam", tc.n, tc.theta, err)
		}
		if _, err := NewScrambledZipfian(tc.n, tc.theta); !errors.Is(err, ErrBadParam) {
			t.Errorf("NewScrambledZipfian(%d, %v): err %v, want ErrBadParam", tc.n, tc.theta, err)
		}
	}
}

func TestFNV64(t *testing.T) {
	// Against the standard library's FNV-1a over the little-endian bytes.
	r := newRand(11)
	for _, v := range []uint64{0, 1, 255, 256, math.MaxUint64, r.Uint64(), r.Uint64()} {
		h := fnv.New64a()
		h.Write(binary.LittleEndian.AppendUint64(nil, v))
		if got, want := FNV64(v), h.Sum64(); got != want {
			t.Errorf("FNV64(%d) = %#x, want %#x", v, got, want)
		}
	}
}

func TestScrambledZipfianSpreadsHotItems(t *testing.T) {
	const n, samples = 10000, 500_000
	s, err := NewScrambledZipfian(n, 0.9)
	if err != nil {
		t.Fatal(err)
	}
	z, _ := NewZipfian(n, 0.9)
	c := counts(t, s, samples)
	// The hottest item is rank 0's image, at least as hot as rank 0 is
	// (collisions only add).
	hottest := 0
	for i := range c {
		if c[i] > c[hottest] {
			hottest = i
		}
	}
	if uint64(hottest) != s.Item(0) {
		t.Errorf("hottest item %d, want Item(0) = %d", hottest, s.Item(0))
	}
	if p0 := 1 / z.Zeta(); float64(c[hottest])/samples < 0.97*p0 {
		t.Errorf("hottest frequency %.4f, want >= %.4f", float64(c[hottest])/samples, p0)
	}
	// The 20 hottest ranks land all over the item space, not at its start.
	var hot []uint64
	for r := range uint64(20) {
		hot = append(hot, s.Item(r))
	}
	slices.Sort(hot)
	if hot[0] > n/4 || hot[len(hot)-1] < 3*n/4 {
		t.Errorf("hot items %v are clustered", hot)
	}
	// The skew survives scrambling: the 100 hottest items take about the
	// same mass as the Zipfian's top 100 (slightly more, from collisions).
	sorted := slices.Clone(c)
	slices.SortFunc(sorted, func(a, b int) int { return b - a })
	var got, want float64
	for i := range 100 {
		got += float64(sorted[i]) / samples
		want += 1 / math.Pow(float64(i+1), 0.9) / z.Zeta()
	}
	if got < 0.97*want || got > 1.15*want {
		t.Errorf("top-100 mass %.4f, zipfian %.4f", got, want)
	}
}

func TestDeterministic(t *testing.T) {
	z, _ := NewZipfian(1000, 0.99)
	s, _ := NewScrambledZipfian(1000, 0.99)
	for _, g := range []Generator{z, s} {
		a, b, c := newRand(42), newRand(42), newRand(43)
		var sa, sb, sc []uint64
		for range 200 {
			sa = append(sa, g.Next(a))
			sb = append(sb, g.Next(b))
			sc = append(sc, g.Next(c))
		}
		if !slices.Equal(sa, sb) {
			t.Errorf("%T: same seed, different sequences", g)
		}
		if slices.Equal(sa, sc) {
			t.Errorf("%T: different seeds, same sequence", g)
		}
	}
}

func TestKeyOrder(t *testing.T) {
	edges := []uint64{0, 1, 9, 10, 99, 100, 12345, 1 << 32, MaxKeyIndex - 1, MaxKeyIndex}
	r := newRand(1)
	for range 10000 {
		edges = append(edges, r.Uint64N(MaxKeyIndex+1), r.Uint64N(100000))
	}
	for i, a := range edges {
		b := edges[(i+1)%len(edges)]
		ka, kb := Key(a), Key(b)
		if len(ka) != KeyLen {
			t.Fatalf("Key(%d) = %q has %d bytes, want %d", a, ka, len(ka), KeyLen)
		}
		if got, want := bytes.Compare(ka, kb), cmpU(a, b); got != want {
			t.Fatalf("Compare(Key(%d), Key(%d)) = %d, want %d", a, b, got, want)
		}
	}
	if got := string(Key(42)); got != "user000000000042" {
		t.Errorf("Key(42) = %q", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("Key(MaxKeyIndex+1) did not panic")
		}
	}()
	Key(MaxKeyIndex + 1)
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
