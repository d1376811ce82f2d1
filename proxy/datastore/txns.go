package datastore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/txn"
)

// session is one client transaction. Its mutex serializes the requests made
// on it, since a txn.Txn is used from one goroutine at a time.
type session struct {
	mu       sync.Mutex
	t        *txn.Txn
	readOnly bool
	// at is the read_time of a read-only transaction that reads a past
	// moment (txn.Engine.BeginAt); nil for one that reads the present.
	at      *timestamppb.Timestamp
	lastUse time.Time // guarded by registry.mu
	done    bool      // committed or rolled back; guarded by mu
	// once: the session of one read at a read_time, in no registry,
	// ended with its request (openRead).
	once bool
}

// readTime is the read_time a read in s answers with: s's past moment, or
// now.
func readTime(s *session) *timestamppb.Timestamp {
	if s != nil && s.at != nil {
		return s.at
	}
	return timestamppb.Now()
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

// --- sessions in requests ---

// readSession resolves read options: nil for a non-transactional read, the
// named transaction, or a new one (whose id is returned for the response).
func (f *Frontend) readSession(ro *datastorepb.ReadOptions) (*session, []byte, error) {
	switch c := ro.GetConsistencyType().(type) {
	case *datastorepb.ReadOptions_Transaction:
		s := f.txns.get(c.Transaction)
		if s == nil {
			return nil, nil, invalid(msgExpiredTxn)
		}
		return s, nil, nil
	case *datastorepb.ReadOptions_NewTransaction:
		id, s, err := f.begin(c.NewTransaction)
		return s, id, err
	case *datastorepb.ReadOptions_ReadTime:
		// A read at a read_time is a read-only transaction of its own,
		// reading that moment (or, over a store that keeps no past, the
		// latest state: see txn.Engine.BeginAt).
		t, err := f.beginAt(c.ReadTime)
		if err != nil {
			return nil, nil, err
		}
		return &session{t: t, readOnly: true, at: c.ReadTime, once: true}, nil, nil
	}
	// Eventual and strong reads are served from the latest committed state
	// (strong).
	return nil, nil, nil
}

// beginAt begins a read-only transaction reading the moment rt, once the
// service would take rt.
func (f *Frontend) beginAt(rt *timestamppb.Timestamp) (*txn.Txn, error) {
	if err := checkReadTime(rt); err != nil {
		return nil, err
	}
	t, err := f.engine.BeginAt(rt.AsTime())
	if err != nil {
		return nil, toStatus(err)
	}
	return t, nil
}

// openRead is readSession plus the session's lock for the request: done
// releases it (a no-op outside a transaction).
func (f *Frontend) openRead(ro *datastorepb.ReadOptions) (s *session, newID []byte, done func(), err error) {
	s, newID, err = f.readSession(ro)
	if err != nil {
		return nil, nil, nil, err
	}
	if s == nil {
		return nil, newID, func() {}, nil
	}
	if s.once {
		return s, nil, s.t.Abort, nil
	}
	if err := s.lock(); err != nil {
		return nil, nil, nil, err
	}
	return s, newID, s.mu.Unlock, nil
}

func (f *Frontend) begin(opts *datastorepb.TransactionOptions) ([]byte, *session, error) {
	ro := opts.GetReadOnly() != nil
	rt := opts.GetReadOnly().GetReadTime()
	var t *txn.Txn
	var err error
	if rt != nil {
		t, err = f.beginAt(rt)
	} else if t, err = f.engine.Begin(ro); err != nil {
		err = toStatus(err)
	}
	if err != nil {
		return nil, nil, err
	}
	id, s := f.txns.add(t, ro)
	s.at = rt
	return id, s, nil
}

// msgBadTimestamp is the service's answer for a timestamp field (a read
// time, a mutation's update time) that is no valid protobuf timestamp.
const msgBadTimestamp = "invalid timestamp, please check https://developers.google.com/protocol-buffers/docs/reference/java/com/google/protobuf/util/Timestamps.html#isValid-long-int- for the timestamp format."

// checkReadTime refuses a read time the service refuses: no valid
// timestamp, or one before the epoch.
func checkReadTime(ts *timestamppb.Timestamp) error {
	if !ts.IsValid() {
		return invalid(msgBadTimestamp)
	}
	if ts.GetSeconds() < 0 {
		return invalid("Only timestamps past epoch are supported.")
	}
	return nil
}

// lock takes the session for one request; it fails for a finished one.
func (s *session) lock() error {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return invalid(msgExpiredTxn)
	}
	return nil
}

// read reads key in the session or, with no session, from the latest
// committed state. A read-write transaction takes a shared lock, upgraded
// when it writes the key at commit (two transactions reading one entity
// both go on; if both then write it, one of them is the deadlock victim
// and gets ABORTED, as in the service); a read-only one reads its snapshot
// and locks nothing.
func (f *Frontend) read(ctx context.Context, s *session, ks adapters.Keyspace, key []byte) ([]byte, bool, error) {
	if s == nil {
		return f.engine.Get(ctx, ks, key, txn.ReadLatest)
	}
	return s.t.Get(ctx, ks, key)
}

// --- transaction RPCs ---

// BeginTransaction implements datastorepb.DatastoreServer.
func (f *Frontend) BeginTransaction(ctx context.Context, req *datastorepb.BeginTransactionRequest) (*datastorepb.BeginTransactionResponse, error) {
	if err := f.checkProject(req.GetProjectId()); err != nil {
		return nil, err
	}
	id, _, err := f.begin(req.GetTransactionOptions())
	if err != nil {
		return nil, err
	}
	return &datastorepb.BeginTransactionResponse{Transaction: id}, nil
}

// Rollback implements datastorepb.DatastoreServer. Rolling back a
// transaction that already ended (a failed commit) succeeds.
func (f *Frontend) Rollback(ctx context.Context, req *datastorepb.RollbackRequest) (*datastorepb.RollbackResponse, error) {
	if err := f.checkProject(req.GetProjectId()); err != nil {
		return nil, err
	}
	s := f.txns.get(req.GetTransaction())
	if s == nil {
		return nil, invalid(msgExpiredTxn)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		// Committed (or rolled back) already: the service refuses it.
		return nil, invalid(msgExpiredTxn)
	}
	s.t.Abort()
	s.done = true
	return &datastorepb.RollbackResponse{}, nil
}
