// Package contract makes a real backend (Azurite, the Datastore emulator,
// or the services themselves) answer the way the services' API contracts
// allow and production does, where the emulators are friendlier: it sits
// under nemo's real adapters, on the wire, so every reader and writer of
// a backend (range reads, point reads, key listings, metadata queries,
// write-back, write-through, leases) meets it, and nemo's own adapter code
// runs against the real emulator underneath. It is seeded and
// deterministic: one generator, drawn in call order, so a run whose calls
// come from one goroutine replays exactly (concurrent calls draw in the
// order they arrive). Tests use it directly; `nemo serve` wires it from
// backend.contract.
//
// For Datastore it is a gRPC unary client interceptor (Interceptor) on the
// adapter's connection:
//
//   - RunQuery batches are cut short at a random point, some empty, with
//     more_results NOT_FINISHED and an end_cursor where the cut is, also
//     while the batch is still skipping an offset (skipped_results below
//     the offset, skipped_cursor and end_cursor at the cut); the client
//     continues from it. A cut at a result takes that result's own cursor;
//     a cut before any result (an empty batch, or inside the skipped
//     results) asks the backend for the position with the same query at
//     offset n and limit 0 (one extra call, a probe, inside the same
//     transaction if any), so every cursor is the backend's own. GQL
//     queries are cut only after a result.
//   - Lookup answers part of the keys as deferred (never all of them), as
//     the service does under load; the client asks again.
//   - Transient errors on any call: UNAVAILABLE, and ABORTED where the
//     service gives it (a Commit, or a read inside a transaction, never
//     one of a read-only transaction, which reads a snapshot), before
//     the call reaches the backend; and UNAVAILABLE after it did (a lost
//     reply: the backend applied the call, a write included).
//
// For Azure Table Storage it is a policy.Transporter (Transport) under
// the aztables client's pipeline, below its retry policy:
//
//   - Query pages (entities and the table list) cut short: a smaller
//     $top than asked (page sizes below 1,000), the backend's own
//     continuation headers (x-ms-continuation-NextPartitionKey and
//     NextRowKey, or NextTableName) carrying the rest; and empty pages
//     that carry continuation headers without reaching the backend: the
//     request's own, or at the start of a query a token of the contract's
//     (continuation tokens are opaque to clients) that it takes back
//     off the next request.
//   - Transient errors on any call: 503 ServerBusy and 500
//     OperationTimedOut before the call reaches the backend, and 500
//     OperationTimedOut after it did (the backend applied it, a write
//     included), with the service's error body and headers.
//
// DefiniteWrites keeps writes definite: they then fail only in ways the
// services document as not applied (Azure 503 ServerBusy, Datastore
// ABORTED), for suites that assert every write's exact outcome where a
// write reaches the store before it is acknowledged (coherence mode
// shared). Without it, a write the backend may have applied ends in the
// service's own ambiguity, which nemo must pass on (see
// adapters.ErrUnknownOutcome).
//
// Stats counts what was injected; LoseNext makes the next calls of a kind
// lose their replies, for tests of one exact case. A Contract is safe for
// concurrent use.
package contract
