package datastore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/txn"
)

// Commit implements datastorepb.DatastoreServer.
func (f *Frontend) Commit(ctx context.Context, req *datastorepb.CommitRequest) (*datastorepb.CommitResponse, error) {
	if err := f.checkProject(req.GetProjectId()); err != nil {
		return nil, err
	}
	if len(req.GetMutations()) > maxMutations {
		return nil, invalid("cannot write more than %d entities in a single call", maxMutations)
	}
	muts, err := f.prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	var results []*datastorepb.MutationResult
	if req.GetMode() == datastorepb.CommitRequest_NON_TRANSACTIONAL {
		if req.GetTransactionSelector() != nil {
			return nil, invalid("A non-transactional commit must not name a transaction.")
		}
		seen := map[string]bool{}
		for _, m := range muts {
			id := string(m.ks) + "\x00" + string(m.enc)
			if seen[id] {
				return nil, invalid("A non-transactional commit may not contain multiple mutations affecting the same entity.")
			}
			seen[id] = true
		}
		// Not atomic, as the service: the mutations before one that is
		// refused (an insert of an existing entity, an update of a
		// missing one) are applied, the rest are not, and the call fails
		// with the refusal.
		var last *txn.Txn
		var refused *refusal
		err := f.engine.Run(ctx, false, func(t *txn.Txn) error {
			var err error
			t.AcceptParts() // as the service: not atomic
			last, refused = t, nil
			results, err = f.apply(ctx, t, req, muts)
			if errors.As(err, &refused) {
				return nil // commit what came before it
			}
			return err
		})
		if err != nil {
			return nil, toStatus(err)
		}
		if refused != nil {
			return nil, refused.err
		}
		f.storedVersions(last, muts, results)
		return &datastorepb.CommitResponse{MutationResults: results, IndexUpdates: indexUpdates(muts, results), CommitTime: timestamppb.Now()}, nil
	}
	if err := checkRepeats(muts); err != nil {
		return nil, err
	}
	var s *session
	switch sel := req.GetTransactionSelector().(type) {
	case *datastorepb.CommitRequest_Transaction:
		if s = f.txns.get(sel.Transaction); s == nil {
			return nil, invalid(msgExpiredTxn)
		}
	case *datastorepb.CommitRequest_SingleUseTransaction:
		if _, s, err = f.begin(sel.SingleUseTransaction); err != nil {
			return nil, err
		}
	default:
		// As the service: a transactional (or unspecified) commit must
		// name a transaction or ask for a single-use one.
		return nil, invalid("transactional commit requires a transaction")
	}
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if s.readOnly && len(muts) > 0 {
		s.done = true
		s.t.Abort()
		return nil, invalid(msgReadOnlyTxn)
	}
	results, err = f.apply(ctx, s.t, req, muts)
	if err == nil {
		err = s.t.Commit(ctx)
	}
	if err != nil {
		// Not done: a client rolls back after a failed commit (the Go
		// client retries only once that rollback succeeds), and the
		// transaction, aborted, refuses anything else.
		s.t.Abort()
		return nil, toStatus(err)
	}
	s.done = true
	f.storedVersions(s.t, muts, results)
	return &datastorepb.CommitResponse{MutationResults: results, IndexUpdates: indexUpdates(muts, results), CommitTime: timestamppb.Now()}, nil
}

// checkRepeats refuses, as the service does (the Firestore emulator; the
// legacy one applies them in order), a transactional commit in which a
// mutation of an entity cannot follow the one before it of the same
// entity: an insert after an insert, update or upsert, an update after a
// delete. Other sequences apply in order.
func checkRepeats(muts []*mutation) error {
	last := make(map[string]string, len(muts))
	for _, mu := range muts {
		id := string(mu.ks) + "\x00" + string(mu.enc)
		op := opName(mu.m)
		if prev, ok := last[id]; ok && (op == "insert" && prev != "delete" || op == "update" && prev == "delete") {
			return invalid("Cannot %s then %s an entity in the same request.", prev, op)
		}
		last[id] = op
	}
	return nil
}

// opName is a mutation's operation as the service's messages name it.
func opName(m *datastorepb.Mutation) string {
	switch m.GetOperation().(type) {
	case *datastorepb.Mutation_Insert:
		return "insert"
	case *datastorepb.Mutation_Update:
		return "update"
	case *datastorepb.Mutation_Upsert:
		return "upsert"
	}
	return "delete"
}

// storedVersions sets each written entity's result version to the one the
// commit installed: writing through to Datastore (coherence mode shared)
// that is the version the service gave the write, the one every replica
// and every other client sees; writing back it is the one apply chose, as
// results already say.
func (f *Frontend) storedVersions(t *txn.Txn, muts []*mutation, results []*datastorepb.MutationResult) {
	if !f.engine.WritesThrough() {
		return
	}
	type at struct {
		ks  adapters.Keyspace
		key string
	}
	vals := map[at][]byte{}
	for _, c := range t.Committed() {
		if c.Op == txn.ChangePut {
			vals[at{c.Keyspace, string(c.Key)}] = c.Value
		}
	}
	for i, mu := range muts {
		v, ok := vals[at{mu.ks, string(mu.enc)}]
		if !ok || results[i] == nil || results[i].ConflictDetected {
			continue
		}
		if ver, err := dscodec.ValueVersion(v); err == nil && ver > 0 {
			results[i].Version = ver
		}
	}
}

// mutation is a validated mutation with its key resolved.
type mutation struct {
	m         *datastorepb.Mutation
	key       *datastorepb.Key
	p         dscodec.Partition
	ks        adapters.Keyspace
	enc       []byte
	entity    *datastorepb.Entity // nil for delete
	mask      [][]string          // the property mask's paths, parsed
	allocated bool
}

// prepare validates the mutations and completes incomplete keys.
func (f *Frontend) prepare(ctx context.Context, req *datastorepb.CommitRequest) ([]*mutation, error) {
	out := make([]*mutation, len(req.GetMutations()))
	var toAlloc []int
	for i, m := range req.GetMutations() {
		mu, err := prepareOne(req, m)
		if err != nil {
			return nil, err
		}
		if incomplete(mu.key) {
			toAlloc = append(toAlloc, i)
		}
		out[i] = mu
	}
	if len(toAlloc) > 0 {
		keys := make([]*datastorepb.Key, len(toAlloc))
		for j, i := range toAlloc {
			keys[j] = out[i].key
		}
		done, err := f.alloc.AllocateIDs(ctx, req.GetProjectId(), req.GetDatabaseId(), keys)
		if err != nil {
			return nil, toStatus(err)
		}
		for j, i := range toAlloc {
			out[i].key = &datastorepb.Key{PartitionId: out[i].key.PartitionId, Path: done[j].GetPath()}
			out[i].allocated = true
		}
	}
	for _, mu := range out {
		enc, err := dscodec.EncodeKey(mu.key)
		if err != nil {
			return nil, invalid("invalid key: %v", err)
		}
		mu.enc, mu.ks = enc, f.keyspace(mu.p)
	}
	return out, nil
}

// prepareOne validates one mutation of req, in the service's order, and
// normalizes its key (still incomplete where the service allocates one).
func prepareOne(req *datastorepb.CommitRequest, m *datastorepb.Mutation) (*mutation, error) {
	if len(m.GetPropertyTransforms()) > 0 {
		return nil, status.Error(codes.Unimplemented, "nemo does not support property transforms")
	}
	mu := &mutation{m: m}
	var k *datastorepb.Key
	switch op := m.GetOperation().(type) {
	case *datastorepb.Mutation_Insert:
		mu.entity, k = op.Insert, op.Insert.GetKey()
	case *datastorepb.Mutation_Update:
		mu.entity, k = op.Update, op.Update.GetKey()
	case *datastorepb.Mutation_Upsert:
		mu.entity, k = op.Upsert, op.Upsert.GetKey()
	case *datastorepb.Mutation_Delete:
		k = op.Delete
	default:
		return nil, invalid("A mutation must have an operation.")
	}
	nk, p, err := normKey(req.GetProjectId(), req.GetDatabaseId(), k)
	if err != nil {
		return nil, err
	}
	_, canAlloc := m.GetOperation().(*datastorepb.Mutation_Insert)
	if _, ok := m.GetOperation().(*datastorepb.Mutation_Upsert); ok {
		canAlloc = true
	}
	if err := checkPath(nk, canAlloc, true); err != nil {
		return nil, err
	}
	if err := checkNamespace(p.Namespace, true); err != nil {
		return nil, err
	}
	if mu.entity != nil {
		if err := checkEntity(mu.entity); err != nil {
			return nil, err
		}
	}
	if err := checkPreconditions(m); err != nil {
		return nil, err
	}
	if mu.mask, err = maskPaths(m.GetPropertyMask()); err != nil {
		return nil, err
	}
	mu.key, mu.p = nk, p
	return mu, nil
}

// checkPreconditions checks a mutation's base version, update time and
// conflict resolution strategy as the service does.
func checkPreconditions(m *datastorepb.Mutation) error {
	if m.GetConflictResolutionStrategy() != datastorepb.Mutation_STRATEGY_UNSPECIFIED && m.GetConflictDetectionStrategy() == nil {
		return invalid("cannot set a conflict resolution strategy if no detection strategy was set")
	}
	if _, ok := m.GetConflictDetectionStrategy().(*datastorepb.Mutation_BaseVersion); ok {
		if v := m.GetBaseVersion(); v < 0 {
			return invalid("Invalid base_version: %d, it should be >= 0", v)
		}
		if _, upd := m.GetOperation().(*datastorepb.Mutation_Update); upd && m.GetBaseVersion() == 0 {
			return invalid("Cannot update an entity with a base version set to zero")
		}
	}
	if ut := m.GetUpdateTime(); ut != nil && !ut.IsValid() {
		return invalid(msgBadTimestamp)
	}
	return nil
}

// refusal is apply's error for a mutation the entity's state refuses (an
// insert of an existing entity, an update of a missing one); the
// mutations before it are in the transaction. err is the status.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }

// GRPCStatus makes the refusal its status (toStatus passes it through).
func (r *refusal) GRPCStatus() *status.Status { return status.Convert(r.err) }

// apply performs the mutations in t, in order. A conflicting base version
// or update time marks the mutation and skips it, as the service does,
// unless its conflict_resolution_strategy is FAIL: that conflict, as an
// insert of an existing entity or an update of a missing one, refuses the
// mutation and stops apply with a *refusal (FAILED_PRECONDITION, worded as
// the service words it).
func (f *Frontend) apply(ctx context.Context, t *txn.Txn, req *datastorepb.CommitRequest, muts []*mutation) ([]*datastorepb.MutationResult, error) {
	version := f.version()
	now := timestamppb.New(time.UnixMicro(version))
	results := make([]*datastorepb.MutationResult, len(muts))
	for i, mu := range muts {
		cur, exists, err := f.current(ctx, t, req, mu)
		if err != nil {
			return nil, err
		}
		res := &datastorepb.MutationResult{}
		if mu.allocated {
			res.Key = mu.key
		}
		results[i] = res
		if conflict(mu.m, cur) {
			if mu.m.GetConflictResolutionStrategy() == datastorepb.Mutation_FAIL {
				return nil, &refusal{status.Errorf(codes.FailedPrecondition,
					"the stored version (%d) does not match the required base version (%d)", cur.GetVersion(), requiredVersion(mu.m))}
			}
			res.ConflictDetected = true
			if cur != nil {
				res.Version, res.CreateTime, res.UpdateTime = cur.Version, cur.CreateTime, cur.UpdateTime
			} else {
				res.Version = f.readVersion()
			}
			continue
		}
		v := version
		if cur != nil && cur.Version >= v {
			v = cur.Version + 1
		}
		res.Version = v
		switch mu.m.GetOperation().(type) {
		case *datastorepb.Mutation_Delete:
			if _, err := t.Delete(ctx, mu.ks, mu.enc); err != nil {
				return nil, err
			}
			continue
		case *datastorepb.Mutation_Insert:
			if exists {
				return nil, &refusal{status.Errorf(codes.AlreadyExists, "%s: %s", msgExists, keyString(mu.key))}
			}
		case *datastorepb.Mutation_Update:
			if !exists {
				return nil, &refusal{status.Errorf(codes.NotFound, "%s: %s", msgNoEntity, keyString(mu.key))}
			}
		}
		e := storedEntity(mu.entity, mu.key)
		if mu.m.GetPropertyMask() != nil {
			e = merge(cur.GetEntity(), e, mu.mask)
		}
		created := now
		if cur != nil && cur.CreateTime != nil {
			created = cur.CreateTime
		}
		val, err := dscodec.EncodeValue(&datastorepb.EntityResult{Entity: e, Version: v, CreateTime: created, UpdateTime: now})
		if err != nil {
			return nil, err
		}
		if err := t.Upsert(ctx, mu.ks, mu.enc, val); err != nil {
			return nil, err
		}
		res.CreateTime, res.UpdateTime = created, now
	}
	return results, nil
}

// current X-locks mu's entity and returns it (nil: absent or, for a blind
// upsert, unknown). Insert, update, delete, a property-masked upsert (a
// merge), a conditional one (base version or update time) and one of an
// allocated id read the entity, remotely if nemo does not hold it. A
// plain upsert does not depend on the old entity: it locks the key blind
// and takes what nemo holds for free (see blindUpsert).
func (f *Frontend) current(ctx context.Context, t *txn.Txn, req *datastorepb.CommitRequest, mu *mutation) (*datastorepb.EntityResult, bool, error) {
	var raw []byte
	var exists bool
	var err error
	if blindUpsert(mu) {
		raw, exists, _, err = t.LockKnown(ctx, mu.ks, mu.enc)
	} else {
		raw, exists, err = t.GetForUpdate(ctx, mu.ks, mu.enc)
	}
	if err != nil {
		return nil, false, err
	}
	for exists && mu.allocated { // an allocated id someone wrote by hand: take another
		done, err := f.alloc.AllocateIDs(ctx, req.GetProjectId(), req.GetDatabaseId(), []*datastorepb.Key{mu.key})
		if err != nil {
			return nil, false, err
		}
		mu.key = &datastorepb.Key{PartitionId: mu.key.PartitionId, Path: done[0].GetPath()}
		if mu.enc, err = dscodec.EncodeKey(mu.key); err != nil {
			return nil, false, err
		}
		if raw, exists, err = t.GetForUpdate(ctx, mu.ks, mu.enc); err != nil {
			return nil, false, err
		}
	}
	if !exists {
		return nil, false, nil
	}
	cur, err := dscodec.DecodeValue(raw)
	if err != nil {
		return nil, false, err
	}
	return cur, true, nil
}

// blindUpsert reports whether mu is an upsert whose result does not
// depend on the entity it replaces: no base version or update time to
// check, no property mask to merge with, a key the client chose. Its
// version is the commit's (above any nemo gave before, its clock being
// microseconds) or, when nemo holds the old entity, above that one's; its
// create time is the old entity's when nemo holds it, else the commit's
// (see README, Limits).
func blindUpsert(mu *mutation) bool {
	_, up := mu.m.GetOperation().(*datastorepb.Mutation_Upsert)
	return up && mu.m.GetConflictDetectionStrategy() == nil && mu.m.GetPropertyMask() == nil && !mu.allocated
}

// storedEntity is e as the service stores it under key: every timestamp
// value truncated to the microsecond (both emulators do so too), and a
// null value whose enum number is not NULL_VALUE made NULL_VALUE (as both
// emulators answer it), so that what nemo serves from its buffer is what
// the store holds. e, the request's entity, is left as it is: the result
// shares its property values unless one needs changing, which copies them.
// (Fields nemo does not know never get here: the gRPC server drops them,
// as the service does, and the REST API refuses them.)
func storedEntity(e *datastorepb.Entity, key *datastorepb.Key) *datastorepb.Entity {
	if !eachValue(e, unstored) {
		return &datastorepb.Entity{Key: key, Properties: e.GetProperties()}
	}
	e = proto.Clone(e).(*datastorepb.Entity)
	e.Key = key
	eachValue(e, func(v *datastorepb.Value) bool {
		switch x := v.GetValueType().(type) {
		case *datastorepb.Value_TimestampValue:
			if ts := x.TimestampValue; ts != nil {
				ts.Nanos -= ts.GetNanos() % 1000
			}
		case *datastorepb.Value_NullValue:
			x.NullValue = structpb.NullValue_NULL_VALUE
		}
		return false
	})
	return e
}

// unstored reports whether the service stores v otherwise than it is
// written (storedEntity).
func unstored(v *datastorepb.Value) bool {
	switch x := v.GetValueType().(type) {
	case *datastorepb.Value_TimestampValue:
		return x.TimestampValue.GetNanos()%1000 != 0
	case *datastorepb.Value_NullValue:
		return x.NullValue != structpb.NullValue_NULL_VALUE
	}
	return false
}

// eachValue calls fn with each value of e, those in arrays and entity
// values too (after the array or entity value itself), until fn returns
// true, and reports whether it did.
func eachValue(e *datastorepb.Entity, fn func(*datastorepb.Value) bool) bool {
	var value func(v *datastorepb.Value) bool
	value = func(v *datastorepb.Value) bool {
		if fn(v) {
			return true
		}
		switch x := v.GetValueType().(type) {
		case *datastorepb.Value_ArrayValue:
			for _, el := range x.ArrayValue.GetValues() {
				if value(el) {
					return true
				}
			}
		case *datastorepb.Value_EntityValue:
			return eachValue(x.EntityValue, fn)
		}
		return false
	}
	for _, v := range e.GetProperties() {
		if value(v) {
			return true
		}
	}
	return false
}

// conflict reports whether m's precondition fails against cur (nil:
// absent). An absent entity has version 0.
func conflict(m *datastorepb.Mutation, cur *datastorepb.EntityResult) bool {
	switch s := m.GetConflictDetectionStrategy().(type) {
	case *datastorepb.Mutation_BaseVersion:
		if cur == nil {
			return s.BaseVersion != 0
		}
		return cur.Version != s.BaseVersion
	case *datastorepb.Mutation_UpdateTime:
		if cur == nil {
			return true
		}
		return !proto.Equal(cur.UpdateTime, s.UpdateTime)
	}
	return false
}

// requiredVersion is the version m's conflict detection requires, as the
// service names it in a FAIL refusal: the base version, or the update time
// in microseconds.
func requiredVersion(m *datastorepb.Mutation) int64 {
	if ut := m.GetUpdateTime(); ut != nil {
		return ut.AsTime().UnixMicro()
	}
	return m.GetBaseVersion()
}

// indexUpdates estimates the index writes of a commit: one per indexed
// value written, as the service counts (for the response field only).
func indexUpdates(muts []*mutation, results []*datastorepb.MutationResult) int32 {
	var n int32
	for i, mu := range muts {
		if results[i].GetConflictDetected() || mu.entity == nil {
			continue
		}
		for name := range mu.entity.GetProperties() {
			n += int32(len(indexValues(mu.entity, name)))
		}
	}
	return n
}

func keyString(k *datastorepb.Key) string {
	s := ""
	for i, e := range k.GetPath() {
		if i > 0 {
			s += "/"
		}
		if e.GetName() != "" {
			s += fmt.Sprintf("%s:%q", e.GetKind(), e.GetName())
		} else {
			s += fmt.Sprintf("%s:%d", e.GetKind(), e.GetId())
		}
	}
	return s
}
