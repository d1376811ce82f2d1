// Package wal is nemo's redo log device: the durability behind write-back
// caching. It stores a transaction's data records — each a type byte and a
// body it never looks into; the engine's format (package txn/logrec) gives
// them their meaning — and its commit marker, appended in one call and
// acknowledged only after an fsync covers them; concurrent Appends share one write and one fsync (group
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
// left; with internal/invariants on (-tags invariants, or -race) each
// checkpoint asserts the first and each write-back that it marks nothing
// clean without a confirmed version). With invariants on the log asserts
// its half too: no segment holding a commit at or above the highest LSN a
// Checkpoint call promised leaves the log, and each batch it writes
// continues the durable LSNs without a gap, starts on a frame boundary
// and is whole frames, one per LSN.
//
// The log does not know what a data record means: it frames, sequences,
// checksums and syncs type bytes and bodies, and hands them back as they
// were appended. A caller may append records that need not be durable
// before anything (txn's write-back records) with AppendEarly and not
// wait for them.
//
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
// The payload starts with a header the log owns, a type byte and uvarints:
//
//	data       | type | lsn | txn | body |
//	commit     |  3   | lsn | txn |
//	checkpoint |  4   | lsn | checkpoint lsn |
//
// A data frame's type is its writer's choice among 1 to 63 but 3 and 4,
// and its body is the writer's bytes; the log checks neither beyond that
// (package txn/logrec documents what the engine writes: types 1, 2 and 5
// to 9). Type bytes 0, 3, 4 and above 63 are reserved: 0 is never a
// frame's type (zeroed space is the end of the log or damage), 3 and 4
// are the log's commit and checkpoint frames, and a frame whose type is
// above 63 is damage, so that repair does not take random bytes with a
// matching checksum for a record. Append refuses a data record with a
// reserved type (ErrInvalidRecord).
//
// Decoding is strict (minimal varints, no bytes after a commit or
// checkpoint, zero padding), so a frame that decodes re-encodes to the
// same bytes; the engine's decoder is as strict about bodies. Damage a
// checksum misses inside a body is the engine's to find at replay (txn
// stops the replay with ErrCorrupt there).
//
// # Repair rules
//
// In the last segment, a frame that is cut short, fails its checksum or
// whose header does not parse, bytes after the end marker, or data frames with no
// Commit after them, are a torn tail if no valid frame follows anywhere
// later in the file: the segment is copied to <name>.broken and cut back to
// the end of its last complete transaction. Damage followed by a valid
// frame, damage in any other segment, an LSN out of sequence or a missing
// segment make Open fail with ErrCorrupt naming the file and offset.
package wal
