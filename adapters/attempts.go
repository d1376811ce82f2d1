package adapters

import "context"

type singleAttemptKey struct{}

// WithSingleAttempt returns ctx asking the store to make each call it
// carries once: no retries of its own, and none of their pauses. It is for
// a caller that settles a failed or unanswered call itself and must do so
// quickly, such as the lease renewer (txn/lease), which reads the record
// back after a write it is unsure of and lapses if a renewal round takes
// longer than its margin: a backoff the adapter sleeps inside one of its
// calls spends that margin without settling anything. A failure is
// reported as it would be once retries are over (a write whose attempt
// went unanswered may have been applied).
func WithSingleAttempt(ctx context.Context) context.Context {
	return context.WithValue(ctx, singleAttemptKey{}, true)
}

// SingleAttempt reports whether ctx asks for one attempt per call
// (WithSingleAttempt). Stores that retry check it before each retry.
func SingleAttempt(ctx context.Context) bool {
	v, _ := ctx.Value(singleAttemptKey{}).(bool)
	return v
}
