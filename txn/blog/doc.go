// Package blog keeps a commit log per keyspace in the backend itself, for
// coherence mode partitioned (wal.location: backend): with an emptyDir, an
// owner's local WAL dies with its pod, so the next owner of a keyspace (a
// nemo on another node, after a crash) could not replay the commits its
// last owner acknowledged. Here it can: at lease acquisition the engine
// calls Open, which fences the log at the lease's epoch and returns every
// entry it holds, to be replayed before anything is acknowledged; per
// commit it calls Append, durable when it returns (concurrent Appends share
// one atomic store call: group commit); after a checkpoint's flush,
// Truncate. Entries are opaque bytes (the engine encodes its commit
// records); the log numbers them 1, 2, 3, ... without gaps.
//
// It imports adapters only: each backend provides a Codec beside its
// adapter (aztable.LogCodec: table "nemolog", one partition per table;
// datastore.LogCodec: kind NemoLog in the database's default namespace, one
// entity group per namespace; RawCodec for the embedded store and tests),
// saying where a keyspace's log lives (one fence record and the entry
// records, all writable in one atomic call), how its records are spelled,
// and what one call and one record may hold (Limits). An entry bigger than
// a record is split into parts; a batch bigger than a call takes several.
//
// # Fencing
//
// The fence record holds the owner's lease Epoch, the Token drawn by the
// Open that wrote it, the Holder's id (messages only) and Last, the seq of
// the last entry. Every write of a Log (an append batch, a truncation) is
// one atomic call that rewrites the fence conditioned on the version this
// Log last wrote, together with its entries (each expected absent) or
// deletions. Open reads the fence, refuses a higher epoch (ErrFenced), and
// otherwise rewrites it with its own epoch and a new Token, Last kept,
// conditioned on the version it read, and only then reads the entries.
// So:
//
//   - After a new Open's fence write, no earlier Log can change the log:
//     each of its writes expects a version that is gone (the Token makes
//     even an Open at the same epoch, a restart of the same node, a new
//     record, which Datastore, keeping the version of an entity rewritten
//     unchanged, would not otherwise give). The entries the new owner
//     reads are therefore every entry any earlier Log was told was
//     durable, and no earlier Log deletes any of them under its read.
//   - Last only grows (Open keeps it, a truncation rewrites it unchanged),
//     so a fence of another Open whose Last is below a call's first seq
//     proves that call never landed; at or above it, so does an entry at
//     the call's first seq holding other data than the call's (the Open
//     kept the entries it found, so had the call landed that entry would
//     be the call's; the next owner appended its own there). Otherwise
//     (the entry is the call's, or truncated) the call's outcome is
//     unknown (it may have landed before the Open, which then replays it).
//   - A call refused or unanswered is settled by reading the fence, never
//     by guessing: our Token at the call's last seq, applied (its answer
//     was lost, or the adapter's own retry was refused by the first
//     attempt's effect); our Token at the Last we left, not applied, sent
//     again; another Token, fenced. A fence that cannot be read leaves the
//     outcome unknown (ErrUnsettled, matching adapters.ErrUnknownOutcome
//     for the Appends of that call).
//   - Fenced or unsettled, a Log stops: every later Append and Truncate
//     fails at once. Opening the log again settles everything: it reads
//     what is there.
//
// The lease decides who should own a keyspace; the fence makes sure that
// an owner who lost the lease without knowing it cannot make the log say
// anything the next owner has not read. An owner acknowledges a commit only
// after Append returned nil, so the next owner replays every acknowledged
// commit, in seq order, once.
//
// # Cost
//
// One Append alone is one atomic call: Azure, one entity group transaction
// ($batch: the fence replaced with If-Match, the entry inserted); Datastore,
// a transaction (BeginTransaction, a Lookup of the fence and the entry's
// keys, Commit: three RPCs). Concurrent Appends share it: N appenders make
// about one call per round trip, not N. Open is a keyspace creation (where
// keyspaces exist explicitly: Azure, the embedded store), a fence read, a
// fence write and a range read per 32 MiB of entries; a truncation, one
// call per CallRecords-1 entry parts. (Legacy Datastore admits about one
// commit a second per entity group in production, which a log is; Firestore
// in Datastore mode does not limit it.) A log has one call in flight at a
// time (each is conditioned on the version the one before it left), so
// its throughput is a group per round trip. BenchmarkAppend measures
// latency, calls and wire requests per append against the servers, with
// a simulated round trip, beside a write-through of one entity.
//
// # Lock order
//
// Log.writeMu (serializes the Log's store writes: the leader of a group
// commit holds it for its batch's calls and their settling, Truncate for
// its calls; the fence version and the entries held are guarded by it)
// before Log.mu (the queue of Appends, the leader flag and the sticky
// error; a leaf: never held across a store call). An Append waiting in the
// queue holds neither.
package blog
