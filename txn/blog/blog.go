package blog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/internal/obs"
)

// Defaults of Options.
const (
	DefaultMaxBatch    = 1024
	DefaultCallTimeout = 30 * time.Second
	DefaultGatherWait  = 2 * time.Millisecond
)

// Options configure Open. The zero value of a field means its default.
type Options struct {
	// Store holds the log (the backend itself); it must implement
	// adapters.AtomicWriter.
	Store adapters.Store
	// Codec says where a keyspace's log lives in Store and how its
	// records are spelled.
	Codec  Codec
	Logger *slog.Logger
	// MaxBatch bounds the entries one group commit takes (default 1024);
	// the Appends beyond it wait for the next.
	MaxBatch int
	// CallTimeout bounds each store call of an append batch, of its
	// settling and of a truncation (default 30s). Open's calls run on its
	// own ctx.
	CallTimeout time.Duration
	// GatherWait bounds how long a group commit waits for the appends
	// its log's user says are coming (Log.SetPending) before it takes
	// its batch (default 2ms; negative: never wait). The wait is also
	// held to the recent duration of an append call, so it costs a
	// commit at most one more call's time, and buys fewer calls.
	GatherWait time.Duration

	// Counters, when set, are the counters of every Log opened with
	// these options (a node's metrics add up its keyspaces' logs, those
	// closed included); otherwise each Log counts on its own.
	Counters *Counters

	// token draws an Open's token (tests); default random in [1, 2^63).
	token func() uint64
}

// EnsureDefaults fills in the zero fields.
func (o *Options) EnsureDefaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.GatherWait == 0 {
		o.GatherWait = DefaultGatherWait
	}
	if o.token == nil {
		o.token = func() uint64 { return 1 + rand.Uint64N(1<<63-1) }
	}
}

// Validate reports every invalid field.
func (o Options) Validate() error {
	var errs []error
	bad := func(f string, args ...any) { errs = append(errs, fmt.Errorf("blog: "+f, args...)) }
	if o.Store == nil {
		bad("no store")
	} else if _, ok := o.Store.(adapters.AtomicWriter); !ok {
		bad("store %T cannot write atomically (adapters.AtomicWriter)", o.Store)
	}
	if o.Codec == nil {
		bad("no codec")
	} else if lim := o.Codec.Limits(); lim.CallRecords < 2 || lim.CallBytes <= 0 || lim.RecordBytes <= 0 {
		bad("codec limits %+v: a call must hold the fence and one record", lim)
	}
	if o.MaxBatch < 0 {
		bad("max batch %d is negative", o.MaxBatch)
	}
	if o.CallTimeout < 0 {
		bad("call timeout %v is negative", o.CallTimeout)
	}
	return errors.Join(errs...)
}

// Entry is one entry of the log as Open reads it back.
type Entry struct {
	Seq  uint64
	Data []byte
}

// Errors, compared with errors.Is.
var (
	// ErrFenced: another owner (a higher epoch, or a later Open of this
	// one's epoch) fenced the log; this Log appends nothing more. See
	// FencedError.
	ErrFenced = errors.New("blog: the log was fenced by a later owner")
	// ErrUnsettled: a write to the log got no answer and reading the
	// fence could not settle it; the Log appends nothing more. Open the
	// log again: what it reads back settles it.
	ErrUnsettled = errors.New("blog: a write to the log was left unsettled; open the log again")
	// ErrCorrupt: the log's records contradict each other (an entry past
	// the fence's Last, a gap, a part missing).
	ErrCorrupt = errors.New("blog: the log's records are inconsistent")
)

// FencedError reports the fence that shut a Log out. errors.Is(err,
// ErrFenced) holds; when the Append it answers may have been applied before
// the fence moved, errors.Is(err, adapters.ErrUnknownOutcome) holds too.
type FencedError struct {
	Keyspace adapters.Keyspace
	// Epoch is this Log's (or, from Open, the epoch it was asked for).
	Epoch uint64
	// Found is the fence read from the store.
	Found Fence
	// Unknown: the refused or unanswered call may have been applied
	// before the fence moved (the new owner has replayed it then).
	Unknown bool
}

func (e *FencedError) Error() string {
	s := fmt.Sprintf("blog: the log of %q (epoch %d) is fenced by %q at epoch %d (last entry %d)",
		e.Keyspace, e.Epoch, e.Found.Holder, e.Found.Epoch, e.Found.Last)
	if e.Unknown {
		s += "; the entry may or may not have been appended before"
	}
	return s
}

// Is makes errors.Is(err, ErrFenced) true, and with Unknown also
// adapters.ErrUnknownOutcome (and so adapters.ErrUnavailable).
func (e *FencedError) Is(target error) bool {
	return target == ErrFenced || e.Unknown && (target == adapters.ErrUnknownOutcome || target == adapters.ErrUnavailable)
}

// Log is one owner's handle on a keyspace's log. Safe for concurrent use.
type Log struct {
	o        Options
	ks, lks  adapters.Keyspace
	aw       adapters.AtomicWriter
	lim      Limits
	fenceKey []byte
	fenceMax int // the most bytes the fence takes in a call
	log      *slog.Logger

	maxOnce  sync.Once
	maxEntry int // MaxEntryBytes

	// writeMu serializes the Log's writes (append batches, truncation):
	// each is conditioned on the fence version the one before it left.
	writeMu sync.Mutex
	fence   Fence            // as this Log last wrote it (or adopted it)
	version adapters.Version // its version
	present []held           // the entries in the store, ascending
	last    atomic.Uint64    // fence.Last, for Last

	// mu guards the queue of Appends and the sticky error; a leaf, never
	// held across a store call.
	mu      sync.Mutex
	queue   []*request
	leading bool  // an Append is writing batches
	err     error // sticky: fenced, unsettled or corrupt

	// pending says how many appends the log's user expects soon
	// (SetPending); grew is signalled when an Append joins the queue
	// behind a leader; callNanos is a moving average of an append
	// call's duration. They drive gather.
	pending   atomic.Pointer[func() int]
	grew      chan struct{}
	callNanos atomic.Int64

	st *Counters
}

// held is an entry in the store: its seq and how many parts it has.
type held struct {
	seq   uint64
	parts int
}

// groupBounds are the buckets of the entries-per-group-commit histogram.
var groupBounds = []int64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

// Bounds of the store calls about one write.
const (
	// maxRounds: attempts of one call found not applied (refused by a
	// write of ours whose answer was lost, aborted, or unanswered and not
	// applied).
	maxRounds = 4
	// settleReads: attempts to read the fence that settles a call, with
	// settleBackoff doubling between them.
	settleReads   = 4
	settleBackoff = 50 * time.Millisecond
)

// Open fences ks's log at epoch for holder and returns what it holds, in
// seq order, for the caller to replay before it acknowledges anything. It
// reads the fence: a fence of a higher epoch is a *FencedError; otherwise
// it rewrites the fence (epoch, holder, a new Token, Last kept) conditioned
// on the version it read, so that from then on every write of an earlier
// owner (or of an earlier Open of this epoch) is refused; then it reads the
// entries. A fence write refused or unanswered is settled by reading the
// fence again (our Token there: it was applied). Open's store calls run on
// ctx.
func Open(ctx context.Context, o Options, ks adapters.Keyspace, epoch uint64, holder string) (*Log, []Entry, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, nil, err
	}
	l := &Log{o: o, ks: ks, lks: o.Codec.Keyspace(ks), fenceKey: o.Codec.FenceKey(ks), lim: o.Codec.Limits(),
		log: o.Logger.With("keyspace", ks), grew: make(chan struct{}, 1)}
	l.aw = o.Store.(adapters.AtomicWriter)
	if l.st = o.Counters; l.st == nil {
		l.st = NewCounters()
	}
	switch {
	case l.lks == "" || len(l.fenceKey) == 0:
		return nil, nil, fmt.Errorf("blog: keyspace %q has no log with this codec: %w", ks, adapters.ErrInvalid)
	case epoch == 0 || epoch > 1<<63-1:
		return nil, nil, fmt.Errorf("blog: epoch %d out of range [1, 2^63): %w", epoch, adapters.ErrInvalid)
	}
	widest, err := o.Codec.EncodeFence(ks, Fence{Epoch: epoch, Token: 1<<63 - 1, Holder: holder, Last: 1<<63 - 1})
	if err != nil {
		return nil, nil, fmt.Errorf("blog: encode the fence of %q: %w", ks, err)
	}
	l.fenceMax = len(l.fenceKey) + len(widest)
	if err := l.ensureKeyspace(ctx); err != nil {
		return nil, nil, err
	}
	if err := l.fenceAt(ctx, epoch, holder); err != nil {
		return nil, nil, err
	}
	entries, err := l.readEntries(ctx)
	if err != nil {
		return nil, nil, err
	}
	l.log.Info("backend log opened", "epoch", epoch, "holder", holder, "entries", len(entries), "last", l.fence.Last)
	return l, entries, nil
}

// ensureKeyspace makes the log keyspace exist when the store has explicit
// keyspaces (Azure's LogTable).
func (l *Log) ensureKeyspace(ctx context.Context) error {
	a, ok := l.o.Store.(adapters.KeyspaceAdmin)
	if !ok {
		return nil
	}
	l.st.storeCalls.Add(1)
	if err := a.CreateKeyspace(ctx, l.lks); err != nil && !errors.Is(err, adapters.ErrNoKeyspaceAdmin) {
		return fmt.Errorf("blog: create log keyspace %q: %w", l.lks, err)
	}
	return nil
}

// maxOpenRounds bounds how often Open reads the fence again after its
// write was refused or unanswered.
const maxOpenRounds = 5

// fenceAt writes the fence of an Open at epoch (see Open).
func (l *Log) fenceAt(ctx context.Context, epoch uint64, holder string) error {
	token := l.o.token()
	var last error
	for range maxOpenRounds {
		cur, ver, exists, err := l.getFence(ctx)
		if err != nil {
			return err
		}
		switch {
		case exists && cur.Epoch == epoch && cur.Token == token:
			// Our own fence write, its answer lost.
			l.setFence(cur, ver)
			return nil
		case exists && cur.Epoch > epoch:
			return &FencedError{Keyspace: l.ks, Epoch: epoch, Found: cur}
		}
		next := Fence{Epoch: epoch, Token: token, Holder: holder, Last: cur.Last}
		expect := adapters.Expect{Kind: adapters.ExpectAbsent}
		if exists {
			expect = adapters.Expect{Kind: adapters.ExpectVersion, Version: ver}
		}
		fv, err := l.o.Codec.EncodeFence(l.ks, next)
		if err != nil {
			return fmt.Errorf("blog: encode the fence of %q: %w", l.ks, err)
		}
		l.st.storeCalls.Add(1)
		vers, err := l.aw.WriteAtomic(ctx, l.lks, []adapters.Mutation{{Write: adapters.Write{Key: l.fenceKey, Value: fv, Expect: expect}}})
		switch {
		case err == nil && len(vers) == 1 && vers[0] != "":
			l.setFence(next, vers[0])
			return nil
		case err == nil:
			last = errors.New("the store reported no version")
		case definite(err) || ctx.Err() != nil:
			return fmt.Errorf("blog: fence the log of %q: %w", l.ks, err)
		default:
			last = err // refused or unanswered: read again
		}
	}
	return fmt.Errorf("blog: fence the log of %q: not settled after %d attempts: %w", l.ks, maxOpenRounds, last)
}

// definite reports whether a failed write surely applied nothing and
// cannot succeed if sent again.
func definite(err error) bool {
	return errors.Is(err, adapters.ErrInvalid) || errors.Is(err, adapters.ErrAccessDenied)
}

// getFence reads the fence once.
func (l *Log) getFence(ctx context.Context) (Fence, adapters.Version, bool, error) {
	l.st.storeCalls.Add(1)
	recs, err := l.o.Store.Get(ctx, l.lks, [][]byte{l.fenceKey})
	if err != nil {
		return Fence{}, "", false, fmt.Errorf("blog: read the fence of %q: %w", l.ks, err)
	}
	if len(recs) != 1 {
		return Fence{}, "", false, fmt.Errorf("blog: the store answered %d records for the fence of %q", len(recs), l.ks)
	}
	if recs[0].Value == nil {
		return Fence{}, "", false, nil
	}
	f, err := l.o.Codec.DecodeFence(recs[0].Value)
	if err != nil {
		return Fence{}, "", false, fmt.Errorf("blog: the fence of %q is unreadable: %w", l.ks, err)
	}
	if recs[0].Version == "" {
		return Fence{}, "", false, fmt.Errorf("blog: the store reported no version for the fence of %q", l.ks)
	}
	return f, recs[0].Version, true, nil
}

// readBytes bounds the records one read of the entries asks for, as
// records of Limits.RecordBytes: a page of big entries is not read whole.
const readBytes = 32 << 20

// readEntries reads the entries after the fence is ours and checks that
// they are whole and contiguous, ending at the fence's Last.
func (l *Log) readEntries(ctx context.Context) ([]Entry, error) {
	start, end := l.o.Codec.EntryRange(l.ks)
	page := max(1, readBytes/l.lim.RecordBytes)
	var recs []adapters.Record
	for {
		l.st.storeCalls.Add(1)
		got, more, err := l.o.Store.GetRange(ctx, l.lks, start, end, page)
		if err != nil {
			return nil, fmt.Errorf("blog: read the log of %q: %w", l.ks, err)
		}
		recs = append(recs, got...)
		if !more || len(got) == 0 {
			break
		}
		start = adapters.Successor(got[len(got)-1].Key)
	}
	var out []Entry
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: the log of %q: %s", ErrCorrupt, l.ks, fmt.Sprintf(format, args...))
	}
	part := 0
	for _, r := range recs {
		seq, p, data, err := l.o.Codec.DecodeEntry(r.Value)
		if err != nil {
			return nil, fmt.Errorf("blog: the log of %q holds an unreadable entry: %w", l.ks, err)
		}
		switch {
		case string(r.Key) != string(l.o.Codec.EntryKey(l.ks, seq, p)):
			return nil, bad("the record at key %x holds seq %d part %d", r.Key, seq, p)
		case seq > l.fence.Last:
			return nil, bad("entry %d is past the fence's last entry %d", seq, l.fence.Last)
		case len(out) > 0 && seq == out[len(out)-1].Seq && p == part+1:
			part = p
			out[len(out)-1].Data = append(out[len(out)-1].Data, data...)
			l.present[len(l.present)-1].parts++
		case p != 0:
			return nil, bad("entry %d starts at part %d", seq, p)
		case len(out) > 0 && seq != out[len(out)-1].Seq+1:
			return nil, bad("entry %d follows entry %d", seq, out[len(out)-1].Seq)
		default:
			part = 0
			out = append(out, Entry{Seq: seq, Data: data})
			l.present = append(l.present, held{seq: seq, parts: 1})
		}
	}
	if len(out) > 0 && out[len(out)-1].Seq != l.fence.Last {
		return nil, bad("the last entry is %d, the fence's is %d", out[len(out)-1].Seq, l.fence.Last)
	}
	return out, nil
}

// Last returns the seq of the last entry appended (0 if none). It does not
// wait for a batch in flight.
func (l *Log) Last() uint64 { return l.last.Load() }

// setFence notes the fence this Log wrote or adopted, at version v.
// writeMu is held.
func (l *Log) setFence(f Fence, v adapters.Version) {
	l.fence, l.version = f, v
	l.last.Store(f.Last)
}

// Err returns the sticky error that stopped the Log (fenced, unsettled),
// nil while it appends.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// fail makes err (or what it stands for) the Log's sticky error, once.
func (l *Log) fail(sticky error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = sticky
		l.log.Warn("backend log stopped: nothing more is appended until it is opened again", "epoch", l.fence.Epoch, "err", sticky)
	}
}

// callCtx bounds one store call of a batch, its settling or a truncation.
func (l *Log) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), l.o.CallTimeout)
}

// Counters count what Logs do (Options.Counters); safe for concurrent use.
type Counters struct {
	appends, failed, bytes, batches, calls, settles, truncated, storeCalls atomic.Uint64
	group, latency                                                         *obs.Histogram
}

// NewCounters returns counters at zero.
func NewCounters() *Counters {
	return &Counters{group: obs.NewHistogram(groupBounds...), latency: obs.NewDurationHistogram()}
}

// Stats are a Log's counters (or those of every Log sharing its
// Options.Counters), for metrics and the benchmark.
type Stats struct {
	// Appends counts entries made durable, Failed the Appends that
	// failed, Bytes the data of the durable entries.
	Appends, Failed, Bytes uint64
	// Batches counts group commits; Calls the atomic calls their
	// batches sent (a batch over a call's limits takes several, and a
	// call found not applied is sent again).
	Batches, Calls uint64
	// Settles counts calls refused or unanswered and settled by reading
	// the fence.
	Settles uint64
	// Truncated counts entries Truncate deleted.
	Truncated uint64
	// StoreCalls counts every store call the Log made: Open's, the
	// batches', the settling reads, the truncations'.
	StoreCalls uint64
	// Group is the number of entries per group commit; Latency the time
	// from an Append's call to its answer.
	Group, Latency obs.HistogramSnapshot
}

// Stats returns the Log's counters: its Options.Counters' when set.
func (l *Log) Stats() Stats { return l.st.Stats() }

// Stats returns the counts so far.
func (c *Counters) Stats() Stats {
	return Stats{
		Appends: c.appends.Load(), Failed: c.failed.Load(), Bytes: c.bytes.Load(),
		Batches: c.batches.Load(), Calls: c.calls.Load(), Settles: c.settles.Load(),
		Truncated: c.truncated.Load(), StoreCalls: c.storeCalls.Load(),
		Group: c.group.Snapshot(), Latency: c.latency.Snapshot(),
	}
}
