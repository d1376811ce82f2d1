// Package lease enforces nemo's `exclusive` coherence mode: a nemo may
// buffer writes and keep negative and range knowledge of a keyspace only
// while it is that keyspace's only writer, and it proves that with a lease
// per keyspace stored in the backend itself, next to the data. A Manager
// acquires, renews and releases the leases of one node (its Holder); the
// engine calls Hold before it acknowledges a write of a keyspace (and
// before it trusts what it knows of it) and stops when Hold fails. The
// lease record also names the holder's peer address, so a replica that
// does not own a keyspace finds its owner with Owner (the ownership record
// of coherence partitioned), and Release hands one keyspace over.
//
// It sits beside the engine it serves: it imports only adapters (no
// backend: proxy/layers_test.go checks it), the engine knows it only as a
// txn.Leaser, and proxy/node, which assembles a process, hands one to it
// with its backend's codec.
//
// # Where a lease lives
//
// A lease record (adapters.LeaseRecord) holds the holder's identity, the
// epoch, the holder's wall-clock expiry and the holder's peer address
// (Options.Addr, host:port; "" when it has none), which every acquire and
// renewal writes and a release clears. A Codec says where the lease of a
// keyspace lives and how its record is spelled; each backend's adapter
// provides one. aztable.LeaseCodec keeps the leases of an Azure account in
// the reserved table "nemoleases" (PartitionKey "lease", RowKey the
// lower-cased table name, since table names are case-insensitive;
// properties Holder (String), Epoch (Int64), Expiry (DateTime) and Addr
// (String)). datastore.LeaseCodec keeps the leases of a project/database in
// its default namespace, kind NemoLease, one entity per namespace named
// after it (the default namespace, whose name "" is not a legal key name,
// is spelled "(default)", which no namespace can be), with the same four
// properties. A record written before nemo kept the address has no Addr and
// reads as "". A store that implements adapters.KeyspaceAdmin (Azure,
// embedded) gets the lease keyspace created before its first use; an
// existing one is fine.
//
// # Rules
//
// Clocks: every duration is measured on this node's monotonic clock
// (Options.Now). No node trusts another's wall clock: Record.Expiry is the
// holder's wall-clock deadline and appears in messages only.
//
// Acquire (Hold, when this node holds no lease on the keyspace): read the
// record.
//
//   - Absent: write it with ExpectAbsent, epoch 1.
//   - Held by this Holder (a restart of the same node; a node's identity
//     is stable across restarts, and two live Managers must never share a
//     Holder): renew it with ExpectVersion, keeping its epoch.
//   - Released (Holder ""): take it with ExpectVersion, epoch+1.
//   - Held by another node: that lease is live until the record's version
//     has stayed unchanged for a whole TTL on OUR monotonic clock since we
//     first saw that version. Until then Hold returns a *HeldError
//     (errors.Is(err, ErrHeld)); after it, Hold takes the lease over with
//     ExpectVersion, epoch+1, and counts a takeover.
//
// A write refused by its precondition, or left without an answer (the
// store may have applied it), is settled by reading the record again,
// never by guessing: the rules above then apply, so a record that names
// this node (our own acquire, applied with its answer lost) is renewed
// with its epoch, and another holder's is reported. After a refusal Hold
// answers from memory for TTL/15 (one second at the default TTL), or until
// the holder's lease may be taken over if that is sooner, before it reads
// the record again, so a node that cannot get a lease does not read it
// once per client request.
//
// Validity: a lease this node holds is valid until renewStart + TTL - TTL/5,
// where renewStart is our monotonic time just BEFORE the successful acquire
// or renewal write was sent. Past it Hold returns ErrLost (wrapped with the
// keyspace), without a store call, until a renewal succeeds, so the caller
// stops acknowledging writes before any other node can take the lease: a
// contender waits a full TTL from when it first sees the version our last
// successful write made, and it can see it only after renewStart. (The
// TTL/5 margin absorbs a clock-rate difference between the nodes of up to
// 20 %.) A lapsed lease whose renewal later succeeds is valid again with
// the same epoch: its version never changed, so no other node took it.
//
// Renewal: one goroutine renews every held lease every TTL/3 with
// ExpectVersion of our last version and a new Expiry (strictly later than
// any we wrote before, so even Datastore, which keeps an entity's version
// when it is rewritten unchanged, gives the record a new version, and the
// Expiry names the write that made a record). The leases whose records
// share a lease keyspace (every table of an Azure account, every namespace
// of a Datastore database) are renewed in one Upsert call. Each call of a
// renewal is bounded by TTL/3 and made once, without the store's own
// retries (adapters.WithSingleAttempt), whose backoffs would spend the
// validity margin: the round settles a failure itself, at once. A renewal
// that is refused or gets no answer is settled by reading the record (one
// Get for the group, tried up to three times):
//
//   - It names this node and our epoch, with a version we do not know: one
//     of our renewals whose answer was lost made it (only we write a
//     record that names us, and every other writer bumps the epoch or
//     clears the holder). We adopt its version; the lease is valid from
//     just before that write was sent (found by its Expiry among the
//     unanswered writes we remember), as if its answer had come, and
//     unless it was this round's write we write again at once.
//   - It names us with the version we know: the write was not applied
//     (yet); we write again at once.
//   - It names another holder or epoch, or is gone: the lease was taken.
//     It is dropped, and the next Hold acquires by the rules above, which
//     report a HeldError.
//   - It cannot be read: the lease stays held and valid until its
//     deadline, and the next tick tries again.
//
// A node alone therefore never drops its own lease for a lost answer. A
// renewal round makes at most three writes. Failed renewals are logged at
// WARN once per change of state (failing, lapsed, taken), not per tick,
// saying which it is. With the default TTL of 15s a held lease costs 3
// record writes per TTL: 12 per minute.
//
// Release: Close stops renewal and writes Holder "" and Addr ""
// (ExpectVersion, same epoch) for every lease still held, so another node
// takes it at once with epoch+1; Release does the same for one keyspace
// (a rebalance hands it over) and leaves the others held. A release
// refused or unanswered is settled the same way: a released record at our
// epoch is our release, applied; one still ours is adopted and released
// again; one that cannot be read is reported, and the lease is no longer
// held here. The caller must have stopped writing and written back its
// buffered writes first.
//
// Owner (who holds a keyspace, for routing; it acquires nothing): this
// node's valid lease is answered without a store call (Self); this node's
// lapsed lease is ErrLost. Otherwise the record is read and its Holder,
// Addr and Epoch answered, Live by the takeover rule above: another node's
// record is live until its version has stayed unchanged for a whole TTL on
// our clock since we first saw it (Owner and Hold watch the same version);
// a released or absent record, or one naming this node that it does not
// hold (its previous run's), is not live. The answer is remembered for
// TTL/15, or until the holder's lease may be taken over if sooner, and
// Owner and Hold share that memory: a refused Hold answers Owner, and an
// Owner that found another node's live lease is Hold's refusal. Concurrent
// Owners of one keyspace make one read between them. Invalidate(ks)
// forgets it, for a caller whose answer proved stale (the peer it named
// said it is not the owner), so a stale route costs one lease read.
//
// Epoch is a fencing token: it grows by one each time the lease passes to
// another node (or is taken after a release), never on renewal or on a
// same-Holder restart.
//
// # Lock order
//
// lease.op (one per keyspace: serializes the store calls about that lease;
// the renewer and Close take several at once, in ascending order of
// keyspace within one lease keyspace, and one group at a time) before
// Manager.adminMu (the creation of lease keyspaces) before Manager.mu (the
// lease table and every lease's state; a leaf: never held across a store
// call or while taking another lock). Hold's and Owner's fast paths, for a
// lease this node holds or an answer from memory, take Manager.mu only;
// Owner's read holds the lease's op.
package lease
