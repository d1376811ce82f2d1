package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"syscall"
)

// ckptReserve is the room at the end of every segment that commits never
// use: only checkpoint records may go there, so a checkpoint always fits
// in the current segment and never needs space the volume may not have.
// It holds four of the largest checkpoint frames; two would do, since a
// full segment takes no more commits and a checkpoint that covers no new
// commit writes nothing.
const ckptReserve = 4 * ((headerSize + 1 + 2*binary.MaxVarintLen64 + frameAlign - 1) &^ (frameAlign - 1))

// spaceShare is the part of the volume's free space one segment may take
// when the volume cannot hold Options.SegmentSize that many times over.
const spaceShare = 4

// segmentSize is the size to preallocate for a segment that must hold
// need bytes: Options.SegmentSize (or need, if larger), unless that is
// more than a spaceShare-th of the space the volume has left; then that
// share, but never less than need. So a small volume gets small segments
// instead of a log that cannot start, and the log keeps room to rotate
// while a checkpoint frees the old ones.
func (l *Log) segmentSize(need int64) int64 {
	size := max(l.opts.SegmentSize, need)
	avail, err := l.fs.Available(l.opts.Dir)
	if err != nil {
		return size
	}
	share := avail / spaceShare &^ (frameAlign - 1)
	if size <= share {
		return size
	}
	fit := max(share, need)
	level := slog.LevelWarn
	if l.spaceLow.Load() {
		level = slog.LevelDebug // said when the shortage began
	}
	l.log.Log(context.Background(), level, "wal: volume short of space; preallocating a smaller segment",
		"available", avail, "segment_size", l.opts.SegmentSize, "preallocating", fit)
	return fit
}

// setCapacity records the current segment's preallocated size.
func (l *Log) setCapacity(size int64) {
	l.capacity = size
	l.segBytes.Store(size)
	l.spaceLow.Store(size < l.opts.SegmentSize)
}

// noSpace wraps a failure to create or extend a segment: ErrNoSpace when
// the volume is full (nothing was written, the log is not failed),
// ErrSync otherwise.
func (l *Log) noSpace(err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		l.spaceLow.Store(true)
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	return fmt.Errorf("%w: %w", ErrSync, err)
}

// recycle turns the current segment into the next one when the volume
// has no room for a new segment and the store holds every transaction in
// the log (the caller checked coveredBy): the segments before it are
// removed, its file is cut to nothing, synced, renamed after the next LSN
// and preallocated again from the space that freed. A crash at any point
// leaves a valid log: the old segment as it was, or empty under either
// name (an empty log; what it held is in the store). Until the rename is
// durable the file keeps its old name, so nothing is written to it
// (l.recycling) and a failed step is retried by the next rotation.
// writeMu held.
func (l *Log) recycle(need int64) error {
	l.mustRotate = true
	if !l.recycling {
		if err := l.removeBelow(l.next); err != nil {
			return fmt.Errorf("%w: recycle: %w", ErrNoSpace, err)
		}
		l.log.Warn("wal: no space for a new segment; recycling the current one, which a checkpoint covers",
			"segment", l.curName(), "next_lsn", l.next)
		l.recycling = true
	}
	l.off, l.dirtyEnd = 0, 0
	l.setCapacity(0)
	if err := l.cur.Truncate(0); err != nil {
		return fmt.Errorf("%w: recycle: truncate %s: %w", ErrSync, l.curName(), err)
	}
	if err := l.cur.Sync(); err != nil {
		return fmt.Errorf("%w: recycle: fsync %s: %w", ErrSync, l.curName(), err)
	}
	seg := segment{first: l.next, name: segmentName(l.next)}
	if old := l.curName(); old != seg.name {
		if err := l.fs.Rename(l.path(old), l.path(seg.name)); err != nil {
			return fmt.Errorf("%w: recycle: rename %s to %s: %w", ErrSync, old, seg.name, err)
		}
		l.segs[len(l.segs)-1] = seg
	}
	if err := l.fs.SyncDir(l.opts.Dir); err != nil {
		return fmt.Errorf("%w: recycle: sync directory %s: %w", ErrSync, l.opts.Dir, err)
	}
	l.segs = l.segs[len(l.segs)-1:]
	l.recycling, l.mustRotate, l.wantRotate = false, false, false
	// An empty segment named after the next LSN: the next batch may grow
	// it (makeRoom) if this preallocation fails.
	size := l.segmentSize(need)
	if err := l.cur.Allocate(size); err != nil {
		return l.noSpace(fmt.Errorf("recycle: preallocate %s to %d bytes: %w", seg.name, size, err))
	}
	if err := l.cur.Sync(); err != nil {
		return fmt.Errorf("%w: recycle: fsync %s: %w", ErrSync, seg.name, err)
	}
	l.setCapacity(size)
	return nil
}
