// Package node assembles nemo's engine from a config.Config: it opens the
// configured backend store, wraps it in adapters.Counted so every remote
// call is counted, builds the record buffer and the transaction engine (whose
// constructor replays the write-ahead log before it returns), and tears the
// stack down again in the order that keeps acknowledged writes safe: engine
// drain (flush, checkpoint, close the WAL), then the buffer, then the store.
// It holds no server or protocol logic (package proxy, beside it, builds
// its engine through it), and maps config's settings onto the options of
// the store, the buffer, the engine, the WAL and the leases (txn/lease), so
// the wiring exists once.
package node
