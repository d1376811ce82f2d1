package bench

import (
	"testing"
	"time"

	"github.com/nemocache/nemo/cache"
)

// benchScale: 20,000 records of 1 KiB, 1 ms per remote call, 16 clients.
var benchScale = scale{
	records: 20000, valueSize: 1024, latency: time.Millisecond, workers: 16,
	warmOps: 200000, ops: 40000, checkEvery: 8,
}

// BenchmarkPointReads: (a) zipfian 0.9 reads, buffer 10% of the data.
func BenchmarkPointReads(b *testing.B) { runBench(b, pointReads) }

// BenchmarkNegativeLookups: (b) half the lookups miss the data, buffer 30%.
func BenchmarkNegativeLookups(b *testing.B) { runBench(b, negativeLookups) }

// BenchmarkRangeScans: (c) YCSB-E scans of 8 records, buffer 30%.
func BenchmarkRangeScans(b *testing.B) { runBench(b, rangeScans) }

// BenchmarkRangeScansClustered: (c) with hot scans adjacent in key order.
func BenchmarkRangeScansClustered(b *testing.B) { runBench(b, rangeScansClustered) }

// BenchmarkPointReadsPaper: (a) with the paper's workload (unscrambled
// zipfian, top-K warm-up).
func BenchmarkPointReadsPaper(b *testing.B) { runBench(b, pointReadsPaper) }

// BenchmarkNegativeLookupsPaper: (b) with the paper's workload.
func BenchmarkNegativeLookupsPaper(b *testing.B) { runBench(b, negativeLookupsPaper) }

// BenchmarkRangeScansPaper: (c) with the paper's workload, where the paper
// reports 4.70x fewer remote calls than the record cache.
func BenchmarkRangeScansPaper(b *testing.B) { runBench(b, rangeScansPaper) }

// runBench measures the workload under its baseline policy and under nemo
// in every iteration, and reports both and their ratios. The timer covers
// both policies; the reported ops/s are each policy's own measured phase.
func runBench(b *testing.B, w workload) {
	e := newEnv(b, w, benchScale)
	var base, nemo result
	for b.Loop() {
		base.add(e.run(b, w.baseline))
		nemo.add(e.run(b, cache.PolicyNemo))
	}
	for _, r := range []result{base, nemo} {
		b.Log(r)
		if len(r.wrong) > 0 {
			b.Fatalf("%s: %d wrong answers, first: %s", r.policy, len(r.wrong), r.wrong[0])
		}
	}
	bp := string(w.baseline)
	b.ReportMetric(nemo.opsPerSec(), "nemo_ops/s")
	b.ReportMetric(base.opsPerSec(), bp+"_ops/s")
	b.ReportMetric(nemo.opsPerSec()/base.opsPerSec(), "speedup")
	b.ReportMetric(nemo.remotePerOp(), "nemo_remote/op")
	b.ReportMetric(base.remotePerOp(), bp+"_remote/op")
	b.ReportMetric(base.remotePerOp()/nemo.remotePerOp(), "remote_reduction")
	b.ReportMetric(nemo.hitRatio(), "nemo_hit_ratio")
	b.ReportMetric(base.hitRatio(), bp+"_hit_ratio")
}

// testScale is small enough for go test -race.
var testScale = scale{
	records: 1000, valueSize: 1024, latency: 100 * time.Microsecond, workers: 16,
	warmOps: 3000, ops: 2000, checkEvery: 1,
}

// TestWorkloads runs every benchmark workload briefly and checks what must
// hold at any scale: every answer matches the loaded data, and nemo asks
// the store less often per operation than its baseline.
func TestWorkloads(t *testing.T) {
	for _, w := range []workload{pointReads, negativeLookups, rangeScans, rangeScansClustered,
		pointReadsPaper, negativeLookupsPaper, rangeScansPaper} {
		t.Run(w.name, func(t *testing.T) {
			e := newEnv(t, w, testScale)
			base := e.run(t, w.baseline)
			nemo := e.run(t, cache.PolicyNemo)
			for _, r := range []result{base, nemo} {
				t.Log(r)
				if r.ops != testScale.ops || r.checked != int64(testScale.ops) {
					t.Errorf("%s: %d ops, %d checked; want %d of each", r.policy, r.ops, r.checked, testScale.ops)
				}
				for _, msg := range r.wrong {
					t.Errorf("%s: wrong answer: %s", r.policy, msg)
				}
			}
			// The baselines' cost is fixed by construction: no buffer, or
			// a positive-only one that sends every scan to the store.
			if w.scanLen > 0 || w.baseline == cache.PolicyNone {
				if base.remotePerOp() < 1 {
					t.Errorf("%s baseline: %.3f remote requests per op, want >= 1", base.policy, base.remotePerOp())
				}
			}
			if w.scanLen == 0 && w.baseline == cache.PolicyRecord && base.remotePerOp() < float64(base.negatives)/float64(base.ops) {
				t.Errorf("record baseline: %.3f remote requests per op, below its negative fraction %d/%d", base.remotePerOp(), base.negatives, base.ops)
			}
			if nemo.remotePerOp() >= base.remotePerOp() {
				t.Errorf("nemo: %.3f remote requests per op, baseline %s %.3f: want fewer", nemo.remotePerOp(), base.policy, base.remotePerOp())
			}
			if nemo.hitRatio() <= base.hitRatio() {
				t.Errorf("nemo hit ratio %.3f, baseline %s %.3f: want higher", nemo.hitRatio(), base.policy, base.hitRatio())
			}
		})
	}
}
