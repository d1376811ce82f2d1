// Package datastore is nemo's Google Cloud Datastore dialect: the
// google.datastore.v1.Datastore gRPC service (datastorepb.DatastoreServer)
// and the v1 REST JSON API, served on one listener, so unmodified clients
// work with DATASTORE_EMULATOR_HOST pointed at nemo: the proxy sends HTTP/2
// prior-knowledge connections to GRPCServer (grpc-go's own transport) and
// HTTP/1.x ones to the REST routes Register mounts on echo. With
// Options.Token, a client that is not on loopback (by its connection's peer
// address) must send "authorization: Bearer <token>" on either (auth.go);
// clients on loopback send nothing, as emulator clients do. Each partition
// (project, database, namespace) is one engine keyspace whose keys are the
// dscodec order-preserving path encoding and whose values are the entity
// with its version and create/update times. Lookup and Commit are point
// operations on the engine; BeginTransaction, Commit and Rollback map onto
// engine transactions: reads in a read-write transaction take shared
// locks, upgraded when the commit writes; a conflicting request waits for
// the lock, and only a deadlock victim or a wait past txn.lock_wait comes
// back as ABORTED, which the clients retry; a read-only transaction reads
// the engine's snapshot and locks nothing (in coherence mode shared, the
// backend's own snapshot); a Lookup in a transaction reads its keys at
// once; a non-transactional commit applies the mutations before one the
// entity's state refuses, as the service does; RunQuery and RunAggregationQuery read a covering key
// range through the engine's serializable range scan and evaluate kinds,
// filters, orders, projections, distinct-on, offsets, limits and cursors
// locally with Datastore's value order and array semantics, so every
// committed write is reflected whatever the backend. A GQL query is
// translated into the structured query the service would build from it
// (internal/gql) and runs the same way, in transactions too. Metadata
// queries (__namespace__, __kind__, __property__) run the same way over
// virtual entities computed from the engine or, with nothing unflushed,
// listed by the backend (metadata.go). RunAggregationQuery aggregates the
// nested query's results as Firestore in Datastore mode does (aggregate.go).
// A write that ended with an unknown outcome (coherence mode shared) is
// answered with the service's own error for it. AllocateIds and
// ReserveIds go to an IDAllocator: the Datastore backend's, or a local one
// persisted through the engine for the embedded store.
package datastore
