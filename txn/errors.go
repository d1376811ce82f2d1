package txn

import (
	"errors"

	"github.com/nemocache/nemo/cache"
)

// Errors, compared with errors.Is. The buffer's errors pass through
// unchanged (cache.ErrInvalidKey, cache.ErrStore, ...).
var (
	// ErrConflict: a lock could not be granted (NO_WAIT); the transaction
	// was aborted. Retry it.
	ErrConflict = cache.ErrConflict
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
	// ErrCommitLog: the commit log could not make the commit durable;
	// nothing was applied.
	ErrCommitLog = errors.New("txn: commit log write failed")
)
