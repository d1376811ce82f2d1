// Package cache is nemo's record buffer: the Nemo paper's tree-structured
// cache of hot records over a backend Store. Each keyspace has one
// google/btree BTreeG of records ordered by key. A record is regular (a
// value), a tombstone (the key is known absent) or a sentinel (a placeholder
// a range reader locks before it knows the key's state), and carries a gap
// bit (0: no key exists between it and its successor; 1: unknown), a dirty bit
// (the store has not seen this version yet) and a ref bit (CLOCK). With
// tombstones and gap bits the buffer answers absent keys and empty ranges
// locally; RangeScan finds every hole in a range and fills them with one
// GetRange. Writes become dirty records, written back lazily by the
// engine (package txn), which drives each write-back through the buffer's
// passive primitives (see Write-back); eviction is CLOCK second chance
// with a hand over key order that takes sealed runs of records as units,
// bounded by a byte budget that counts everything resident, and a full
// buffer admits a range on its second fetch (see Eviction and admission).
// The buffer also holds the lock state the txn package drives (row and
// next-key locks live on the records themselves), so that cache activity
// can never make a lock shrink.
// Check verifies the buffer's invariants; tests run it after every step.
//
// Every record carries its base: what the store held for the key when the
// buffer last knew (the version it fetched or wrote back, or absence; or
// unknown, for a key written blind). Write-back is conditioned on it, so a
// change another writer made is never overwritten: the store refuses, and
// the refusal is a conflict, resolved by OnConflict (the store's version
// wins by default: the record is dropped and refetched on the next read)
// and reported in full (conflicts.go).
//
// # When a write is done
//
// A dirty record becomes clean only when the store has confirmed the
// version it now holds for it: the version its Upsert returned, absence
// after its Delete, or, when a call succeeded without saying, a read of
// the key finding the same value (Options.Unstamped), at the version it
// reports (none where the store keeps none, as for Azure's table list). A
// write-back that leaves a record it took as it was (a failed call, an
// answer it could not read, a refusal while a transaction holds the
// record) fails, so Flush fails, and the engine neither checkpoints past
// the record's log record nor reports a drain as done. With invariants
// on (internal/invariants: -tags invariants, or -race), marking a record clean without a confirmed version
// panics. This is the buffer's half of the one durability rule (package
// wal, "When a write is done").
//
// Write-back recognises its own earlier writes however often nemo
// crashed. Every value it may have left in the store is one the engine
// logged: a committed write (the log is durable before write-back reads a
// value: under early release the engine's write-back waits for it
// between Next and Store), or, for a write whose log record a checkpoint
// truncated while its write-back was in flight, the prior unwritten value
// a later write logged (Bases). Replay
// remembers all of them per key (keyspace.sent, never cut short before the
// store confirms a write of the key), so a refused write-back that finds
// one of them in the store is rebased on the store's version and written
// again, not reported: a conflict means a writer that is not this buffer.
// To spare that refusal the engine also logs, without waiting for it to
// be durable, the version the store returned to each write-back (what
// WriteBack.Store returns: WrittenBack), and replay gives a record the
// newest base the log knows (the latest, in log order, of its writes' logged bases and
// its logged write-backs', ReplayWritten). Values are compared as digests
// of the value without what the store stamps on it (Options.Unstamped:
// Azure's Timestamp and ETag, Datastore's version and times), which match
// across processes. The
// engine runs no write-back while it replays.
//
// A range fetch seals gaps and caches empty ranges only up to where the
// store's answer is complete (more false: the whole range; else up to the
// last record). With invariants on the buffer hands the store an
// adapters.RangeReport and asserts, before sealing, that the backend's
// own batches vouched for that stretch: an adapter that took a short or
// empty batch for the last one fails there.
//
// Keyspaces are opened on first use (by the engine) and dropped with
// everything in them. Creating and dropping a keyspace in the store is
// queued in the buffer's keyspace gate, and every store call the buffer
// makes first runs what is queued, in order, so a re-created table never
// sees or receives the dropped one's records; Flush runs the queue too, so
// a checkpoint never covers a drop the store has not seen (keyspaces.go).
//
// # Eviction and admission
//
// The evictor is CLOCK with a hand over key order (evict.go), taking
// records run by run: a run is records linked by sealed gaps (what a range
// fetch leaves behind), at most Options.EvictRun of them, and a batch of
// the hand is extended to the end of the run it stops in. A record whose
// gaps are unknown (a point read's) is a run of one, and plain
// second-chance CLOCK with size-aware credit applies to it. A longer run is
// one unit: if any of its records was read since the hand last passed, it
// stays whole and each record banks a chance (up to three), so a run read
// pass after pass outlives as many passes without reads; otherwise its
// chances are spent; then the whole run goes, leaving one hole. Removing
// records one by one instead left a hole after every unread record of a
// hot range, and every scan over a hole fetches: on the paper's scan
// workload 30% of range fetches went for a record evicted from inside a
// sealed run; with runs and the admission filter below, 0.4% (cache/bench,
// BenchmarkRangeScansPaper). The
// background evictor turns each hand at most once per round (newEviction
// with oneTurn), so banked chances last until the hand comes round in a
// later round, while readers run; Evict, called with a target, turns it
// as often as it takes. Eviction removes clean records itself; a dirty
// record it chooses is written back first, by whoever drives write-back:
// an Eviction hands its caller each step's write-back (the engine's
// EvictUntil runs it before the next step), and the background evictor
// leaves them queued for the engine (TakeEvictions, WriteBackWanted).
// Either way the write-back removes each record it wrote if nothing read
// or locked it meanwhile.
//
// Admission is scan-resistant for ranges (rangeadmit.go): while resident
// bytes are at or above the evictor's low mark, a range fetch is admitted
// only if one of its keys was fetched before by a range fetch that was not
// admitted, remembered in a small direct-mapped table of key hashes per
// keyspace (Options.RangeAdmitSlots). A range read once, such as a scan of
// the cold end of the key space, is answered from the store and flushes
// nothing; a range read again soon is admitted, without ref bits, so the
// hand takes it, as one run, before records that were read. Point misses
// are admitted as before, and so is a range fetch that refreshes stale
// records; below the low mark everything is.
//
// # Tree layout
//
// The trees hold *record (a record's identity carries its lock state, and
// lock holders keep the pointer), and a comparison reads no key while the
// keys' summaries differ: each record carries sum, an order-preserving
// 8-byte summary of its key (the 8 bytes after the keyspace's common key
// prefix; keys outside the prefix map to the ends), and less compares
// sums first and keys only on a tie. Without it each comparison down the
// tree missed the CPU cache twice at scale, on the record and on its key
// (a hit took 0.44, 1.48 and 2.84 µs at 10k, 100k and 1M records); with
// it, once (0.35, 1.01 and 2.06 µs; see README, Benchmarks). The
// prefix is cut back, and every sum recomputed under the exclusive latch,
// when a key arrives that does not share it: O(records), at most once per
// prefix length the keyspace's keys ever cut back to. The sum fits in the
// record's 48-byte size class because the key ‖ value ‖ base buffer is held
// by a pointer and two 32-bit lengths instead of a slice header. Summaries
// in the tree's items instead (16-byte items, no record read until a tie)
// would cost about 10 bytes more per record than the 64-byte overhead
// target allows, and a summary of the first 8 bytes alone would not tell
// apart keys sharing a prefix ("user0000…", a table's partition key).
// Degree 64 instead of 32 (57.3 instead of 58.6 bytes per record) showed
// no gain within the benchmark's noise.
//
// # Staleness bound
//
// With Options.MaxStaleness > 0 every record carries the tick at which the
// store last vouched for it (a fetch that returned it or proved it absent,
// or its write-back; taken before the store call), covering its own state
// and, when sealed, the gap after it (the older of the two). Reads outside
// transactions (Get, Scan) treat a clean record or tombstone, or a sealed
// gap, whose stamp is older than the bound as unknown: they fetch the key
// or range again, answer with the fetch, and refresh what is buffered. A
// refresh replaces a stale record's value, kind and base version (a
// fetched absence turns it into a tombstone) only if it is clean, still
// stale, unlocked, and not written to the store since the fetch began (its
// fetch epoch, as for removable); a sealed gap too old to keep is unsealed
// rather than extended. Dirty records are the buffer's own writes and are
// never stale (their stamp speaks only for their gap). Transactional reads
// (LockKey, LockRange) keep reading what they lock as buffered, and locked
// records are never refreshed or unsealed under their holders; a read
// outside the transaction still gets the store's answer. With the bound 0
// no stamp is read and behaviour is as without it. A hit on a record whose
// knowledge has used three quarters of the bound, and that was read at
// least twice since the store vouched for it, fetches it again in the
// background (refresh ahead, stale.go), so hot keys are refreshed before
// any read has to wait for the store; such refreshes are held to
// Options.RefreshAheadShare of the buffer's store calls. One function,
// Buffer.freshness (stale.go), decides for every read outside a
// transaction, point or range, and for a peek (LockKeyKnown) whether
// what the buffer knows answers (and whether to refresh it ahead) or is
// fetched again; the fetch's refresh asks it too. A point read is one
// line: Get asks fromBuffer (get.go: search, freshness, answer) and only
// what it cannot answer goes to getMiss (fetch.go: fetch and admit).
// Concurrent misses of one key share one fetch (takeoff): a miss waits
// for a fetch of its key already in flight if that fetch began within the
// bound and no write through this node (nor a Forget) landed in the
// keyspace since, so that sharing never answers older than the bound or
// misses the reader's own write.
//
// # Other writers
//
// The engine's coherence mode shared is served by FreshLocks, Snapshot
// and CheckOptions.OthersWrite; mode exclusive's lease never reaches the
// buffer: the engine asks it before it writes a keyspace back (see
// Write-back). FreshLocks (mode shared) makes every locking read ask the store, unless the owner
// already holds the record (LockRange forgets what it has just locked, so
// its scan fetches the range; scans then report versions; LockKeys locks
// several keys and fetches the ones it must in one Get): a transaction
// then reads the store's truth, and WriteThrough conditions each write on
// what it read (Write.Expect), sending the whole group as one atomic store
// call when the store can (adapters.AtomicWriter; a refusal is ErrChanged,
// a store transaction aborted for contention ErrStoreAborted, both
// conflicts the engine retries; checks no atomic call can take are read
// back before the writes) and installing the store's stamped values
// (adapters.Stamper) and versions. Once sent, those writes are not cut off
// by the frontend's own request deadline but run to the client's
// (internal/deadline), so that their outcome is known. Snapshot reads the store's own
// consistent snapshot (adapters.SnapshotReader) past the buffer, for
// read-only transactions in mode shared; SnapshotAt its snapshot of a past
// moment (adapters.SnapshotAtReader), for reads at a read_time. CheckOptions.OthersWrite checks
// a buffer whose store others write (OthersWriteKey: some of its keys).
//
// # Write-back
//
// The buffer writes nothing back by itself and never calls up into the
// engine: it is a passive structure that says what is dirty and carries
// out a write-back one step at a time, and the engine (package txn, its
// write-back driver) decides when and what to write back and takes its
// own steps between the buffer's. What the driver reads to decide:
// WriteBackWanted (a channel: dirty bytes over DirtyLimit, or dirty
// records the background evictor chose), DirtyBytes, DirtyLimit (at most
// MaxDirtyBytes, lower while write-back falls behind MaxDirtyAge:
// throttle.go), Stats (FlushLag),
// Keyspaces. What it takes: TakeAged (the records dirty since before a
// cutoff the driver picks, off the write-back queue, oldest first),
// TakeDirty (every dirty record of a keyspace, for a flush),
// TakeEvictions (what the background evictor left) and an Eviction's
// steps. Each is a WriteBack, which the driver runs as:
//
//	engine: the lease (coherence exclusive)
//	WriteBack.Lock       keyspace.wbMu, exclusively
//	  WriteBack.Next     read the dirty values (under the latch)
//	  engine: the durable barrier (early release)
//	  WriteBack.Store    the store calls (wbMu held, no latch; up to
//	                     Options.WriteBackParallelism at once, in key order)
//	  engine: the write-back log (a WAL) of what Store returned
//	  WriteBack.Settle   mark clean, resolve conflicts (under the latch)
//	  ... again while a pass rebased or overwrote records (Next)
//	WriteBack.Confirm    fails if a record taken was left as it was
//	WriteBack.Close      lets go of wbMu
//
// A write-back that does not run (the lease or the barrier refused, Lock
// gave up) puts its records back on the queue, due at once (Requeue).
// Everything that is the buffer's state stays here: conflicts and their
// resolution (conflicts.go), the sorting out of refusals and unanswered
// calls by reading the keys back (ownWrites), the digests of what was
// sent (keyspace.sent), the isolation of records the store rejects
// (storeIsolating), the ages FlushLag reports, DirtyMark and
// FlushedSince.
//
// # Lock order
//
// A goroutine that holds several of the buffer's mutexes took them in this
// order (a lock further down is never held while one further up is taken):
//
//  1. Buffer.mu guards the keyspace map. It is held only to look a keyspace
//     up, list or add or drop one; the one nesting is Stats, which reads
//     every tree's length under it (Buffer.mu, then each keyspace's latch).
//  2. Buffer.budgetMu makes an admission's budget check and charge atomic.
//     reserve takes it alone; only Check holds it over the keyspaces' locks.
//  3. keyspace.wbMu, the write-back lock, a reader/writer lock whose
//     waits end with the caller's context (ctxRWMutex, writers first). A
//     write-back, a replay's noting of sent values, DropKeyspace and Check
//     take it exclusively: one write-back per keyspace at a time, so
//     versions reach the store in order, and none alongside a
//     write-through. Within a write-back the store calls run side by side
//     (Options.WriteBackParallelism), each key in one of them, and the
//     pass settles only when all have answered. WriteThrough takes it shared, so write-throughs of
//     different keys of one keyspace reach the store together; the
//     caller's X locks keep two of one key apart, and the exclusive hold
//     keeps a dirty record's write-back from racing a write-through of
//     its key. It is the one buffer lock held across store I/O (Upsert
//     and Delete in WriteBack.Store and WriteThrough). A WriteBack holds
//     it from Lock to Close, so the engine's steps between (the durable
//     barrier's wait, the write-back log's append) run under it too, but
//     never under the latch (the engine's lease is asked before Lock,
//     holding no buffer lock); DropKeyspace takes it to wait for them.
//     Held exclusively it guards keyspace.sent, which write-through does
//     not touch; what write-through changes it changes under the latch
//     (4).
//  4. keyspace.mu, the tree latch: shared to read the tree or to lock
//     records (lock state has its own mutex), exclusive to change the tree
//     or a record. Never held across store I/O: operations plan under it,
//     let go, fetch or write, and take it again (so every decision made
//     before the I/O is checked again after it). It is never upgraded:
//     LockKey, LockKeyBlind and LockRange drop the shared latch and take
//     the exclusive one, and look again.
//  5. Under the latch, one at a time, each a leaf or nearly:
//     keyspace.fetchMu (the epochs of fetches in flight, and the point
//     fetches misses may share; taken by removable under the exclusive
//     latch, and alone by beginFetch, endFetch, takeoff and landed); and lockState.mu, one record's lock state (taken with the
//     latch held, shared or exclusive, and at most one record's at a time),
//     under which Owner.mu is taken to record what an owner holds
//     (adopt, inherit). Owner.mu is also taken alone (mark, Release).
//
// Buffer.roomMu (the wake-up channel for admissions waiting on eviction) and
// Buffer.ahead.mu (the refreshes running ahead, and each keyspace's
// refreshing set) are leaves taken with nothing else held. The range
// admission filter (keyspace.rangeFilter) takes no lock: its slots are
// atomics, read and written with nothing held.
//
// The keyspace gate's two mutexes sit outside this order: they are taken
// at the start of a store call, before it, with none of the above held
// except a keyspace's wbMu (write-back and write-through settle the gate
// inside it): keyspaceGate.runMu, held across the store's create and drop
// calls, then keyspaceGate.opsMu, a leaf guarding the queue. DropKeyspace
// queues its drop (opsMu) after it has let go of the keyspace's locks.
//
// Check breaks the order on purpose: it takes budgetMu and then every
// keyspace's wbMu and latch at once, in keyspace name order, and reads the
// store while holding them; it is for quiescent buffers (tests, and Close
// with invariants on, which skips the store reads).
//
// The row and next-key locks on records are not mutexes: a request that
// conflicts fails at once with a *LockConflict naming the holders and a
// channel closed at the record's next release; the buffer never waits, the
// txn package decides whether to (without a deadlock) and asks again. An
// S holder refused an upgrade to X is noted, and new S requests then wait
// behind it, so readers cannot starve it. A transaction holds its locks
// across store I/O (LockKey resolves its sentinel with a fetch while
// holding its lock; LockRange scans while holding its range).
package cache
