// Package embedded is the default backend: an on-disk, ordered, durable
// adapters.Store kept in one bbolt file inside a data directory, with one
// bbolt bucket per keyspace. It makes nemo a self-contained local emulator
// for both frontends when no cloud store is configured. Every Upsert and
// Delete call is one bbolt transaction (fsynced unless Options.NoSync), and
// so is every WriteAtomic call (adapters.AtomicWriter), which checks all
// its preconditions before applying anything and so applies all its
// mutations or none. Every byte handed out is copied, because bbolt memory
// is valid only inside its transaction. With Options.InMemory the same
// bbolt database lives in an anonymous memory file (memfd_create on
// Linux) instead: no file is created, nothing outlives the process, and
// Store.Reset empties it (nemo's POST /reset, for test suites).
package embedded
