// Package ycsb provides the request generators of the Yahoo! Cloud Serving
// Benchmark, written from the published algorithms, for nemo's benchmarks:
// Zipfian (Gray et al., "Quickly generating billion-record synthetic
// databases", SIGMOD 1994, with the zeta constant precomputed as YCSB's
// ZipfianGenerator does), ScrambledZipfian (the same skew with the hot items
// spread over the item space by an FNV-64 hash), Uniform and Latest (most
// recently inserted items hottest), plus YCSB-style keys whose byte order
// equals integer order and random values. Generators are immutable after
// construction (Latest's Grow aside, which is safe to call concurrently) and
// take the *rand.Rand to draw from on every call, so goroutines share one
// generator and keep a generator of random numbers each.
package ycsb
