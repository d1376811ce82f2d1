package cache

import (
	"context"

	"github.com/nemocache/nemo/adapters"
)

// Upcalls are what the buffer asks of the layer above it, the engine
// (package txn), at write-back: three small interfaces the engine passes
// down with SetUpcalls, so that every call from the buffer back up is
// named here and the imports still run one way (txn imports cache). Each
// is optional; a nil one is not asked.
type Upcalls struct {
	// Gate is asked before write-back writes a keyspace's records.
	Gate WriteGate
	// Durable is waited on by write-back after it has read the dirty
	// values it is about to write and before it writes them.
	Durable DurableBarrier
	// Log is handed what the store confirmed to a write-back, before the
	// records are marked clean.
	Log WriteBackLog
}

// WriteGate holds back write-back of keyspaces this node may not write.
// Coherence exclusive passes the lease: a node that does not hold a
// keyspace's lease (a restarted holder whose lease passed to another node)
// never writes the store; its acknowledged writes wait in the WAL until it
// holds the lease again, and are then written back conditionally, losing
// (recorded) to anything newer.
type WriteGate interface {
	// Hold returns nil if this node may write ks now. An error stops
	// that write-back: the records stay dirty and are retried later, and
	// Flush reports the error.
	Hold(ctx context.Context, ks adapters.Keyspace) error
}

// DurableBarrier is passed by a commit log that applies commits to the
// buffer before they are durable (txn's early lock release).
type DurableBarrier interface {
	// WaitDurable returns once every commit applied to the buffer so far
	// is durable, so the store never holds a write a crash could take
	// back from the log. An error holds the write-back back: the records
	// stay dirty and are retried.
	WaitDurable(ctx context.Context) error
}

// WriteBackLog records what write-back wrote. The engine appends it to the
// commit log without waiting for it to be durable, so that after a crash
// replay conditions each record on the version the store returned last
// (ReplayWritten) instead of an older base logged with its write: fewer
// refusals to sort out after a restart. Nothing depends on the record
// reaching the disk: a refusal caused by a base it would have renewed
// finds one of the buffer's own writes in the store (keyspace.sent) and is
// rebased.
type WriteBackLog interface {
	LogWriteBack(ks adapters.Keyspace, written []WrittenBack)
}

// SetUpcalls installs what write-back asks of the engine, replacing what
// was set before. Set them before the buffer holds dirty records that
// need them (the engine does so in txn.New, while it holds write-back for
// the replay: HoldWriteBack).
func (b *Buffer) SetUpcalls(u Upcalls) { b.up.Store(&u) }
