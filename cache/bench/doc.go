// Package bench holds the record buffer's YCSB-style benchmarks, and only
// them: its code is all in _test.go files. Each benchmark loads a data set
// straight into an embedded store, puts the fault store in front of it to
// charge every remote call a fixed latency, counts the calls, and then runs
// the same operation sequence through a buffer with the nemo policy and
// through one with a baseline policy (none or record), so that every figure
// it reports is a ratio against a baseline measured in the same run: point
// reads (nemo vs none), half-negative point lookups and range scans of
// length 8 (nemo vs record, the Nemo paper's 4.76x and 4.70x workloads).
// Each comes in two forms: the scrambled zipfian (hot keys spread over the
// key space) warmed by running the workload, and the paper's (its
// prototype's generator: the zipfian top-K unscrambled, hot keys adjacent,
// and a warm-up that loads the K hottest items, K sized to the buffer, before
// measuring; the ...Paper benchmarks).
// TestWorkloads runs the same code on tiny data in ordinary go test so it
// cannot rot, and TestScanAfterBoundEvicted pins down, deterministically, a
// scan-versus-eviction race that TestWorkloads found.
package bench
