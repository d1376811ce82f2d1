package enum

import "slices"

// Policy selects how much the buffer does (cache.Policy).
type Policy string

const (
	// PolicyNemo is the full record buffer: positive and negative point
	// hits, range hits with hole filling, write-back.
	PolicyNemo Policy = "nemo"
	// PolicyRecord is the paper's positive-only record cache baseline:
	// point hits only; negative lookups and every range go to the store
	// (buffered writes are overlaid so answers stay correct).
	PolicyRecord Policy = "record"
	// PolicyNone passes every call through to the store; writes are
	// written through.
	PolicyNone Policy = "none"
)

// Policies returns every Policy, in the order messages list them. It is the
// one list of allowed values: the buffer's Validate and the config
// package's cache.policy check both use it.
func Policies() []Policy { return []Policy{PolicyNemo, PolicyRecord, PolicyNone} }

// Valid reports whether p is one of Policies. The empty Policy is not valid
// by itself; in the buffer's options it means the default, PolicyNemo.
func (p Policy) Valid() bool { return slices.Contains(Policies(), p) }

// ConflictPolicy says what write-back does when the store refuses a
// buffered write because the key changed since the buffer last saw it
// (cache.ConflictPolicy).
type ConflictPolicy string

const (
	// ConflictStoreWins (default): the store's version stands; the
	// buffered record is dropped (the next read refetches) and the losing
	// write is reported (counter, log line, OnConflict).
	ConflictStoreWins ConflictPolicy = "store"
	// ConflictOverwrite: the buffered write is written again
	// unconditionally, replacing the other writer's change (which is
	// reported the same way).
	ConflictOverwrite ConflictPolicy = "overwrite"
)

// ConflictPolicies returns every ConflictPolicy (the one list of allowed
// values).
func ConflictPolicies() []ConflictPolicy {
	return []ConflictPolicy{ConflictStoreWins, ConflictOverwrite}
}

// Valid reports whether p is one of ConflictPolicies.
func (p ConflictPolicy) Valid() bool { return slices.Contains(ConflictPolicies(), p) }

// Phantom selects the engine's phantom-protection strategy (txn.Phantom).
type Phantom string

const (
	// NextKey: next-key locks on buffer records, with sentinels (default).
	NextKey Phantom = "nextkey"
	// PCL: partition covering locks over fixed key partitions (baseline).
	PCL Phantom = "pcl"
)

// Phantoms returns every Phantom, in the order messages list them. It is
// the one list of allowed values: the engine's Validate and the config
// package's txn.phantom check both use it.
func Phantoms() []Phantom { return []Phantom{NextKey, PCL} }

// Valid reports whether p is one of Phantoms. The empty Phantom is not
// valid by itself; in the engine's options it means the default, NextKey.
func (p Phantom) Valid() bool { return slices.Contains(Phantoms(), p) }

// WriteMode says when a commit reaches the store (txn.WriteMode).
type WriteMode string

const (
	// WriteBack (default): a commit is durable in the WAL and applied to
	// the buffer as dirty records, written back lazily.
	WriteBack WriteMode = "back"
	// WriteThrough: a commit is written to the store before it is
	// acknowledged; no WAL is needed.
	WriteThrough WriteMode = "through"
)

// WriteModes returns every WriteMode, in the order messages list them. It
// is the one list of allowed values: the engine's Validate and the config
// package's wal.write_mode check both use it.
func WriteModes() []WriteMode { return []WriteMode{WriteBack, WriteThrough} }

// Valid reports whether m is one of WriteModes. The empty WriteMode is not
// valid by itself; in the engine's options it means the default, WriteBack.
func (m WriteMode) Valid() bool { return slices.Contains(WriteModes(), m) }

// WALLocation says where the commit log lives (config wal.location).
type WALLocation string

const (
	// WALLocal (default): segment files in wal.dir, on this node's disk.
	WALLocal WALLocation = "local"
	// WALBackend: one log per table or namespace in the backend itself,
	// next to its lease (coherence exclusive in front of Azure or
	// Datastore), so another node replays it when this one's disk is
	// gone.
	WALBackend WALLocation = "backend"
)

// WALLocations returns every WALLocation, in the order messages list
// them: the one list of allowed values.
func WALLocations() []WALLocation { return []WALLocation{WALLocal, WALBackend} }

// Coherence says how the engine copes with other writers of the store
// (txn.Coherence).
type Coherence string

const (
	// Exclusive (default): this node is the only writer of its keyspaces.
	// Commits write back lazily, the buffer answers negative and range
	// reads, and transactions are serializable in the buffer.
	Exclusive Coherence = "exclusive"
	// Shared: any number of nodes and outside clients write the store.
	// Commits are written through, conditioned on what the transaction
	// read from the store (a locking read always asks the store: the
	// buffer's FreshLocks), so a refusal comes from the store's truth and
	// retries the transaction.
	Shared Coherence = "shared"
	// Partitioned: any number of nemo replicas, each keyspace owned by
	// the holder of its lease, which runs it as Exclusive does; the
	// others forward its writes and transactions there and answer reads
	// outside transactions under a staleness bound. The engine runs it as
	// Exclusive with a router (txn.Options.Router).
	Partitioned Coherence = "partitioned"
)

// Coherences returns every Coherence, in the order messages list them: the
// one list of allowed values (the engine's Validate, config's
// coherence.mode).
func Coherences() []Coherence { return []Coherence{Exclusive, Shared, Partitioned} }

// Valid reports whether c is one of Coherences. The empty Coherence is not
// valid by itself; in the engine's options it means the default, Exclusive.
func (c Coherence) Valid() bool { return slices.Contains(Coherences(), c) }
