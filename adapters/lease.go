package adapters

import (
	"errors"
	"time"
)

// LeaseRecord is the lease of one keyspace as the backend stores it, next
// to the data: the ownership record of coherence modes exclusive and
// partitioned. The lease protocol (txn/lease) reads and writes it with
// version preconditions; each remote backend's adapter provides the codec
// that says where it lives and how it is spelled there (aztable.LeaseCodec,
// datastore.LeaseCodec), so the engine knows no backend's spelling.
type LeaseRecord struct {
	// Holder is the node holding the lease; "" when it was released.
	Holder string
	// Epoch grows by one each time the lease passes to another node.
	Epoch uint64
	// Expiry is the holder's wall-clock deadline, for messages only.
	Expiry time.Time
	// Addr is the host:port of the holder's peer listener, where other
	// replicas reach it; "" when it has none (or the lease was released,
	// or an older nemo wrote the record).
	Addr string
}

// ErrBadLeaseRecord: a stored value is not a lease record (a lease codec's
// Decode wraps it).
var ErrBadLeaseRecord = errors.New("adapters: not a lease record")
