// Package bench holds the transactional engine's benchmarks, and only them:
// its code is all in _test.go files. BenchmarkYCSBE and BenchmarkDomain run
// YCSB-E style transactions (range scans of 8 records from zipfian start
// keys, and inserts of fresh keys) through a txn.Engine over a buffer over
// an embedded store behind the fault store's 1 ms latency, once with
// next-key locking and once with partition covering locks (PCL), and report
// both and their ratios from the same run (the two stacks measured in
// alternating slices): over 4 to 64 goroutines; with a WAL, without and
// with early lock release (BenchmarkYCSBEDurable); under NO_WAIT 2PL
// (BenchmarkYCSBENoWait); and at 32 goroutines over key domains of 2^16,
// 2^32 and 2^64 with PCL held to a fixed lock-table budget. BenchmarkCommit measures commits per second
// through the engine and its WAL with group commit and with an fsync per
// commit, and the WAL bytes per committed write; BenchmarkRecovery the
// replay time per GiB of log. Keys are 8-byte big-endian integers, because
// PCL partitions a key space by its first 8 bytes read as an integer. Every
// configuration runs for a fixed time and reports rates, so the whole suite
// takes a bounded time. TestWorkloads runs the same code at tiny sizes in
// ordinary go test, checking every scan against a model of the committed
// keys, so the benchmark code cannot rot.
package bench
