// Package logrec is the engine's log format: what package txn writes to
// its redo log and reads back at replay. A Record is one change of a
// committed transaction — a put or delete (with what the writer knew the
// store to hold for the key, its expectation, and the prior value still
// unwritten), a keyspace create or drop, or a write-back confirmation —
// and it is encoded as a type byte and a body. The WAL (package wal) is
// the device that stores them: it frames, sequences, checksums and syncs
// them, adds each frame's header (LSN and transaction id) and its own
// commit and checkpoint frames, and hands the type byte and body back at
// replay without looking inside; Decode turns them back into a Record.
// For a commit log kept in the backend itself (txn/blog), EncodeEntry
// packs a commit's records into one checksummed entry and DecodeEntry
// reads it back. Decoding is strict, so whatever decodes re-encodes to
// exactly the same bytes, and the format is pinned by golden files: the
// WAL's testdata (../../wal/testdata) and testdata/entries.txt here.
//
// # Record layout
//
// In a WAL frame the payload is the device's header — the type byte,
// uvarint(LSN), uvarint(transaction id) — followed by the record's body;
// an entry lays each record out the same way, with LSN 0. Lengths and
// LSNs are uvarints:
//
//	put        | 1 | lsn | txn | len ks | ks | len key | key | len val | val |
//	delete     | 2 | lsn | txn | len ks | ks | len key | key |
//	commit     | 3 | lsn | txn |                     (the WAL's own frame)
//	checkpoint | 4 | lsn | checkpoint lsn |          (the WAL's own frame)
//	create ks  | 5 | lsn | txn | len ks | ks |
//	drop ks    | 6 | lsn | txn | len ks | ks |
//	put-expect | 7 | lsn | txn | len ks | ks | len key | key | len val | val | expect |
//	del-expect | 8 | lsn | txn | len ks | ks | len key | key | expect |
//	write-back | 9 | lsn | txn | len ks | ks | len key | key | base | digest |
//
//	expect     | 1 |                 the key was absent
//	           | 2 | len ver | ver | the key existed at version ver (not empty)
//	base       | 0 | (no version known) | or an expect: what the store holds now
//	digest     8 bytes big-endian, not 0: Record.Digest of the value or
//	           delete written
//
// The body is everything after txn. Type bytes 0, 3 and 4 are the WAL's
// (0 is never a payload's first byte, 3 and 4 are its commit and
// checkpoint frames), and the WAL accepts data types up to 63 only; this
// format uses 1, 2 and 5 to 9.
//
// With 0x80 set in the kind byte (0x81, 0x82) eight more bytes follow, a
// big-endian Record.Prior (not 0): a hash of the value the key's record
// still held unwritten when the write committed. A write-back of it may
// have landed just before a crash while its own record is already behind
// a checkpoint; replay counts it as the writer's own, not another
// writer's.
//
// A put or delete carries its expectation (Record.ExpectKind and
// ExpectVersion): what the writer knew the store to hold for the key
// before the write, which replay hands back so that write-back stays
// conditional after a restart. Types 7 and 8 are put and delete with an
// expectation appended; a write that knows nothing (ExpectAny) is a plain
// type 1 or 2, so logs written before expectations existed replay
// unchanged, their writes with ExpectAny. Callers never see types 7 and 8:
// Decode hands them back as puts and deletes.
//
// A write-back record (type 9) is the engine's note that the store
// confirmed a write-back: for its key, the store holds the value (or
// delete) whose digest it carries, at the version (or absence) it names.
// Replay hands it back so that the engine conditions the key's next
// write-back on that version rather than on an older base logged with a
// write. The engine logs write-back records as a transaction of their own
// (transaction id 0, never mixed with data records) and does not wait for
// them to be durable.
//
// Decoding is strict (minimal varints, no trailing bytes, no expect kind
// but 1 or 2 (with or without 0x80) in types 7 and 8, nor but 0, 1 or 2
// in type 9, no empty version, no zero prior or digest, no keyspace
// operation without a keyspace), so a record that
// decodes re-encodes to the same bytes; the WAL is as strict about its
// header and framing. At LSNs in the millions, a one-write transaction
// with a 10-byte keyspace, 20-byte key and 100-byte value costs a 152-byte
// put frame plus a 16-byte commit frame.
package logrec
