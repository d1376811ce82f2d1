package obs

import (
	"slices"
	"sync/atomic"
	"time"
)

// Histogram counts observations into fixed buckets. Observe is lock-free
// (a search over the bounds and two atomic adds); Snapshot reads it for a
// Stats report. The zero value is not usable: make one with
// NewHistogram or NewDurationHistogram.
type Histogram struct {
	bounds []int64         // inclusive upper bounds, ascending
	counts []atomic.Uint64 // one per bound, then +Inf
	sum    atomic.Int64    // of the observed values
	scale  float64         // multiplies values into the exported unit
}

// LatencyBuckets are the bounds of nemo's latency histograms: 50 µs (a
// buffer hit through a frontend) to 10 s (a lock wait's or a request's
// limit).
var LatencyBuckets = []time.Duration{
	50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// LatencySeconds are LatencyBuckets in seconds, for Prometheus histograms
// that the proxy keeps itself.
func LatencySeconds() []float64 {
	out := make([]float64, len(LatencyBuckets))
	for i, b := range LatencyBuckets {
		out[i] = b.Seconds()
	}
	return out
}

// NewDurationHistogram returns a histogram of durations with the given
// bounds (LatencyBuckets when none), exported in seconds.
func NewDurationHistogram(bounds ...time.Duration) *Histogram {
	if len(bounds) == 0 {
		bounds = LatencyBuckets
	}
	b := make([]int64, len(bounds))
	for i, d := range bounds {
		b[i] = int64(d)
	}
	return newHistogram(b, 1e-9)
}

// NewHistogram returns a histogram of counts or sizes with the given
// inclusive upper bounds, exported as they are.
func NewHistogram(bounds ...int64) *Histogram { return newHistogram(slices.Clone(bounds), 1) }

func newHistogram(bounds []int64, scale float64) *Histogram {
	if !slices.IsSorted(bounds) {
		panic("obs: histogram bounds must ascend")
	}
	return &Histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1), scale: scale}
}

// Observe counts v.
func (h *Histogram) Observe(v int64) {
	i, _ := slices.BinarySearch(h.bounds, v)
	h.counts[i].Add(1)
	h.sum.Add(v)
}

// ObserveDuration counts d (a histogram made by NewDurationHistogram).
func (h *Histogram) ObserveDuration(d time.Duration) { h.Observe(int64(d)) }

// Since counts the time since start.
func (h *Histogram) Since(start time.Time) { h.Observe(int64(time.Since(start))) }

// HistogramSnapshot is a histogram read at one moment: each bucket's own
// count (not cumulative), the last one past every bound.
type HistogramSnapshot struct {
	// Bounds are the buckets' upper bounds in the exported unit
	// (seconds for durations).
	Bounds []float64
	Counts []uint64
	// Count is the number of observations, Sum their total in the
	// exported unit.
	Count uint64
	Sum   float64
	// Raw is the sum in the observed unit (nanoseconds for durations).
	Raw int64
}

// Snapshot reads h. Buckets are read one at a time, so a snapshot taken
// during traffic may miss an observation in flight; that is fine for
// metrics.
func (h *Histogram) Snapshot() HistogramSnapshot {
	s := HistogramSnapshot{Bounds: make([]float64, len(h.bounds)), Counts: make([]uint64, len(h.counts))}
	for i, b := range h.bounds {
		s.Bounds[i] = float64(b) * h.scale
	}
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
		s.Count += s.Counts[i]
	}
	s.Raw = h.sum.Load()
	s.Sum = float64(s.Raw) * h.scale
	return s
}

// Cumulative returns the buckets as Prometheus wants them: upper bound to
// the count of observations at or below it (+Inf left out).
func (s HistogramSnapshot) Cumulative() map[float64]uint64 {
	m := make(map[float64]uint64, len(s.Bounds))
	var n uint64
	for i, b := range s.Bounds {
		n += s.Counts[i]
		m[b] = n
	}
	return m
}

// Mean is Sum/Count, 0 with no observations.
func (s HistogramSnapshot) Mean() float64 {
	if s.Count == 0 {
		return 0
	}
	return s.Sum / float64(s.Count)
}

// Reset zeroes h (between benchmark phases).
func (h *Histogram) Reset() {
	for i := range h.counts {
		h.counts[i].Store(0)
	}
	h.sum.Store(0)
}
