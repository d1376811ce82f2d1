package node

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nemocache/nemo/adapters"
	azstore "github.com/nemocache/nemo/adapters/aztable"
	dsstore "github.com/nemocache/nemo/adapters/datastore"
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
	return backendLogs{opts: blog.Options{Store: store, Codec: codec, Logger: log.With("component", "blog")}, leases: leases, holder: id}, nil
}
