package node

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nemocache/nemo/adapters"
	azstore "github.com/nemocache/nemo/adapters/aztable"
	dsstore "github.com/nemocache/nemo/adapters/datastore"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/enum"
	"github.com/nemocache/nemo/txn"
	"github.com/nemocache/nemo/txn/blog"
)

// logCodecs says where each backend keeps the commit logs of
// wal.location backend: its adapter's codec, beside the leases.
var logCodecs = map[config.BackendType]blog.Codec{
	config.BackendAzTable:   azstore.LogCodec(),
	config.BackendDatastore: dsstore.LogCodec(),
}

// backendLogs are the engine's keyspace logs (txn.KeyspaceLogs) over
// txn/blog: each keyspace's log, fenced at the epoch of this node's lease.
type backendLogs struct {
	opts   blog.Options
	leases *leaseHolder
	holder string
}

var _ txn.KeyspaceLogs = backendLogs{}

func (b backendLogs) Epoch(ks adapters.Keyspace) uint64 { return b.leases.m.Epoch(ks) }

func (b backendLogs) Open(ctx context.Context, ks adapters.Keyspace, epoch uint64) (txn.KeyspaceLog, []txn.LogEntry, error) {
	if b.opts.Codec.Keyspace(ks) == "" || epoch == 0 {
		return nil, nil, nil // no lease, no log: a catalog or a reserved table
	}
	l, entries, err := blog.Open(ctx, b.opts, ks, epoch, b.holder)
	if err != nil {
		return nil, nil, err
	}
	out := make([]txn.LogEntry, len(entries))
	for i, en := range entries {
		out[i] = txn.LogEntry{Seq: en.Seq, Data: en.Data}
	}
	return l, out, nil
}

// openLogs returns the engine's keyspace logs when cfg keeps them in the
// backend (wal.location backend), or nil.
func openLogs(store adapters.Store, cfg config.Config, leases *leaseHolder, log *slog.Logger) (txn.KeyspaceLogs, error) {
	if cfg.WAL.Location != enum.WALBackend {
		return nil, nil
	}
	codec, ok := logCodecs[cfg.Backend.Type]
	if !ok || leases == nil {
		return nil, fmt.Errorf("node: wal.location backend needs leases in front of aztable or datastore (coherence exclusive)")
	}
	id, err := NodeID(cfg)
	if err != nil {
		return nil, err
	}
	log.Info("commit logs kept in the backend, one per table or namespace beside its lease", "backend", cfg.Backend.Type)
	o := blog.Options{Store: store, Codec: codec, Logger: log.With("component", "blog"), Counters: blog.NewCounters()}
	return backendLogs{opts: o, leases: leases, holder: id}, nil
}

// recoverMargin is what Recover waits past two lease TTLs before it
// leaves a log to a holder that keeps its lease: a renewal retried, a
// takeover attempt's own round trip.
const recoverMargin = 5 * time.Second

// recoverLogs starts the recovery of the logs in the backend that hold
// entries (their last holders may be gone: a node killed with its disk):
// the engine takes their leases once free, replays and writes them back,
// whether or not a client touches those tables; a drain waits for them.
// It reads the logs of cfg's account (Azure) or database (Datastore).
func recoverLogs(ctx context.Context, logs txn.KeyspaceLogs, eng *txn.Engine, cfg config.Config, log *slog.Logger) error {
	b, ok := logs.(backendLogs)
	if !ok {
		return nil
	}
	lks := adapters.Keyspace(azstore.LogTable)
	if cfg.Backend.Type == config.BackendDatastore {
		lks = b.opts.Codec.Keyspace(dscodec.Partition{Project: cfg.Backend.Datastore.Project, Database: cfg.Backend.Datastore.Database}.Keyspace())
	}
	kss, err := blog.Pending(ctx, b.opts, lks)
	if err != nil {
		return fmt.Errorf("node: list the commit logs kept in the backend: %w", err)
	}
	if len(kss) > 0 {
		log.Info("commit logs in the backend hold acknowledged writes not yet written back: recovering them", "keyspaces", kss)
		// Past two TTLs a dead holder's lease has passed: one still held
		// is a live node's.
		eng.Recover(kss, 2*cfg.Coherence.LeaseTTL+recoverMargin)
	}
	return nil
}

// LogStats returns the counters of the commit logs kept in the backend
// (every keyspace's, from the start), or false when the node keeps none
// there (wal.location local).
func (n *Node) LogStats() (blog.Stats, bool) {
	if n.logs == nil {
		return blog.Stats{}, false
	}
	return n.logs.Stats(), true
}
