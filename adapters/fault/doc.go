// Package fault wraps an adapters.Store and injects the failures a cloud
// backend produces, so tests, benchmarks and operators (config
// backend.fault) can exercise the record buffer's miss, write-back and
// retry paths: per-operation latency with jitter, occasional slow calls,
// random errors of a chosen kind, unavailable or timeout (for Upsert and
// Delete optionally after applying only a prefix of the batch, since the
// Store is not atomic across records; for WriteAtomic, which is atomic,
// optionally after applying the whole group, as when a reply is lost; such
// a write fails with adapters.ErrUnknownOutcome, as the adapters report
// one), outages (at once with SetDown, periodic, or scheduled windows;
// failing at once or hanging), a hung backend whose calls block until
// their context ends, and deterministic hooks that fail the next n calls
// of an operation or lose their replies. Randomness comes from a seeded
// generator so a run can be replayed. It forwards the wrapped store's
// optional interfaces (atomic writes, stamps, snapshots of the present and
// of a past moment), injecting the same faults into their calls, so that
// the nemo it stands under behaves as it does without it.
package fault
