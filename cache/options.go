package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/enum"
)

// Policy selects how much the buffer does; ConflictPolicy what write-back
// does when the store refuses a buffered write because the key changed
// since the buffer last saw it. Both are defined in internal/enum, below
// config, which reads them too (see enum's documentation for each value).
type (
	Policy         = enum.Policy
	ConflictPolicy = enum.ConflictPolicy
)

// The values of Policy and ConflictPolicy.
const (
	PolicyNemo        = enum.PolicyNemo
	PolicyRecord      = enum.PolicyRecord
	PolicyNone        = enum.PolicyNone
	ConflictStoreWins = enum.ConflictStoreWins
	ConflictOverwrite = enum.ConflictOverwrite
)

// Reader is where Options.Source sends a keyspace's reads.
type Reader interface {
	Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error)
	GetRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) (recs []adapters.Record, more bool, err error)
}

// Options configures a Buffer. The zero value of a field means its default:
// call EnsureDefaults to fill them in, then Validate (New does both).
type Options struct {
	Policy Policy
	// MaxBytes is the byte budget: keys, values, tombstones, sentinels and
	// RecordOverhead per record all count. Default 256 MiB.
	MaxBytes int64
	// RecordOverhead is the fixed per-record cost charged to the budget,
	// standing for the record header and its tree slot. Default 64.
	RecordOverhead int64
	// EvictWorkers is the number of background eviction workers. Default 2.
	EvictWorkers int
	// EvictBatch is how many records the clock hand examines per step, and
	// the most records one admission adds beyond the budget. Default 64.
	EvictBatch int
	// EvictRun is the longest run of adjacent records the clock hand takes
	// as one unit: records linked by sealed gaps (gap bit 0), which a
	// range fetch left behind. A run is kept whole while any of its
	// records was read since the hand last passed (and banks a chance for
	// each such pass, up to three), and is evicted whole once none was, so
	// eviction leaves one hole where single-record CLOCK would punch many
	// (each hole in a sealed run costs a range fetch later). Records with
	// unknown gaps on both sides (point reads) are runs of one, evicted as
	// plain second-chance CLOCK. Default 32; 1 turns runs off.
	EvictRun int
	// RangeAdmitSlots sizes the range admission filter: while the buffer is
	// at or above the evictor's low mark (MaxBytes - MaxBytes/8), a range
	// fetch is admitted only if one of its keys was fetched by an earlier
	// range fetch that was not admitted, remembered in a table of this
	// many key hashes (8 bytes each, per keyspace). A one-off scan of cold
	// keys thus passes through without flushing hotter records, and a
	// range read again soon is admitted on its second fetch. Below the low
	// mark every fetch is admitted, and so is one that refreshes stale
	// buffered records (MaxStaleness). Default 4096 (32 KiB, allocated for
	// a keyspace when it first filters a fetch): 256 remembered too few
	// ranges at zipfian 0.99 over 20k records, where a hot range's keys
	// were overwritten before its second fetch (nemo-bench, range reads of
	// 8: 3.97x fewer remote calls than record with 256 slots, 6.16x with
	// 4096; cache/bench at 0.9: 4.99x and 4.27x). -1 turns the filter off
	// (every range fetch is admitted, budget permitting).
	RangeAdmitSlots int
	// MaxKeyBytes and MaxValueBytes bound user keys and values.
	// Defaults 4 KiB and 2 MiB.
	MaxKeyBytes   int
	MaxValueBytes int
	// FlushInterval is how often the engine's background write-back
	// (package txn) looks for old dirty records (TakeAged). Default 1s.
	FlushInterval time.Duration
	// MaxDirtyBytes: beyond it write-back is wanted at once
	// (WriteBackWanted), and the engine's takes records of any age.
	// Default 64 MiB.
	MaxDirtyBytes int64
	// MaxDirtyAge: a dirty record is written back within about this long.
	// Default 5s.
	MaxDirtyAge time.Duration
	// AdmitWait bounds how long an admission waits for eviction to make room
	// before it bypasses the buffer. Default 5ms.
	AdmitWait time.Duration
	// StoreTimeout bounds each store call the buffer makes on its own
	// (a write-back attempt, a refresh ahead): a store that does not
	// answer fails the attempt, which lets go of the keyspace's write-back
	// lock and is retried later. Calls made for a caller (a miss, a
	// write-through, the engine's Flush) end with the caller's context too. Default
	// 10s.
	StoreTimeout time.Duration
	// WriteBatch is the most records written back in one store call.
	// Default 100 (Azure's entity-group limit).
	WriteBatch int
	// WriteBackParallelism bounds the store calls one write-back has in
	// flight at once. A write-back's records are sent in key order, so
	// each call holds few Azure partitions or Datastore entity groups,
	// and its calls run side by side; each key appears once in a pass and
	// a keyspace runs one write-back at a time, so the writes of one key
	// still reach the store in order. Default 8; 1 sends the calls one
	// after another.
	WriteBackParallelism int
	// DisableWorkers turns off the background evictor, and the engine's
	// background write-back over this buffer; tests drive eviction and
	// write-back by hand.
	DisableWorkers bool
	// OnConflict says what write-back does with a write the store refuses
	// because the key changed behind the buffer. Default ConflictStoreWins.
	OnConflict ConflictPolicy
	// Conflicts, when set, receives every such conflict (after the buffer
	// has dealt with it), for example to append it to a file an operator
	// can replay. It must not call back into the buffer.
	Conflicts func(Conflict)
	// Unstamped returns a value without the metadata the store stamps on
	// what it stores (Azure's ETag and Timestamp, Datastore's version and
	// times), so that a value the buffer wrote and the same value read
	// back from the store are alike: write-back tells its own writes in
	// the store from other writers' by digests of it, which every process
	// computes alike (see ApplyReplayed). Default: the value itself (a
	// store that keeps the bytes).
	Unstamped func(value []byte) []byte
	// MaxStaleness bounds how old the store's word may be when a read
	// outside a transaction (Get, Scan) answers from the buffer: a clean
	// record, a tombstone or a sealed gap last confirmed by the store
	// (fetched, or written back) longer ago than this counts as unknown,
	// so the key or range is fetched again and the buffered state is
	// refreshed with the answer. It bounds how long a change made behind
	// the buffer (another replica, an outside writer) stays hidden.
	// Dirty records are the buffer's own writes and never stale.
	// Transactional reads (LockKey, LockRange) do not apply it: what a
	// transaction locks it reads as buffered. Confirmation times are kept
	// in ticks of MaxStaleness/32 (at least 1ms, at most 1/16s), so the
	// bound is met with up to two ticks to spare; below 1ms every such
	// read goes to the store. 0 (the default) turns it off: buffered
	// knowledge never expires.
	MaxStaleness time.Duration
	// RefreshAheadShare bounds refresh ahead (with MaxStaleness: a hit on
	// a record read at least twice since the store last vouched for it,
	// once its knowledge has used three quarters of the bound, fetches it
	// again in the background): over the last two windows of
	// MaxStaleness, refreshes ahead may be at most this share of the
	// buffer's store calls, their own included. Refreshes it declines are
	// counted (Stats.RefreshSkipped) and left to the first read that
	// finds the record stale. 0 means the default, 0.5 (refreshes at most
	// as many as all other calls); 1 leaves them unbounded; negative
	// turns refresh ahead off.
	RefreshAheadShare float64
	// FreshLocks makes every locking read (LockKey) ask the store, even
	// when the buffer holds the key, so a transaction reads what the
	// store holds and its writes, written through, are conditioned on
	// it (coherence mode shared: other writers change the store behind
	// the buffer's back). Dirty records are the buffer's own newer state
	// and are not refetched.
	FreshLocks bool
	// Source, when set, may name where the buffer reads a keyspace
	// instead of the store (coherence partitioned: a keyspace another
	// node owns is read from that node, whose buffer holds writes the
	// store has not seen yet). A nil Reader means the store. Only reads
	// (misses, range fetches, refreshes) ask it; writes go to the store.
	// A read its Reader fails with ErrSourceMoved asks Source again, once.
	Source func(ctx context.Context, ks adapters.Keyspace) (Reader, error)
	Logger *slog.Logger

	// now is the clock MaxStaleness is measured with; nil means
	// time.Now. Tests set it to step time instead of sleeping.
	now func() time.Time
}

// EnsureDefaults sets every zero field of o to its default (see each
// field's comment); fields already set are left alone, so calling it again
// changes nothing. New calls it before Validate.
func (o *Options) EnsureDefaults() {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	defi := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if o.Policy == "" {
		o.Policy = PolicyNemo
	}
	def(&o.MaxBytes, 256<<20)
	def(&o.RecordOverhead, 64)
	def(&o.MaxDirtyBytes, 64<<20)
	defi(&o.EvictWorkers, 2)
	defi(&o.EvictBatch, 64)
	defi(&o.EvictRun, 32)
	defi(&o.RangeAdmitSlots, 4096)
	defi(&o.MaxKeyBytes, 4<<10)
	defi(&o.MaxValueBytes, 2<<20)
	defi(&o.WriteBatch, 100)
	defi(&o.WriteBackParallelism, 8)
	defd(&o.FlushInterval, time.Second)
	defd(&o.MaxDirtyAge, 5*time.Second)
	defd(&o.AdmitWait, 5*time.Millisecond)
	defd(&o.StoreTimeout, 10*time.Second)
	if o.RefreshAheadShare == 0 {
		o.RefreshAheadShare = 0.5
	}
	if o.OnConflict == "" {
		o.OnConflict = ConflictStoreWins
	}
	if o.Unstamped == nil {
		o.Unstamped = func(v []byte) []byte { return v }
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports every problem with the options at once, joined with
// errors.Join. It assumes EnsureDefaults has run: it never fills or consults
// defaults, and never changes o. A zero field passes, since it stands for
// its default, but cross-field checks compare the fields as given.
func (o Options) Validate() error {
	var errs []error
	bad := func(f string, args ...any) { errs = append(errs, fmt.Errorf("cache: "+f, args...)) }
	if o.Policy != "" && !o.Policy.Valid() {
		bad("policy %q: want %s", o.Policy, enum.Or(enum.Policies()))
	}
	if o.OnConflict != "" && !o.OnConflict.Valid() {
		bad("conflict policy %q: want %s", o.OnConflict, enum.Or(enum.ConflictPolicies()))
	}
	if o.MaxBytes < 0 {
		bad("max bytes %d is negative", o.MaxBytes)
	}
	if o.RecordOverhead < 0 {
		bad("record overhead %d is negative", o.RecordOverhead)
	}
	if o.EvictWorkers < 0 || o.EvictBatch < 0 || o.EvictRun < 0 || o.WriteBatch < 0 || o.WriteBackParallelism < 0 {
		bad("evict workers, evict batch, evict run, write batch and write-back parallelism must not be negative")
	}
	if o.RangeAdmitSlots < -1 {
		bad("range admit slots %d: want -1 (off), 0 (default) or more", o.RangeAdmitSlots)
	}
	if o.MaxKeyBytes < 0 || o.MaxValueBytes < 0 || o.MaxDirtyBytes < 0 {
		bad("key, value and dirty limits must not be negative")
	}
	if o.FlushInterval < 0 || o.MaxDirtyAge < 0 || o.AdmitWait < 0 || o.MaxStaleness < 0 || o.StoreTimeout < 0 {
		bad("durations must not be negative")
	}
	if o.RefreshAheadShare > 1 {
		bad("refresh ahead share %v: want at most 1 (negative: off)", o.RefreshAheadShare)
	}
	if o.MaxBytes != 0 && o.MaxBytes < o.RecordOverhead+int64(o.MaxKeyBytes) {
		bad("max bytes %d cannot hold one record of the largest key", o.MaxBytes)
	}
	return errors.Join(errs...)
}
