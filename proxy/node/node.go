package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"time"

	"google.golang.org/api/option"

	"github.com/nemocache/nemo/adapters"
	azstore "github.com/nemocache/nemo/adapters/aztable"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/adapters/contract"
	dsstore "github.com/nemocache/nemo/adapters/datastore"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/enum"
	"github.com/nemocache/nemo/proxy/peer"
	"github.com/nemocache/nemo/txn"
	"github.com/nemocache/nemo/txn/blog"
	"github.com/nemocache/nemo/txn/lease"
	"github.com/nemocache/nemo/txn/logrec"
	"github.com/nemocache/nemo/wal"
)

// ErrBackendUnavailable is returned by Open for a backend type this binary
// has no adapter for.
var ErrBackendUnavailable = errors.New("node: backend not available in this build")

// ErrPendingWAL is returned by Open when the data directory's WAL holds
// acknowledged writes that never reached the store, the configuration
// would not replay them (coherence mode shared, wal.write_mode through or
// cache.policy none keep no WAL), and writing them to the store first
// failed: starting would lose them.
var ErrPendingWAL = errors.New("node: the WAL holds acknowledged writes not yet in the store")

// Node is an assembled engine: the counted store, the buffer over it and the
// engine over the buffer. Its fields are set by Open and never change.
type Node struct {
	// Engine runs transactions; frontends call it.
	Engine *txn.Engine
	// Buffer is the engine's record buffer (debug API, metrics).
	Buffer *cache.Buffer
	// Store counts every call the buffer makes to the backend (metrics).
	Store *adapters.Counted
	// Backend is the backend store itself, under the counters and any
	// fault injection, for dialect operations the Store interface has no
	// word for (a frontend type-asserts it, e.g. to allocate Datastore
	// ids): those reach the backend without faults.
	Backend adapters.Store
	// Leases holds this node's leases in coherence mode exclusive in
	// front of Azure or Datastore; nil otherwise.
	Leases *lease.Manager

	peers      *peer.Client // coherence partitioned's router; nil otherwise
	peerSecret string
	leaseTTL   time.Duration  // coherence.lease_ttl (Ready)
	logs       *blog.Counters // wal.location backend's logs (LogStats); nil otherwise
	faults     *fault.Store   // backend.fault, when enabled (Open)
	health     *health        // whether the backend answers (Ready, BackendUp)
	closeStore func() error
	conflicts  *conflictFile
	log        *slog.Logger
	// stopRebalance stops the rebalancer (coherence.peers) and waits for
	// it; nil without one.
	stopRebalance func()

	once sync.Once
	err  error
}

// Opener opens a backend store for a configuration and returns it with the
// function that releases it.
type Opener func(cfg config.Config, log *slog.Logger) (adapters.Store, func() error, error)

// openers maps each backend type compiled into this binary to its opener.
// A new backend adapter plugs in by adding its line here.
var openers = map[config.BackendType]Opener{
	config.BackendEmbedded:  openEmbedded,
	config.BackendAzTable:   openAzTable,
	config.BackendDatastore: openDatastore,
}

func openDatastore(cfg config.Config, log *slog.Logger) (adapters.Store, func() error, error) {
	c := cfg.Backend.Datastore
	opts := dsstore.Options{EmulatorHost: c.EmulatorHost, Project: c.Project, Database: c.Database, Logger: log.With("component", "store")}
	if k := openContract(cfg, log); k != nil {
		opts.Interceptors = append(opts.Interceptors, k.Interceptor())
	}
	if c.CredentialsFile != "" {
		opts.ClientOptions = append(opts.ClientOptions, option.WithAuthCredentialsFile(option.ServiceAccount, c.CredentialsFile))
	}
	s, err := dsstore.Open(context.Background(), opts)
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

func openAzTable(cfg config.Config, log *slog.Logger) (adapters.Store, func() error, error) {
	c := cfg.Backend.AzTable
	opts := azstore.Options{
		ConnectionString: c.ConnectionString,
		ServiceURL:       c.Endpoint,
		Account:          c.Account,
		Key:              c.Key,
		ETagMemory:       c.ETagMemory,
		Logger:           log.With("component", "store"),
	}
	if c.UseDefaultCredential {
		opts.Key = "" // the adapter falls back to the default credential chain
	}
	if k := openContract(cfg, log); k != nil {
		opts.Transport = k.Transport(nil)
	}
	if cfg.CoherenceMode() == txn.Shared {
		// Clients see the store's own ETags, valid at every replica.
		opts.ETagMemory = -1
	}
	s, err := azstore.New(opts)
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

func openEmbedded(cfg config.Config, log *slog.Logger) (adapters.Store, func() error, error) {
	s, err := embedded.Open(cfg.Backend.Embedded.DataDir, embedded.Options{
		NoSync:   cfg.Backend.Embedded.NoSync,
		InMemory: cfg.Backend.Embedded.InMemory,
		Logger:   log.With("component", "store"),
	})
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

// Open builds the node cfg describes. cfg must have passed config.Validate.
// It returns once the write-ahead log has been replayed into the buffer;
// it does not wait for the backend to answer (remote adapters connect
// lazily), so a slow cloud does not hold up startup.
func Open(cfg config.Config, log *slog.Logger) (*Node, error) {
	if log == nil {
		log = slog.Default()
	}
	open, ok := openers[cfg.Backend.Type]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrBackendUnavailable, cfg.Backend.Type)
	}
	store, closeStore, err := open(cfg, log)
	if err != nil {
		return nil, fmt.Errorf("node: open %s backend: %w", cfg.Backend.Type, err)
	}
	var faults *fault.Store
	if f := cfg.Backend.Fault; f.Enabled {
		fc := FaultOptions(cfg)
		faults = fault.New(store, fc)
		store = faults
		log.Warn("backend.fault: injecting failures into every call to the backend", "backend", string(cfg.Backend.Type),
			"seed", fc.Seed, "latency", f.Latency, "jitter", f.Jitter, "error_rate", f.ErrorRate, "error", string(f.Error),
			"outage_every", f.OutageEvery, "outage_for", f.OutageFor, "outage_schedule", f.OutageSchedule,
			"outage_mode", string(f.OutageMode), "hung", f.Hung)
	}
	reached, err := checkBackend(store, cfg, log)
	if err != nil {
		return nil, errors.Join(err, closeStore())
	}
	n, err := New(store, closeStore, cfg, log)
	if err != nil {
		return nil, errors.Join(err, closeStore())
	}
	if reached != nil {
		n.health.startDown(reached)
	}
	n.faults = faults
	return n, nil
}

// openContract returns the contract backend.contract asks for (nil when
// it is off), logging what it injects.
func openContract(cfg config.Config, log *slog.Logger) *contract.Contract {
	k := cfg.Backend.Contract
	if !k.Enabled {
		return nil
	}
	c := ContractOptions(cfg)
	log.Warn("backend.contract: the backend answers as its service's API contract allows: short and empty batches, deferred keys, transient errors",
		"backend", string(cfg.Backend.Type), "seed", c.Seed, "short_rate", c.ShortRate, "empty_rate", c.EmptyRate, "defer_rate", c.DeferRate,
		"error_rate", c.ErrorRate, "lost_rate", c.LostRate, "definite_writes", c.DefiniteWrites)
	return contract.New(c)
}

// ContractOptions maps backend.contract onto the contract's plan. A zero
// seed is replaced by one from the clock. cfg must have passed
// config.Validate.
func ContractOptions(cfg config.Config) contract.Config {
	k := cfg.Backend.Contract
	seed := uint64(k.Seed)
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	return contract.Config{Seed: seed, ShortRate: k.ShortRate, EmptyRate: k.EmptyRate, DeferRate: k.DeferRate,
		ErrorRate: k.ErrorRate, LostRate: k.LostRate, DefiniteWrites: k.DefiniteWrites}
}

// FaultOptions maps backend.fault onto the fault injector's plan: every
// operation gets the same latency, jitter and error rate. A zero seed is
// replaced by one from the clock. cfg must have passed config.Validate.
func FaultOptions(cfg config.Config) fault.Config {
	f := cfg.Backend.Fault
	kind := fault.Unavailable
	if f.Error == config.FaultTimeout {
		kind = fault.Timeout
	}
	seed := uint64(f.Seed)
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	sched, _ := config.ParseOutageSchedule(f.OutageSchedule) // validated
	windows := make([]fault.Window, len(sched))
	for i, w := range sched {
		windows[i] = fault.Window{Start: w.Start, Duration: w.Duration}
	}
	return fault.Config{
		Seed:    seed,
		Default: fault.OpConfig{Latency: f.Latency, Jitter: f.Jitter, ErrorRate: f.ErrorRate, Error: kind},
		Outages: fault.Outages{Every: f.OutageEvery, For: f.OutageFor, Windows: windows,
			Hang: f.OutageMode == config.OutageHang, Error: kind},
		Hung: f.Hung,
	}
}

// New builds a node over an already open store (tests and benchmarks pass a
// fault-injecting one). closeStore, which may be nil, is called by Drain and
// Close after everything above the store has stopped; on error New does not
// call it.
func New(store adapters.Store, closeStore func() error, cfg config.Config, log *slog.Logger) (*Node, error) {
	if log == nil {
		log = slog.Default()
	}
	if closeStore == nil {
		closeStore = func() error { return nil }
	}
	// In memory nemo never reads the WAL directory: a WAL left there by a
	// nemo on disk is that nemo's, and would be checkpointed away.
	if TxnOptions(cfg, log).WAL == nil && !cfg.InMemory() {
		if err := flushPendingWAL(store, cfg, log); err != nil {
			return nil, err
		}
	}
	counted := adapters.CountLogged(store, log.With("component", "store"))
	pinger, _ := store.(adapters.Pinger)
	h := newHealth(pinger, log.With("component", "health"))
	counted.Watch(h.observe)
	fail := func(err error) (*Node, error) {
		h.close()
		return nil, err
	}
	conflicts := &conflictFile{path: cfg.ConflictsFile(), log: log}
	co := CacheOptions(cfg, log)
	co.Conflicts = conflicts.record
	leases, err := openLeases(counted, cfg, log)
	if err != nil {
		return fail(err)
	}
	var peers *peer.Client
	if cfg.CoherenceMode() == enum.Partitioned && leases != nil {
		peers = peer.NewClient(peer.Options{Owners: leases.m, Leased: leases.leased, Self: cfg.PeerAdvertise(),
			Secret: cfg.Coherence.PeerSecret, Logger: log.With("component", "peer")})
		co.Source = peers.Source
	}
	buf, err := cache.New(counted, co)
	if err != nil {
		if leases != nil {
			leases.m.Stop()
		}
		return fail(fmt.Errorf("node: buffer: %w", err))
	}
	to := TxnOptions(cfg, log)
	if peers != nil {
		to.Router = peers
	}
	if leases != nil {
		// Only the lease holder writes the store, write-back included:
		// the engine passes the lease down as the buffer's write gate.
		to.Leases = leases
	}
	if to.Logs, err = openLogs(counted, cfg, leases, log); err != nil {
		if leases != nil {
			leases.m.Stop()
		}
		return fail(errors.Join(err, buf.Close()))
	}
	eng, err := txn.New(buf, to)
	if err != nil {
		if leases != nil {
			leases.m.Stop()
		}
		return fail(errors.Join(fmt.Errorf("node: engine: %w", err), buf.Close()))
	}
	rctx, rcancel := context.WithTimeout(context.Background(), probeTimeout)
	err = recoverLogs(rctx, to.Logs, eng, cfg, log)
	rcancel()
	if err != nil {
		log.Warn("the commit logs kept in the backend could not be listed: those a last holder left are recovered when a client touches their tables", "err", err)
	}
	n := &Node{Engine: eng, Buffer: buf, Store: counted, Backend: innermost(store), health: h, closeStore: closeStore, conflicts: conflicts, log: log,
		peers: peers, peerSecret: cfg.Coherence.PeerSecret, leaseTTL: cfg.Coherence.LeaseTTL}
	if b, ok := to.Logs.(backendLogs); ok {
		n.logs = b.opts.Counters
	}
	if leases != nil {
		n.Leases = leases.m
	}
	if peers != nil && cfg.Coherence.Peers != "" {
		n.startRebalance(cfg)
	}
	return n, nil
}

// rebalanceHandoverTimeout bounds one hand-over of a rebalance, its wait
// for the transactions using the keyspace included: past it the keyspace
// stays, and a later round tries again.
const rebalanceHandoverTimeout = 30 * time.Second

// startRebalance runs the rebalancer (proxy/peer, coherence.peers) until
// the node drains or closes.
func (n *Node) startRebalance(cfg config.Config) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.peers.Rebalance(ctx, n.Engine, peer.RebalanceOptions{Peers: cfg.Coherence.PeerList(),
			Interval: cfg.Coherence.RebalanceInterval, HandoverTimeout: rebalanceHandoverTimeout})
	}()
	n.stopRebalance = func() {
		cancel()
		<-done
	}
	n.log.Info("rebalancing with peers", "peers", cfg.Coherence.Peers, "interval", cfg.Coherence.RebalanceInterval)
}

// RebalanceMoves counts the keyspaces this node handed over to a peer
// that took them (nemo_rebalance_moves_total); 0 outside partitioned mode.
func (n *Node) RebalanceMoves() uint64 {
	if n.peers == nil {
		return 0
	}
	return n.peers.Moved()
}

// innermost unwraps s through the wrappers that say what they wrap
// (counters, fault injection) down to the backend itself.
func innermost(s adapters.Store) adapters.Store {
	for {
		u, ok := s.(interface{ Unwrap() adapters.Store })
		if !ok {
			return s
		}
		s = u.Unwrap()
	}
}

// flushPendingWAL writes to the store what a WAL left in cfg's WAL
// directory holds past its last checkpoint, for a configuration that keeps
// no WAL and so would not replay it (coherence mode shared, write mode
// through, cache policy none): acknowledged writes of an earlier start in
// mode exclusive with write-back, perhaps one that stopped with exit
// status 3. It replays them into a node that writes back (mode exclusive,
// with its leases), drains it within listen.shutdown_grace, and returns;
// if they cannot all be written, it returns ErrPendingWAL saying how to
// drain them, and the log keeps them.
func flushPendingWAL(store adapters.Store, cfg config.Config, log *slog.Logger) error {
	n, err := pendingWAL(cfg, log)
	if err != nil {
		return fmt.Errorf("node: read the WAL left in %s: %w", cfg.WALDir(), err)
	}
	if n == 0 {
		return nil
	}
	rc := cfg
	rc.Coherence.Mode = txn.Exclusive
	rc.WAL.WriteMode, rc.WAL.Location = txn.WriteBack, enum.WALLocal
	if rc.Cache.Policy == cache.PolicyNone {
		rc.Cache.Policy = cache.PolicyNemo
	}
	log.Warn("the WAL holds acknowledged writes that this configuration would not replay: writing them to the store first",
		"wal_dir", cfg.WALDir(), "transactions", n, "coherence_mode", cfg.CoherenceMode(), "write_mode", cfg.WAL.WriteMode,
		"cache_policy", cfg.Cache.Policy)
	rn, err := New(store, nil, rc, log.With("phase", "wal recovery"))
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Listen.ShutdownGrace)
		err = rn.Drain(ctx)
		cancel()
	}
	if err != nil {
		return fmt.Errorf("%w: %d transactions in %s, written in coherence mode exclusive with write-back, could not be written to the store before starting (%w). "+
			"Start again once the store answers, or start with coherence.mode exclusive, wal.write_mode back and cache.policy nemo or record "+
			"and stop that nemo cleanly (SIGTERM): its drain writes them back", ErrPendingWAL, n, cfg.WALDir(), err)
	}
	log.Info("the WAL's acknowledged writes are in the store", "transactions", n)
	return nil
}

// pendingWAL counts the committed transactions a WAL left in cfg's WAL
// directory holds past its last checkpoint (0 when there is none); a
// write-back's log of what it sent is not one.
func pendingWAL(cfg config.Config, log *slog.Logger) (int, error) {
	dir := cfg.WALDir()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || err == nil && len(ents) == 0 {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	// It only reads: no group-commit writer.
	l, err := wal.Open(wal.Options{Dir: dir, SegmentSize: int64(cfg.WAL.SegmentSize), NoGroupCommit: true, Logger: log})
	if err != nil {
		return 0, err
	}
	n := 0
	err = l.Replay(0, func(_ uint64, recs []wal.Data) error {
		if len(recs) == 0 || recs[0].Type != byte(logrec.RecordWriteBack) {
			n++
		}
		return nil
	})
	return n, errors.Join(err, l.Close())
}

// leaseCodecs says where each backend keeps leases: its adapter's codec.
// The embedded store has none: its database file is locked by the process
// that opens it, which is exclusion enough.
var leaseCodecs = map[config.BackendType]lease.Codec{
	config.BackendAzTable:   azstore.LeaseCodec{},
	config.BackendDatastore: dsstore.LeaseCodec{},
}

// leaseHolder is the engine's Leaser: the manager, for the keyspaces that
// are leased (catalogs and reserved keyspaces are not: the codec has no
// place for them).
type leaseHolder struct {
	m     *lease.Manager
	codec lease.Codec
}

// leased reports whether ks has a lease (the codec has a place for it).
func (l leaseHolder) leased(ks adapters.Keyspace) bool {
	return l.codec.Keyspace(ks) != "" && len(l.codec.Key(ks)) > 0
}

func (l leaseHolder) Hold(ctx context.Context, ks adapters.Keyspace) error {
	if !l.leased(ks) {
		return nil
	}
	err := l.m.Hold(ctx, ks)
	if errors.Is(err, lease.ErrHeld) {
		return fmt.Errorf("%w: %w", txn.ErrNotLeaseHolder, err)
	}
	return err // this node's own lease unconfirmed: txn.ErrLeaseUnavailable
}

// Release lets go of ks's lease (txn.Releaser: a handover).
func (l leaseHolder) Release(ctx context.Context, ks adapters.Keyspace) error {
	return l.m.Release(ctx, ks)
}

// openLeases starts the lease manager coherence mode exclusive needs in
// front of a shared backend, or returns nil.
func openLeases(store adapters.Store, cfg config.Config, log *slog.Logger) (*leaseHolder, error) {
	c, ok := leaseCodecs[cfg.Backend.Type]
	if !ok || cfg.CoherenceMode() == txn.Shared {
		return nil, nil
	}
	id, err := NodeID(cfg)
	if err != nil {
		return nil, err
	}
	m, err := lease.New(lease.Options{Store: store, Codec: c, Holder: id, TTL: cfg.Coherence.LeaseTTL,
		Addr: cfg.PeerAdvertise(), Logger: log.With("component", "lease")})
	if err != nil {
		return nil, fmt.Errorf("node: leases: %w", err)
	}
	if cfg.CoherenceMode() == enum.Partitioned {
		log.Info("coherence partitioned: each keyspace is owned by the holder of its lease; the others forward to it",
			"node_id", id, "lease_ttl", cfg.Coherence.LeaseTTL, "advertise", cfg.PeerAdvertise(), "max_staleness", cfg.MaxStaleness())
	} else {
		log.Info("coherence exclusive: writes hold a lease per keyspace", "node_id", id, "lease_ttl", cfg.Coherence.LeaseTTL)
	}
	return &leaseHolder{m: m, codec: c}, nil
}

// CacheOptions maps the cache section of cfg onto the buffer's options.
func CacheOptions(cfg config.Config, log *slog.Logger) cache.Options {
	c := cfg.Cache
	o := cache.Options{
		Policy:               c.Policy,
		MaxBytes:             int64(cfg.BufferBytes()),
		RecordOverhead:       int64(c.RecordOverheadBytes),
		EvictWorkers:         c.EvictWorkers,
		EvictBatch:           c.EvictBatch,
		MaxKeyBytes:          int(cfg.MaxKeyBytes()),
		MaxValueBytes:        int(cfg.MaxValueBytes()),
		FlushInterval:        c.FlushInterval,
		MaxDirtyBytes:        int64(cfg.MaxDirtyBytes()),
		MaxDirtyAge:          c.MaxDirtyAge,
		WriteBackParallelism: c.WriteBackParallelism,
		OnConflict:           c.WriteBackConflict,
		MaxStaleness:         cfg.MaxStaleness(),
		FreshLocks:           cfg.CoherenceMode() == txn.Shared,
		Unstamped:            unstamped(cfg.Backend.Type),
		Logger:               log.With("component", "cache"),
	}
	// coherence.refresh_ahead_share 0 is off; the buffer's 0 is its default.
	o.RefreshAheadShare = cfg.Coherence.RefreshAheadShare
	if o.RefreshAheadShare == 0 {
		o.RefreshAheadShare = -1
	}
	return o
}

// unstamped is a backend's value without the store's stamps: Azure and
// Datastore stamp what they store (timestamps, versions), the embedded
// store keeps the bytes.
func unstamped(t config.BackendType) func([]byte) []byte {
	switch t {
	case config.BackendAzTable:
		return tablecodec.Unstamped
	case config.BackendDatastore:
		return dscodec.Unstamped
	}
	return nil // the bytes
}

// SharedRetryWait is how long a single-operation call retries a conflict
// in coherence mode shared (txn.Options.RetryWait).
const SharedRetryWait = 2 * time.Second

// TxnOptions maps the txn and wal sections of cfg onto the engine's
// options. Write-through needs no WAL (the store has every commit before it
// is acknowledged), and cache policy "none" keeps nothing dirty, so it
// always writes through whatever wal.write_mode says.
func TxnOptions(cfg config.Config, log *slog.Logger) txn.Options {
	o := txn.Options{
		Phantom:            cfg.Txn.Phantom,
		PCLPartitionSize:   txn.PartitionSize(cfg.Txn.PCLPartitions),
		IdleTimeout:        cfg.Txn.IdleTimeout,
		LockWait:           cfg.Txn.LockWait,
		SnapshotBytes:      int64(cfg.Txn.SnapshotBytes),
		Mode:               txn.WriteBack,
		CheckpointInterval: cfg.WAL.CheckpointInterval,
		CheckpointBytes:    int64(cfg.WAL.CheckpointBytes),
		Logger:             log.With("component", "txn"),
	}
	if cfg.Txn.LockWait == 0 {
		o.LockWait = -1 // the engine's NO_WAIT (its 0 is the default)
	}
	if cfg.CoherenceMode() == txn.Shared {
		// Other writers share the store: every commit goes to it,
		// conditioned on what the transaction read there.
		o.Mode, o.Coherence = txn.WriteThrough, txn.Shared
		// A lock is held across the store write: a competing call on
		// this node waits it out rather than fail.
		o.RetryWait = SharedRetryWait
		return o
	}
	if cfg.WAL.WriteMode == txn.WriteThrough || cfg.Cache.Policy == cache.PolicyNone {
		o.Mode = txn.WriteThrough
		return o
	}
	if cfg.WAL.Location == enum.WALBackend {
		return o // the keyspaces' logs are in the backend (openLogs)
	}
	if cfg.InMemory() {
		// No log: the store is memory too, so a commit lives in memory
		// however it is logged; it is acknowledged once it is in the
		// buffer and written back to the in-memory store later.
		return o
	}
	o.EarlyRelease = cfg.Txn.EarlyRelease
	o.WAL = &wal.Options{
		Dir:           cfg.WALDir(),
		SegmentSize:   int64(cfg.WAL.SegmentSize),
		NoGroupCommit: !cfg.WAL.GroupCommit,
		Logger:        log, // the WAL tags its own lines
	}
	return o
}

// ErrResetRefused is returned by Reset for a backend it must not empty.
var ErrResetRefused = errors.New("node: reset refused")

// Reset empties the buffer and the store (txn.Engine.Reset), for the
// in-memory embedded store only: a test suite's reset between tests. It
// refuses a cloud backend (nemo does not own its data, and other clients
// may share it) and the embedded store on disk (its WAL would replay what
// a reset forgot; delete its data directory while nemo is stopped
// instead).
func (n *Node) Reset(ctx context.Context) error {
	s, ok := n.Backend.(*embedded.Store)
	switch {
	case !ok:
		return fmt.Errorf("%w: the backend is a cloud store, whose data nemo does not own; POST /reset empties only the in-memory embedded store (backend.embedded.in_memory)", ErrResetRefused)
	case !s.InMemory():
		return fmt.Errorf("%w: the embedded store is on disk, and its WAL would replay what a reset forgot; POST /reset empties only the in-memory embedded store (--in-memory, backend.embedded.in_memory); to empty this one, stop nemo and delete its data directory", ErrResetRefused)
	}
	return n.Engine.Reset(ctx, s.Reset)
}

// Drain shuts the node down cleanly: the engine stops admitting
// transactions, lets live ones finish until ctx ends, flushes every dirty
// record, checkpoints and closes the WAL; then the buffer's workers stop and
// the store is closed. The store is closed even when the drain fails (the
// WAL still holds what did not reach it). Drain and Close are idempotent and
// share one outcome: whichever runs first decides it.
func (n *Node) Drain(ctx context.Context) error {
	if n.faults != nil {
		// A hung backend (backend.fault) must not outlast the drain's
		// deadline: calls with none (background write-back) hang too.
		defer context.AfterFunc(ctx, n.faults.Stop)()
	}
	n.once.Do(func() {
		var errs []error
		if n.stopRebalance != nil {
			n.stopRebalance() // no hand-over alongside the drain's
		}
		if err := n.Engine.Drain(ctx); err != nil {
			errs = append(errs, fmt.Errorf("node: engine drain: %w", err))
			if n.Leases != nil {
				n.Leases.Stop() // writes stay in the WAL: keep others out until the lease lapses
			}
		} else if n.Leases != nil {
			// Everything acknowledged is in the store: another nemo may
			// take the keyspaces at once.
			if err := n.Leases.Close(ctx); err != nil {
				n.log.Warn("releasing leases failed; they lapse after coherence.lease_ttl", "err", err)
			}
		}
		n.err = errors.Join(append(errs, n.stop()...)...)
	})
	return n.err
}

// Close stops the node without flushing: live transactions are aborted and
// dirty records stay in the WAL for the next start to replay. It is for
// failed startups and tests; a clean shutdown calls Drain.
func (n *Node) Close() error {
	n.once.Do(func() { n.err = errors.Join(n.stop()...) })
	return n.err
}

// PeerServer returns the server of the peer API (listen.peer) over this
// node's engine, nil unless coherence.mode is partitioned.
func (n *Node) PeerServer() *peer.Server {
	if n.peers == nil {
		return nil
	}
	return peer.NewServer(n.Engine, n.peers, n.peerSecret, n.log.With("component", "peer"))
}

func (n *Node) stop() []error {
	var errs []error
	if n.stopRebalance != nil {
		n.stopRebalance()
	}
	if n.faults != nil {
		n.faults.Stop() // release calls hung without a deadline, so the workers can stop
	}
	if n.Leases != nil {
		n.Leases.Stop()
	}
	n.health.close()
	if err := n.Engine.Close(); err != nil {
		errs = append(errs, fmt.Errorf("node: engine close: %w", err))
	}
	if err := n.Buffer.Close(); err != nil {
		errs = append(errs, fmt.Errorf("node: buffer close: %w", err))
	}
	if n.peers != nil {
		if err := n.peers.Close(); err != nil {
			errs = append(errs, fmt.Errorf("node: peer connections: %w", err))
		}
	}
	if err := n.closeStore(); err != nil {
		errs = append(errs, fmt.Errorf("node: store close: %w", err))
	}
	if err := n.conflicts.close(); err != nil {
		errs = append(errs, fmt.Errorf("node: conflicts file close: %w", err))
	}
	return errs
}
