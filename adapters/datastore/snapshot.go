package datastore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

var _ adapters.SnapshotReader = (*Store)(nil)

// Snapshot implements adapters.SnapshotReader with the service's read-only
// transactions: the first read of a database (project and database; its
// namespaces share it) begins one, and every read of that database through
// the snapshot is made in it, so they all see the database as of one
// moment. Reads of two databases are two snapshots. Lookups are read in
// the transaction on every backend. A key range is read there where the
// backend allows it (Firestore in Datastore mode); legacy Datastore (and
// its emulator) refuses any query but an ancestor query in a transaction,
// so there, after its first refusal, GetRange fails with
// errors.ErrUnsupported; and its read-only transactions are not
// multi-version: a read of an entity written since the transaction began
// is ABORTED (as any reader of the emulator's is), which Get returns as
// adapters.ErrAborted. Close rolls the transactions back in the
// background. (A Lookup naming new_transaction would save the
// BeginTransaction call, but the Firestore emulator then takes locks, as
// for a read-write transaction, and holds them until it expires.)
func (s *Store) Snapshot() (adapters.Snapshot, error) {
	return &snapshot{s: s, txs: map[dbID][]byte{}}, nil
}

var _ adapters.SnapshotAtReader = (*Store)(nil)

// SnapshotAt implements adapters.SnapshotAtReader: a Snapshot whose
// read-only transactions read at at (their read_time), sent as given. The
// service refuses a moment it does not keep, or one in the future, or
// finer than a microsecond, when the snapshot first reads; the legacy
// emulator reads its current state whatever the read_time.
func (s *Store) SnapshotAt(at time.Time) (adapters.Snapshot, error) {
	return &snapshot{s: s, txs: map[dbID][]byte{}, at: timestamppb.New(at)}, nil
}

type dbID struct{ project, database string }

type snapshot struct {
	s      *Store
	at     *timestamppb.Timestamp // the read_time; nil: now
	mu     sync.Mutex
	txs    map[dbID][]byte // read-only transaction per database
	closed bool
}

// tx returns p's database's transaction, beginning it on first use. ctx
// must be routed.
func (sn *snapshot) tx(ctx context.Context, p dscodec.Partition) ([]byte, error) {
	id := dbID{p.Project, p.Database}
	sn.mu.Lock()
	defer sn.mu.Unlock()
	if sn.closed {
		return nil, fmt.Errorf("datastore: snapshot read after Close: %w", adapters.ErrClosed)
	}
	if tx := sn.txs[id]; tx != nil {
		return tx, nil
	}
	// Begun under mu: a second reader of the database waits for this
	// one's transaction rather than begin another (another moment).
	tx, err := sn.s.begin(ctx, p, &datastorepb.TransactionOptions{Mode: &datastorepb.TransactionOptions_ReadOnly_{ReadOnly: &datastorepb.TransactionOptions_ReadOnly{ReadTime: sn.at}}})
	if err != nil {
		return nil, err
	}
	sn.txs[id] = tx
	return tx, nil
}

// Get reads keys as of the snapshot (a Lookup in its transaction).
func (sn *snapshot) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	p, err := partition(ks)
	if err != nil {
		return nil, err
	}
	ctx = routed(ctx, p)
	tx, err := sn.tx(ctx, p)
	if err != nil {
		return nil, err
	}
	found, err := sn.s.lookupIn(ctx, p, keys, tx)
	if status.Code(err) == codes.Aborted {
		return nil, fmt.Errorf("datastore: snapshot read: %w: %w", adapters.ErrAborted, err)
	}
	if err != nil {
		return nil, err
	}
	return inOrder(keys, found), nil
}

// errRangeInSnapshot: the backend reads no key range in a transaction.
var errRangeInSnapshot = fmt.Errorf("datastore: the backend allows no key-range query in a read-only transaction (legacy Datastore: ancestor queries only): %w", errors.ErrUnsupported)

// GetRange reads [start, end) as of the snapshot, where the backend allows
// a key-range query in a read-only transaction (see Snapshot).
func (sn *snapshot) GetRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	if sn.s.snapRangesOutside.Load() {
		return nil, false, errRangeInSnapshot
	}
	p, err := partition(ks)
	if err != nil {
		return nil, false, err
	}
	ctx = routed(ctx, p)
	tx, err := sn.tx(ctx, p)
	if err != nil {
		return nil, false, err
	}
	recs, more, err := sn.s.getRange(ctx, p, start, end, limit, tx)
	if refusedInTxn(err) {
		if !sn.s.snapRangesOutside.Swap(true) {
			code, msg, _ := adapters.ServiceStatusOf(err)
			sn.s.opts.Logger.Info("datastore adapter: the backend refuses key-range queries inside read-only transactions; read-only transactions that read ranges are checked at commit instead",
				"status", code, "message", msg)
		}
		return nil, false, errRangeInSnapshot
	}
	return recs, more, err
}

// Close rolls the snapshot's transactions back, in the background.
func (sn *snapshot) Close() {
	sn.mu.Lock()
	txs := sn.txs
	sn.txs, sn.closed = nil, true
	sn.mu.Unlock()
	for id, tx := range txs {
		p := dscodec.Partition{Project: id.project, Database: id.database}
		go sn.s.rollback(routed(context.Background(), p), p, tx)
	}
}
