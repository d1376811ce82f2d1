// Package enum defines the engine's settings enums (the buffer's Policy and
// ConflictPolicy, the engine's Phantom, WriteMode and Coherence), each with
// the one list of its allowed values, and renders such lists for error
// messages (Or).
//
// They live here, on the lowest floor, because two floors name them: the
// config package reads and validates them from YAML, flags and the
// environment, and the engine (packages cache and txn) acts on them.
// Defined in the engine, they would make config import the engine; defined
// in config, they would make the engine import config. cache and txn re-export
// them under their own names (cache.Policy, txn.Phantom, ...) as type
// aliases, so the engine's API reads as before and a value passes between
// config and engine without conversion.
package enum
