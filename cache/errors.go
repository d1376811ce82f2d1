package cache

import (
	"errors"
	"fmt"
)

// Errors returned by the buffer, wrapped with %w; compare with errors.Is.
var (
	ErrInvalidKey      = errors.New("cache: invalid key")
	ErrKeyTooLarge     = errors.New("cache: key too large")
	ErrValueTooLarge   = errors.New("cache: value too large")
	ErrUnknownKeyspace = errors.New("cache: unknown keyspace")
	ErrExists          = errors.New("cache: key already exists")
	ErrNotFound        = errors.New("cache: key not found")
	ErrConflict        = errors.New("cache: lock conflict")
	ErrClosed          = errors.New("cache: buffer closed")
	// ErrBackpressure: dirty bytes stayed above MaxDirtyBytes for the whole
	// throttle wait (write-back cannot keep up, or the store is down); the
	// write is refused so the dirty data a shutdown must flush stays bounded.
	ErrBackpressure = errors.New("cache: too much dirty data waiting for write-back")
	// ErrStore wraps a backend failure; the underlying error is joined so
	// errors.Is(err, adapters.ErrUnavailable) also works.
	ErrStore = errors.New("cache: store request failed")
	// ErrChanged: writing through, the store refused a write because the
	// key changed since the transaction read it (another writer). It
	// matches ErrConflict too: the transaction is retried, and its fresh
	// reads then see the other writer's change.
	ErrChanged = fmt.Errorf("%w: the key changed in the store since the transaction read it", ErrConflict)
	// ErrStoreAborted: the store aborted its transaction for contention
	// (adapters.ErrAborted, whose error, with the store's own status, is
	// joined): writing through, the atomic write applied nothing; or a
	// snapshot read was refused. It matches ErrConflict: the transaction
	// is retried.
	ErrStoreAborted = fmt.Errorf("%w: the store aborted the transaction for contention", ErrConflict)
	// ErrSourceMoved is what a Reader that Options.Source named wraps
	// when it no longer serves the keyspace (coherence partitioned: the
	// owner it read from handed the keyspace over). The buffer asks
	// Source again and reads once more from what it names now.
	ErrSourceMoved = errors.New("cache: the keyspace's source moved")
)

// LockConflict is the error a lock request returns when another owner
// holds the lock in a conflicting mode (it matches ErrConflict). The buffer
// never waits for a lock: the caller decides whether to wait (Wake), and for
// whom (Holders), or to give up.
type LockConflict struct {
	Lock    string   // which lock, in which mode, for messages
	Holders []uint64 // the IDs of the owners in the way, when the conflict was found
	// Wake is closed when any lock on the record changes hands (or the
	// record's lock state is retired): the moment to ask again.
	Wake <-chan struct{}
}

func (c *LockConflict) Error() string {
	return fmt.Sprintf("%v: %s", ErrConflict, c.Lock)
}

func (c *LockConflict) Unwrap() error { return ErrConflict }

var (
	errShortReply         = errors.New("store returned the wrong number of values")
	errMoreWithoutRecords = errors.New("store returned no records, and more")
)
