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
// the service limits (500 mutations, 10 MiB). Reads report each entity's
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
// which it faces from their answers rather than from configuration: legacy
// Datastore (and its emulator) allows only ancestor queries in a
// transaction and honours base_version; Firestore in Datastore mode takes
// any query in a read-only transaction, its emulator fails a kindless one
// in a read-write transaction, and the emulator ignores base_version, so
// version-conditioned writes are checked in a transaction unless the
// backend showed itself legacy (write.go). Failed calls carry the
// service's status (adapters.ServiceError). Calls retry UNAVAILABLE,
// ABORTED, RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED with jittered
// exponential backoff, except that a commit that may have been applied
// (UNAVAILABLE, DEADLINE_EXCEEDED) and is not idempotent (an insert, a base
// version, a read-write transaction) ends, unless a retry succeeds, in
// adapters.ErrUnknownOutcome with the service's error, never in the
// conflict its own first application would cause (write.go). The Store
// also forwards AllocateIds and ReserveIds, which the frontend uses for
// incomplete keys. It dials the emulator named by DATASTORE_EMULATOR_HOST
// (plaintext, no credentials) or the production endpoint with Google
// default credentials, with Options.Interceptors on the connection
// (backend.contract: adapters/contract).
package datastore
