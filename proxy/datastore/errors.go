package datastore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/txn"
)

// Datastore's own messages for the errors clients see most.
const (
	msgContention   = "too much contention on these datastore entities. please try again."
	msgExpiredTxn   = "The referenced transaction has expired or is no longer valid."
	msgReadOnlyTxn  = "Cannot modify entities in a read-only transaction."
	msgExists       = "entity already exists"
	msgNoEntity     = "no entity to update"
	msgShuttingDown = "nemo is shutting down; retry against the next instance"
	// nemo's own: a read_time read in coherence exclusive (txn.ErrPastRead).
	msgPastRead = "nemo serves reads at a read_time only in coherence shared: in coherence exclusive the store's past lacks the writes nemo acknowledged and has not yet written back"
)

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// toStatus maps an engine error to the gRPC status Datastore would return.
// Status errors pass through.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		return err // a status made here (status.FromError would also unwrap the backend's, text and all)
	}
	if st := engineStatus(err); st != nil {
		return st
	}
	if st := failureStatus(err); st != nil {
		return st
	}
	return status.Errorf(codes.Internal, "internal error: %v", err)
}

// engineStatus is the status of the engine's own refusals (lease,
// contention, the transaction's state, limits, shutdown), nil for
// another error. toStatus asks it first.
func engineStatus(err error) error {
	switch {
	case errors.Is(err, txn.ErrOneKeyspace):
		// Not retryable (the same transaction is refused again), as the
		// service refuses a transaction over too many entity groups.
		return status.Errorf(codes.InvalidArgument, "this nemo keeps its commit logs in the backend (wal.location backend): a transaction may write one namespace only: %v", err)
	case errors.Is(err, txn.ErrOwnersDiffer):
		// Coherence partitioned: the transaction's namespaces are owned
		// by different nemo replicas. Retryable: ownership moves.
		return status.Errorf(codes.Aborted, "this transaction spans namespaces owned by different nemo replicas (coherence.mode partitioned); nothing was written: %v", err)
	case errors.Is(err, txn.ErrOwnerUnavailable) && !errors.Is(err, adapters.ErrUnknownOutcome):
		return retryAfter(status.Newf(codes.Unavailable, "the nemo replica that owns the namespace could not be reached; nothing was written, retry: %v", err), time.Second)
	case errors.Is(err, txn.ErrNotLeaseHolder):
		return status.Errorf(codes.FailedPrecondition, "this nemo may not write the namespace: %v; use the nemo that holds the lease, or coherence.mode shared", err)
	case errors.Is(err, txn.ErrLeaseUnavailable):
		return retryAfter(status.Newf(codes.Unavailable, "this nemo could not confirm its lease of the namespace (is the backend reachable?); nothing was written, retry: %v", err), time.Second)
	case errors.Is(err, txn.ErrStoreAborted):
		// The backend aborted the commit for contention: its own answer.
		if st, ok := backendStatus(err); ok {
			return st.Err()
		}
		return status.Error(codes.Aborted, msgContention)
	case errors.Is(err, txn.ErrConflict):
		return status.Error(codes.Aborted, msgContention)
	case errors.Is(err, txn.ErrIdleTimeout), errors.Is(err, txn.ErrDone):
		return status.Error(codes.InvalidArgument, msgExpiredTxn)
	case errors.Is(err, txn.ErrAborted):
		// Aborted for a reason other than a conflict (drain, commit log):
		// the client should start over.
		return status.Error(codes.Aborted, fmt.Sprintf("transaction aborted: %v", err))
	case errors.Is(err, txn.ErrExists):
		return status.Error(codes.AlreadyExists, msgExists)
	case errors.Is(err, txn.ErrNotFound):
		return status.Error(codes.NotFound, msgNoEntity)
	case errors.Is(err, txn.ErrReadOnly):
		return status.Error(codes.InvalidArgument, msgReadOnlyTxn)
	case errors.Is(err, txn.ErrPastRead):
		return status.Error(codes.FailedPrecondition, msgPastRead)
	case errors.Is(err, txn.ErrKeyTooLarge):
		return status.Error(codes.InvalidArgument, "The key is too long.")
	case errors.Is(err, txn.ErrValueTooLarge):
		return status.Error(codes.InvalidArgument, "entity is too big")
	case errors.Is(err, txn.ErrInvalidKey):
		return status.Errorf(codes.InvalidArgument, "invalid key: %v", err)
	case errors.Is(err, txn.ErrClosed), errors.Is(err, txn.ErrBufferClosed):
		return status.Error(codes.Unavailable, msgShuttingDown)
	}
	return nil
}

// storeStatus is the status of a call the frontend made to the backend
// itself, outside the engine (the metadata entities the backend lists):
// like a store failure the engine reports, the service's own status and
// message (the Firestore emulator refuses __kind__ queries with
// INVALID_ARGUMENT), or the request's deadline or cancellation.
func storeStatus(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return toStatus(err)
	}
	return toStatus(fmt.Errorf("%w: %w", txn.ErrStore, err))
}

// failureStatus is the status of a failure of the backend or of the
// call's context, nil for another error. toStatus asks it after
// engineStatus.
func failureStatus(err error) error {
	switch {
	case errors.Is(err, adapters.ErrUnknownOutcome):
		// A write the backend may or may not have applied: the service's
		// own ambiguity, as it answered (never a refusal, never a
		// success).
		if st, ok := backendStatus(err); ok {
			return st.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return status.Error(codes.DeadlineExceeded, "deadline exceeded")
		}
		return status.Errorf(codes.Unavailable, "backend unavailable: %v", err)
	case errors.Is(err, txn.ErrStore):
		// The backend failed the call: its own status and message (a
		// value it will not take, an outage that outlived the retries),
		// never one made up here.
		if st, ok := backendStatus(err); ok {
			return st.Err()
		}
		if errors.Is(err, adapters.ErrInvalid) {
			return status.Error(codes.InvalidArgument, "the backend refused the request as invalid")
		}
		return status.Errorf(codes.Unavailable, "backend unavailable: %v", err)
	case errors.Is(err, txn.ErrCommitLog):
		return status.Errorf(codes.Unavailable, "commit not durable: %v", err)
	case errors.Is(err, txn.ErrBackpressure):
		return status.Errorf(codes.Unavailable, "write-back is behind, retry later: %v", err)
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request cancelled")
	}
	return nil
}

// retryAfter is st's error saying the call did nothing and may be sent
// again after d: a google.rpc.RetryInfo detail, which the REST API turns
// into a Retry-After header and the gRPC service into a trailers-only
// answer with grpc-retry-pushback-ms (bounded), so that clients' retry
// policies retry it.
func retryAfter(st *status.Status, d time.Duration) error {
	with, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	if err != nil {
		return st.Err()
	}
	return with.Err()
}

// retryDelay is the delay a retryAfter error asks for, if err is one.
func retryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// backendStatus finds the backend's own status in err's chain: the
// Datastore backend's answer, as the service gave it.
func backendStatus(err error) (*status.Status, bool) {
	var gs interface{ GRPCStatus() *status.Status }
	if errors.As(err, &gs) {
		if st := gs.GRPCStatus(); st != nil && st.Code() != codes.OK {
			return st, true
		}
	}
	return nil, false
}
