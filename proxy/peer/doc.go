// Package peer is the replica-to-replica API of coherence partitioned:
// each leased keyspace (an Azure table, a Datastore namespace) has one
// owner, the holder of its lease, and every other replica forwards to it
// the engine operations that write or lock the keyspace (txn/forward.go).
//
// It is gRPC on its own listener (listen.peer), never on an application's
// port, with a hand-written protocol-buffer codec (wire.go; no generated
// code) and two methods: Txn, a bidirectional stream per forwarded
// transaction (a begin message, then one request and one reply per
// operation, until the commit or abort; the owner aborts the transaction
// if the stream ends first), and Read, a unary read of the owner's latest
// committed state for the buffer of a replica that does not own the
// keyspace (cache.Options.Source), so that what that replica's buffer
// misses comes from the owner, whose buffer holds writes the store has not
// seen yet. Both present the shared secret coherence.peer_secret in the
// nemo-peer-secret header; the server compares digests in constant time.
// What is forwarded is the engine's operation, not the client's HTTP or
// gRPC request, so the Azure Table and the Datastore frontends share one
// path, and errors travel as their message plus which engine and adapter
// errors they match (wireErrors), so errors.Is works on the sender.
//
// Client is the node's txn.Router (who owns a keyspace, from its lease
// record, which names the holder's peer address) and the buffer's source;
// Server serves a node's engine. Client's connection map is guarded by a
// leaf mutex.
package peer
