package datastore

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"

	"github.com/nemocache/nemo/txn"
)

// session is one client transaction. Its mutex serializes the requests made
// on it, since a txn.Txn is used from one goroutine at a time.
type session struct {
	mu       sync.Mutex
	t        *txn.Txn
	readOnly bool
	lastUse  time.Time // guarded by registry.mu
	done     bool      // committed or rolled back; guarded by mu
}

// keepFinished is how long a finished or abandoned transaction's id is
// remembered. A client rolls back after a failed commit and must not be
// told the id is unknown (the Go client stops retrying when rollback
// fails).
const keepFinished = 10 * time.Minute

// registry maps transaction ids (the engine's id plus 8 random bytes, so ids
// cannot be guessed) to sessions.
type registry struct {
	mu        sync.Mutex
	m         map[string]*session
	lastSweep time.Time
}

func newRegistry() *registry { return &registry{m: map[string]*session{}, lastSweep: time.Now()} }

func (r *registry) add(t *txn.Txn, readOnly bool) ([]byte, *session) {
	id := binary.BigEndian.AppendUint64(nil, t.ID())
	var salt [8]byte
	_, _ = rand.Read(salt[:]) // crypto/rand.Read never fails
	id = append(id, salt[:]...)
	s := &session{t: t, readOnly: readOnly}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	s.lastUse = now
	r.m[string(id)] = s
	if now.Sub(r.lastSweep) > time.Minute {
		r.lastSweep = now
		for k, old := range r.m {
			if now.Sub(old.lastUse) > keepFinished {
				old.t.Abort() // no-op when finished
				delete(r.m, k)
			}
		}
	}
	return id, s
}

// get returns the session for id, or nil.
func (r *registry) get(id []byte) *session {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.m[string(id)]
	if s != nil {
		s.lastUse = time.Now()
	}
	return s
}

func (r *registry) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, s := range r.m {
		s.t.Abort()
		delete(r.m, k)
	}
}
