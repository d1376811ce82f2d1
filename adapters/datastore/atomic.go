package datastore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

var _ adapters.AtomicWriter = (*Store)(nil)

// MaxAtomic is the most mutations one WriteAtomic group may hold: a
// commit's limit.
const MaxAtomic = maxCommitMutations

// maxAtomicAttempts bounds how often WriteAtomic runs its transaction when
// the service aborts it (contention) before giving up with
// adapters.ErrAborted, the service's last answer wrapped.
const maxAtomicAttempts = 5

// errTxnAgain marks a transaction that applied nothing and should be run
// again from its start.
var errTxnAgain = errors.New("datastore: transaction aborted")

// retryableInTx is retryable without ABORTED, which ends a transaction:
// a call inside one is not retried then, the whole transaction is.
func retryableInTx(err error) bool {
	return retryable(err) && status.Code(err) != codes.Aborted
}

// WriteAtomic implements adapters.AtomicWriter as one transactional
// commit. Preconditions are not left to base_version: a base_version that
// does not match makes the service skip that mutation and apply the rest
// of the commit, transaction or not (testdata/datastore-versions-emulator.txt),
// which is not all-or-nothing. Instead, when the group holds a
// precondition (ExpectAbsent or ExpectVersion), WriteAtomic begins a
// read-write transaction, Looks up those keys inside it and compares:
// if any precondition fails, the transaction is rolled back and the error
// is a *adapters.ConflictError naming every refused mutation, with Exists
// and Current as that transactional read found them. Otherwise it commits
// the mutations in that transaction, which the service applies only if
// none of the keys read changed since (else ABORTED). The mutations: an
// upsert is an upsert, or an insert under ExpectAbsent; a delete is a
// delete, except under ExpectAbsent, where the read alone decides and
// nothing is sent. A group without preconditions is one commit in a
// single-use transaction.
//
// A range check is a key-range query inside the transaction where the
// backend allows one (Firestore in Datastore mode; the read then holds
// what it read until the commit), else just outside it (see rangeIn).
//
// A transaction the service aborts (contention; also ALREADY_EXISTS, an
// insert racing another writer) applied nothing and is run again from
// its start, at most maxAtomicAttempts times with jittered backoff, then
// fails with adapters.ErrAborted wrapping the service's own answer (its
// status and message). Other calls retry as everywhere (see call); a
// commit whose answer was lost may have been applied, and the error is
// then adapters.ErrUnknownOutcome (see sendCommit). A transaction that does not commit is rolled back, even
// when the caller's context has ended, so the service does not keep what
// it holds (Firestore: locks on what it read) until it expires.
//
// A group of more than MaxAtomic (500) mutations or 9 MiB, or naming one key twice
// (Datastore allows one mutation per entity in a commit), is refused with
// adapters.ErrInvalid before anything is sent. Versions are those of the
// commit's MutationResults ("" for deletes).
func (s *Store) WriteAtomic(ctx context.Context, ks adapters.Keyspace, ms []adapters.Mutation) ([]adapters.Version, error) {
	p, err := partition(ks)
	if err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, nil
	}
	if len(ms) > MaxAtomic {
		return nil, fmt.Errorf("datastore: write_atomic: %d mutations, a commit holds at most %d: %w", len(ms), MaxAtomic, adapters.ErrInvalid)
	}
	muts := make([]*datastorepb.Mutation, len(ms)) // nil: nothing sent
	var reads []int                                // mutations whose precondition the transaction reads
	seen := make(map[string]int, len(ms))
	size := 0
	var ranges []int // range checks: queried inside the transaction
	for i, m := range ms {
		if m.Range != nil {
			ranges = append(ranges, i)
			continue
		}
		k, err := decodeKey(p, m.Key)
		if err != nil {
			return nil, err
		}
		id, err := dscodec.EncodeKey(k)
		if err != nil {
			return nil, fmt.Errorf("datastore: write_atomic: mutation %d: %w: %w", i, adapters.ErrInvalid, err)
		}
		if j, dup := seen[string(id)]; dup {
			return nil, fmt.Errorf("datastore: write_atomic: mutations %d and %d name one key: %w", j, i, adapters.ErrInvalid)
		}
		seen[string(id)] = i
		size += len(m.Key) + len(m.Value)
		switch m.Expect.Kind {
		case adapters.ExpectAny:
		case adapters.ExpectAbsent, adapters.ExpectVersion:
			reads = append(reads, i)
		default:
			return nil, unknownExpect("write_atomic", i, m.Expect.Kind)
		}
		switch {
		case m.Check, m.Delete && m.Expect.Kind == adapters.ExpectAbsent:
			// Nothing to send; the read decides.
		case m.Delete:
			muts[i] = &datastorepb.Mutation{Operation: &datastorepb.Mutation_Delete{Delete: k}}
		default:
			if muts[i], err = entityMutation(m.Value, k, m.Expect.Kind == adapters.ExpectAbsent); err != nil {
				return nil, fmt.Errorf("datastore: write_atomic: mutation %d: %w", i, err)
			}
		}
	}
	if size > maxCommitBytes {
		return nil, fmt.Errorf("datastore: write_atomic: %d bytes, a commit holds at most %d: %w", size, maxCommitBytes, adapters.ErrInvalid)
	}
	ctx = routed(ctx, p)
	var vers []adapters.Version
	err = s.rerun(ctx, "write_atomic", func(err error) bool { return errors.Is(err, errTxnAgain) }, func(ctx context.Context) (err error) {
		vers, err = s.atomicOnce(ctx, p, ms, muts, reads, ranges)
		return err
	})
	return vers, err
}

// atomicOnce runs WriteAtomic's transaction once; errTxnAgain (wrapped)
// means it applied nothing and may be run again. ctx must be routed.
func (s *Store) atomicOnce(ctx context.Context, p dscodec.Partition, ms []adapters.Mutation, muts []*datastorepb.Mutation, reads, ranges []int) ([]adapters.Version, error) {
	again := func(err error) error {
		if c := status.Code(err); !errors.Is(err, adapters.ErrUnknownOutcome) && (c == codes.Aborted || c == codes.AlreadyExists) {
			return fmt.Errorf("%w: %w", errTxnAgain, err)
		}
		return err
	}
	req := &datastorepb.CommitRequest{ProjectId: p.Project, DatabaseId: p.Database, Mode: datastorepb.CommitRequest_TRANSACTIONAL}
	if len(reads) == 0 && len(ranges) == 0 {
		req.TransactionSelector = &datastorepb.CommitRequest_SingleUseTransaction{SingleUseTransaction: readWrite}
	} else {
		tx, err := s.begin(ctx, p, readWrite)
		if err != nil {
			return nil, again(err)
		}
		// Whatever ends the attempt short of a commit the service
		// answered rolls the transaction back.
		committed := false
		defer func() {
			if !committed {
				s.rollback(ctx, p, tx)
			}
		}()
		conflicts, err := s.checkIn(ctx, p, ms, reads, ranges, tx)
		if err != nil {
			return nil, again(err)
		}
		if len(conflicts) > 0 {
			return nil, &adapters.ConflictError{Conflicts: conflicts}
		}
		req.TransactionSelector = &datastorepb.CommitRequest_Transaction{Transaction: tx}
		resp, err := s.commit(ctx, req, muts)
		if err != nil {
			return nil, again(err)
		}
		committed = true
		return versions(ms, muts, resp), nil
	}
	resp, err := s.commit(ctx, req, muts)
	if err != nil {
		return nil, again(err)
	}
	return versions(ms, muts, resp), nil
}

// readWrite is the options of a read-write transaction.
var readWrite = &datastorepb.TransactionOptions{Mode: &datastorepb.TransactionOptions_ReadWrite_{ReadWrite: &datastorepb.TransactionOptions_ReadWrite{}}}

// begin begins a transaction with opts. ctx must be routed.
func (s *Store) begin(ctx context.Context, p dscodec.Partition, opts *datastorepb.TransactionOptions) ([]byte, error) {
	var tx []byte
	err := s.call(ctx, "beginTransaction", func(ctx context.Context) error {
		resp, err := s.client.BeginTransaction(ctx, &datastorepb.BeginTransactionRequest{ProjectId: p.Project, DatabaseId: p.Database, TransactionOptions: opts})
		if err == nil {
			tx = resp.GetTransaction()
		}
		return err
	})
	return tx, err
}

// checkIn reads, inside transaction tx, the keys whose preconditions the
// group states (reads) and the ranges it checks, and returns the
// mutations whose precondition does not hold, with Exists and Current as
// the transaction read them.
func (s *Store) checkIn(ctx context.Context, p dscodec.Partition, ms []adapters.Mutation, reads, ranges []int, tx []byte) ([]adapters.Conflict, error) {
	keys := make([][]byte, len(reads))
	for j, i := range reads {
		keys[j] = ms[i].Key
	}
	found, err := s.lookupIn(ctx, p, keys, tx)
	if err != nil {
		return nil, err
	}
	var conflicts []adapters.Conflict
	for _, i := range reads {
		r, exists := found[string(ms[i].Key)]
		holds := !exists
		if ms[i].Expect.Kind == adapters.ExpectVersion {
			holds = exists && r.Version == ms[i].Expect.Version
		}
		if !holds {
			conflicts = append(conflicts, adapters.Conflict{Index: i, Key: ms[i].Key, Exists: exists, Current: r.Version})
		}
	}
	for _, i := range ranges {
		got, err := s.rangeIn(ctx, p, ms[i], tx)
		if err != nil {
			return nil, err
		}
		if !adapters.SameRange(got, ms[i].Range.Records) {
			conflicts = append(conflicts, adapters.Conflict{Index: i, Key: ms[i].Key, Exists: len(got) > 0})
		}
	}
	return conflicts, nil
}

// commit sends req with the mutations that send something (muts[i] nil:
// nothing) and returns the service's answer.
func (s *Store) commit(ctx context.Context, req *datastorepb.CommitRequest, muts []*datastorepb.Mutation) (*datastorepb.CommitResponse, error) {
	for _, m := range muts {
		if m != nil {
			req.Mutations = append(req.Mutations, m)
		}
	}
	resp, _, err := s.sendCommit(ctx, req, req.GetTransaction() == nil) // single-use: ExpectAny upserts and deletes
	if err == nil && len(resp.GetMutationResults()) != len(req.Mutations) {
		return nil, fmt.Errorf("datastore: write_atomic: commit of %d mutations answered %d results", len(req.Mutations), len(resp.GetMutationResults()))
	}
	return resp, err
}

// versions returns each mutation's new version from a commit's results
// ("" for deletes, checks and mutations that sent nothing).
func versions(ms []adapters.Mutation, muts []*datastorepb.Mutation, resp *datastorepb.CommitResponse) []adapters.Version {
	vers := make([]adapters.Version, len(ms))
	results := resp.GetMutationResults()
	j := 0
	for i, m := range muts {
		if m == nil {
			continue
		}
		if !ms[i].Delete {
			vers[i] = version(results[j].GetVersion())
		}
		j++
	}
	return vers
}

// rangeIn reads a range check's range inside the read-write transaction
// tx where the backend allows it: Firestore in Datastore mode takes any
// query in a transaction and holds what it read until the commit. Legacy
// Datastore (and its emulator) allows only ancestor queries there
// (INVALID_ARGUMENT), and the Firestore emulator fails a kindless query in
// a read-write transaction (UNKNOWN, with no message), though it takes one
// in a read-only transaction. After the first such refusal the adapter
// reads range checks just outside the transaction: that still catches
// every change made before the read, though not one that lands between it
// and the commit.
func (s *Store) rangeIn(ctx context.Context, p dscodec.Partition, m adapters.Mutation, tx []byte) ([]adapters.Record, error) {
	if !s.rangesOutside.Load() {
		got, _, err := s.getRange(ctx, p, m.Key, m.Range.End, 0, tx)
		if !refusedInTxn(err) {
			return got, err
		}
		if !s.rangesOutside.Swap(true) {
			code, msg, _ := adapters.ServiceStatusOf(err)
			s.opts.Logger.Info("datastore adapter: the backend refuses key-range queries inside read-write transactions; range checks run just before the commit, outside its transaction",
				"status", code, "message", msg)
		}
	}
	got, _, err := s.getRange(ctx, p, m.Key, m.Range.End, 0, nil)
	return got, err
}

// refusedInTxn reports whether err is the backend refusing a key-range
// query inside a transaction (see rangeIn).
func refusedInTxn(err error) bool {
	var se serviceError
	if !errors.As(err, &se) {
		return false
	}
	st := status.Convert(se.err)
	return st.Code() == codes.Unknown || st.Code() == codes.InvalidArgument && strings.Contains(strings.ToLower(st.Message()), "transaction")
}

// rollback ends transaction tx, which will not commit, so the service
// frees what it holds, even when ctx (routed) has ended; a failure is only
// logged (the transaction expires).
func (s *Store) rollback(ctx context.Context, p dscodec.Partition, tx []byte) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	var err error
	for attempt := range rollbackAttempts {
		if attempt > 0 {
			// A rollback that did not reach the service leaves the
			// transaction's locks (Firestore) until it expires: try
			// again. One that did and lost its answer is refused as
			// unknown the second time, which ends the loop.
			select {
			case <-time.After(s.opts.RetryBase << attempt):
			case <-ctx.Done():
			}
		}
		_, err = s.client.Rollback(ctx, &datastorepb.RollbackRequest{ProjectId: p.Project, DatabaseId: p.Database, Transaction: tx})
		if err == nil || !retryable(err) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		s.opts.Logger.Debug("datastore adapter: rollback failed", "err", err)
	}
}

// rollbackTimeout bounds a rollback, its retries included; rollbackAttempts
// bounds how often it is sent.
const (
	rollbackTimeout  = 5 * time.Second
	rollbackAttempts = 3
)
