// Package txn is nemo's engine: serializable transactions over the record
// buffer with strict two-phase locking. A conflicting lock request waits
// for the holders to let go, up to Options.LockWait, as the services make
// a conflicting writer wait; one whose wait would close a cycle in the
// waits-for graph fails at once with ErrConflict (the deadlock victim
// aborts, and clients retry), so waits never deadlock (wait.go). Read-only
// transactions take no locks under coherence exclusive: they read a
// snapshot of the committed state as of their start, from the latest state
// and the before-images commits keep while a snapshot is open
// (snapshot.go), so they never hold up a writer. Locks live on the buffer's
// records (package cache): row locks
// protect a key's value and existence, next-key locks protect the gap from a
// record to its successor. A point read of an absent key locks the tombstone
// admitted for it; a range read anchors its bounds with sentinels, S-locks
// every row and gap in the span, fetches the holes and resolves the
// sentinels; a write X-locks the key's record, which, if the key was absent,
// was just admitted into its gap and inherited that gap's locks, so an
// insert conflicts with every reader whose range covers it (no phantoms)
// while point readers elsewhere proceed. Writes stay private to the
// transaction until Commit, which appends them to the commit log (the WAL),
// applies them to the buffer as dirty records and then releases the locks.
// Each logged put and delete carries its base, what the buffer knew the
// store to hold for the key (Change.Expect, filled from cache.Buffer.Bases
// when the caller left it unset), and replay restores it
// (cache.Buffer.ApplyReplayed): write-back after a crash stays conditional,
// so it cannot overwrite a change another writer made meanwhile. Every
// value a write-back may have left in the store is in the log too (a
// write, or a later write's Prior), and replay notes them all as nemo's
// own, so with one writer, however often nemo crashed, a write-back
// conflict cannot happen; and the version the store returned to each
// write-back is logged (logWriteBack: a logrec.RecordWriteBack per key,
// appended without waiting), so replay conditions each record on the
// newest base the log knows (cache.Buffer.ReplayWritten).
// With Options.EarlyRelease (a WAL, writing back) a commit lets go of its
// locks before its fsync, and nothing that depends on it is acknowledged
// before the fsync (early.go, commit.go). The commit appends to the log with
// wal.Log.AppendEarly, which returns once the commit has its LSN in the
// batch about to be written; it then marks its keys pending (with that
// LSN), installs its writes in the buffer, releases its locks, and only
// then waits for the batch's fsync before Commit returns. Serializability
// is unchanged: every lock was acquired before any is released (two-phase
// locking; the lock point is the commit), and another transaction sees
// the writes only after they are installed, at their final value.
// Durability and recoverability are kept by commit dependencies: a
// transaction that reads a pending key, or scans a range holding one
// (whether it returns it or found it deleted), depends on the highest such
// LSN, and its Commit returns only once the log is durable up to it; a
// read outside a read-write transaction (ReadLatest, a read-only
// transaction's read) and an insert's "exists" refusal wait before they
// answer. A writer that overwrites a pending write is sequenced after it,
// and LSNs are durable in order, so its own fsync covers the dependency.
// Write-back runs behind a durable barrier (waitApplied, a step of the
// engine's write-back driver: after the buffer has read the dirty values,
// wait until the log is durable up to the last LSN handed out), so the
// store never holds a write the log could lose, and a checkpoint's flush, behind the same barrier, covers only
// durable commits. A crash before the fsync loses the commit and every
// transaction that depended on it, none of them acknowledged, and the
// store holds none of their writes. If the fsync fails, the writes are in
// the buffer but will never be in the log: their keys stay pending (every
// read of them fails), the log is never reset (its LSNs would be handed
// out again), so the engine refuses writes until a restart replays the
// log. Commits with keyspace creates or drops keep their locks to the
// fsync.
//
// # The commit pipeline
//
// Every read-write commit runs the same stages, each written once in
// commit.go, with what a stage calls inside the engine (checkReads,
// awaitDurable); the modes only configure them (commitPlan): early release
// moves the fsync from sequence to durable, write-through puts the store
// write in install, and replay reuses install. A commit leaves commit.go
// only for the commit log (package wal), the before-images open
// snapshots keep (snapshots.keep, snapshot.go) and the buffer (package
// cache).
//
//	Txn.Commit (Txn.mu held throughout)
//	  |
//	  | admit     lease held for every keyspace written; changes listed
//	  |           (a commit that writes nothing checks its reads instead,
//	  |           checkReads); while a snapshot is open, the before-images
//	  |           of the keys written are read (snapshots.preread: may
//	  |           fetch, so before applyMu; the commit's X locks keep them)
//	  |  +- Engine.applyMu shared ------------------------------------+
//	  |  | sequence  bases read (cache.Buffer.Bases), WAL append:      |
//	  |  |           classic: durable when it returns                  |
//	  |  |           early:   LSN only, keys pending (early.go)        |
//	  |  | install   snapshots keep the before-images (no store call); |
//	  |  |           cache.Buffer.Apply (dirty records), or            |
//	  |  |           WriteThrough (the store, then clean records)      |
//	  |  +-------------------------------------------------------------+
//	  | release   the locks go (cache.Buffer.Release)
//	  | durable   early: wait for the fsync; every mode: wait for the
//	  |           commits it read from (awaitDurable)
//	  v ack       counted; Commit returns nil
//
// Write-back, later, has one owner: the engine's write-back driver
// (writeback.go). It decides when and what is written back: a round
// every cache.Options.FlushInterval, or at once when the buffer asks
// (cache.Buffer.WriteBackWanted: dirty bytes over the DirtyLimit, or dirty
// records the evictor chose), takes each keyspace's aged records
// (cache.Buffer.TakeAged) and those eviction left (TakeEvictions);
// Flush, FlushKeyspace (checkpoints, drains, handovers) take every dirty
// record (TakeDirty); EvictUntil writes back each eviction step's dirty
// records before the next step (cache.Eviction). It runs each write-back
// step by step (cache.WriteBack), taking the engine's own steps between
// the buffer's; the buffer never calls back up:
//
//	held while New replays the log (holdAll)
//	  -> Leases.Hold (the lease, coherence exclusive; no buffer lock held)
//	  -> WriteBack.Lock (the keyspace's wbMu) -> WriteBack.Next (read the
//	     dirty values under the latch) -> waitApplied (early release: the
//	     durable barrier) -> WriteBack.Store (the store calls)
//	  -> logWriteBack (a WAL: RecordWriteBack, not waited for)
//	  -> WriteBack.Settle (mark clean, under the latch), again while a
//	     pass rebased records -> WriteBack.Confirm -> Close (wbMu)
//
// With internal/invariants on (-tags invariants, or -race) each stage
// asserts what it relies on: stages in order, the locks held until
// release, the log holding the commit before the locks go (without early
// release), and nothing acknowledged before its LSN and every LSN it read
// from are durable.
//
// The phantom strategy is pluggable for the benchmark: nextkey (the default)
// or pcl, partition covering locks over fixed key partitions (the Nemo
// paper's baseline). The Engine's single-operation methods are one-operation
// transactions, retried a few times on conflict.
//
// With a WAL (Options.WAL) New replays the log before it returns, and
// recovery stays proportional to what the store has not seen yet rather
// than to the log's history: a checkpoint (flush every dirty record, then
// tell the log everything below the LSN read before the flush is in the
// store, which truncates it) runs right after a replay that found
// anything, so the replayed records are written back and the next start
// does not replay them again (when nothing is dirty after the flush, the
// checkpoint covers the whole log, the flush's own write-back records
// included, so a drained log replays nothing); once Options.CheckpointBytes have been
// logged since the last one; within a second of write-back having caught
// up (nothing dirty); when an append found no space (the checkpoint frees
// segments, package wal "Space"); and every Options.CheckpointInterval.
// One checkpoint runs at a time; after a failed one the due ones back off
// (durable.go).
//
// The Engine is the only door the frontends use. Reads outside a
// transaction take a ReadMode: ReadLatest (lock-free, the latest committed
// state, linearizable per key, all-or-nothing per commit within one call),
// which both frontends use for non-transactional reads, or ReadSerializable
// (a one-operation read-only transaction). Keyspaces open on first use;
// tables that exist explicitly in the store are created and dropped through
// a transaction on a catalog keyspace (keyspaces.go), so a drop is a WAL
// record and replay never brings a dropped keyspace back.
//
// Coherence (Options.Coherence) says how the engine copes with writers it
// does not see. Exclusive (the default) is all of the above; with
// Options.Leases (a lease per keyspace in the backend, package
// txn/lease) a write of a keyspace is refused unless this node holds
// its lease, checked at the write and again just before the commit is
// logged: with ErrNotLeaseHolder when another node holds it (the client
// must go there), with ErrLeaseUnavailable when this node could not
// confirm its own (its renewal failed in a backend outage: retry). Shared writes through: each transaction
// records what its locking reads found in the store (the buffer asks the
// store for every locking read: cache.Options.FreshLocks), its writes of
// those keys are conditioned on it (blind writes of keys it never read
// are not), and the commit goes to the store before it is acknowledged,
// atomically where the store can; a refusal (cache.ErrChanged, an
// ErrConflict) aborts the attempt and Run retries it on fresh reads, so a
// client's insert or If-Match is decided by the store's state. Keys a
// transaction only read, and the ranges it read (each with the keys and
// versions found there; a range read asks the store, see
// cache.Buffer.LockRange), go into the same atomic store call as checks
// (ChangeCheck: the commit applies only if the store still holds what was
// read), so there is neither write skew nor a phantom among the keyspaces
// it writes, where the store applies groups atomically (Datastore,
// embedded). What it read of keyspaces it does not write (catalog lookups
// aside) is checked first, in calls of their own, before anything is
// written; a failure stops the commit there. A transaction that writes
// nothing commits its checks alone, so it commits only if what it read was
// current at one moment (no read skew across replicas). A read-only
// transaction reads the store's own snapshot past the buffer (a Datastore
// read-only transaction), or, where the store has none or cannot read a
// range in one, has its reads checked at commit (shared.go). BeginAt
// begins one that reads a past moment (Datastore's read_time) in the
// store's snapshot of it: under coherence shared only, since under
// exclusive the store's past lacks what was not yet written back
// (ErrPastRead); over a store with no past it reads the latest state. Committed
// reports what a commit installed (the store's stamped values, carrying
// the versions it gave).
//
// # Lock order
//
// The engine's mutexes, outermost first (a lock further down is never held
// while one further up is taken):
//
//  0. Engine.ckpt.sem, held by the running checkpoint (Checkpoint, the
//     checkpoint loop, Drain) across its flush (store I/O) and the WAL's
//     checkpoint, before applyMu is taken; a waiter gives up with its
//     context. No transaction takes it.
//  1. Txn.mu serializes one transaction's calls. It is held for a whole
//     call, store I/O included: LockKey's fetch, LockRange's scan, and at
//     Commit the log append and fsync and, writing through, the store
//     writes. The reaper only TryLocks it (a busy transaction is not idle),
//     and Close and StopAdmitting abort transactions after letting go of
//     Engine.mu.
//  2. The pcl stripe mutexes (partition covering locks) are leaves taken
//     under Txn.mu, one at a time, never across I/O.
//  3. Engine.applyMu, the apply barrier: Commit holds it shared from
//     reading its writes' bases, through the log append, until its writes
//     are in the buffer (across the WAL's fsync, or under early release
//     only until the commit is sequenced, and any write-through store
//     I/O); an early-released commit waits for its fsync after letting go
//     of it and of its locks, holding only Txn.mu; Checkpoint holds it exclusively only
//     to read the WAL's next LSN and counters and the buffer's dirty bytes
//     (Buffer.Stats: Buffer.mu, then each keyspace's latch, shared, one at
//     a time), and flushes after letting go.
//  4. Under applyMu, one after the other and never nested: first a
//     keyspace's tree latch, shared, to read the bases; then the WAL's
//     locks (Log.writeMu, held across segment writes and fsync, then Log.mu,
//     a leaf never held across I/O; with group commit the append waits for
//     the writer goroutine, which takes them), then, once the append has
//     returned, snapshots.mu, shared, across the install (the
//     before-images an open snapshot needs were read before applyMu, so
//     nothing under it waits for the store unless the commit writes
//     through, or a snapshot opened while the commit was being logged
//     needs the image of a key the commit wrote blind and the buffer does
//     not hold: Stats.LateImageFetches), under which the buffer's are taken (package cache
//     documents their order: Buffer.mu, budgetMu, a keyspace's write-back
//     lock wbMu, its tree latch, then a record's lock state and the
//     Owner's mutex), and snapshots.hmu, a leaf. Begin takes
//     snapshots.mu exclusively, alone, to open a snapshot.
//  5. pendingWrites.mu (early release) is a leaf: taken under applyMu by
//     a commit marking its keys pending, and alone by readers looking
//     their dependencies up and by a commit whose fsync returned. The
//     WAL's Log.mu, which WaitDurable takes to read the failure and the
//     wake-up channel, is a leaf too. The write-back driver holds none of
//     the engine's mutexes: it asks the lease holding nothing, then, in
//     a write-back holding a keyspace's write-back lock wbMu (the
//     buffer's lock 3, from cache.WriteBack.Lock to Close) and never its
//     tree latch, waits at the durable barrier (waitApplied: the WAL's
//     Log.mu, a leaf) and appends to the write-back log (logWriteBack:
//     the WAL's writeMu and Log.mu, through its group commit writer,
//     not waited for). A checkpoint's or a drain's flush runs the same
//     write-backs under Engine.ckpt.sem (0), before applyMu.
//  6. Engine.mu guards the live transactions. It is a leaf, never held
//     across I/O: taken alone (Begin, Stats, the reaper, Close,
//     StopAdmitting) or under Txn.mu by forget, when a transaction
//     finishes, after the buffer's locks are released. waitGraph.mu and
//     snapshots.hmu are leaves too (a lock wait enters and leaves the
//     graph under Txn.mu; a snapshot read consults the kept versions
//     under Txn.mu).
//
// The row, next-key and partition locks themselves are not mutexes: they
// are held by a transaction from acquisition to Commit or Abort, and a
// transaction waits for one (under its Txn.mu, holding no mutex of the
// buffer's) only when the waits-for graph says the wait cannot deadlock.
package txn
