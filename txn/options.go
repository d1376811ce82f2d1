package txn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/enum"
	"github.com/nemocache/nemo/wal"
)

// Phantom selects the phantom-protection strategy, WriteMode when a
// commit reaches the store, Coherence how the engine copes with other
// writers of the store. They are defined in internal/enum, below config,
// which reads them too (see enum's documentation for each value).
type (
	Phantom   = enum.Phantom
	WriteMode = enum.WriteMode
	Coherence = enum.Coherence
)

// The values of Phantom, WriteMode and Coherence.
const (
	NextKey      = enum.NextKey
	PCL          = enum.PCL
	WriteBack    = enum.WriteBack
	WriteThrough = enum.WriteThrough
	Exclusive    = enum.Exclusive
	Shared       = enum.Shared
)

// Leaser enforces coherence exclusive where other nodes could write the
// store: Hold returns nil only while this node holds a valid lease on ks
// (acquiring it on first use), and an error naming the holder otherwise.
type Leaser interface {
	// Hold returns nil if this node may write ks now. An error wrapping
	// ErrNotLeaseHolder says another node holds its lease; any other
	// error that this node could not confirm its own (the write is
	// refused with ErrLeaseUnavailable, which clients retry).
	Hold(ctx context.Context, ks adapters.Keyspace) error
}

// Options configures an Engine. The zero value of a field means its
// default: call EnsureDefaults to fill them in, then Validate (New does
// both).
type Options struct {
	Phantom Phantom
	// PCLPartitionSize is the width of one PCL partition: a key's first
	// eight bytes, read as a big-endian integer (zero padded), divided by
	// it. Default 1<<48 (65536 partitions over a 64-bit key space).
	PCLPartitionSize uint64
	// IdleTimeout aborts an interactive transaction idle this long.
	// Default 30s.
	IdleTimeout time.Duration
	// Log receives every read-write commit before it is applied; nil
	// means no log (write-through, tests, benchmarks).
	Log CommitLog
	// Logs, when set, keeps each keyspace's commits in a log of its own
	// in the backend, fenced by its lease (klog.go), instead of Log or a
	// WAL: coherence exclusive with Leases, write mode back, no early
	// release.
	Logs KeyspaceLogs
	// Router, when set, is coherence partitioned (forward.go): the
	// operations that write or lock a keyspace another node owns are
	// forwarded to it, and reads outside transactions of such a keyspace
	// are the buffer's, under its staleness bound. It needs Logs (the
	// next owner replays a keyspace's log) and a buffer with a staleness
	// bound whose misses of such keyspaces read the owner
	// (cache.Options.Source).
	Router Router
	// Retries is how many times a single-operation call is retried on a
	// lock conflict before ErrConflict is returned. Default 8.
	Retries int
	// RetryWait lets a single-operation call go on retrying a conflict,
	// with backoff, past Retries until this much time has passed since
	// it began. Default 0 (Retries alone). Coherence shared sets it: a
	// lock there is held across a synchronous store write (and the
	// store's own retries), far longer than Retries' backoff covers.
	RetryWait time.Duration
	// LockWait is how long a lock request waits, in all, for conflicting
	// holders to let go before it fails with ErrConflict (a wait that
	// would deadlock fails at once; one ends so too just before its
	// context's deadline; see wait.go). Default 5s; negative means never
	// wait (NO_WAIT).
	LockWait time.Duration
	// SnapshotBytes bounds the versions kept for read-only transactions'
	// snapshots (coherence exclusive); past it the oldest snapshots are
	// given up. Default 64 MiB.
	SnapshotBytes int64
	// Mode is the write mode: back (default) or through.
	Mode WriteMode
	// Coherence is exclusive (default) or shared; shared needs Mode
	// through (and a buffer with FreshLocks).
	Coherence Coherence
	// Leases, when set (coherence exclusive in front of a shared store),
	// is asked before a transaction writes a keyspace and again before
	// its commit is logged: a keyspace whose lease this node does not
	// hold is not written (ErrNotLeaseHolder, or ErrLeaseUnavailable).
	Leases Leaser
	// WAL, when set with write mode back, is opened and replayed into the
	// buffer by New (so New returns only after recovery) and becomes the
	// commit log.
	WAL *wal.Options
	// EarlyRelease (with a WAL, writing back) releases a commit's locks
	// once its log records are sequenced in the batch being written and
	// its writes are in the buffer, not after the fsync; the commit, and
	// every transaction or read that saw its writes, is acknowledged
	// only once the log is durable up to it, and write-back waits for the
	// same (early.go). Commits with keyspace creates or drops keep their
	// locks to the fsync. A log write or fsync failure then stops the
	// engine's writes for good (the log is not reset: a restart replays
	// it), since writes whose locks are gone may be lost with it.
	EarlyRelease bool
	// CheckpointInterval is how often a fuzzy checkpoint runs with a WAL.
	// Default 1m. Checkpoints also run right after a replay, when
	// CheckpointBytes have been logged since the last one, when nothing is
	// left dirty, and when the log finds no space (durable.go).
	CheckpointInterval time.Duration
	// CheckpointBytes starts a checkpoint once this many bytes have been
	// logged since the last one, so the log a restart replays stays
	// bounded whatever the write rate. Default 64 MiB (wal's default
	// segment size).
	CheckpointBytes int64
	// DirtyWait is how long a transaction's first write waits for
	// write-back to bring dirty bytes under the buffer's MaxDirtyBytes
	// before it fails with cache.ErrBackpressure. Default 2s.
	DirtyWait time.Duration
	Logger    *slog.Logger
}

// EnsureDefaults sets every zero field of o that has a default (see each
// field's comment; Logger defaults to slog.Default()). Fields already set
// are left alone, so calling it again changes nothing. The WAL's own
// options are defaulted when New opens it.
func (o *Options) EnsureDefaults() {
	if o.Phantom == "" {
		o.Phantom = NextKey
	}
	if o.PCLPartitionSize == 0 {
		o.PCLPartitionSize = 1 << 48
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 30 * time.Second
	}
	if o.Retries == 0 {
		o.Retries = 8
	}
	if o.LockWait == 0 {
		o.LockWait = 5 * time.Second
	}
	if o.SnapshotBytes == 0 {
		o.SnapshotBytes = 64 << 20
	}
	if o.Mode == "" {
		o.Mode = WriteBack
	}
	if o.Coherence == "" {
		o.Coherence = Exclusive
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = time.Minute
	}
	if o.CheckpointBytes == 0 {
		o.CheckpointBytes = wal.DefaultSegmentSize
	}
	if o.DirtyWait == 0 {
		o.DirtyWait = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports every problem with the options at once, joined with
// errors.Join. It assumes EnsureDefaults has run: it never fills or consults
// defaults, and never changes o. A zero field passes, since it stands for
// its default.
func (o Options) Validate() error {
	var errs []error
	if o.Phantom != "" && !o.Phantom.Valid() {
		errs = append(errs, fmt.Errorf("txn: phantom %q: want %s", o.Phantom, enum.Or(enum.Phantoms())))
	}
	if o.IdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("txn: idle timeout %v is negative", o.IdleTimeout))
	}
	if o.RetryWait < 0 {
		errs = append(errs, fmt.Errorf("txn: retry wait %v is negative", o.RetryWait))
	}
	if o.SnapshotBytes < 0 {
		errs = append(errs, fmt.Errorf("txn: snapshot bytes %d is negative", o.SnapshotBytes))
	}
	if o.Retries < 0 {
		errs = append(errs, fmt.Errorf("txn: retries %d is negative", o.Retries))
	}
	errs = append(errs, o.validateModes()...)
	if o.CheckpointInterval < 0 {
		errs = append(errs, fmt.Errorf("txn: checkpoint interval %v is negative", o.CheckpointInterval))
	}
	if o.CheckpointBytes < 0 {
		errs = append(errs, fmt.Errorf("txn: checkpoint bytes %d is negative", o.CheckpointBytes))
	}
	return errors.Join(errs...)
}

// validateModes is Validate for the write mode, the coherence and the
// commit logs they allow.
func (o Options) validateModes() []error {
	var errs []error
	if o.Mode != "" && !o.Mode.Valid() {
		errs = append(errs, fmt.Errorf("txn: write mode %q: want %s", o.Mode, enum.Or(enum.WriteModes())))
	}
	if o.Coherence != "" && !o.Coherence.Valid() {
		errs = append(errs, fmt.Errorf("txn: coherence %q: want %s", o.Coherence, enum.Or(enum.Coherences())))
	}
	if o.Coherence == Shared && o.Mode != WriteThrough {
		errs = append(errs, fmt.Errorf("txn: coherence shared writes through; write mode is %q", o.Mode))
	}
	if o.Mode == WriteThrough && o.EarlyRelease {
		errs = append(errs, errors.New("txn: early lock release needs write mode back (a WAL)"))
	}
	if o.Mode == WriteThrough && (o.WAL != nil || o.Log != nil) {
		errs = append(errs, errors.New("txn: write mode through takes no commit log"))
	}
	if o.Logs != nil && (o.Coherence != Exclusive || o.Leases == nil || o.Mode != WriteBack || o.WAL != nil || o.Log != nil || o.EarlyRelease) {
		errs = append(errs, errors.New("txn: keyspace logs in the backend need coherence exclusive with leases, write mode back, and no WAL, other commit log or early release"))
	}
	if o.Router != nil && o.Logs == nil {
		errs = append(errs, errors.New("txn: coherence partitioned needs keyspace logs in the backend"))
	}
	return errs
}
