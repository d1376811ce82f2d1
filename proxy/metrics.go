package proxy

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/obs"
	"github.com/nemocache/nemo/proxy/node"
	"github.com/nemocache/nemo/txn/blog"
	"github.com/nemocache/nemo/txn/lease"
)

const namespace = "nemo"

// collector exports the engine's counters. It keeps no state of its own:
// each scrape reads the Stats() snapshots of the buffer, the counted store,
// the engine and the WAL, so the numbers Prometheus sees are the ones the
// benchmark and the debug API read. Before the engine is open only
// nemo_build_info and nemo_draining are reported.
type collector struct {
	node     func() *node.Node
	draining func() bool
	build    prometheus.Metric

	cache  []cacheMetric
	gauges []cacheGauge
	remote []remoteMetric

	remoteLatency, writebackBatch, writebackDelay, walPerSync *prometheus.Desc

	drainingDesc, txnLive, txnCommits, txnAborts, txnConflicts, txnIdle    *prometheus.Desc
	txnLockWaits, txnDeadlocks, txnLockTimeouts, lockWaitSeconds           *prometheus.Desc
	txnSnapshots, txnSnapshotBytes, txnSnapshotsExpired                    *prometheus.Desc
	walCheckpoints, walSegmentBytes, walSpaceLow                           *prometheus.Desc
	commitSeconds, lockHoldSeconds                                         *prometheus.Desc
	walFsync, walCommits, walBytes                                         *prometheus.Desc
	leaseHeld, leaseAcquired, leaseTakeovers, leaseRenewals, leaseFailures *prometheus.Desc
	leaseAdoptions, leaseDrops, rebalanceMoves                             *prometheus.Desc

	// wal.location backend: the commit logs kept in the backend.
	blog                     []blogMetric
	blogAppend, blogPerGroup *prometheus.Desc
}

type blogMetric struct {
	desc *prometheus.Desc
	get  func(blog.Stats) uint64
}

type cacheMetric struct {
	desc *prometheus.Desc
	get  func(cache.Stats) uint64
}

type cacheGauge struct {
	desc *prometheus.Desc
	get  func(cache.Stats) float64
}

type remoteMetric struct {
	desc *prometheus.Desc
	get  func(adapters.OpStats) uint64
}

func newCollector(n func() *node.Node, draining func() bool, version string) *collector {
	d := func(sub, name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, sub, name), help, labels, nil)
	}
	counter := func(name, help string, get func(cache.Stats) uint64) cacheMetric {
		return cacheMetric{d("cache", name, help), get}
	}
	gauge := func(name, help string, get func(cache.Stats) float64) cacheGauge {
		return cacheGauge{d("cache", name, help), get}
	}
	remote := func(name, help string, get func(adapters.OpStats) uint64) remoteMetric {
		return remoteMetric{d("remote", name, help, "op"), get}
	}
	blogCounter := func(name, help string, get func(blog.Stats) uint64) blogMetric {
		return blogMetric{d("backend_log", name, help), get}
	}
	if version == "" {
		version = "unknown"
	}
	c := &collector{
		node:     n,
		draining: draining,
		build: prometheus.MustNewConstMetric(
			d("", "build_info", "Always 1; the labels say which nemo this is.", "version", "goversion"),
			prometheus.GaugeValue, 1, version, runtime.Version()),
		cache: []cacheMetric{
			counter("hits_total", "Point lookups answered from the buffer with a value.", func(s cache.Stats) uint64 { return s.Hits }),
			counter("negative_hits_total", "Point lookups answered \"absent\" from the buffer (a tombstone or a gap known to be empty).", func(s cache.Stats) uint64 { return s.NegativeHits }),
			counter("misses_total", "Point lookups that had to ask the store.", func(s cache.Stats) uint64 { return s.Misses }),
			counter("misses_coalesced_total", "Misses answered by a fetch of the same key already in flight (among misses_total), without a store call of their own.", func(s cache.Stats) uint64 { return s.Coalesced }),
			counter("range_hits_total", "Range scans answered entirely from the buffer.", func(s cache.Stats) uint64 { return s.RangeHits }),
			counter("range_holes_total", "Holes (spans the buffer knows nothing about) found by range scans.", func(s cache.Stats) uint64 { return s.RangeHoles }),
			counter("range_fetches_total", "Store range reads made to fill holes (one per scan pass that had any).", func(s cache.Stats) uint64 { return s.RangeFetches }),
			counter("range_retries_total", "Scan passes run again because a write landed between their plan and their merge (so that no answer shows half a commit).", func(s cache.Stats) uint64 { return s.RangeRetries }),
			counter("admitted_total", "Records admitted into the buffer from store reads.", func(s cache.Stats) uint64 { return s.Admitted }),
			counter("admit_bypassed_total", "Admissions skipped because the budget was full of dirty or locked records.", func(s cache.Stats) uint64 { return s.AdmitBypass }),
			counter("evictions_total", "Records evicted by the clock.", func(s cache.Stats) uint64 { return s.Evictions }),
			counter("evictions_deferred_total", "Evictions put off because a store read in flight might hold an older value.", func(s cache.Stats) uint64 { return s.EvictDeferred }),
			counter("writebacks_total", "Dirty records written back to the store.", func(s cache.Stats) uint64 { return s.Writebacks }),
			counter("writeback_calls_total", "Write-back store calls, one per batch of dirty records.", func(s cache.Stats) uint64 { return s.WritebackCalls }),
			counter("writes_throttled_total", "Transactions whose first write waited because dirty bytes exceeded the dirty limit.", func(s cache.Stats) uint64 { return s.Throttled }),
			counter("writeback_errors_total", "Write-back store calls that failed (the records stay dirty and are retried).", func(s cache.Stats) uint64 { return s.WritebackErr }),
			counter("writeback_conflicts_total", "Buffered writes the store refused because another writer changed the key since nemo last saw it (see conflicts.jsonl).", func(s cache.Stats) uint64 { return s.WritebackConflicts }),
			counter("writeback_rejected_total", "Buffered writes the store refused as invalid (a record it will never take; isolated from their batch) or whose table was deleted behind nemo: quarantined in conflicts.jsonl and dropped.", func(s cache.Stats) uint64 { return s.WritebackRejected }),
			counter("stale_reads_total", "Reads outside transactions that found buffered knowledge older than coherence.max_staleness and fetched again.", func(s cache.Stats) uint64 { return s.StaleReads }),
			counter("refreshed_ahead_total", "Background fetches of hot records whose knowledge had used three quarters of coherence.max_staleness (so reads of them never wait for the store).", func(s cache.Stats) uint64 { return s.RefreshedAhead }),
			counter("refresh_ahead_skipped_total", "Refreshes ahead that coherence.refresh_ahead_share declined (the record is fetched by the first read that finds it stale).", func(s cache.Stats) uint64 { return s.RefreshSkipped }),
			counter("refresh_ahead_cold_total", "Hits on an aging record not refreshed ahead because it was read only once since the store last confirmed it (the long tail).", func(s cache.Stats) uint64 { return s.RefreshCold }),
			counter("refreshed_records_total", "Buffered records such a fetch replaced with the store's current state.", func(s cache.Stats) uint64 { return s.Refreshed }),
		},
		gauges: []cacheGauge{
			gauge("used_bytes", "Bytes charged to the buffer budget: keys, values, tombstones, sentinels and per-record overhead.", func(s cache.Stats) float64 { return float64(s.UsedBytes) }),
			gauge("max_bytes", "The buffer budget.", func(s cache.Stats) float64 { return float64(s.MaxBytes) }),
			gauge("pending_keyspace_ops", "Keyspaces whose create or drop has not reached the store yet (it waits for the store to answer).", func(s cache.Stats) float64 { return float64(s.PendingKeyspaceOps) }),
			gauge("dirty_bytes", "Bytes of dirty records: committed and in the WAL, not yet in the store.", func(s cache.Stats) float64 { return float64(s.DirtyBytes) }),
			gauge("flush_lag_seconds", "How long the oldest dirty record has waited for its write-back to the store.", func(s cache.Stats) float64 { return s.FlushLag.Seconds() }),
			gauge("dirty_limit_bytes", "The dirty bytes writers may leave now: cache.max_dirty_bytes, or less while write-back falls behind cache.max_dirty_age.", func(s cache.Stats) float64 { return float64(s.DirtyLimit) }),
			gauge("writeback_calls_in_flight", "Write-back store calls in flight now (at most cache.write_back_parallelism per table or namespace).", func(s cache.Stats) float64 { return float64(s.WritebackInFlight) }),
			gauge("records", "Records resident in the buffer, fences included.", func(s cache.Stats) float64 { return float64(s.Records) }),
		},
		remote: []remoteMetric{
			remote("requests_total", "Calls made to the backend store, by operation.", func(s adapters.OpStats) uint64 { return s.Requests }),
			remote("errors_total", "Backend calls that failed, by operation.", func(s adapters.OpStats) uint64 { return s.Errors }),
			remote("keys_total", "Keys asked for by get and delete calls.", func(s adapters.OpStats) uint64 { return s.Keys }),
			remote("records_total", "Records returned by reads or written by successful upserts.", func(s adapters.OpStats) uint64 { return s.Records }),
			remote("sent_bytes_total", "Key and value bytes sent to the backend.", func(s adapters.OpStats) uint64 { return s.BytesSent }),
			remote("received_bytes_total", "Key and value bytes received from the backend.", func(s adapters.OpStats) uint64 { return s.BytesReceived }),
		},
		blog: []blogMetric{
			blogCounter("appends_total", "wal.location backend: commits made durable in a backend log.", func(s blog.Stats) uint64 { return s.Appends }),
			blogCounter("append_errors_total", "wal.location backend: appends to a backend log that failed (the commit was not acknowledged).", func(s blog.Stats) uint64 { return s.Failed }),
			blogCounter("written_bytes_total", "wal.location backend: bytes of the commits made durable in a backend log.", func(s blog.Stats) uint64 { return s.Bytes }),
			blogCounter("calls_total", "wal.location backend: atomic store calls that group commits sent.", func(s blog.Stats) uint64 { return s.Calls }),
			blogCounter("settles_total", "wal.location backend: refused or unanswered log writes settled by reading the log's fence.", func(s blog.Stats) uint64 { return s.Settles }),
			blogCounter("truncated_entries_total", "wal.location backend: log entries deleted by checkpoints.", func(s blog.Stats) uint64 { return s.Truncated }),
			blogCounter("store_calls_total", "wal.location backend: every store call the backend logs made (opening, appending, settling, truncating).", func(s blog.Stats) uint64 { return s.StoreCalls }),
		},
		drainingDesc:        d("", "draining", "1 from the moment shutdown begins (readiness is 503 then), else 0."),
		txnLive:             d("txn", "live", "Transactions in progress."),
		txnCommits:          d("txn", "commits_total", "Committed transactions, read-only ones included."),
		txnAborts:           d("txn", "aborts_total", "Aborted transactions, for any reason."),
		txnConflicts:        d("txn", "lock_conflicts_total", "Lock requests that failed: a wait that would deadlock, a wait past txn.lock_wait, or any conflict under NO_WAIT (the transaction aborts; the client retries)."),
		txnLockWaits:        d("txn", "lock_waits_total", "Waits for a conflicting lock (each ends in the lock, or a timeout)."),
		txnDeadlocks:        d("txn", "deadlocks_total", "Lock requests refused because waiting would have closed a cycle (the deadlock victim aborts)."),
		txnLockTimeouts:     d("txn", "lock_wait_timeouts_total", "Lock waits that ran out of txn.lock_wait."),
		lockWaitSeconds:     d("txn", "lock_wait_seconds", "How long lock requests that met a conflicting lock waited (until granted, refused or timed out)."),
		txnSnapshots:        d("txn", "snapshots", "Read-only transactions reading a snapshot now."),
		txnSnapshotBytes:    d("txn", "snapshot_bytes", "Bytes of the versions kept for open snapshots (bounded by txn.snapshot_bytes)."),
		txnSnapshotsExpired: d("txn", "snapshots_expired_total", "Snapshots given up to keep the versions under txn.snapshot_bytes."),
		txnIdle:             d("txn", "idle_aborts_total", "Transactions aborted for sitting idle past txn.idle_timeout."),
		commitSeconds:       d("txn", "commit_seconds", "Commit latency of read-write transactions (WAL append and fsync, or the write through, and apply)."),
		lockHoldSeconds:     d("txn", "lock_hold_seconds", "How long read-write transactions held locks, first lock to release."),
		walFsync:            d("wal", "fsync_seconds", "WAL fsync latency, one per group commit (over 1s also logs a WARN)."),
		walPerSync:          d("wal", "commits_per_sync", "Commits made durable by each WAL write and fsync (the group commit's size); its count is the number of syncs."),
		remoteLatency:       d("remote", "request_duration_seconds", "Latency of calls to the backend store, by operation.", "op"),
		writebackBatch:      d("cache", "writeback_batch_seconds", "Latency of write-back store calls, one per batch of dirty records."),
		writebackDelay:      d("cache", "writeback_delay_seconds", "For each record the flusher wrote back: how long it had been dirty, from commit to the store's confirmation."),
		walCommits:          d("wal", "commits_total", "Transactions made durable in the WAL."),
		blogAppend:          d("backend_log", "append_seconds", "wal.location backend: time from a commit's append to the backend log until it is durable there."),
		blogPerGroup:        d("backend_log", "appends_per_group", "wal.location backend: commits made durable by each group commit to a backend log; its count is the number of group commits."),
		walBytes:            d("wal", "written_bytes_total", "Bytes written to the WAL, framing included."),
		walCheckpoints:      d("wal", "checkpoints_total", "Checkpoint records written (each lets the log drop what it covers)."),
		walSegmentBytes:     d("wal", "segment_bytes", "Preallocated size of the WAL segment being written (below wal.segment_size on a small volume)."),
		walSpaceLow:         d("wal", "space_low", "1 while the WAL volume is short of space (a smaller segment, or no room found); writes may be refused until a checkpoint frees some."),
		leaseHeld:           d("lease", "held", "Keyspace leases this nemo holds (coherence.mode exclusive in front of Azure or Datastore)."),
		leaseAcquired:       d("lease", "acquisitions_total", "Leases acquired (takeovers and a restarted nemo taking back its own included)."),
		leaseTakeovers:      d("lease", "takeovers_total", "Leases taken from another nemo whose lease had lapsed."),
		leaseRenewals:       d("lease", "renewals_total", "Lease renewals that succeeded."),
		leaseFailures:       d("lease", "renewal_failures_total", "Lease renewals that failed, or were refused because another nemo holds the lease (a refusal by a write of our own is settled, not counted)."),
		leaseAdoptions:      d("lease", "adoptions_total", "Lease writes whose answer was lost (or that an earlier such write made the store refuse), found applied by reading the record: the lease was kept."),
		leaseDrops:          d("lease", "drops_total", "Held leases dropped because their record named another holder: another nemo took the keyspace."),
		rebalanceMoves:      d("rebalance", "moves_total", "coherence.mode partitioned with coherence.peers: tables or namespaces this nemo handed over to a peer that owned fewer, and the peer took."),
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.build.Desc()
	for _, m := range c.cache {
		ch <- m.desc
	}
	for _, m := range c.gauges {
		ch <- m.desc
	}
	for _, m := range c.remote {
		ch <- m.desc
	}
	for _, m := range c.blog {
		ch <- m.desc
	}
	for _, d := range []*prometheus.Desc{
		c.remoteLatency, c.writebackBatch, c.writebackDelay, c.walPerSync,
		c.drainingDesc, c.txnLive, c.txnCommits, c.txnAborts, c.txnConflicts, c.txnIdle,
		c.txnLockWaits, c.txnDeadlocks, c.txnLockTimeouts, c.lockWaitSeconds,
		c.txnSnapshots, c.txnSnapshotBytes, c.txnSnapshotsExpired,
		c.commitSeconds, c.lockHoldSeconds, c.walFsync, c.walCommits, c.walBytes, c.walCheckpoints, c.walSegmentBytes, c.walSpaceLow,
		c.leaseHeld, c.leaseAcquired, c.leaseTakeovers, c.leaseRenewals, c.leaseFailures, c.leaseAdoptions, c.leaseDrops,
		c.blogAppend, c.blogPerGroup, c.rebalanceMoves,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ch <- c.build
	draining := 0.0
	if c.draining() {
		draining = 1
	}
	ch <- prometheus.MustNewConstMetric(c.drainingDesc, prometheus.GaugeValue, draining)
	n := c.node()
	if n == nil {
		return
	}
	bs := n.Buffer.Stats()
	for _, m := range c.cache {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.get(bs)))
	}
	for _, m := range c.gauges {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, m.get(bs))
	}
	ch <- histogram(c.writebackBatch, bs.WritebackBatch)
	ch <- histogram(c.writebackDelay, bs.WritebackDelay)
	rs := n.Store.Stats()
	for op, s := range rs {
		label := adapters.Op(op).String()
		for _, m := range c.remote {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.get(s)), label)
		}
		ch <- histogram(c.remoteLatency, n.Store.Latency(adapters.Op(op)), label)
	}
	ts := n.Engine.Stats()
	ch <- prometheus.MustNewConstMetric(c.txnLive, prometheus.GaugeValue, float64(ts.Live))
	ch <- prometheus.MustNewConstMetric(c.txnCommits, prometheus.CounterValue, float64(ts.Commits))
	ch <- prometheus.MustNewConstMetric(c.txnAborts, prometheus.CounterValue, float64(ts.Aborts))
	ch <- prometheus.MustNewConstMetric(c.txnConflicts, prometheus.CounterValue, float64(ts.Conflicts))
	ch <- prometheus.MustNewConstMetric(c.txnIdle, prometheus.CounterValue, float64(ts.IdleAborts))
	ch <- prometheus.MustNewConstMetric(c.txnLockWaits, prometheus.CounterValue, float64(ts.LockWaits))
	ch <- prometheus.MustNewConstMetric(c.txnDeadlocks, prometheus.CounterValue, float64(ts.Deadlocks))
	ch <- prometheus.MustNewConstMetric(c.txnLockTimeouts, prometheus.CounterValue, float64(ts.LockTimeouts))
	ch <- histogram(c.lockWaitSeconds, ts.LockWaitTimes)
	ch <- prometheus.MustNewConstMetric(c.txnSnapshots, prometheus.GaugeValue, float64(ts.Snapshots))
	ch <- prometheus.MustNewConstMetric(c.txnSnapshotBytes, prometheus.GaugeValue, float64(ts.SnapshotBytes))
	ch <- prometheus.MustNewConstMetric(c.txnSnapshotsExpired, prometheus.CounterValue, float64(ts.SnapshotsExpired))
	ch <- histogram(c.commitSeconds, ts.CommitTimes)
	ch <- histogram(c.lockHoldSeconds, ts.LockHolds)
	if ws, ok := n.Engine.WALStats(); ok {
		ch <- histogram(c.walFsync, ws.Fsyncs)
		ch <- histogram(c.walPerSync, ws.GroupSizes)
		ch <- prometheus.MustNewConstMetric(c.walCommits, prometheus.CounterValue, float64(ws.Commits))
		ch <- prometheus.MustNewConstMetric(c.walBytes, prometheus.CounterValue, float64(ws.Bytes))
		ch <- prometheus.MustNewConstMetric(c.walCheckpoints, prometheus.CounterValue, float64(ws.Checkpoints))
		ch <- prometheus.MustNewConstMetric(c.walSegmentBytes, prometheus.GaugeValue, float64(ws.SegmentBytes))
		low := 0.0
		if ws.SpaceLow {
			low = 1
		}
		ch <- prometheus.MustNewConstMetric(c.walSpaceLow, prometheus.GaugeValue, low)
	}
	// Zero with wal.location local, like the lease series without
	// leases.
	bl, _ := n.LogStats()
	for _, m := range c.blog {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.get(bl)))
	}
	ch <- histogram(c.blogAppend, bl.Latency)
	ch <- histogram(c.blogPerGroup, bl.Group)
	// Without leases (the embedded store, coherence shared) they are 0, so
	// dashboards and alerts see the series either way.
	var ls lease.Stats
	if n.Leases != nil {
		ls = n.Leases.Stats()
	}
	ch <- prometheus.MustNewConstMetric(c.leaseHeld, prometheus.GaugeValue, float64(ls.Held))
	ch <- prometheus.MustNewConstMetric(c.leaseAcquired, prometheus.CounterValue, float64(ls.Acquisitions))
	ch <- prometheus.MustNewConstMetric(c.leaseTakeovers, prometheus.CounterValue, float64(ls.Takeovers))
	ch <- prometheus.MustNewConstMetric(c.leaseRenewals, prometheus.CounterValue, float64(ls.Renewals))
	ch <- prometheus.MustNewConstMetric(c.leaseFailures, prometheus.CounterValue, float64(ls.RenewalFailures))
	ch <- prometheus.MustNewConstMetric(c.leaseAdoptions, prometheus.CounterValue, float64(ls.Adoptions))
	ch <- prometheus.MustNewConstMetric(c.leaseDrops, prometheus.CounterValue, float64(ls.Drops))
	ch <- prometheus.MustNewConstMetric(c.rebalanceMoves, prometheus.CounterValue, float64(n.RebalanceMoves()))
}

// histogram exports a layer's histogram snapshot.
func histogram(d *prometheus.Desc, s obs.HistogramSnapshot, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstHistogram(d, s.Count, s.Sum, s.Cumulative(), labels...)
}
