// Package bench is the engine of cmd/nemo-bench: named experiments that
// mirror the Nemo paper's figures, each measured with its baselines in the
// same run, written as markdown tables and PNG plots (gonum/plot).
//
// The experiments are data (experiments.go): an experiment is a list of
// figures, a figure a sweep of one parameter of a runSpec (buffer size,
// zipfian skew, share of negative lookups, range length, goroutines, key
// domain) over a list of series (cache policies none / record / nemo, or
// next-key vs PCL locking over a dense and a sparse layout), and every
// point of every series is one measured run on a fresh buffer and engine.
// The series of one point run one after the other, so the baselines are
// interleaved with what they are compared with, and the tables give
// ratios against the figure's baseline at the same point.
//
// Targets. The default, embedded, loads the data into an embedded store
// in a temporary folder, behind adapters/fault's injected latency (with
// jitter) and adapters.Counted, and drives the workload through
// txn.Engine: reads outside transactions (ReadLatest) as the frontends
// make them, and for the locking experiment YCSB-E transactions (95%
// locking scans of 8, 5% inserts; no WAL, as in txn/bench). The azurite
// (or URL) and emulator targets load the data straight into Azurite or
// the Datastore emulator and run the point and range experiments through
// nemo's own frontend (proxy/aztable over HTTP, proxy/datastore over
// gRPC), started in process over a fresh engine per run, with the
// aztables SDK or the Go Datastore client; their latency is the real
// backend's, so no latency is injected and warm-ups pay it too.
//
// Workloads (internal/ycsb.Workload). paper: the zipfian top-K hot set
// unscrambled, hot keys adjacent, and the buffer warmed before measuring
// by reading the K hottest items once each, K = 95% of what the buffer
// holds (a point read each for point workloads; a one-record range read
// each for range workloads, so the hot run of keys ends up sealed);
// scrambled: YCSB's scrambled zipfian, the buffer warmed by running the
// workload itself (Scale.WarmOps operations). Warm-ups on the embedded
// target run with the latency off.
//
// What is counted. Remote requests are every store call made during the
// measured phase (adapters.Counted, the counters Prometheus reads);
// remote requests per operation is the headline figure, steady where
// throughput on a shared machine is not. The hit ratio is buffer lookups
// answered locally (hits, negative hits, scans with no hole) over all
// lookups (plus misses and scans that fetched). Latency percentiles are
// per completed operation, retries included; aborts are lock-conflict
// aborts (the engine waits for conflicting locks, so only deadlock
// victims abort).
//
// Data layout. Item i of the cache experiments is stored under key index
// 4i (ycsb.Key), so a negative lookup of item i asks for index 4i+2 and
// an empty range read covers (4i, 4i+4); a range read of L items is the
// bounded range [key(i), key(i+L)) with limit L. Every answer is checked
// against this layout, so a wrong answer fails the run. The locking
// experiment's keys are 8-byte big-endian integers (PCL partitions by
// them), uniform over the lowest 2^16 keys of the domain (dense) or the
// whole domain (sparse), PCL held to 2^12 partitions whatever the domain.
package bench
