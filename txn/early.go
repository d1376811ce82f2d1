package txn

import (
	"sync"
	"sync/atomic"

	"github.com/nemocache/nemo/adapters"
)

// Early lock release (Options.EarlyRelease). A commit's locks are released
// once its records have their place in the log (wal.Log.AppendEarly: LSNs
// assigned in a batch the writer is about to write) and its writes are in
// the buffer, instead of after the fsync; the commit is acknowledged only
// after the fsync. What others may see in between is tracked here: every
// key such a commit wrote stays in pendingWrites, with the commit's LSN,
// until the log is durable up to it. A transaction that reads a pending key
// (or a range holding one) depends on that commit, and its Commit returns
// only once the log is durable up to the highest LSN it depends on; a read
// outside a read-write transaction (ReadLatest, a read-only transaction's
// read) waits before it returns. One sequential log with LSNs in commit
// order makes "durable up to my dependency" a single number (the wait is
// awaitDurable, the commit pipeline's durable stage, commit.go). A writer
// that overwrites a pending write is sequenced after it, so its own fsync
// covers its dependency.

// pendingWrites are the keys written by commits whose locks are released
// but whose log records are not yet known durable, with the highest such
// commit's LSN per key.
type pendingWrites struct {
	n  atomic.Int64 // keys held, so readers skip the mutex when there are none
	mu sync.Mutex
	ks map[adapters.Keyspace]map[string]uint64
}

// add records changes' keys as written by the commit at lsn (before they
// are installed, so a reader that sees them finds them here).
func (p *pendingWrites) add(changes []Change, lsn uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ks == nil {
		p.ks = map[adapters.Keyspace]map[string]uint64{}
	}
	for _, c := range changes {
		if c.Op != ChangePut && c.Op != ChangeDelete {
			continue
		}
		m := p.ks[c.Keyspace]
		if m == nil {
			m = map[string]uint64{}
			p.ks[c.Keyspace] = m
		}
		if _, ok := m[string(c.Key)]; !ok {
			p.n.Add(1)
		}
		m[string(c.Key)] = max(m[string(c.Key)], lsn)
	}
}

// done forgets the keys of the commit at lsn, now durable; a key a later
// pending commit wrote again stays, with that commit's LSN.
func (p *pendingWrites) done(changes []Change, lsn uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range changes {
		m := p.ks[c.Keyspace]
		if l, ok := m[string(c.Key)]; ok && l <= lsn {
			delete(m, string(c.Key))
			p.n.Add(-1)
			if len(m) == 0 {
				delete(p.ks, c.Keyspace)
			}
		}
	}
}

// key returns the LSN a read of key depends on (0: none).
func (p *pendingWrites) key(ks adapters.Keyspace, key []byte) uint64 {
	if p.n.Load() == 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ks[ks][string(key)]
}

// span returns the LSN a read of [start, stop) depends on (stop nil:
// unbounded): the highest among the pending keys there, whether the read
// returned them or found them deleted.
func (p *pendingWrites) span(ks adapters.Keyspace, start, stop []byte) uint64 {
	if p.n.Load() == 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var lsn uint64
	for k, l := range p.ks[ks] {
		if l > lsn && k >= string(start) && (stop == nil || k < string(stop)) {
			lsn = l
		}
	}
	return lsn
}

// early reports whether this engine releases commit locks early.
func (e *Engine) early() bool { return e.elog != nil }

// dependKey and dependSpan return what a read depends on (0: nothing, or
// no early release).
func (e *Engine) dependKey(ks adapters.Keyspace, key []byte) uint64 {
	if e.elog == nil {
		return 0
	}
	return e.pend.key(ks, key)
}

func (e *Engine) dependSpan(ks adapters.Keyspace, start, stop []byte) uint64 {
	if e.elog == nil {
		return 0
	}
	return e.pend.span(ks, start, stop)
}
