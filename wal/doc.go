// Package wal is nemo's logical redo log: the durability behind write-back
// caching. A transaction's Put, Delete (each with what the writer knew the
// store held for the key, see below) and keyspace create/drop records and
// its Commit marker are appended in one call and acknowledged only after an
// fsync covers them; concurrent Appends share one write and one fsync (group
// commit). Stats reports each fsync's latency and each batch's commit count
// as histograms; an fsync over a second is logged at WARN (the volume is too
// slow for the commits waiting on it), and in a traced request Append is a
// "wal fsync" span. AppendEarly (for txn's early lock release) returns as soon as a
// commit has its LSNs in a batch the writer has made room for and is about
// to write, with a channel for the fsync's outcome; WaitDurable waits until
// the log is durable up to an LSN (or has failed), SequencedLSN is the last
// LSN handed out. LSNs are handed out in commit order and a batch is
// durable as a whole, so "durable up to LSN n" covers every commit below n.
// Replay
// hands back, in LSN order, only transactions whose Commit marker is on
// disk, starting from the last checkpoint ("everything below LSN X is in the
// store"); Checkpoint deletes the segments wholly below it. So that a
// restart does not read much history checkpoints already covered, a
// checkpoint in a segment more than 1/32 full (and past 1 MiB) moves the
// log to a new segment: at once, starting with a copy of the checkpoint
// record, when it covers every commit, else at the next commit (and the
// next checkpoint drops the old segment). Open repairs a
// torn tail — the unacknowledged end of the last segment, copied aside to
// <segment>.broken first — and refuses any other damage with ErrCorrupt,
// because guessing there could silently drop acknowledged writes. After a
// failed write or fsync the log is sticky-failed (ErrSync) until Reset or
// reopen, since the OS may have dropped the unsynced pages and a retried
// fsync could report success for data that is gone. A full volume is not
// such a failure: see Space.
//
// # When a write is done
//
// One rule, whatever the caller's mode, lease state, write gate or
// pending replay: a logged write leaves the log's protection (a
// checkpoint's truncation, a drain that reports success, an exit with
// status 0) only once the store has confirmed that write's version. The
// log enforces its half: Checkpoint(x) is a promise from the caller that
// every commit below x is in the store, and nothing else ever deletes a
// segment holding a commit. The caller keeps the rest (package txn: a
// checkpoint's LSN is read while no commit is between its log append and
// its install, then every record dirty then is written back, each marked
// clean only with the version the store returned for it, or resolved as a
// conflict and filed; a drain reports success only with nothing dirty
// left; under the invariants tag each checkpoint asserts the first and
// each write-back that it marks nothing clean without a confirmed
// version).
//
// A write-back record (type 9) is the caller's note that the store
// confirmed a write-back: for its key, the store holds the value (or
// delete) whose digest it carries, at the version (or absence) it names.
// Replay hands it back so that the caller conditions the key's next
// write-back on that version rather than on an older base logged with a
// write. It need not be durable before anything: the caller appends it
// with AppendEarly and does not wait. Write-back records are appended like
// a transaction (with a commit marker, transaction id 0, never mixed with
// data records) and come back from Replay in log order.

// # Segments
//
// The log is a directory of segment files named %016x.wal after the LSN of
// their first record, preallocated to Options.SegmentSize and zero-filled,
// so the first all-zero frame header marks the end of the log. A batch
// that does not fit rotates to a new segment; a batch never spans two, so
// neither does a transaction. LSNs start at 1 and run on without gaps
// across segments; Open checks that.
//
// # Space
//
// A full volume must not stop the log from shrinking, so nothing a
// checkpoint or a restart does needs new space:
//
//   - Commits never use the last 128 bytes of a segment (ckptReserve):
//     they are kept for checkpoint records, so a checkpoint always fits in
//     the current segment. A checkpoint that would cover no commit the
//     last one did not writes nothing, so an idle or refused log does not
//     use the reserve up.
//   - An Append that needs a new segment the volume has no room for fails
//     with ErrNoSpace and writes nothing; the log is not failed, and the
//     file it could not preallocate is removed. Once a checkpoint covers
//     every commit in the log, the segments before the current one are
//     deleted, and if there is still no room the current one is recycled:
//     cut to nothing, renamed after the next LSN and preallocated again.
//   - Open writes nothing it does not have to: a last segment it cannot
//     preallocate again is used as it is, a 0-byte last segment (a
//     rotation interrupted before preallocation) is removed, and a torn
//     tail is repaired without its .broken copy when there is no room for
//     one. So a restart on a full volume replays, and its first checkpoint
//     frees space before anything needs appending.
//   - Segments are preallocated at Options.SegmentSize unless that is more
//     than a quarter of the volume's free space (FS.Available, statfs);
//     then they take that quarter, so a small volume gets small segments
//     rather than a log that cannot start. Stats.SpaceLow says so.
//
// # Frame layout
//
// Every frame starts at an 8-byte boundary:
//
//	 0               4               8
//	+---------------+---------------+------------------------+---------+
//	| length uint32 | crc32c uint32 | payload (length bytes) | padding |
//	|  little-end.  |  little-end.  |                        | 0 to 7  |
//	+---------------+---------------+------------------------+---------+
//	crc32c is CRC-32C (Castagnoli) of the payload only; padding is zero
//	bytes up to the next multiple of 8; length 0 (with crc 0) = end of log.
//
// The payload is a type byte and uvarints, laid out per type:
//
//	put        | 1 | lsn | txn | len ks | ks | len key | key | len val | val |
//	delete     | 2 | lsn | txn | len ks | ks | len key | key |
//	commit     | 3 | lsn | txn |
//	checkpoint | 4 | lsn | checkpoint lsn |
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
// replay hands them back as puts and deletes.
//
// Decoding is strict (minimal varints, no trailing bytes, zero padding, no
// expect kind but 1 or 2 (with or without 0x80) in types 7 and 8, nor but
// 0, 1 or 2 in type 9, no empty version, no zero prior or digest), so a frame
// that decodes re-encodes to the same bytes. At LSNs in the
// millions, a one-write transaction with a 10-byte keyspace, 20-byte key and
// 100-byte value costs a 152-byte put frame plus a 16-byte commit frame.
//
// # Repair rules
//
// In the last segment, a frame that is cut short, fails its checksum or
// does not parse, bytes after the end marker, or data frames with no
// Commit after them, are a torn tail if no valid frame follows anywhere
// later in the file: the segment is copied to <name>.broken and cut back to
// the end of its last complete transaction. Damage followed by a valid
// frame, damage in any other segment, an LSN out of sequence or a missing
// segment make Open fail with ErrCorrupt naming the file and offset.
package wal
