// Package aztable is the Azure Table Storage backend: an adapters.Store
// over the aztables SDK. A keyspace is one table; keys and values are the
// tablecodec encodings, so GetRange becomes a PartitionKey/RowKey-bounded
// OData query with paging, Upsert becomes entity group transactions
// (insert-or-replace) split at the service's limits (100 operations, one
// partition, 4 MiB) with a fallback to single operations, and Delete deletes
// with If-Match * and ignores absent entities. Throttling (429, 503) is
// retried with exponential backoff by the SDK pipeline and surfaces as a
// *ThrottleError, which matches adapters.ErrUnavailable, when it persists.
// The catalog keyspace tablecodec.TablesKeyspace reads the account's table
// list (its writes change nothing), and tables are created and deleted
// through adapters.KeyspaceAdmin, which the engine calls. Credentials: a connection
// string, an account name and key, or a token credential (by default the
// azidentity DefaultAzureCredential chain, which covers workload identity on
// Kubernetes).
package aztable
