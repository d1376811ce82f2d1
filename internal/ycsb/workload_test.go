package ycsb

import (
	"errors"
	"slices"
	"testing"
)

// TestTopKPaperIsAdjacent: the paper's workload's hot set is the first k
// items, and they are the items drawn most often.
func TestTopKPaperIsAdjacent(t *testing.T) {
	g, err := WorkloadPaper.Generator(1000, 0.99)
	if err != nil {
		t.Fatal(err)
	}
	top := TopK(g, 10)
	if want := []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(top, want) {
		t.Fatalf("TopK = %v, want %v", top, want)
	}
	c := counts(t, g, 200000)
	for _, it := range top {
		for j := uint64(20); j < g.Items(); j++ {
			if c[it] < c[j] {
				t.Fatalf("top item %d drawn %d times, item %d %d times", it, c[it], j, c[j])
			}
		}
	}
}

// TestTopKScrambled: the scrambled workload's top-K are distinct, follow
// the scrambling of ranks 0, 1, … (skipping repeats), and are the items
// drawn most often.
func TestTopKScrambled(t *testing.T) {
	g, err := WorkloadScrambled.Generator(1000, 0.99)
	if err != nil {
		t.Fatal(err)
	}
	s := g.(*ScrambledZipfian)
	top := TopK(g, 50)
	if len(top) != 50 {
		t.Fatalf("%d items, want 50", len(top))
	}
	seen := map[uint64]bool{}
	rank := uint64(0)
	for i, it := range top {
		for seen[s.Item(rank)] {
			rank++
		}
		if it != s.Item(rank) {
			t.Fatalf("item %d is %d, want the item of rank %d, %d", i, it, rank, s.Item(rank))
		}
		seen[it] = true
		rank++
	}
	c := counts(t, g, 200000)
	if c[top[0]] != slices.Max(c) {
		t.Fatalf("hottest item %d drawn %d times, the most drawn %d", top[0], c[top[0]], slices.Max(c))
	}
	adjacent := 0
	sorted := slices.Sorted(slices.Values(top[:10]))
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1]+1 {
			adjacent++
		}
	}
	if adjacent > 3 {
		t.Fatalf("scrambled top 10 %v has %d adjacent pairs", sorted, adjacent)
	}
}

// TestTopKBounds: k beyond the item count returns every (distinct) item;
// k <= 0 returns none.
func TestTopKBounds(t *testing.T) {
	g, err := WorkloadPaper.Generator(5, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	if got := TopK(g, 100); !slices.Equal(got, []uint64{0, 1, 2, 3, 4}) {
		t.Fatalf("TopK(5 items, 100) = %v", got)
	}
	if got := TopK(g, 0); len(got) != 0 {
		t.Fatalf("TopK(0) = %v", got)
	}
	s, err := WorkloadScrambled.Generator(7, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	got := TopK(s, 100)
	if len(got) == 0 || len(got) > 7 || len(slices.Compact(slices.Sorted(slices.Values(got)))) != len(got) {
		t.Fatalf("TopK(scrambled 7 items, 100) = %v: want distinct items, at most 7", got)
	}
}

func TestWorkloadValid(t *testing.T) {
	for _, w := range Workloads() {
		if !w.Valid() {
			t.Errorf("%q not valid", w)
		}
	}
	if Workload("zipf").Valid() {
		t.Error(`"zipf" valid`)
	}
	if _, err := Workload("zipf").Generator(10, 0.9); !errors.Is(err, ErrBadParam) {
		t.Errorf("Generator of an unknown workload: %v, want ErrBadParam", err)
	}
}
