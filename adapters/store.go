package adapters

import (
	"context"
	"errors"
)

// Keyspace names one independent ordered key space of a backend: one Azure
// table, or one Datastore partition (project + database + namespace). It is
// opaque to the engine; adapters define its spelling.
type Keyspace string

// Record is one key and its value. Keys are compared with bytes.Compare,
// which equals the backend's own key order (the dialect codecs guarantee it).
type Record struct {
	Key   []byte
	Value []byte
}

// Store is the backend interface (the Nemo paper's Table 2). Every method is
// safe for concurrent use.
//
// Range convention: GetRange covers the half-open interval [start, end):
// start inclusive, end exclusive. A nil end means "no upper bound". An empty
// or nil start means "from the first key". To read an inclusive upper bound b,
// pass end = Successor(b).
type Store interface {
	// Get returns one value per key, in the order of keys; a nil value
	// means the key is absent. A present key with an empty value is
	// returned as a non-nil empty slice.
	Get(ctx context.Context, ks Keyspace, keys [][]byte) ([][]byte, error)
	// GetRange returns records in [start, end) in key order, at most limit
	// of them when limit > 0. more reports that records beyond the last
	// returned one may exist in the range.
	GetRange(ctx context.Context, ks Keyspace, start, end []byte, limit int) (recs []Record, more bool, err error)
	// Upsert writes every record (insert or replace). Adapters split the
	// batch to the backend's limits. It is not atomic across records.
	Upsert(ctx context.Context, ks Keyspace, recs []Record) error
	// Delete removes every key; absent keys are not an error.
	Delete(ctx context.Context, ks Keyspace, keys [][]byte) error
}

// KeyspaceAdmin is implemented by stores whose keyspaces exist explicitly:
// Azure tables, the embedded store's buckets. The engine calls it to carry
// a keyspace's creation and deletion to the store, ordered before any later
// read or write of that keyspace. Datastore partitions exist implicitly, so
// its adapter does not implement it.
type KeyspaceAdmin interface {
	// CreateKeyspace makes ks exist; an existing ks is not an error.
	CreateKeyspace(ctx context.Context, ks Keyspace) error
	// DropKeyspace deletes ks and every record in it; an absent ks is not
	// an error.
	DropKeyspace(ctx context.Context, ks Keyspace) error
}

// Errors adapters return (wrapped with %w); callers compare with errors.Is.
var (
	// ErrUnavailable: the backend could not be reached or refused service
	// (outage, throttling that persisted through retries).
	ErrUnavailable = errors.New("adapters: backend unavailable")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("adapters: store closed")
	// ErrInvalid: the request is malformed (empty key, bad range).
	ErrInvalid = errors.New("adapters: invalid request")
	// ErrNoKeyspaceAdmin: a wrapper was asked to create or drop a keyspace
	// but the store it wraps has no explicit keyspaces (KeyspaceAdmin).
	ErrNoKeyspaceAdmin = errors.New("adapters: the store has no keyspace administration")
)

// Successor returns the smallest key strictly greater than k in byte order
// (k followed by a zero byte). It is how an inclusive bound becomes an
// exclusive one.
func Successor(k []byte) []byte {
	s := make([]byte, len(k)+1)
	copy(s, k)
	return s
}
