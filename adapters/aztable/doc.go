// Package aztable is the Azure Table Storage backend: an adapters.Store
// over the aztables SDK. A keyspace is one table; keys and values are the
// tablecodec encodings, so GetRange becomes a PartitionKey/RowKey-bounded
// OData query with paging, and writes become entity group transactions
// split at the service's limits (100 operations, one partition, 4 MiB)
// with a fallback to single operations.
//
// Versions are the entities' ETags exactly as the service returns them
// (odata.etag in a read, the ETag header of a write or of its operation's
// response inside a transaction). A write's precondition picks its
// operation: ExpectAny upserts with insert-or-replace and deletes with
// If-Match * (an absent entity is fine); ExpectAbsent upserts with insert
// (409 EntityAlreadyExists refuses it) and, for a delete, is checked with a
// point read; ExpectVersion replaces or deletes with If-Match: version
// (412 refuses it, 404 too: the entity is absent). A transaction with one
// failing operation is refused whole; its answer names the operation by
// index, which is reported as a conflict while the rest is submitted again
// (see writeChunk), so every write whose precondition holds is applied.
// Calls per partition chunk: one transaction when nothing is refused; one
// more per refused write (after maxBatchAttempts, the rest one by one);
// plus one point read per refused key whose current version the service
// did not say. The SDK pipeline retries failed attempts (below); a
// conditional write whose first attempt was applied although its answer
// was lost is refused on retry (its own write changed the version), so a
// conflict after a transport failure may be the write itself.
//
// Throttling (429, 503) is retried with exponential backoff by the SDK
// pipeline and surfaces as a *ThrottleError, which matches
// adapters.ErrUnavailable, when it persists. The catalog keyspace
// tablecodec.TablesKeyspace reads the account's table list (its records
// have no versions, and its writes change nothing, preconditions
// included), and tables are created and deleted through
// adapters.KeyspaceAdmin, which the engine calls. Credentials: a connection
// string, an account name and key, or a token credential (by default the
// azidentity DefaultAzureCredential chain, which covers workload identity on
// Kubernetes).
package aztable
