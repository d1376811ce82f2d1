package lease

import (
	"context"
	"time"

	"github.com/nemocache/nemo/adapters"
)

// Owner is who holds the lease of a keyspace, as Manager.Owner found it.
type Owner struct {
	// Self: this node holds a valid lease on the keyspace (Holder, Addr
	// and Epoch are its own).
	Self bool
	// Holder, Addr and Epoch are the lease record's: Holder "" when it
	// was released (or is absent), Addr "" when the holder has no peer
	// listener (or wrote the record before nemo kept addresses).
	Holder, Addr string
	Epoch        uint64
	// Live: the lease is in force: this node's valid lease, or another
	// node's whose record's version has not stayed unchanged for a whole
	// TTL on this node's clock (the rule Hold takes leases over by). A
	// released or absent record is not live, and neither is one naming
	// this node that it does not hold (left by its previous run: Hold
	// takes it back at once, keeping its epoch).
	Live bool
}

// Owner says who holds the lease of ks now, and acquires nothing. This
// node's own valid lease is answered without a store call; an error
// wrapping ErrLost says that this node holds the lease but its renewal has
// failed for too long (it may neither act as the owner nor send a peer to
// another). Otherwise Owner reads the lease record, at most once per TTL/15
// for ks (and no later than when the holder's lease may be taken over),
// answering from memory in between, as Hold does after a refusal; Hold and
// Owner share that memory, and a caller whose answer proved stale (the
// peer it named answered that it does not own ks) calls Invalidate, so a
// stale route costs one read. Owner returns ErrClosed after Close, an
// adapters.ErrInvalid for a keyspace the codec has no lease for, or the
// store's error.
func (m *Manager) Owner(ctx context.Context, ks adapters.Keyspace) (Owner, error) {
	l, o, ok, err := m.ownerFromMemory(ks)
	if ok || err != nil {
		return o, err
	}
	l.op.Lock()
	defer l.op.Unlock()
	// Another caller's read or acquire may have answered meanwhile.
	if _, o, ok, err := m.ownerFromMemory(ks); ok || err != nil {
		return o, err
	}
	cur, ver, exists, err := m.read(ctx, l)
	if err != nil {
		return Owner{}, err
	}
	now := m.opts.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.noteLocked(l, readBack{rec: cur, version: ver, exists: exists}, now), nil
}

// ownerFromMemory answers Owner without a store call if it can (ok): this
// node's own lease, or what it read of the record less than retryEvery
// ago. It returns the lease either way.
func (m *Manager) ownerFromMemory(ks adapters.Keyspace) (l *lease, o Owner, ok bool, err error) {
	now := m.opts.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err = m.leaseLocked(ks)
	switch {
	case err != nil:
		return nil, Owner{}, false, err
	case l.held:
		if err := m.validLocked(l, now); err != nil {
			return l, Owner{}, false, err
		}
		return l, Owner{Self: true, Holder: m.opts.Holder, Addr: m.opts.Addr, Epoch: l.epoch, Live: true}, true, nil
	case l.known && now.Before(l.retryAt):
		return l, l.owner, true, nil
	}
	return l, Owner{}, false, nil
}

// noteLocked remembers cur, l's record as this node (not holding it) read
// it at now, until retryEvery later, or until the holder's lease may be
// taken over if that is sooner; a live lease of another node is also
// Hold's refusal meanwhile. It returns the owner cur names. m.mu is held.
func (m *Manager) noteLocked(l *lease, cur readBack, now time.Time) Owner {
	o := Owner{Holder: cur.rec.Holder, Addr: cur.rec.Addr, Epoch: cur.rec.Epoch}
	l.lastErr, l.retryAt = nil, now.Add(m.retryEvery)
	if cur.exists && o.Holder != "" && o.Holder != m.opts.Holder {
		o.Live = m.watchLocked(l, cur.version, now) < m.ttl
	}
	if o.Live {
		l.lastErr = &HeldError{Keyspace: l.ks, Holder: o.Holder, Epoch: o.Epoch, Expiry: cur.rec.Expiry, Addr: o.Addr}
		if until := l.seenAt.Add(m.ttl); until.Before(l.retryAt) {
			l.retryAt = until
		}
	}
	l.owner, l.known = o, true
	return o
}

// Invalidate forgets what this node last read of the lease record of ks,
// so that the next Owner or Hold reads it again: for a caller whose answer
// proved stale (the peer it named answered that it does not own ks). It
// changes nothing about a lease this node holds.
func (m *Manager) Invalidate(ks adapters.Keyspace) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.leases[ks]; l != nil {
		l.known, l.lastErr = false, nil
	}
}
