// Package ycsb provides the request generators of the Yahoo! Cloud Serving
// Benchmark, written from the published algorithms, for nemo's benchmarks:
// Zipfian (Gray et al., "Quickly generating billion-record synthetic
// databases", SIGMOD 1994, with the zeta constant precomputed as YCSB's
// ZipfianGenerator does), ScrambledZipfian (the same skew with the hot items
// spread over the item space by an FNV-64 hash), plus YCSB-style keys whose
// byte order equals integer order. Workload names the two ways
// nemo's benchmarks lay zipfian requests over the keys: paper (the Nemo
// paper's prototype: the unscrambled top-K hot set, hot keys adjacent, and
// a buffer warmed with the top-K items, which TopK lists) and scrambled
// (YCSB's own, warmed by running the workload). Generators are immutable
// after construction and take the *rand.Rand to draw from on every call, so
// goroutines share one generator and keep a generator of random numbers
// each.
package ycsb
