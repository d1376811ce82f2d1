// Package cache is nemo's record buffer: the Nemo paper's tree-structured
// cache of hot records over a backend Store. Each keyspace has one
// google/btree BTreeG of records ordered by key. A record is regular (a
// value), a tombstone (the key is known absent) or a sentinel (a placeholder
// a range reader locks before it knows the key's state), and carries a gap
// bit (0: no key exists between it and its successor; 1: unknown), a dirty bit
// (the store has not seen this version yet) and a ref bit (CLOCK). With
// tombstones and gap bits the buffer answers absent keys and empty ranges
// locally; RangeScan finds every hole in a range and fills them with one
// GetRange. Writes become dirty records that background workers write back
// lazily; eviction is CLOCK second chance with a hand over key order, bounded
// by a byte budget that counts everything resident. The buffer also holds
// the lock state the txn package drives (row and next-key locks live on the
// records themselves), so that cache activity can never make a lock shrink.
// Check verifies the buffer's invariants; tests run it after every step.
package cache
