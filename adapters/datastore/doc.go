// Package datastore is nemo's Store over Google Cloud Datastore's v1 gRPC
// API (the datastorepb client, so entities pass through unchanged). A
// keyspace is one partition (dscodec.Partition: project, database,
// namespace); keys are dscodec path encodings and values dscodec entity
// values. Get is a batched Lookup that follows `deferred` keys until every
// key is found or missing (an answer that leaves a key out is an error,
// never an absence); GetRange is a kindless __key__-bounded RunQuery in
// key order, paged with cursors, whose byte bounds are translated to the
// tightest Datastore key bounds and the results trimmed to the exact byte
// range. A batch is the last only when the service says so (finished: not
// NOT_FINISHED, and not a limit reached), whatever its length: a short or
// empty NOT_FINISHED batch goes on from its end cursor, and each batch is
// reported (adapters.ReportBatch) for the buffer's check. ListKeyspaces
// and MetadataEntities (the __kind__ and __property__ entities the
// frontend runs metadata queries over) follow batches the same way.
// Upsert and Delete are non-transactional Commits in batches within
// the service limits (500 mutations, 10 MiB; a batch that goes out as a
// transaction, see write.go, also within 25 entity groups unless the
// backend is Firestore in Datastore mode, which has no such limit: the
// legacy Datastore emulator refuses a 26th root key in a transaction, and
// is never sent one). Reads report each entity's
// version (EntityResult.version, in decimal). Write preconditions map onto
// insert and base_version mutations (a batch holding an insert is committed
// as a single-use transaction); write.go explains how conflicts are found
// and what each costs. WriteAtomic (adapters.AtomicWriter) is one
// transactional commit of at most 500 mutations: its preconditions are
// checked by a Lookup inside a read-write transaction, not by base_version
// (a mismatch there skips one mutation and applies the rest), so a refused
// group applies nothing, an ABORTED transaction is run again a bounded
// number of times and then fails with adapters.ErrAborted carrying the
// service's answer, and a transaction that does not commit is rolled back
// (atomic.go). Snapshot reads through read-only transactions
// (snapshot.go). The two Datastore backends differ, and the adapter learns
// which it faces from their answers (Firestore's carry read and update
// times) rather than from configuration: legacy
// Datastore (and its emulator) allows only ancestor queries in a
// transaction and honours base_version; Firestore in Datastore mode takes
// any query in a read-only transaction, its emulator fails a kindless one
// in a read-write transaction, and the emulator ignores base_version, so
// version-conditioned writes are checked in a transaction unless the
// backend showed itself legacy (write.go). Failed calls carry the
// service's status (adapters.ServiceError). The Store also forwards
// AllocateIds and ReserveIds, which the frontend uses for incomplete keys.
//
// Calls and retries. The adapter calls the datastorepb client on its own
// connection: the Go library publishes no generated client for the
// Datastore data API (cloud.google.com/go/datastore, up to v1.28.1, ships
// apiv1/datastorepb only; its own Client calls the datastorepb client too,
// retrying through a gRPC service config). Each call runs under
// gax.Invoke, the retry loop of Google's generated clients, paused by a
// gax.Backoff (bounds from Options.RetryBase doubling up to 5s, full
// jitter), at most Options.Retries times. What is retried follows the
// service's error guide and nemo's rule for unknown outcomes, not the
// service's published client defaults (Lookup, RunQuery and ReserveIds
// retry UNAVAILABLE and DEADLINE_EXCEEDED; BeginTransaction, Commit,
// Rollback and AllocateIds nothing; 60s per call) nor the Go library's
// (UNAVAILABLE for every method, Commit included):
//
//   - Lookup, RunQuery, BeginTransaction, AllocateIds and ReserveIds
//     retry UNAVAILABLE, DEADLINE_EXCEEDED and RESOURCE_EXHAUSTED (the
//     guide: retry with exponential backoff) and ABORTED (the request
//     conflicted with another; the guide: retry it, or the whole
//     transaction in one). A begin whose answer was lost leaves a
//     transaction that holds nothing and expires; an AllocateIds whose
//     answer was lost wastes ids, which are never handed out again.
//     Inside a transaction ABORTED is not retried: the transaction is
//     over, and it is run again from its start, at most 5 times, then
//     fails with adapters.ErrAborted.
//   - No retry and no new run starts that cannot be expected to end
//     before the caller's deadline (the pause and half as long again as
//     the last attempt): the call fails then with the last answer (a
//     transaction with the service's ABORTED, as adapters.ErrAborted),
//     while the caller still has time to pass on that nothing was
//     applied, instead of being cut short with the deadline's error.
//   - Commit retries the same codes (ABORTED only outside a transaction),
//     but a commit that may have been applied (UNAVAILABLE,
//     DEADLINE_EXCEEDED) and is not idempotent (an insert, a base
//     version, a read-write transaction) ends, unless a retry succeeds,
//     in adapters.ErrUnknownOutcome with the service's error, never in
//     the conflict its own first application would cause (write.go). A
//     retry below the adapter (the Go library's service config) would
//     hide that answer, so the connection Open dials has gRPC's retries
//     disabled, whatever service config it is given (only gRPC's
//     transparent retries remain: they resend what the server never
//     processed).
//   - Rollback is never retried; it is bounded by 5s even when the
//     caller's context has ended, and a failure is only logged (the
//     transaction expires).
//   - Deadlines are the caller's: the cache bounds each store call by
//     cache.Options.StoreTimeout, a frontend by its request's; the adapter
//     adds none.
//
// Every call carries the routing headers the service routes a database's
// calls by, as the Go library sends them: x-goog-request-params
// (project_id, and database_id for a named database) and
// google-cloud-resource-prefix (routed). The Store dials the emulator
// named by DATASTORE_EMULATOR_HOST (plaintext, no credentials) or the
// production endpoint with Google default credentials, with
// Options.Interceptors on the connection (backend.contract:
// adapters/contract).
//
// LeaseCodec spells the lease records of txn/lease (coherence exclusive)
// in this backend: one entity of kind NemoLease per namespace, in the
// default namespace of its project and database.
package datastore
