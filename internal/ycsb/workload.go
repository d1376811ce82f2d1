package ycsb

import (
	"fmt"
	"slices"
)

// Ranked is a Generator that also names the item of each popularity rank
// (0 = hottest), so a benchmark can warm a buffer with the hottest items.
type Ranked interface {
	Generator
	Item(rank uint64) uint64
}

// Item returns the item of popularity rank rank: the Zipfian is
// unscrambled, so rank r is item r.
func (z *Zipfian) Item(rank uint64) uint64 { return min(rank, z.n-1) }

// Workload names how a benchmark's zipfian requests are laid over the key
// space and how its buffer is warmed.
type Workload string

const (
	// WorkloadPaper is the Nemo paper's prototype: the hot set is the
	// zipfian top-K unscrambled (rank r is item r, so the hot keys are
	// adjacent), and the buffer is warmed with the top-K items before
	// measuring.
	WorkloadPaper Workload = "paper"
	// WorkloadScrambled is YCSB's own: ranks scattered over the key space
	// by FNV-64 (ScrambledZipfian), the buffer warmed by running the
	// workload itself.
	WorkloadScrambled Workload = "scrambled"
)

// Workloads returns every Workload, in the order messages list them.
func Workloads() []Workload { return []Workload{WorkloadPaper, WorkloadScrambled} }

// Valid reports whether w is one of Workloads.
func (w Workload) Valid() bool { return slices.Contains(Workloads(), w) }

// Generator returns w's request generator over n items with skew theta.
func (w Workload) Generator(n uint64, theta float64) (Ranked, error) {
	switch w {
	case WorkloadPaper:
		return NewZipfian(n, theta)
	case WorkloadScrambled:
		return NewScrambledZipfian(n, theta)
	}
	return nil, fmt.Errorf("%w: workload %q", ErrBadParam, w)
}

// TopK returns the k hottest distinct items of g, hottest first (fewer
// when g has fewer distinct items). Distinct ranks of a ScrambledZipfian
// can share an item; such a repeat is skipped and the next rank taken.
func TopK(g Ranked, k int) []uint64 {
	n := g.Items()
	out := make([]uint64, 0, min(uint64(max(k, 0)), n))
	seen := make(map[uint64]struct{}, cap(out))
	for rank := uint64(0); rank < n && len(out) < k; rank++ {
		it := g.Item(rank)
		if _, dup := seen[it]; dup {
			continue
		}
		seen[it] = struct{}{}
		out = append(out, it)
	}
	return out
}
