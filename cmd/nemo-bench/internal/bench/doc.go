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
// ratios against the figure's baseline at the same point. Every table and
// the index say what produced them (source.go): the command line, the
// commit nemo-bench was built from (or, unstamped, its checkout's), the
// nemo binary a real target ran, and the date.
//
// Targets. The default, embedded, loads the data into an embedded store
// in a temporary folder, behind adapters/fault's injected latency (with
// jitter) and adapters.Counted, and drives the workload through
// txn.Engine: reads outside transactions (ReadLatest) as the frontends
// make them, and for the locking experiment YCSB-E transactions (95%
// locking scans of 8, 5% inserts; no WAL, as in txn/bench). The azurite
// (or URL) and emulator targets load the data straight into Azurite or
// the Datastore emulator, and every run starts what its series puts in
// front of the backend as a process of its own (servers.go): a nemo (the
// binary, Options.Nemo, configured by NEMO_ variables: policy, budget,
// coherence mode), a bare reverse proxy (child.go: this program run again,
// RunChild), or nothing (the clients talk to the backend). The clients
// are the aztables SDK or the Go Datastore client, in this process; their
// latency is the real backend's, so no latency is injected and warm-ups
// pay it too. Remote requests and buffer counters are read from the nemo's
// /metrics (without a nemo, the requests the clients sent), and each
// server process's CPU time (user and system, /proc/<pid>/stat) over the
// measured phase gives its CPU per operation: the nemo's or the proxy's,
// and the backend's, found by the port it listens on (procs.go). The
// real targets run point and range, and two experiments of their own:
// forward (a forwarded read and write of items in turn, none read twice
// within a pass: nemo with policy none and nemo missing in coherence
// shared, against the bare proxy) and servers (point reads, 50% negative lookups, range reads of 8 and
// YCSB-B, straight to the backend and through nemo in either coherence
// mode, with a buffer that holds the table) and replicas (YCSB-A and
// YCSB-B over three nemo processes in coherence shared or partitioned,
// the clients' requests spread over the three in turn, against the
// clients straight to the backend; remote requests and the nemos' CPU are
// summed over the three; in partitioned mode the first replica to write
// the table owns it and the other two forward their writes, two thirds of
// them (the table's owners column: the replicas that report nemo_lease_held
// at the end of the run); every run starts fresh replicas, drained with SIGTERM and exit 0
// before the next series or the table's deletion). Two more run the
// replicas' transactions and failures (bank.go, takeover.go):
// replicas-bank (1,000 accounts in one partition or entity group,
// transfers between two accounts chosen uniformly as conditional entity
// group batches or read-write transactions, retried on conflict, 2%
// audits reading every account; the series fails unless the total read
// straight from the backend after its nemos drained is the bank's) and
// replicas-takeover (upserts through three partitioned replicas, the
// table's owner killed with SIGKILL: the time until a write through the
// survivors is acknowledged, the latency of the writes caught by it, the
// commit log entries the survivors replayed, and every acknowledged
// write found in the backend, or the run fails). And writeback
// (writeback.go, Azure only): the write-back soak, clients writing their
// own keys through one exclusive nemo over cache.write_back_parallelism,
// with nemo's write-back gauges sampled from /metrics and every key
// compared with its last acknowledged write after the drain.
//
// A simulated cloud round trip (Options.RTT, --rtt; RTTJitter,
// --rtt-jitter): on the real targets every series reaches the backend
// through a TCP delay proxy in this process (delayproxy.go), the direct
// clients and the nemos alike, so each ratio compares nemo and the backend
// at the same distance. It holds each chunk it reads for RTT/2 plus a
// uniform jitter in [0, RTTJitter] before writing it on, in each
// direction, in order; its CPU counts as the clients'. With
// Options.BackendNice (--backend-nice) every thread of the backend's
// process runs at that nice for the session (remote.go), so that the
// backend, like a store with CPU of its own, does not wait for the cores
// the clients and nemo keep busy.
//
// Workloads (internal/ycsb.Workload). paper: the zipfian top-K hot set
// unscrambled, hot keys adjacent, and the buffer warmed before measuring
// by reading the K hottest items once each, K = 95% of what the buffer
// holds (a point read each for point workloads; a one-record range read
// each for range workloads, so the hot run of keys ends up sealed);
// scrambled: YCSB's scrambled zipfian, the buffer warmed by running the
// workload itself (Scale.WarmOps operations; on a real target for
// Scale.Measure); longtail: scrambled over at least 20,000 records, so a
// small scale cannot make the tail look hot. Warm-ups on the embedded
// target run with the latency off.
//
// What is counted. Remote requests are every store call made during the
// measured phase (adapters.Counted, the counters Prometheus reads);
// remote requests per operation is the headline figure, steady where
// throughput on a shared machine is not. The hit ratio is buffer lookups
// answered locally (hits, negative hits, scans with no hole) over all
// lookups (plus misses and scans that fetched). Latency percentiles are
// per completed operation, retries included; aborts are lock-conflict
// aborts: under NO_WAIT every conflict, under waiting (txn.lock_wait)
// only deadlock victims. A run's measured phase is Scale.Measure, or
// with Scale.MeasureOps that many operations (tests: a fixed amount of
// work makes remote requests per operation independent of the machine's
// speed).
//
// Data layout. Item i of the cache experiments is stored under key index
// 4i (ycsb.Key), so a negative lookup of item i asks for index 4i+2 and
// an empty range read covers (4i, 4i+4); a range read of L items is the
// bounded range [key(i), key(i+L)) with limit L. Every answer is checked
// against this layout, so a wrong answer fails the run. The locking
// experiment's keys are 8-byte big-endian integers (PCL partitions by
// them), uniform over the lowest 2^16 keys of the domain (dense) or the
// whole domain (sparse), PCL held to 2^12 partitions whatever the domain;
// each layout runs under NO_WAIT 2PL (the paper's protocol; the client
// retries an aborted transaction after a backoff, and the aborts are
// counted) and under waiting (nemo's default).
package bench
