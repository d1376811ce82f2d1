package aztable

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

// maxBatchAttempts bounds how often one chunk is submitted as a
// transaction: each refused attempt whose failed operation is a conflict
// drops that operation and submits the rest again; after this many
// attempts (or any other refusal) the rest is written one by one.
const maxBatchAttempts = 4

// Upsert implements adapters.Store, batched per partition. The
// precondition picks the operation: ExpectAny is insert-or-replace,
// ExpectAbsent is insert (409 EntityAlreadyExists refuses it), and
// ExpectVersion is replace with If-Match: version (412 refuses it, and so
// does 404: the entity is absent). Each applied write's version is the
// ETag the service answered with, from the response or from the batch's
// sub-response. See writeChunk for how refused writes inside a batch are
// found, and conflicts for how their Current is filled.
func (s *Store) Upsert(ctx context.Context, ks adapters.Keyspace, writes []adapters.Write) ([]adapters.Version, error) {
	if ks == tablecodec.TablesKeyspace {
		return make([]adapters.Version, len(writes)), checkTables(writes)
	}
	ops := make([]op, len(writes))
	stamps := make([]stamp, len(writes))
	for i, w := range writes {
		if err := checkExpect(w.Expect); err != nil {
			return nil, fmt.Errorf("aztable: upsert write %d: %w", i, err)
		}
		e, body, st, err := entityJSON(w.Key, w.Value)
		if err != nil {
			return nil, err
		}
		ops[i] = op{pk: e.PartitionKey, rk: e.RowKey, body: body, expect: w.Expect, idx: []int{i}}
		stamps[i] = st
	}
	out := newOutcome(writes)
	err := s.apply(ctx, ks, ops, out)
	s.remember(ks, writes, stamps, out, err)
	if err != nil {
		return nil, err
	}
	return out.vers, out.conflicts(ctx, s, ks)
}

// stamp is what nemo stamped a written value with: its Timestamp (in
// ticks) and ETag.
type stamp struct {
	ts   int64
	etag string
}

// remember updates the stamp memo after a call's writes: an applied write
// whose new service ETag is known and whose value nemo stamped is
// remembered, any other write (refused, version unknown, not applied
// because the call failed, unstamped) forgets its entity. Writes are
// visited in call order, so of repeated writes of one entity the last
// one's stamps stay.
func (s *Store) remember(ks adapters.Keyspace, writes []adapters.Write, stamps []stamp, out *outcome, err error) {
	if s.memo == nil {
		return
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	for i, w := range writes {
		if err == nil && out.vers[i] != "" && stamps[i].etag != "" {
			s.memo.put(ks, w.Key, out.vers[i], stamps[i].ts, stamps[i].etag)
		} else {
			s.memo.drop(ks, w.Key)
		}
	}
}

// Delete implements adapters.Store, batched per partition. ExpectAny
// deletes with If-Match * and an absent entity is not an error;
// ExpectVersion deletes with If-Match: version (412 refuses it, and so
// does 404: the entity is absent); ExpectAbsent has nothing to delete and
// holds iff the entity is absent, which one point read per such key
// checks.
func (s *Store) Delete(ctx context.Context, ks adapters.Keyspace, writes []adapters.Write) error {
	if ks == tablecodec.TablesKeyspace {
		return nil // see checkTables
	}
	ops := make([]op, len(writes))
	for i, w := range writes {
		if err := checkExpect(w.Expect); err != nil {
			return fmt.Errorf("aztable: delete key %d: %w", i, err)
		}
		pk, rk, err := tablecodec.DecodeKey(w.Key)
		if err != nil {
			return fmt.Errorf("aztable: delete key %d: %w: %w", i, adapters.ErrInvalid, err)
		}
		ops[i] = op{pk: pk, rk: rk, expect: w.Expect, idx: []int{i}}
	}
	for _, w := range writes {
		s.memo.drop(ks, w.Key)
	}
	out := newOutcome(writes)
	if err := s.apply(ctx, ks, ops, out); err != nil {
		return err
	}
	return out.conflicts(ctx, s, ks)
}

// checkExpect rejects a malformed precondition.
func checkExpect(e adapters.Expect) error {
	switch {
	case e.Kind > adapters.ExpectVersion:
		return fmt.Errorf("unknown precondition kind %d: %w", e.Kind, adapters.ErrInvalid)
	case e.Kind == adapters.ExpectVersion && e.Version == "":
		return fmt.Errorf("ExpectVersion without a version: %w", adapters.ErrInvalid)
	}
	return nil
}

// entityJSON is the request body that stores value under key: its
// properties with type annotations, without the ETag and Timestamp (the
// service assigns its own), which it returns as st.
func entityJSON(key, value []byte) (e *tablecodec.Entity, body []byte, st stamp, err error) {
	e, err = tablecodec.DecodeEntity(value)
	if err != nil {
		return nil, nil, st, fmt.Errorf("aztable: upsert: %w: %w", adapters.ErrInvalid, err)
	}
	pk, rk, err := tablecodec.DecodeKey(key)
	if err != nil {
		return nil, nil, st, fmt.Errorf("aztable: upsert: %w: %w", adapters.ErrInvalid, err)
	}
	if pk != e.PartitionKey || rk != e.RowKey {
		return nil, nil, st, fmt.Errorf("aztable: upsert: key (%q,%q) holds entity (%q,%q): %w", pk, rk, e.PartitionKey, e.RowKey, adapters.ErrInvalid)
	}
	st = stamp{ts: tablecodec.Ticks(e.Timestamp), etag: e.ETag}
	e.ETag, e.Timestamp = "", time.Time{}
	return e, tablecodec.AppendJSON(nil, e, tablecodec.Metadata{Level: tablecodec.MinimalMetadata, TypedDoubles: true}, nil), st, nil
}

// op is one operation on one entity.
type op struct {
	pk, rk string
	body   []byte // nil for a delete
	expect adapters.Expect
	// idx are the positions in the call of the writes the op carries:
	// its own last, and before it those of earlier unconditional writes
	// of the same key that it supersedes.
	idx []int
}

// self is the position of the op's own write.
func (o op) self() int { return o.idx[len(o.idx)-1] }

// outcome collects what happened to each write of a call.
type outcome struct {
	keys [][]byte
	mu   sync.Mutex
	vers []adapters.Version
	conf []adapters.Conflict
}

func newOutcome(ws []adapters.Write) *outcome {
	keys := make([][]byte, len(ws))
	for i, w := range ws {
		keys[i] = w.Key
	}
	return &outcome{keys: keys, vers: make([]adapters.Version, len(ws))}
}

// applied records o's new version (v, "" for a delete) for every write
// it carries.
func (r *outcome) applied(o op, v adapters.Version) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, i := range o.idx {
		r.vers[i] = v
	}
}

// refused records that o's precondition did not hold. Only a conditional
// op is refused, and it carries just its own write.
func (r *outcome) refused(o op, exists bool, current adapters.Version) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := o.self()
	r.conf = append(r.conf, adapters.Conflict{Index: i, Key: r.keys[i], Exists: exists, Current: current})
}

// conflicts returns the call's *adapters.ConflictError, or nil. When the
// service refused a write without saying the key's version (409 on an
// insert, 412 on If-Match), one point read per such key fills Exists and
// Current, so they describe the key as that read found it, a moment after
// the refusal. If that read fails, Current stays "" (the error is logged,
// not returned: the call's writes were applied or refused as reported).
func (r *outcome) conflicts(ctx context.Context, s *Store, ks adapters.Keyspace) error {
	if len(r.conf) == 0 {
		return nil
	}
	cs := slices.Clone(r.conf)
	slices.SortFunc(cs, func(a, b adapters.Conflict) int { return a.Index - b.Index })
	var at []int
	var keys [][]byte
	for j, c := range cs {
		if c.Exists && c.Current == "" {
			at = append(at, j)
			keys = append(keys, c.Key)
		}
	}
	if len(keys) > 0 {
		recs, err := s.Get(ctx, ks, keys)
		if err != nil {
			s.log.Warn("aztable: reading the current version of refused writes", "keyspace", ks, "keys", len(keys), "err", err)
		} else {
			for n, j := range at {
				cs[j].Exists, cs[j].Current = recs[n].Value != nil, recs[n].Version
			}
		}
	}
	return &adapters.ConflictError{Conflicts: cs}
}

// apply runs ops in rounds (see rounds); within a round, one partition's
// ops go as transactions of at most MaxBatchOps, partitions in parallel.
func (s *Store) apply(ctx context.Context, ks adapters.Keyspace, ops []op, out *outcome) error {
	for _, round := range rounds(ops) {
		round, err := s.checkAbsent(ctx, ks, round, out)
		if err != nil {
			return err
		}
		cs := chunks(round)
		if len(cs) == 0 {
			continue
		}
		if err := forEach(ctx, len(cs), s.writePar, func(ctx context.Context, i int) error {
			return s.writeChunk(ctx, ks, cs[i], out)
		}); err != nil {
			return err
		}
	}
	return nil
}

// rounds orders the ops of a call that name one entity more than once,
// since a transaction may name each entity once and a write's precondition
// is checked against what the call's earlier writes left: an op goes one
// round after the previous op of its entity. An unconditional op following
// an unconditional op of its entity replaces it instead (what the earlier
// one stored does not matter, and it could not be refused), as before
// preconditions existed. A call without repeated entities is one round.
func rounds(ops []op) [][]op {
	type last struct {
		round, pos int
		any        bool
	}
	seen := make(map[[2]string]last, len(ops))
	var out [][]op
	for _, o := range ops {
		k := [2]string{o.pk, o.rk}
		r := 0
		if l, ok := seen[k]; ok {
			if l.any && o.expect.Kind == adapters.ExpectAny {
				prev := out[l.round][l.pos]
				o.idx = append(slices.Clone(prev.idx), o.idx...)
				out[l.round][l.pos] = o
				continue
			}
			r = l.round + 1
		}
		for len(out) <= r {
			out = append(out, nil)
		}
		seen[k] = last{round: r, pos: len(out[r]), any: o.expect.Kind == adapters.ExpectAny}
		out[r] = append(out[r], o)
	}
	return out
}

// checkAbsent settles the ExpectAbsent deletes of a round, which have
// nothing to delete: one point read per key; a present entity is a
// conflict (with its version). It returns the round's other ops.
func (s *Store) checkAbsent(ctx context.Context, ks adapters.Keyspace, ops []op, out *outcome) ([]op, error) {
	var keys [][]byte
	rest := ops[:0:0]
	var absent []op
	for _, o := range ops {
		if o.body == nil && o.expect.Kind == adapters.ExpectAbsent {
			absent = append(absent, o)
			keys = append(keys, tablecodec.EncodeKey(o.pk, o.rk))
			continue
		}
		rest = append(rest, o)
	}
	if len(absent) == 0 {
		return ops, nil
	}
	recs, err := s.Get(ctx, ks, keys)
	if err != nil {
		return nil, err
	}
	for i, o := range absent {
		if recs[i].Value != nil {
			out.refused(o, true, recs[i].Version)
		} else {
			out.applied(o, "")
		}
	}
	return rest, nil
}

// chunks groups ops by partition (first appearance order) and splits each
// group at the batch limits. A later op on the same key replaces an earlier
// one, since a batch may name each entity once (rounds leaves no such
// pair in one round).
func chunks(ops []op) [][]op {
	type group struct {
		ops []op
		at  map[string]int
	}
	var order []string
	groups := map[string]*group{}
	for _, o := range ops {
		g := groups[o.pk]
		if g == nil {
			g = &group{at: map[string]int{}}
			groups[o.pk] = g
			order = append(order, o.pk)
		}
		if i, dup := g.at[o.rk]; dup {
			o.idx = append(slices.Clone(g.ops[i].idx), o.idx...)
			g.ops[i] = o
			continue
		}
		g.at[o.rk] = len(g.ops)
		g.ops = append(g.ops, o)
	}
	var out [][]op
	for _, pk := range order {
		var cur []op
		size := 0
		for _, o := range groups[pk].ops {
			n := len(o.body) + batchOpOverhead
			if len(cur) > 0 && (len(cur) == MaxBatchOps || size+n > MaxBatchBytes) {
				out = append(out, cur)
				cur, size = nil, 0
			}
			cur = append(cur, o)
			size += n
		}
		if len(cur) > 0 {
			out = append(out, cur)
		}
	}
	return out
}

// writeChunk writes one partition's chunk as a transaction: one remote call
// when no precondition fails. The service applies a transaction entirely
// or not at all; a refused one answers with the failed operation's
// response alone, whose message starts with the operation's index ("2:The
// specified entity already exists."; Azure and Azurite alike). If that
// operation's failure is a refused precondition (see refusal), the write
// is reported as a conflict and the rest is submitted again, up to
// maxBatchAttempts transactions per chunk. Any other refusal (a delete of
// an absent entity with If-Match *, an unreadable answer, no index) is
// handled as before preconditions existed: the remaining operations are
// written one by one.
func (s *Store) writeChunk(ctx context.Context, ks adapters.Keyspace, ops []op, out *outcome) error {
	pending := ops
	for attempt := 0; len(pending) > 1 && attempt < maxBatchAttempts; attempt++ {
		vers, failed, err := s.submit(ctx, ks, pending)
		if err == nil {
			for i, o := range pending {
				out.applied(o, vers[i])
			}
			return nil
		}
		if errors.Is(err, adapters.ErrUnknownOutcome) {
			return err
		}
		if cerr := classify("batch", err); errors.Is(cerr, adapters.ErrUnavailable) || ctx.Err() != nil {
			return cerr
		}
		if failed != nil && failed.index >= 0 && failed.index < len(pending) {
			o := pending[failed.index]
			if exists, ok := refusal(o, failed.status, failed.code); ok {
				out.refused(o, exists, "")
				pending = slices.Delete(slices.Clone(pending), failed.index, failed.index+1)
				continue
			}
		}
		s.log.Debug("aztable: batch refused, writing singly", "ops", len(pending), "err", err)
		break
	}
	for _, o := range pending {
		if err := s.writeOne(ctx, ks, o, out); err != nil {
			return err
		}
	}
	return nil
}

// refusal reports whether a failure (status and error code) of o is its
// precondition not holding, and if so whether the entity exists.
func refusal(o op, status int, code string) (exists, ok bool) {
	switch o.expect.Kind {
	case adapters.ExpectAbsent:
		if o.body != nil && status == http.StatusConflict && code == "EntityAlreadyExists" {
			return true, true
		}
	case adapters.ExpectVersion:
		switch {
		case status == http.StatusPreconditionFailed:
			return true, true
		case status == http.StatusNotFound && (o.body == nil || code != "TableNotFound"):
			// The entity is absent. (An upsert into a missing table
			// stays an error, as an unconditional one is.)
			return false, true
		}
	}
	return false, false
}

// action is o as a transaction action.
func action(o op) aztables.TransactionAction {
	if o.body == nil {
		a := aztables.TransactionAction{ActionType: aztables.TransactionTypeDelete, Entity: keyJSON(o.pk, o.rk)}
		if o.expect.Kind == adapters.ExpectVersion {
			a.IfMatch = etag(o.expect.Version)
		}
		return a
	}
	switch o.expect.Kind {
	case adapters.ExpectAbsent:
		return aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: o.body}
	case adapters.ExpectVersion:
		return aztables.TransactionAction{ActionType: aztables.TransactionTypeUpdateReplace, Entity: o.body, IfMatch: etag(o.expect.Version)}
	}
	return aztables.TransactionAction{ActionType: aztables.TransactionTypeInsertReplace, Entity: o.body}
}

func etag(v adapters.Version) *azcore.ETag {
	e := azcore.ETag(v)
	return &e
}

// submit sends ops as one transaction (through the SDK, or as a direct
// request: see sendsDirect). On success it returns each op's new ETag
// ("" for deletes, and for all if the answer cannot be read: the ops were
// applied, but the service's versions are unknown; a direct transaction
// whose answer cannot be read is adapters.ErrUnknownOutcome instead, as
// nothing else said it was applied). When the service refused the
// transaction it returns the error and, if the answer names it, the
// failed operation.
func (s *Store) submit(ctx context.Context, ks adapters.Keyspace, ops []op) ([]adapters.Version, *subFailure, error) {
	var raw *http.Response
	var err error
	ctx, note := sentWrite(ctx)
	if s.sendsDirect(ops[0].pk) {
		raw, err = s.direct.transaction(ctx, string(ks), ops)
	} else {
		acts := make([]aztables.TransactionAction, len(ops))
		for i, o := range ops {
			acts[i] = action(o)
		}
		_, err = s.table(ks).SubmitTransaction(policy.WithCaptureResponse(ctx, &raw), acts, nil)
	}
	if errors.Is(err, adapters.ErrUnknownOutcome) {
		return nil, nil, err
	}
	if uerr := unknownOutcome("batch", note, err); uerr != nil {
		return nil, nil, uerr
	}
	if err != nil {
		var re *azcore.ResponseError
		if errors.As(err, &re) && re.StatusCode == http.StatusAccepted && re.RawResponse != nil {
			return nil, batchFailure(re.RawResponse), err
		}
		return nil, nil, err
	}
	vers := make([]adapters.Version, len(ops))
	subs, perr := batchResponses(raw)
	if perr == nil && len(subs) != len(ops) {
		perr = fmt.Errorf("%d responses to %d operations", len(subs), len(ops))
	}
	if perr != nil {
		s.log.Warn("aztable: transaction applied, but its response is unreadable: versions unknown", "ops", len(ops), "err", perr)
		return vers, nil, nil
	}
	for i, o := range ops {
		if o.body != nil {
			vers[i] = adapters.Version(subs[i].header.Get("ETag"))
		}
	}
	return vers, nil, nil
}

// writeOne writes one op by itself (through the SDK, or as a direct
// request: see sendsDirect). A refused precondition is recorded in out,
// not returned.
func (s *Store) writeOne(ctx context.Context, ks adapters.Keyspace, o op, out *outcome) error {
	opn := "upsert"
	if o.body == nil {
		opn = "delete"
		if o.expect.Kind == adapters.ExpectAbsent {
			return fmt.Errorf("aztable: delete: precondition %d cannot be sent: %w", o.expect.Kind, adapters.ErrInvalid)
		}
	}
	ctx, note := sentWrite(ctx)
	var ver adapters.Version
	var err error
	if s.sendsDirect(o.pk) {
		ver, err = s.direct.write(ctx, string(ks), o)
	} else {
		ver, err = sdkWrite(ctx, s.table(ks), o)
	}
	if err != nil && o.body == nil && o.expect.Kind == adapters.ExpectAny && isNotFound(err) {
		err = nil // deleting an absent entity
	}
	if uerr := unknownOutcome(opn, note, err); uerr != nil {
		return uerr
	}
	if err != nil {
		st, code := errorCode(err)
		if exists, ok := refusal(o, st, code); ok {
			out.refused(o, exists, "")
			return nil
		}
		return classify(opn, err)
	}
	out.applied(o, ver)
	return nil
}

// sdkWrite sends o through the SDK and returns the entity's new ETag (""
// for a delete).
func sdkWrite(ctx context.Context, c *aztables.Client, o op) (adapters.Version, error) {
	switch {
	case o.body == nil:
		m := azcore.ETagAny
		if o.expect.Kind == adapters.ExpectVersion {
			m = azcore.ETag(o.expect.Version)
		}
		_, err := c.DeleteEntity(ctx, o.pk, o.rk, &aztables.DeleteEntityOptions{IfMatch: &m})
		return "", err
	case o.expect.Kind == adapters.ExpectAbsent:
		format := aztables.MetadataFormatNone
		r, err := c.AddEntity(ctx, o.body, &aztables.AddEntityOptions{Format: &format})
		return adapters.Version(r.ETag), err
	case o.expect.Kind == adapters.ExpectVersion:
		r, err := c.UpdateEntity(ctx, o.body, &aztables.UpdateEntityOptions{IfMatch: etag(o.expect.Version), UpdateMode: aztables.UpdateModeReplace})
		return adapters.Version(r.ETag), err
	}
	r, err := c.UpsertEntity(ctx, o.body, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
	return adapters.Version(r.ETag), err
}

// keyJSON is the entity body of a delete action: just its keys.
func keyJSON(pk, rk string) []byte {
	e := &tablecodec.Entity{PartitionKey: pk, RowKey: rk}
	return tablecodec.AppendJSON(nil, e, tablecodec.Metadata{Level: tablecodec.NoMetadata}, nil)
}
