// Package aztable is the Azure Table Storage backend: an adapters.Store
// over the aztables SDK. A keyspace is one table; keys and values are the
// tablecodec encodings, so GetRange becomes a PartitionKey/RowKey-bounded
// OData query with paging, and writes become entity group transactions
// split at the service's limits (100 operations, one partition, 4 MiB)
// with a fallback to single operations.
//
// Reads parse the service's own bytes (tablecodec): the SDK decodes an
// entity or a query page into maps and encodes each again, losing the
// difference between 2 and 2.0. A per-call policy (bodyPolicy) keeps the
// body of a successful read for the adapter and hands the SDK an empty
// object, so the SDK does not decode it at all.
//
// Direct requests (direct.go, directwrite.go). A Store with an account key
// also sends requests of its own, outside the SDK: the request the SDK
// would send (same URL, headers and Shared Key Lite signature) through the
// same HTTP client, retried as its pipeline retries (same options, status
// codes, Retry-After), every attempt reported to the write's unsureNote,
// and a refusal returned as the *azcore.ResponseError the SDK returns, so
// classify, refusal and the unknown-outcome rules treat both paths alike.
// One directClient sends them all: point reads and writes (single
// operations and entity group transactions, whose $batch body it builds).
// Around a point read or a write the SDK cost more CPU than the HTTP
// exchange itself; and aztables v1.4.1 refuses to send any write of the
// partition "", although the service stores such entities. A Store
// authenticated with a token credential (Microsoft Entra ID) sends only
// the partition "" directly, each attempt through an azcore pipeline
// holding just the SDK's bearer-token policy; its other reads and writes
// stay with the SDK. Queries and table operations always take the SDK's
// path. A Store opened with a connection string holding a shared access
// signature (directsas.go) sends its point reads and writes directly, as
// one with a key does, carrying the signature's query
// parameters (sasTransport; a $batch's operations carry them in their
// URLs too, as the SDK's do) and no Authorization header. (aztables would
// send such a string's requests to <AccountName>.table.core.windows.net
// whatever its TableEndpoint says; the Store addresses them to the
// endpoint a key's connection string would name.) The HTTP client keeps
// up to 256 idle connections to the service, so concurrent calls reuse
// them. The point reads of a Store with an account key or a SAS take a
// lean HTTP/1.1 transport in front of it (h1.go): kept-alive connections of
// its own, each exchange written and read on the caller's goroutine
// (net/http's client hands every request to a writer and a reader
// goroutine), with net/http's request writer and answer parser; writes,
// and endpoints reached through a proxy, keep net/http's transport.
// Close closes the idle connections of both (the node closes its store
// when it stops).
//
// A Get of several keys reads each partition's keys with queries naming
// up to 14 row keys (PartitionKey eq pk and (RowKey eq a or ...): the
// service permits 15 discrete comparisons in a filter), and a key alone in
// its partition with a point read. Settling a written-back transaction of
// 100 entities whose answer was lost, or filling in the versions of
// refused writes, so costs 8 requests rather than 100.
//
// Versions are the entities' ETags exactly as the service returns them
// (odata.etag in a read, the ETag header of a write or of its operation's
// response inside a transaction). A write's precondition picks its
// operation: ExpectAny upserts with insert-or-replace and deletes with
// If-Match * (an absent entity is fine); ExpectAbsent upserts with insert
// (409 EntityAlreadyExists refuses it) and, for a delete, is checked by
// reading the key first; ExpectVersion replaces or deletes with If-Match: version
// (412 refuses it, 404 too: the entity is absent). A transaction with one
// failing operation is refused whole; its answer names the operation by
// index, which is reported as a conflict while the rest is submitted again
// (see writeChunk), so every write whose precondition holds is applied.
// Calls per partition chunk: one transaction when nothing is refused; one
// more per refused write (after maxBatchAttempts, the rest one by one);
// plus one read of the refused keys whose current versions the service
// did not say. The SDK pipeline retries failed attempts (below); a
// conditional write whose first attempt was applied although its answer
// was lost is refused on retry (its own write changed the version), so a
// conflict after a transport failure may be the write itself.
//
// WriteAtomic (adapters.AtomicWriter) sends its group as one entity group
// transaction: one partition, each entity once, at most 100 operations and
// 4 MiB, else adapters.ErrInvalid before anything is sent; an ExpectAbsent
// delete cannot be expressed in a transaction and is ErrInvalid too. A
// refused precondition refuses the whole group (*adapters.ConflictError
// naming the operation the service named); an ExpectAny delete of an
// absent entity, which fails a transaction with 404, is dropped and the
// rest submitted again. Entities WriteAtomic wrote keep the service's
// stamps (the stamp memo below forgets them), and Stamped
// (adapters.Stamper) derives those stamps from the answered ETag, so the
// buffer can hold the entity as a read would return it.
//
// ETags a client holds: the frontend stamps each write with its own
// Timestamp and derives the entity's ETag from it, while the service
// ignores a written Timestamp and stamps its own (and its own ETag). So an
// entity evicted from the buffer and read again would carry the service's
// stamps, and a client's ETag from nemo would fail with 412 although
// nothing changed. The Store therefore remembers, for each entity it
// wrote, the service's ETag its write produced next to the Timestamp and
// ETag of the value it wrote; a read (Get, GetRange) that finds the
// service's ETag unchanged returns the value with nemo's stamps, a read
// that finds another ETag (the entity changed elsewhere) returns the
// service's stamps, a new ETag, and forgets the entity; a delete forgets
// it too. Record.Version is always the service's ETag (write-backs are
// conditioned on it). The memory is bounded: Options.ETagMemory entries
// (default DefaultETagMemory, 100 000), replaced by CLOCK, about 100 bytes
// plus the table name and key each (about 16 MB for 100 000 entities with
// 60-byte keys). An entity the memory no longer holds reads with the
// service's stamps: its ETag changes once, and a client holding the old
// one gets 412 once. The memory lives in the process only and is lost on
// a restart: every entity nemo wrote back before the restart reads with
// the service's stamps when it is next fetched from the store, so its
// ETag changes once, although the entity did not change; clients holding
// ETags from before the restart get 412 and must read the entity again.
// (Writes still in the WAL at the restart are replayed into the buffer
// with nemo's stamps, written back afterwards and remembered then, so
// their ETags survive.)
//
// GetRange follows the pager's continuation headers to their end: a page
// is the last only without them, however short or empty (each page is
// reported with adapters.ReportBatch for the buffer's check). A write
// whose attempt failed in a way that may have applied it (500, 502, 504,
// a transport error) and whose retry is refused or fails is
// adapters.ErrUnknownOutcome, not a conflict (unsure.go).
//
// Throttling (429, 503) is retried with exponential backoff by the SDK
// pipeline and surfaces as a *ThrottleError, which matches
// adapters.ErrUnavailable, when it persists. The catalog keyspace
// tablecodec.TablesKeyspace reads the account's table list (its records
// have no versions, and its writes change nothing, preconditions
// included), and tables are created and deleted through
// adapters.KeyspaceAdmin, which the engine calls. Credentials: a connection
// string (with an account key or a shared access signature), an account
// name and key, or a token credential (by default the azidentity
// DefaultAzureCredential chain, which covers workload identity on
// Kubernetes).
//
// LeaseCodec spells the lease records of txn/lease (coherence exclusive)
// in this backend: one entity per table in the reserved table nemoleases.
package aztable
