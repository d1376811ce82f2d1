package wal

import (
	"errors"
	"fmt"
	"log/slog"
)

// DefaultSegmentSize is the preallocated size of a segment file.
const DefaultSegmentSize = 64 << 20

// minSegmentSize keeps rotation from happening on nearly every commit.
const minSegmentSize = 4 << 10

// Options configures a Log. The zero value of a field means its default;
// call EnsureDefaults to fill them in, then Validate (Open does both).
type Options struct {
	// Dir holds the segment files; it is created if missing. Required: it
	// has no default.
	Dir string
	// SegmentSize is the preallocated size of each segment file, a
	// multiple of 8 of at least 4 KiB; 0 means DefaultSegmentSize. A
	// transaction larger than a segment gets a segment of its own size.
	SegmentSize int64
	// NoSync skips fsync: acknowledged writes can be lost on a machine
	// crash. Benchmarks and tests only.
	NoSync bool
	// NoGroupCommit turns group commit off. With it on (the zero value,
	// production's setting) concurrent Appends share one write and one
	// fsync; off, each Append does its own write and fsync under a mutex
	// (the benchmark baseline). Either way every commit is fsynced before
	// Append returns.
	NoGroupCommit bool
	// Logger receives repair warnings and failures; nil discards them.
	Logger *slog.Logger
	// FS is the file system the log uses; nil means the OS. Tests inject
	// write, fsync and ENOSPC failures through it.
	FS FS
}

// EnsureDefaults sets every zero field of o that has a default: SegmentSize
// to DefaultSegmentSize, Logger to one that discards, FS to the OS. Fields
// already set are left alone, so calling it again changes nothing. It
// leaves Dir alone, which has no default.
func (o *Options) EnsureDefaults() {
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.FS == nil {
		o.FS = OSFS{}
	}
}

// Validate reports every problem with the options at once, joined with
// errors.Join. It assumes EnsureDefaults has run and never changes o; a zero
// SegmentSize passes, since it stands for its default.
func (o Options) Validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("wal: Dir is required"))
	}
	switch {
	case o.SegmentSize == 0:
	case o.SegmentSize < minSegmentSize:
		errs = append(errs, fmt.Errorf("wal: SegmentSize %d is below the minimum %d", o.SegmentSize, minSegmentSize))
	case o.SegmentSize%frameAlign != 0:
		errs = append(errs, fmt.Errorf("wal: SegmentSize %d is not a multiple of %d", o.SegmentSize, frameAlign))
	}
	return errors.Join(errs...)
}
