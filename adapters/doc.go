// Package adapters defines the Store interface through which the record
// buffer reaches its backend (the Nemo paper's Table 2: Get, GetRange, Upsert,
// Delete over byte keys whose byte order is the backend's key order; reads
// report each record's version, writes carry per-record preconditions and
// report refusals as a ConflictError), the optional KeyspaceAdmin,
// AtomicWriter (an all-or-nothing group of writes to one keyspace, which
// every backend here implements; atomictest is its shared conformance
// test), Stamper (Azure: a written value with the store's stamps) and
// SnapshotReader (a consistent read-only view: Datastore's read-only
// transactions) and SnapshotAtReader (such a view of a past moment:
// Datastore's read_time), LeaseRecord (a keyspace's lease as the backend
// stores it, for txn/lease; aztable and datastore each provide the
// LeaseCodec that spells it, and leasetest checks them), the per-operation request and byte counters and latency
// histograms that metrics and benchmarks read (Counted also notes each call
// on the client request it serves and, in a traced request, gives it a
// span; it forwards AtomicWriter, Stamper, SnapshotReader and
// SnapshotAtReader, failing with
// errors.ErrUnsupported over a store without them; made by CountLogged it
// logs every failed call, rate-limited, with the backend's own status and
// message, which adapters expose through ServiceError), and, in
// sub-packages,
// the backends themselves: embedded (an on-disk ordered store, the
// default), aztable (Azure Table Storage), datastore (Google Cloud
// Datastore) and fault (a wrapper that injects latency, errors and outages
// for tests and benchmarks); and contract, which sits on the wire under
// the aztable and datastore adapters and makes a real backend answer as
// its service's API contract allows (short and empty batches, deferred
// keys, transient errors, lost replies). Two words every remote adapter
// speaks: ErrUnknownOutcome, for a write that may or may not have been
// applied, and RangeReport, in which a paged range read says where the
// backend itself vouched for completeness (the buffer asserts it before
// sealing a gap). Nothing here knows about caching or transactions.
package adapters
