package wal

import "errors"

// Errors returned by the log, wrapped with %w; compare with errors.Is.
var (
	// ErrCorrupt means a segment holds damage that is not a torn tail, so
	// repairing it could drop acknowledged transactions. The message names
	// the file and byte offset. Open refuses such a log.
	ErrCorrupt = errors.New("wal: log is corrupt")
	// ErrSync means writing, preallocating or fsyncing the log failed. The
	// Append that saw it was not acknowledged, and the log is failed until
	// Reset or reopen; the OS error (for example syscall.ENOSPC) is wrapped
	// too.
	ErrSync = errors.New("wal: write or fsync failed")
	// ErrNoSpace means an Append found no room: the current segment is
	// full and the volume has no space for another (creating or extending
	// a segment failed with ENOSPC). Nothing was written and the log is
	// not failed: the Append can be retried once a checkpoint has freed
	// space, which a checkpoint can always do (see "Space" in the package
	// documentation). syscall.ENOSPC is wrapped too.
	ErrNoSpace = errors.New("wal: no space for the log")
	// ErrInvalidRecord means Append was given a record it cannot log.
	ErrInvalidRecord = errors.New("wal: invalid record")
	// ErrClosed means the log was closed.
	ErrClosed = errors.New("wal: log closed")
)
