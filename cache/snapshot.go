package cache

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nemocache/nemo/adapters"
)

// Snapshot is a consistent snapshot of the store, read past the buffer:
// every read sees the store as of one moment (adapters.SnapshotReader).
// Coherence mode shared reads read-only transactions from one, since what
// the buffer holds may be stale, and not all equally. Reads pass the
// keyspace gate (as every store call does) and fail with ErrStore when
// the store does (ErrStoreAborted when it aborted the snapshot for
// contention); a read the store cannot make in the snapshot fails with an
// error matching errors.ErrUnsupported.
type Snapshot struct {
	s    adapters.Snapshot
	gate *keyspaceGate
}

// Snapshot opens a snapshot of the store, or fails with an error matching
// errors.ErrUnsupported when the store has none. Close it when done.
func (b *Buffer) Snapshot() (*Snapshot, error) {
	sr, ok := b.rawStore.(adapters.SnapshotReader)
	if !ok {
		return nil, fmt.Errorf("cache: the store reads no snapshots: %w", errors.ErrUnsupported)
	}
	return b.snapshot(sr.Snapshot())
}

// SnapshotAt opens a snapshot of the store as it was at at (Datastore's
// read_time), or fails with an error matching errors.ErrUnsupported when
// the store reads no past moments. Nothing it reads enters the buffer.
func (b *Buffer) SnapshotAt(at time.Time) (*Snapshot, error) {
	sr, ok := b.rawStore.(adapters.SnapshotAtReader)
	if !ok {
		return nil, fmt.Errorf("cache: the store reads no past moments: %w", errors.ErrUnsupported)
	}
	return b.snapshot(sr.SnapshotAt(at))
}

func (b *Buffer) snapshot(s adapters.Snapshot, err error) (*Snapshot, error) {
	if err != nil {
		return nil, err
	}
	return &Snapshot{s: s, gate: b.store.(gatedStore).gate}, nil
}

// Get reads keys as of the snapshot: each one's value (nil: absent) and
// base (fetchedBase), in the order of keys.
func (s *Snapshot) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([][]byte, []adapters.Expect, error) {
	if err := s.gate.settle(ctx); err != nil {
		return nil, nil, err
	}
	recs, err := s.s.Get(ctx, ks, keys)
	if err == nil && len(recs) != len(keys) {
		err = errShortReply
	}
	if err != nil {
		return nil, nil, snapshotErr("snapshot get", err)
	}
	vals := make([][]byte, len(recs))
	bases := make([]adapters.Expect, len(recs))
	for i, r := range recs {
		vals[i], bases[i] = r.Value, fetchedBase(r)
	}
	return vals, bases, nil
}

// Scan reads the records in [start, end) (end nil: unbounded) as of the
// snapshot, with their versions, at most limit when limit > 0; next, when
// not nil, is where to continue (as Buffer.Scan).
func (s *Snapshot) Scan(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, []byte, error) {
	if err := s.gate.settle(ctx); err != nil {
		return nil, nil, err
	}
	recs, more, err := s.s.GetRange(ctx, ks, start, end, limit)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return nil, nil, err
	case err != nil:
		return nil, nil, snapshotErr("snapshot get_range", err)
	case more && len(recs) > 0:
		return recs, adapters.Successor(recs[len(recs)-1].Key), nil
	}
	return recs, nil, nil
}

// snapshotErr is a failed snapshot read's error: the store aborting the
// snapshot for contention is ErrStoreAborted (a conflict: the transaction
// is retried), anything else a store failure.
func snapshotErr(op string, err error) error {
	if errors.Is(err, adapters.ErrAborted) {
		return fmt.Errorf("%w: %w", ErrStoreAborted, err)
	}
	return storeErr(op, err)
}

// Close releases the snapshot.
func (s *Snapshot) Close() { s.s.Close() }
