package txn

import (
	"errors"

	"github.com/nemocache/nemo/cache"
)

// Errors, compared with errors.Is. These are every error a frontend must
// map: the buffer's errors pass through unchanged and are re-exported here,
// so no frontend imports package cache.
var (
	// ErrInvalidKey: a key the buffer refuses (empty, or a reserved form).
	ErrInvalidKey = cache.ErrInvalidKey
	// ErrKeyTooLarge: a key over the buffer's key limit.
	ErrKeyTooLarge = cache.ErrKeyTooLarge
	// ErrValueTooLarge: a value over the buffer's value limit.
	ErrValueTooLarge = cache.ErrValueTooLarge
	// ErrUnknownKeyspace: the keyspace was dropped while the call ran.
	ErrUnknownKeyspace = cache.ErrUnknownKeyspace
	// ErrStore: the backend failed the call (a fetch, or a write-through);
	// the backend's own error is joined, so errors.Is(err,
	// adapters.ErrUnavailable) works too.
	ErrStore = cache.ErrStore
	// ErrBufferClosed: the record buffer is closed (the node is shutting
	// down).
	ErrBufferClosed = cache.ErrClosed
	// ErrConflict: a lock could not be granted (NO_WAIT); the transaction
	// was aborted. Retry it.
	ErrConflict = cache.ErrConflict
	// ErrStoreAborted: writing through, the store aborted the commit for
	// contention (its own status is joined) and applied nothing. It
	// matches ErrConflict.
	ErrStoreAborted = cache.ErrStoreAborted
	// ErrExists: Insert of a key that exists.
	ErrExists = cache.ErrExists
	// ErrNotFound: Update of a key that does not exist.
	ErrNotFound = cache.ErrNotFound
	// ErrDone: the transaction already committed or aborted.
	ErrDone = errors.New("txn: transaction is finished")
	// ErrAborted: the transaction was aborted (conflict, idle timeout or
	// drain); the wrapped cause says which.
	ErrAborted = errors.New("txn: transaction aborted")
	// ErrIdleTimeout: the transaction sat idle past the idle timeout.
	ErrIdleTimeout = errors.New("txn: idle timeout")
	// ErrReadOnly: a write in a read-only transaction.
	ErrReadOnly = errors.New("txn: read-only transaction")
	// ErrClosed: the engine is draining or closed and admits no new
	// transactions.
	ErrClosed = errors.New("txn: engine closed")
	// ErrBackpressure: write-back is behind by more than the dirty-bytes
	// bound; the write was refused. Retry later.
	ErrBackpressure = cache.ErrBackpressure
	// ErrNotLeaseHolder: coherence exclusive, and another node holds the
	// lease of the keyspace written; the wrapped error names the holder
	// and when its lease expires. Nothing was written. Retrying here does
	// not help: the client must write through the holder.
	ErrNotLeaseHolder = errors.New("txn: another node holds the keyspace's lease")
	// ErrLeaseUnavailable: coherence exclusive, and this node could not
	// confirm its own lease of the keyspace written (its renewal failed
	// and the lease lapsed, or the store did not answer the acquire, as
	// in a backend outage). Nothing was written; retry later.
	ErrLeaseUnavailable = errors.New("txn: this node's lease of the keyspace is not confirmed")
	// ErrUnflushed: a drain ran out of time with dirty records left; the
	// WAL keeps them, and the next start replays them.
	ErrUnflushed = errors.New("txn: drain ended with unflushed writes")
	// ErrCommitLog: the commit log could not make the commit durable;
	// nothing was applied.
	ErrCommitLog = errors.New("txn: commit log write failed")
	// ErrPastRead: a read of a past moment (BeginAt) under coherence
	// exclusive, in front of a store that keeps its past: that past lacks
	// the writes nemo acknowledged and had not yet written back, and the
	// buffer keeps no history. Nothing was read.
	ErrPastRead = errors.New("txn: reads of a past moment are served only under coherence shared")
	// ErrNotOwner: coherence partitioned, a transaction forwarded here
	// touched a keyspace this node does not own (its owner changed). The
	// forwarding node routes again; clients never see it.
	ErrNotOwner = errors.New("txn: this node does not own the keyspace")
	// ErrOwnersDiffer: coherence partitioned, a transaction touched
	// keyspaces owned by different nodes; it was aborted, nothing written.
	ErrOwnersDiffer = errors.New("txn: a transaction's tables or namespaces are owned by different nemo replicas")
	// ErrOwnerUnavailable: coherence partitioned, the node that owns the
	// keyspace could not be reached; nothing was sent there. Retry later.
	ErrOwnerUnavailable = errors.New("txn: the nemo replica that owns the keyspace could not be reached")
)
