// Package fault wraps an adapters.Store and injects the failures a cloud
// backend produces, so tests and benchmarks can exercise the record buffer's
// miss, write-back and retry paths: per-operation latency with jitter,
// occasional slow calls, random errors (for Upsert and Delete optionally
// after applying only a prefix of the batch, since the Store is not atomic
// across records; for WriteAtomic, which is atomic, optionally after
// applying the whole group, as when a reply is lost), full outages, and a deterministic "fail the next n calls"
// hook. Randomness comes from a seeded generator so a run can be replayed.
package fault
