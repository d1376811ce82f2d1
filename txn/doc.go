// Package txn is nemo's engine: serializable transactions over the record
// buffer with strict two-phase locking, NO_WAIT (a conflicting lock request
// fails at once with ErrConflict and the transaction aborts, so clients
// retry). Locks live on the buffer's records (package cache): row locks
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
// The phantom strategy is pluggable for the benchmark: nextkey (the default)
// or pcl, partition covering locks over fixed key partitions (the Nemo
// paper's baseline). The Engine's single-operation methods are one-operation
// transactions, retried a few times on conflict.
package txn
