package datastore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

// How a write's precondition becomes Datastore mutations:
//
//	precondition   Upsert                          Delete
//	ExpectAny      upsert                          delete
//	ExpectVersion  upsert with base_version        delete with base_version
//	ExpectAbsent   insert, transactional commit    Lookup, nothing sent
//
// A base_version that does not match the entity's current version makes
// the mutation conflict: the service does not apply it, sets
// MutationResult.conflict_detected and applies the rest of the commit. A
// missing entity never matches (its version is above every earlier
// version of the key), so ExpectVersion uses upsert rather than update,
// whose NOT_FOUND on a missing entity would fail the whole commit.
//
// An insert of an existing entity fails the whole commit with
// ALREADY_EXISTS, and a non-transactional commit that fails may have applied
// some of its other mutations (the service documents that it is not
// all-or-nothing; the emulator applies the mutations before the failing
// one), which could not then be told from conflicts. So a batch holding an
// insert is committed as a single-use transaction, which applies nothing
// when it fails; the adapter then Looks up the batch's insert keys, refuses
// the inserts whose key exists (their current version comes with the
// Lookup) and commits the rest of the batch again.
//
// An ExpectAbsent delete holds iff the key is absent when it is looked
// up; deleting an absent key changes nothing, so nothing is sent.
// ExpectVersion with a version no entity can have (not a positive decimal)
// is refused without being sent.
//
// Conflict.Exists and Current: the service does not say whether a
// conflicting entity exists (a missing entity's MutationResult.version is
// a snapshot version), so they come from a Lookup of the batch's refused
// keys right after its commit; another writer may have changed the key in
// between.
//
// Versions: an upsert that leaves the entity as it was keeps its version
// (Datastore documents this for MutationResult.version; the emulator does
// it), so unlike the embedded store not every write gives a new version;
// a precondition on that version still means "the entity as it was then".
//
// Retries and unknown outcomes (sendCommit): a Commit is retried after
// UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED (outside a transaction) or
// RESOURCE_EXHAUSTED. A commit answered ABORTED or ALREADY_EXISTS applied
// nothing of a transaction, but one that timed out or found the service
// unavailable may have been applied. A commit of upserts and deletes
// without base versions has the same effect when sent twice; any other
// (an insert, a base version, a read-write transaction) may be refused by
// its own first application when sent again, or, in a transaction, find
// the transaction gone. After such a failure its retry's success is still
// definite (the first attempt did not apply), but any refusal, conflict
// or error is not: the call fails with adapters.ErrUnknownOutcome
// wrapping the service's error, never with a conflict the write itself
// may have caused.
//
// What the emulator answers to each of these mutations is recorded in
// testdata/datastore-versions-emulator.txt (TestEmulatorVersionsReference).
//
// Not every backend honours base_version: the Firestore emulator in
// Datastore mode applies a mutation whatever its base_version (or
// update_time) says. So base_version is used only in front of a backend
// seen to be the legacy Datastore emulator, whose entities carry no create
// or update times (see flavour); elsewhere (and until a first answer has
// told) a batch holding a base_version is committed in a read-write
// transaction that first Looks up those keys and refuses, without sending
// them, the writes whose version differs (commitChecked): one Lookup and a
// BeginTransaction more per such batch.
//
// Entity groups: the legacy Datastore backend takes at most 25 entity
// groups (root keys) in one transaction, and its emulator refuses a
// commit over more with INVALID_ARGUMENT "operating on too many entity
// groups in a single transaction."; a non-transactional commit has no such
// limit, and Firestore in Datastore mode none in a transaction either. So
// a batch that goes out as a transaction (it holds an insert, or a
// base_version checked by commitChecked) holds at most 25 entity groups
// unless the backend has shown itself to be Firestore (nextBatch): a
// write-back of 200 new root entities is 8 commits in front of the legacy
// emulator, 1 in front of Firestore (2 before any answer has told which
// it is).
//
// Remote calls per batch: one Commit when nothing conflicts (with an
// ExpectAbsent delete in the batch, one Lookup more); a base_version
// conflict adds one Lookup; a refused insert adds one Lookup and one
// Commit per ALREADY_EXISTS answer.

// maxInsertRounds bounds how often one batch is committed again after
// ALREADY_EXISTS (each round refuses the inserts whose key exists; another
// round is needed only when a key is inserted or deleted concurrently).
const maxInsertRounds = 8

// version is the adapters form of an entity version: decimal; "" for 0
// (no version reported).
func version(v int64) adapters.Version {
	if v <= 0 {
		return ""
	}
	return adapters.Version(strconv.FormatInt(v, 10))
}

// baseVersion parses an expected version; ok is false when no entity can
// have it (not a positive decimal int64).
func baseVersion(v adapters.Version) (bv int64, ok bool) {
	bv, err := strconv.ParseInt(string(v), 10, 64)
	return bv, err == nil && bv > 0
}

// pendingKind says how one write is carried out.
type pendingKind uint8

const (
	// sendMutation: the outcome is in the write's MutationResult.
	sendMutation pendingKind = iota
	// sendInsert: an insert, which may fail the commit with
	// ALREADY_EXISTS.
	sendInsert
	// checkAbsent: an ExpectAbsent delete, which holds iff the key is
	// absent; nothing is sent.
	checkAbsent
	// refuse: refused without being sent.
	refuse
)

// pending is one write of an Upsert or Delete call on its way to a commit.
type pending struct {
	index int    // position in the call
	key   []byte // engine key
	id    string // the key as commit batching compares it
	group string // its entity group: the encoded root element of its path
	size  int    // bytes counted against maxCommitBytes
	kind  pendingKind
	mut   *datastorepb.Mutation // with sendMutation and sendInsert
}

// newPending prepares write i for the entity key k as a plain mutation;
// the caller sets the mutation, and the kind when it is another.
func newPending(i int, w adapters.Write, k *datastorepb.Key, size int) (pending, error) {
	id, err := dscodec.EncodeKey(k)
	if err != nil {
		return pending{}, fmt.Errorf("datastore: write %d: %w: %w", i, adapters.ErrInvalid, err)
	}
	root, err := dscodec.EncodePath(k.GetPath()[:1])
	if err != nil {
		return pending{}, fmt.Errorf("datastore: write %d: %w: %w", i, adapters.ErrInvalid, err)
	}
	return pending{kind: sendMutation, index: i, key: w.Key, id: string(id), group: string(root), size: size}, nil
}

// transactional reports whether committing w makes its commit a
// transaction: an insert does (commitBatch), and so does a base_version
// when checked (the backend's base_version is not trusted: commitChecked).
func (w pending) transactional(checked bool) bool {
	return w.kind == sendInsert || checked && w.kind == sendMutation && w.mut.GetBaseVersion() != 0
}

// withBaseVersion sets base_version from the write's expected version, or
// marks the write refused when no entity can have that version.
func (w *pending) withBaseVersion(v adapters.Version) {
	bv, ok := baseVersion(v)
	if !ok {
		w.kind, w.mut = refuse, nil
		return
	}
	w.mut.ConflictDetectionStrategy = &datastorepb.Mutation_BaseVersion{BaseVersion: bv}
}

func unknownExpect(op string, i int, k adapters.ExpectKind) error {
	return fmt.Errorf("datastore: %s: write %d: %w: unknown precondition %d", op, i, adapters.ErrInvalid, k)
}

// Upsert implements adapters.Store: the writes become mutations as the
// table above says, sent in commits within the service limits (see
// nextBatch). It returns each applied write's MutationResult.version.
func (s *Store) Upsert(ctx context.Context, ks adapters.Keyspace, writes []adapters.Write) ([]adapters.Version, error) {
	p, err := partition(ks)
	if err != nil {
		return nil, err
	}
	ws := make([]pending, 0, len(writes))
	for i, w := range writes {
		k, err := decodeKey(p, w.Key)
		if err != nil {
			return nil, err
		}
		pw, err := newPending(i, w, k, len(w.Key)+len(w.Value))
		if err != nil {
			return nil, err
		}
		switch w.Expect.Kind {
		case adapters.ExpectAny, adapters.ExpectVersion:
		case adapters.ExpectAbsent:
			pw.kind = sendInsert
		default:
			return nil, unknownExpect("upsert", i, w.Expect.Kind)
		}
		if pw.mut, err = entityMutation(w.Value, k, pw.kind == sendInsert); err != nil {
			return nil, fmt.Errorf("datastore: upsert: write %d: %w", i, err)
		}
		if w.Expect.Kind == adapters.ExpectVersion {
			pw.withBaseVersion(w.Expect.Version)
		}
		ws = append(ws, pw)
	}
	return s.write(ctx, p, len(writes), ws)
}

// entityMutation is the mutation that upserts (or, with insert, inserts)
// the entity engine value holds, under the engine key k (which is
// authoritative). The caller may set the conflict detection strategy.
func entityMutation(value []byte, k *datastorepb.Key, insert bool) (*datastorepb.Mutation, error) {
	er, err := dscodec.DecodeValue(value)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", adapters.ErrInvalid, err)
	}
	e := er.Entity // decoded for this call alone: no copy needed
	e.Key = k
	if insert {
		return &datastorepb.Mutation{Operation: &datastorepb.Mutation_Insert{Insert: e}}, nil
	}
	return &datastorepb.Mutation{Operation: &datastorepb.Mutation_Upsert{Upsert: e}}, nil
}

// Delete implements adapters.Store: the writes become mutations (or a
// Lookup) as the table above says, in commits within the service limits.
func (s *Store) Delete(ctx context.Context, ks adapters.Keyspace, writes []adapters.Write) error {
	p, err := partition(ks)
	if err != nil {
		return err
	}
	ws := make([]pending, 0, len(writes))
	for i, w := range writes {
		k, err := decodeKey(p, w.Key)
		if err != nil {
			return err
		}
		pw, err := newPending(i, w, k, len(w.Key))
		if err != nil {
			return err
		}
		switch w.Expect.Kind {
		case adapters.ExpectAny:
			pw.mut = &datastorepb.Mutation{Operation: &datastorepb.Mutation_Delete{Delete: k}}
		case adapters.ExpectAbsent:
			pw.kind = checkAbsent
		case adapters.ExpectVersion:
			pw.mut = &datastorepb.Mutation{Operation: &datastorepb.Mutation_Delete{Delete: k}}
			pw.withBaseVersion(w.Expect.Version)
		default:
			return unknownExpect("delete", i, w.Expect.Kind)
		}
		ws = append(ws, pw)
	}
	_, err = s.write(ctx, p, len(writes), ws)
	return err
}

// write carries out ws batch by batch, in order, and returns the applied
// writes' versions (n of them, by call position) and a *ConflictError
// naming the refused ones.
func (s *Store) write(ctx context.Context, p dscodec.Partition, n int, ws []pending) ([]adapters.Version, error) {
	ctx = routed(ctx, p)
	versions := make([]adapters.Version, n)
	var conflicts []adapters.Conflict
	for len(ws) > 0 {
		batch := ws[:nextBatch(ws, s.txGroups(), s.flavour.Load() != legacyDatastore)]
		ws = ws[len(batch):]
		cs, err := s.writeBatch(ctx, p, batch, versions)
		if err != nil {
			return nil, err
		}
		conflicts = append(conflicts, cs...)
	}
	if len(conflicts) > 0 {
		slices.SortFunc(conflicts, func(a, b adapters.Conflict) int { return cmp.Compare(a.Index, b.Index) })
		return versions, &adapters.ConflictError{Conflicts: conflicts}
	}
	return versions, nil
}

// nextBatch returns how many of ws (at least one) go in the next commit:
// within the mutation and byte limits; each key at most once per commit,
// so a repeated key starts a new batch (which keeps the later write
// last); and, when the commit is a transaction (a write in it is
// transactional, with checked as writeBatch will choose), within
// maxGroups entity groups (0: no limit). A non-transactional commit has
// no entity group limit on any backend.
func nextBatch(ws []pending, maxGroups int, checked bool) int {
	n, size := 0, 0
	inBatch := map[string]bool{}
	groups := map[string]bool{}
	tx := false
	for n < len(ws) && n < maxCommitMutations && (n == 0 || size+ws[n].size <= maxCommitBytes) {
		w := ws[n]
		if inBatch[w.id] {
			break
		}
		if w.kind == sendMutation || w.kind == sendInsert { // sent: in the commit
			wide := len(groups)
			if !groups[w.group] {
				wide++
			}
			withTx := tx || w.transactional(checked)
			if maxGroups > 0 && n > 0 && withTx && wide > maxGroups {
				break
			}
			groups[w.group], tx = true, withTx
		}
		inBatch[w.id] = true
		size += w.size
		n++
	}
	return n
}

// maxTxGroups is the most entity groups (root keys) the legacy Datastore
// backend takes in one transaction: its emulator refuses a 26th with
// INVALID_ARGUMENT "operating on too many entity groups in a single
// transaction." (a non-transactional commit has no such limit, and
// Firestore in Datastore mode none at all).
const maxTxGroups = 25

// txGroups is the entity group limit of a transactional commit on this
// backend (0: none): maxTxGroups unless the backend has shown itself to be
// Firestore in Datastore mode, so that the first commits, sent before any
// answer told, are never refused for it.
func (s *Store) txGroups() int {
	if s.flavour.Load() == firestoreDatastore {
		return 0
	}
	return maxTxGroups
}

// writeBatch carries out one batch (distinct keys): it checks its
// ExpectAbsent deletes, commits its mutations, sets the versions of the
// applied ones and returns its conflicts with the keys' current state.
func (s *Store) writeBatch(ctx context.Context, p dscodec.Partition, batch []pending, versions []adapters.Version) ([]adapters.Conflict, error) {
	var conflicts []adapters.Conflict
	var unread []int // conflicts whose key's state is still to be read
	refused := func(w pending) {
		unread = append(unread, len(conflicts))
		conflicts = append(conflicts, adapters.Conflict{Index: w.index, Key: w.key})
	}
	var send, checks []pending
	for _, w := range batch {
		switch w.kind {
		case refuse:
			refused(w)
		case checkAbsent:
			checks = append(checks, w)
		default:
			send = append(send, w)
		}
	}
	if len(checks) > 0 {
		cs, err := s.present(ctx, p, checks)
		if err != nil {
			return nil, err
		}
		conflicts = append(conflicts, cs...)
	}
	commit := s.commitBatch
	if s.flavour.Load() != legacyDatastore && slices.ContainsFunc(send, func(w pending) bool { return w.mut.GetBaseVersion() != 0 }) {
		commit = s.commitChecked
	}
	for round := 0; len(send) > 0; round++ {
		results, err := commit(ctx, p, send)
		if status.Code(err) == codes.AlreadyExists && !errors.Is(err, adapters.ErrUnknownOutcome) && round < maxInsertRounds && hasInsert(send) {
			// The transaction applied nothing: refuse the inserts
			// whose key exists and commit the rest again.
			var inserts []pending
			for _, w := range send {
				if w.kind == sendInsert {
					inserts = append(inserts, w)
				}
			}
			cs, err := s.present(ctx, p, inserts)
			if err != nil {
				return nil, err
			}
			conflicts = append(conflicts, cs...)
			send = slices.DeleteFunc(send, func(w pending) bool {
				return slices.ContainsFunc(cs, func(c adapters.Conflict) bool { return c.Index == w.index })
			})
			continue
		}
		if err != nil {
			return nil, err
		}
		for i, r := range results {
			if r.GetConflictDetected() {
				refused(send[i])
				continue
			}
			versions[send[i].index] = version(r.GetVersion())
		}
		break
	}
	if len(unread) > 0 {
		keys := make([][]byte, len(unread))
		for i, c := range unread {
			keys[i] = conflicts[c].Key
		}
		found, err := s.lookup(ctx, p, keys)
		if err != nil {
			return nil, fmt.Errorf("datastore: reading conflicting keys: %w", err)
		}
		for _, c := range unread {
			if r, ok := found[string(conflicts[c].Key)]; ok {
				conflicts[c].Exists, conflicts[c].Current = true, r.Version
			}
		}
	}
	return conflicts, nil
}

// present Looks up the keys of ws and returns a conflict, with the current
// version, for each one that exists.
func (s *Store) present(ctx context.Context, p dscodec.Partition, ws []pending) ([]adapters.Conflict, error) {
	keys := make([][]byte, len(ws))
	for i, w := range ws {
		keys[i] = w.key
	}
	found, err := s.lookup(ctx, p, keys)
	if err != nil {
		return nil, err
	}
	var conflicts []adapters.Conflict
	for _, w := range ws {
		if r, ok := found[string(w.key)]; ok {
			conflicts = append(conflicts, adapters.Conflict{Index: w.index, Key: w.key, Exists: true, Current: r.Version})
		}
	}
	return conflicts, nil
}

func hasInsert(ws []pending) bool {
	return slices.ContainsFunc(ws, func(w pending) bool { return w.kind == sendInsert })
}

// commitBatch sends the mutations of ws in one Commit and returns one
// MutationResult per mutation. The commit is non-transactional, except
// that a batch holding an insert is committed as a single-use read-write
// transaction, so that an ALREADY_EXISTS leaves all of it unapplied.
func (s *Store) commitBatch(ctx context.Context, p dscodec.Partition, ws []pending) ([]*datastorepb.MutationResult, error) {
	muts := make([]*datastorepb.Mutation, len(ws))
	for i, w := range ws {
		muts[i] = w.mut
	}
	req := &datastorepb.CommitRequest{
		ProjectId: p.Project, DatabaseId: p.Database,
		Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL, Mutations: muts,
	}
	if hasInsert(ws) {
		req.Mode = datastorepb.CommitRequest_TRANSACTIONAL
		req.TransactionSelector = &datastorepb.CommitRequest_SingleUseTransaction{SingleUseTransaction: &datastorepb.TransactionOptions{
			Mode: &datastorepb.TransactionOptions_ReadWrite_{ReadWrite: &datastorepb.TransactionOptions_ReadWrite{}},
		}}
	}
	idempotent := !slices.ContainsFunc(ws, func(w pending) bool {
		return w.kind == sendInsert || w.mut.GetBaseVersion() != 0
	})
	resp, unsure, err := s.sendCommit(ctx, req, idempotent)
	if err != nil {
		return nil, err
	}
	results := resp.GetMutationResults()
	if len(results) != len(muts) {
		return nil, fmt.Errorf("datastore: commit of %d mutations answered %d results", len(muts), len(results))
	}
	if unsure != nil && slices.ContainsFunc(results, (*datastorepb.MutationResult).GetConflictDetected) {
		// A base version refused after an attempt that may have applied
		// it: the refusal may be the write's own doing.
		return nil, fmt.Errorf("%w (a retry found conflicts)", unsure)
	}
	for i, m := range muts {
		if m.GetDelete() == nil { // a delete's result has no update time anywhere
			s.observe(results[i].GetUpdateTime() != nil)
			break
		}
	}
	return results, nil
}

// commitChecked is commitBatch for a backend that may ignore base_version:
// in a read-write transaction it Looks up the keys whose mutations carry a
// base_version, refuses those whose version differs (their result says
// conflict_detected; nothing of theirs is sent), and commits the rest
// there, which the service applies only if nothing the transaction read
// changed since. A transaction the service aborts is run again from its
// start, as WriteAtomic's, and after maxAtomicAttempts the call fails with
// adapters.ErrAborted wrapping the service's answer.
func (s *Store) commitChecked(ctx context.Context, p dscodec.Partition, ws []pending) (results []*datastorepb.MutationResult, err error) {
	err = s.rerun(ctx, "commit", func(err error) bool { return status.Code(err) == codes.Aborted }, func(ctx context.Context) (err error) {
		results, err = s.commitCheckedOnce(ctx, p, ws)
		return err
	})
	return results, err
}

func (s *Store) commitCheckedOnce(ctx context.Context, p dscodec.Partition, ws []pending) ([]*datastorepb.MutationResult, error) {
	tx, err := s.begin(ctx, p, readWrite)
	if err != nil {
		return nil, err
	}
	committed := false
	defer func() {
		if !committed {
			s.rollback(ctx, p, tx)
		}
	}()
	var keys [][]byte
	for _, w := range ws {
		if w.mut.GetBaseVersion() != 0 {
			keys = append(keys, w.key)
		}
	}
	found, err := s.lookupIn(ctx, p, keys, tx)
	if err != nil {
		return nil, err
	}
	results := make([]*datastorepb.MutationResult, len(ws))
	var muts []*datastorepb.Mutation
	var at []int
	for i, w := range ws {
		if bv := w.mut.GetBaseVersion(); bv != 0 {
			if r, ok := found[string(w.key)]; !ok || r.Version != version(bv) {
				results[i] = &datastorepb.MutationResult{ConflictDetected: true}
				continue
			}
		}
		muts, at = append(muts, w.mut), append(at, i)
	}
	req := &datastorepb.CommitRequest{ProjectId: p.Project, DatabaseId: p.Database, Mode: datastorepb.CommitRequest_TRANSACTIONAL,
		TransactionSelector: &datastorepb.CommitRequest_Transaction{Transaction: tx}, Mutations: muts}
	// Not idempotent (see sendCommit): after an answer that left the
	// outcome unknown the error says so; the refusals above were read
	// before this commit, so none can be its own doing.
	resp, _, err := s.sendCommit(ctx, req, false)
	if err != nil {
		return nil, err
	}
	committed = true
	if len(resp.GetMutationResults()) != len(muts) {
		return nil, fmt.Errorf("datastore: commit of %d mutations answered %d results", len(muts), len(resp.GetMutationResults()))
	}
	for j, r := range resp.GetMutationResults() {
		results[at[j]] = r
	}
	return results, nil
}

// sendCommit sends req, retrying as call does except that a commit in a
// transaction is not retried after ABORTED. After a failure that may have
// applied a commit that is not idempotent (see Retries above:
// UNAVAILABLE, DEADLINE_EXCEEDED, or the caller's deadline cutting it
// short), its retry can only succeed definitely: any error then is
// adapters.ErrUnknownOutcome wrapping the service's answer that left the
// outcome unknown, and so is unsure, returned with a success, which the
// caller must return instead of any refusal in the results.
func (s *Store) sendCommit(ctx context.Context, req *datastorepb.CommitRequest, idempotent bool) (resp *datastorepb.CommitResponse, unsure, err error) {
	inTx := req.GetTransaction() != nil
	var first error // the service's first answer that left the outcome unknown
	unknown := func(err error) bool {
		c := status.Code(err)
		if (c == codes.Unavailable || c == codes.DeadlineExceeded) && first == nil {
			first = err
		}
		return first != nil
	}
	retry := func(err error) bool {
		if inTx && status.Code(err) == codes.Aborted || !retryable(err) {
			return false
		}
		unknown(err)
		return true
	}
	var last error
	err = s.callRetrying(ctx, "commit", retry, func(ctx context.Context) (err error) {
		resp, err = s.client.Commit(ctx, req)
		last = err
		return err
	})
	if idempotent {
		return resp, nil, err
	}
	if err != nil && ctx.Err() != nil && first == nil {
		first = ctx.Err() // cut short by the caller's deadline: sent, maybe applied
	}
	if err != nil && !unknown(last) {
		return nil, nil, err
	}
	if first != nil {
		// The service's answer that left the outcome unknown, not the
		// last one: whatever a retry was told (a transaction gone,
		// ALREADY_EXISTS) is no refusal of the write, and must not read
		// as one.
		unsure = fmt.Errorf("datastore: commit: %w: %w", adapters.ErrUnknownOutcome, first)
	}
	if err != nil {
		return nil, nil, unsure
	}
	return resp, unsure, nil
}

// Stamped implements adapters.Stamper: the engine value of an entity the
// service stored at version v, so that a buffer holding it reports the
// service's version (the one every other client and replica sees), not
// the one nemo chose when it encoded the write.
func (s *Store) Stamped(value []byte, v adapters.Version) ([]byte, error) {
	bv, ok := baseVersion(v)
	if !ok {
		return nil, fmt.Errorf("datastore: stamp: version %q: %w", v, adapters.ErrInvalid)
	}
	b, err := dscodec.WithVersion(value, bv)
	if err != nil {
		return nil, fmt.Errorf("datastore: stamp: %w: %w", adapters.ErrInvalid, err)
	}
	return b, nil
}
