package adapters

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"
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
	// Version is the record's version in the store, as reads report it;
	// "" when the store reported none.
	Version Version
}

// Version is a record's version in the store: Azure's ETag, Datastore's
// entity version (decimal), the embedded store's per-key sequence number.
// It is opaque to the engine: two versions of one key are equal or not,
// nothing more. A write that changes a record gives it a new version
// (Datastore keeps the version when an entity is rewritten unchanged).
type Version string

// ExpectKind says what a write's precondition requires.
type ExpectKind uint8

const (
	// ExpectAny: no precondition (insert or replace; delete if present).
	ExpectAny ExpectKind = iota
	// ExpectAbsent: the key must not exist.
	ExpectAbsent
	// ExpectVersion: the key must exist at Expect.Version.
	ExpectVersion
)

// Expect is the precondition of one write.
type Expect struct {
	Kind    ExpectKind
	Version Version // with ExpectVersion
}

// Write is one write: Upsert stores Value under Key, Delete removes Key;
// either only if Expect holds.
type Write struct {
	Key    []byte
	Value  []byte
	Expect Expect
}

// Digest is FNV-1a of b: the same in every process, so a digest of a
// value's canonical form (a codec's Digest) logged by one nemo identifies
// the value to the next.
func Digest(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// Puts turns records into unconditional upserts.
func Puts(recs []Record) []Write {
	ws := make([]Write, len(recs))
	for i, r := range recs {
		ws[i] = Write{Key: r.Key, Value: r.Value}
	}
	return ws
}

// Conflict is one write whose precondition did not hold.
type Conflict struct {
	// Index is the write's position in the call.
	Index int
	Key   []byte
	// Exists and Current are the key's state in the store when the
	// write was refused (Current "" if the store did not say).
	Exists  bool
	Current Version
}

// ConflictError is returned by Upsert and Delete when some preconditions
// did not hold: those writes were refused and every other write of the
// call was applied. errors.Is(err, ErrConflict) matches it.
type ConflictError struct {
	Conflicts []Conflict
}

func (e *ConflictError) Error() string {
	if len(e.Conflicts) == 1 {
		c := e.Conflicts[0]
		return fmt.Sprintf("adapters: write precondition failed for key %q (exists=%v, version %q)", c.Key, c.Exists, c.Current)
	}
	return fmt.Sprintf("adapters: write precondition failed for %d keys", len(e.Conflicts))
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Store is the backend interface (the Nemo paper's Table 2). Every method is
// safe for concurrent use.
//
// Range convention: GetRange covers the half-open interval [start, end):
// start inclusive, end exclusive. A nil end means "no upper bound". An empty
// or nil start means "from the first key". To read an inclusive upper bound b,
// pass end = Successor(b).
type Store interface {
	// Get returns one record per key, in the order of keys, with its
	// version; a nil Value means the key is absent. A present key with an
	// empty value has a non-nil empty Value.
	Get(ctx context.Context, ks Keyspace, keys [][]byte) ([]Record, error)
	// GetRange returns records in [start, end) in key order, with their
	// versions, at most limit of them when limit > 0. more reports that
	// records beyond the last returned one may exist in the range; it is
	// true only with at least one record. more false claims the whole
	// range: an adapter that pages reads on until the backend itself says
	// the range is done (a short or empty batch says nothing), and reports
	// each batch with ReportBatch.
	GetRange(ctx context.Context, ks Keyspace, start, end []byte, limit int) (recs []Record, more bool, err error)
	// Upsert writes every record (insert or replace) whose precondition
	// holds and returns each one's new version, in order ("" for a
	// refused one). Adapters split the batch to the backend's limits. It
	// is not atomic across records. Refused writes are reported as a
	// *ConflictError; the others are applied.
	Upsert(ctx context.Context, ks Keyspace, writes []Write) ([]Version, error)
	// Delete removes every key whose precondition holds; an absent key is
	// not an error under ExpectAny. Refused deletes are reported as a
	// *ConflictError; the others are applied.
	Delete(ctx context.Context, ks Keyspace, writes []Write) error
}

// Mutation is one write of an atomic group: an upsert of Value, or with
// Delete a delete of Key; either only if Expect holds. With Check it
// writes nothing: the group applies only if Expect holds for Key (a
// transaction's read of a key it does not write, validated at commit).
type Mutation struct {
	Write
	Delete bool
	Check  bool
	// Range, with Check, checks a range instead of one key: the group
	// applies only if the store holds exactly Range.Records in [Key,
	// Range.End) (same keys, same versions). It is a transaction's range
	// read, validated at commit (no phantoms among writers the buffer
	// does not see).
	Range *RangeCheck
}

// RangeCheck is the range a check mutation covers and what was read there.
type RangeCheck struct {
	// End bounds the range (exclusive); nil means no upper bound.
	End []byte
	// Records are the keys and versions read in the range, in key order.
	Records []Record
}

// SameRange reports whether recs, read from a store in a range, are
// exactly want: the same keys, in order, at the same versions.
func SameRange(recs, want []Record) bool {
	if len(recs) != len(want) {
		return false
	}
	for i := range recs {
		if string(recs[i].Key) != string(want[i].Key) || recs[i].Version != want[i].Version {
			return false
		}
	}
	return true
}

// AtomicWriter is implemented by stores that can apply a group of writes to
// one keyspace all-or-nothing: Azure as one entity group transaction (one
// partition, at most MaxAtomic writes), Datastore as one transactional
// commit, the embedded store as one database transaction. The engine uses
// it where a client's own request is atomic (an Azure $batch, a Datastore
// commit) and the store must decide it.
type AtomicWriter interface {
	// WriteAtomic applies every mutation or none. When a precondition
	// fails nothing is applied and the error is a *ConflictError naming at
	// least one refused mutation (Index is its position in ms). On
	// success it returns each upsert's new version ("" for a delete or a
	// check, or when the store did not say). A group the store cannot apply
	// atomically (Azure: two partitions, too many writes) is refused with
	// ErrInvalid before anything is sent.
	WriteAtomic(ctx context.Context, ks Keyspace, ms []Mutation) ([]Version, error)
}

// Stamper is implemented by stores whose records carry the store's own
// metadata inside the value (Azure: the ETag and Timestamp of an entity).
// Stamped returns value as a Get would return it after a write of value
// that the store answered with version v, so the buffer can hold what the
// store holds without reading it back.
type Stamper interface {
	Stamped(value []byte, v Version) ([]byte, error)
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

// KeyspaceLister is implemented by stores that can say which keyspaces
// hold data: the embedded store (its buckets), the Datastore adapter (the
// namespaces of a project and database, from the service's __namespace__
// query). Frontends use it, through the engine, to answer metadata
// queries; keyspaces nemo holds unflushed writes for are added by the
// buffer.
type KeyspaceLister interface {
	// ListKeyspaces lists, in name order, the keyspaces whose names start
	// with prefix that hold (or may hold) records.
	ListKeyspaces(ctx context.Context, prefix string) ([]Keyspace, error)
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
	// ErrNoKeyspaceLister: a wrapper was asked to list keyspaces but the
	// store it wraps cannot (KeyspaceLister).
	ErrNoKeyspaceLister = errors.New("adapters: the store cannot list its keyspaces")
	// ErrConflict: a write's precondition did not hold (see
	// ConflictError).
	ErrConflict = errors.New("adapters: write precondition failed")
	// ErrAborted: the backend aborted an atomic group for contention (a
	// Datastore transaction answered ABORTED every time it was run):
	// nothing was applied, and running the group again may succeed. The
	// backend's own answer is wrapped (ServiceStatusOf finds it).
	ErrAborted = errors.New("adapters: the backend aborted the transaction (contention)")
	// ErrUnknownOutcome: a write failed without a definite answer (the
	// service timed out, or became unavailable after the request was
	// sent): it may or may not have been applied. Adapters return it for
	// a write they cannot safely send again, rather than a refusal that
	// the write's own first application could have caused. The error also
	// carries the service's own (a gRPC status, an HTTP response error),
	// and matches ErrUnavailable: a caller that retries later must first
	// find out what the store holds.
	ErrUnknownOutcome = fmt.Errorf("%w: the write may or may not have been applied", ErrUnavailable)
	// ErrAccessDenied: the backend refused nemo's credential (Azure 401,
	// or 403 AuthenticationFailed or an authorization failure; Datastore
	// UNAUTHENTICATED or PERMISSION_DENIED): the key, signature, token or
	// identity is wrong, expired or not allowed to do this. Sending the
	// call again cannot help. The service's own answer is wrapped too
	// (ServiceStatusOf finds it).
	ErrAccessDenied = errors.New("adapters: the backend refused the credential")
	// ErrKeyspaceGone: a write to a keyspace the store does not have (an
	// Azure table deleted since: 404 TableNotFound). Sending it again
	// cannot help until the keyspace exists again. The service's own
	// answer is wrapped too.
	ErrKeyspaceGone = errors.New("adapters: the table does not exist in the store")
)

// Pinger is implemented by stores that can check, with one cheap call,
// that the backend answers and accepts nemo's credential (Azure: a listing
// of at most one table; Datastore: a Lookup of a key that does not exist).
// The node makes it at start (a refused credential stops nemo) and, while
// no other call succeeds, as readiness's probe. Ping fails with
// ErrAccessDenied when the credential is refused, and otherwise as the
// store's calls fail.
type Pinger interface {
	Ping(ctx context.Context) error
}

// ServiceError is implemented by an adapter's error that carries the
// backend service's own answer: its status code (gRPC code name, or HTTP
// status and error code) and message, as the service gave them.
type ServiceError interface {
	error
	ServiceStatus() (code, message string)
}

// ServiceStatusOf returns the service's own status from err's chain, if
// the backend answered one.
func ServiceStatusOf(err error) (code, message string, ok bool) {
	var se ServiceError
	if errors.As(err, &se) {
		code, message = se.ServiceStatus()
		return code, message, true
	}
	return "", "", false
}

// SnapshotReader is implemented by stores that can read a consistent
// snapshot: every read through one Snapshot sees the store as it was at
// one moment, no earlier than the snapshot's first read (Datastore: a
// read-only transaction). Coherence mode shared serves read-only
// transactions from one, since the buffer cannot give one: other writers'
// changes reach it late, and not all at once.
type SnapshotReader interface {
	// Snapshot returns a new snapshot; it costs nothing until it reads.
	Snapshot() (Snapshot, error)
}

// SnapshotAtReader is implemented by stores that can read a snapshot of a
// past moment (Datastore: a read-only transaction at a read_time). A
// snapshot of a moment the store does not keep (too old, in the future)
// fails its reads with the store's own refusal.
type SnapshotAtReader interface {
	// SnapshotAt returns a new snapshot of the store as of at; it costs
	// nothing until it reads.
	SnapshotAt(at time.Time) (Snapshot, error)
}

// Snapshot is a consistent view of the store (see SnapshotReader). Its
// reads work as Store's. A read the backend cannot make inside the
// snapshot (the legacy Datastore emulator allows no key-range query in a
// transaction) fails with an error matching errors.ErrUnsupported; the
// snapshot stays usable for the other reads. Safe for concurrent use.
type Snapshot interface {
	Get(ctx context.Context, ks Keyspace, keys [][]byte) ([]Record, error)
	GetRange(ctx context.Context, ks Keyspace, start, end []byte, limit int) (recs []Record, more bool, err error)
	// Close releases the snapshot (the backend's read-only transaction),
	// in the background: it never fails or delays the caller.
	Close()
}

// Successor returns the smallest key strictly greater than k in byte order
// (k followed by a zero byte). It is how an inclusive bound becomes an
// exclusive one.
func Successor(k []byte) []byte {
	s := make([]byte, len(k)+1)
	copy(s, k)
	return s
}
