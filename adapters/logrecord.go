package adapters

import "errors"

// LogFence is the fence record of a keyspace's commit log kept in the
// backend (package txn/blog): which owner may append to the log, and how
// far the log goes. Each backend's log codec (aztable.LogCodec,
// datastore.LogCodec) spells it in its store; the engine's package reads
// it through its own Codec interface, so it knows no backend.
type LogFence struct {
	// Epoch is the owner's lease epoch.
	Epoch uint64
	// Token is drawn at random (in [1, 2^63)) by each opening of the log:
	// it names the opening that wrote the record, so that an opening at
	// the epoch of the last (a restart of the same node) still changes
	// the record (Datastore keeps the version of an entity rewritten
	// unchanged) and an earlier opening's write is told from ours.
	Token uint64
	// Holder is the owner's node id, for messages only.
	Holder string
	// Last is the sequence number of the last entry appended (0 if
	// none): every append changes the record.
	Last uint64
	// Keyspace is the keyspace the log is of, as the engine names it (a
	// table name keeps its case), set by the codec from the keyspace it
	// encodes the fence for: a node that starts lists the logs holding
	// entries by their fences (txn/blog Pending). "" in a fence written
	// without it.
	Keyspace Keyspace
}

// LogLimits say what one atomic call (AtomicWriter.WriteAtomic) and one
// record of a backend's commit log may hold.
type LogLimits struct {
	// CallRecords is the most mutations one call may hold, the fence's
	// included.
	CallRecords int
	// CallBytes is the most bytes one call may hold, counted as the sum
	// of the keys and the encoded values of its mutations.
	CallBytes int
	// RecordBytes is the most data bytes one entry record (one part of
	// an entry) carries; an entry's data is split into parts of at most
	// this many bytes.
	RecordBytes int
}

// ErrBadLogRecord: a stored value is not a commit log record (a log codec's
// decoder refuses it, wrapped with what is wrong).
var ErrBadLogRecord = errors.New("adapters: not a commit log record")
