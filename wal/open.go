package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/nemocache/nemo/internal/obs"
)

// Open opens the log in opts.Dir, creating it if empty. It reads every
// segment, repairs a torn tail in the last one (keeping a copy of the
// damaged file as <name>.broken) and refuses any other damage with
// ErrCorrupt. Call Replay before the first Append.
func Open(opts Options) (*Log, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	l := &Log{opts: opts, fs: opts.FS, log: opts.Logger.With("component", "wal", "dir", opts.Dir), advanced: make(chan struct{})}
	l.stats.fsync, l.stats.group = obs.NewDurationHistogram(), obs.NewHistogram(groupBounds...)
	if err := l.fs.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("wal: create %s: %w", opts.Dir, err)
	}
	names, err := l.fs.ReadDir(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("wal: list %s: %w", opts.Dir, err)
	}
	l.segs = listSegments(names)
	if len(l.segs) == 0 {
		if err := l.createFirst(); err != nil {
			return nil, err
		}
	} else if err := l.recover(); err != nil {
		return nil, err
	}
	l.durableNext.Store(l.next)
	l.seqNext.Store(l.next)
	l.log.Info("wal opened", "segments", len(l.segs), "next_lsn", l.next, "checkpoint", l.lastCkpt.Load())
	if !opts.NoGroupCommit {
		l.reqs = make(chan *request)
		l.quit = make(chan struct{})
		l.stopped = make(chan struct{})
		go l.run()
	}
	return l, nil
}

func (l *Log) path(name string) string { return filepath.Join(l.opts.Dir, name) }

// createFirst starts an empty log; LSNs start at 1 so that 0 can mean
// "no checkpoint" and "from the last checkpoint". On a volume with no
// space at all the segment starts empty: the log opens, and the first
// Append grows it or fails with ErrNoSpace.
func (l *Log) createFirst() error {
	seg := segment{first: 1, name: segmentName(1)}
	size := l.segmentSize(ckptReserve)
	f, _, err := l.createSegment(seg, size)
	if errors.Is(err, syscall.ENOSPC) {
		l.log.Warn("wal: no space to preallocate the first segment; starting with an empty one", "segment", seg.name, "err", err)
		l.spaceLow.Store(true)
		size = 0
		f, _, err = l.createSegment(seg, 0)
	}
	if err != nil {
		return err
	}
	l.segs = []segment{seg}
	l.cur, l.next = f, 1
	l.setCapacity(size)
	return nil
}

// createSegment creates, preallocates and syncs a segment file, and syncs
// the directory so the file survives a crash before it is written. On
// failure it removes the file again; left reports that the removal failed
// too (or is not known to be durable), so a file by that name may remain.
func (l *Log) createSegment(seg segment, size int64) (File, bool, error) {
	f, err := l.fs.OpenFile(l.path(seg.name), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, true, fmt.Errorf("wal: create %s: %w", seg.name, err)
	}
	if err := l.initSegment(f, seg, size); err != nil {
		f.Close()
		rerr := l.fs.Remove(l.path(seg.name))
		if rerr == nil {
			rerr = l.fs.SyncDir(l.opts.Dir)
		}
		if rerr != nil {
			l.log.Warn("wal: remove the segment that could not be created", "segment", seg.name, "err", rerr)
		}
		return nil, rerr != nil, err
	}
	return f, false, nil
}

// initSegment preallocates and syncs a new segment file, then syncs the
// directory.
func (l *Log) initSegment(f File, seg segment, size int64) error {
	if size > 0 {
		if err := f.Allocate(size); err != nil {
			return fmt.Errorf("wal: preallocate %s to %d bytes: %w", seg.name, size, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("wal: sync %s: %w", seg.name, err)
	}
	if err := l.fs.SyncDir(l.opts.Dir); err != nil {
		return fmt.Errorf("wal: sync directory %s: %w", l.opts.Dir, err)
	}
	return nil
}

// recover validates every segment and leaves the last one open for
// appending at the end of its last complete transaction. It needs no
// space: a tail it cannot preallocate is used as it is, and a 0-byte last
// segment (a rotation that got no further than creating the file) is
// removed, so a log on a full volume opens and replays, and a checkpoint
// can then free space (space.go).
func (l *Log) recover() error {
	emptyTail, err := l.hasEmptyTail()
	if err != nil {
		return err
	}
	next := l.segs[0].first
	for i, seg := range l.segs {
		if seg.first != next {
			return fmt.Errorf("%w: %s: segment starts at LSN %d, want %d (a segment is missing)", ErrCorrupt, seg.name, seg.first, next)
		}
		last := i == len(l.segs)-1 || emptyTail && i == len(l.segs)-2
		flag := os.O_RDONLY
		if last {
			flag = os.O_RDWR
		}
		f, err := l.fs.OpenFile(l.path(seg.name), flag, 0)
		if err != nil {
			return fmt.Errorf("wal: open %s: %w", seg.name, err)
		}
		res, size, err := l.checkSegment(f, seg, last)
		if err != nil {
			f.Close()
			return err
		}
		next = res.next
		if res.hasCheckpoint {
			l.lastCkpt.Store(res.checkpoint)
		}
		l.lastCommit = max(l.lastCommit, res.lastCommit)
		if !last {
			if err := f.Close(); err != nil {
				return fmt.Errorf("wal: close %s: %w", seg.name, err)
			}
			continue
		}
		if emptyTail {
			if err := l.dropTail(next); err != nil {
				f.Close()
				return err
			}
		}
		l.cur, l.off = f, res.end
		l.setCapacity(l.growTail(seg, size, res.end))
		break
	}
	l.next = next
	return nil
}

// hasEmptyTail reports whether the log has more than one segment and the
// last one's file is empty (0 bytes: created but never preallocated, so
// it holds nothing).
func (l *Log) hasEmptyTail() (bool, error) {
	if len(l.segs) < 2 {
		return false, nil
	}
	tail := l.segs[len(l.segs)-1]
	f, err := l.fs.OpenFile(l.path(tail.name), os.O_RDONLY, 0)
	if err != nil {
		return false, fmt.Errorf("wal: open %s: %w", tail.name, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return false, fmt.Errorf("wal: stat %s: %w", tail.name, err)
	}
	return size == 0, nil
}

// dropTail removes the empty last segment once the one before it has
// been read up to next, the LSN the empty one must be named after (else
// a segment is missing in between, which the removal must not hide).
func (l *Log) dropTail(next uint64) error {
	tail := l.segs[len(l.segs)-1]
	if tail.first != next {
		return fmt.Errorf("%w: %s: segment starts at LSN %d, want %d (a segment is missing)", ErrCorrupt, tail.name, tail.first, next)
	}
	if err := l.fs.Remove(l.path(tail.name)); err != nil {
		return fmt.Errorf("wal: remove the empty segment %s: %w", tail.name, err)
	}
	if err := l.fs.SyncDir(l.opts.Dir); err != nil {
		return fmt.Errorf("wal: sync directory %s: %w", l.opts.Dir, err)
	}
	l.log.Warn("wal: removed an empty last segment left by an interrupted rotation", "segment", tail.name)
	l.segs = l.segs[:len(l.segs)-1]
	return nil
}

// growTail gives the last segment its room back when a repair, an
// interrupted preallocation or a full volume left it short, and returns
// its size. Without space it stays as it is: appends rotate, and a
// checkpoint uses what is left or recycles the segment.
func (l *Log) growTail(seg segment, size, end int64) int64 {
	if size >= l.opts.SegmentSize {
		return size
	}
	want := l.segmentSize(end + ckptReserve)
	if want <= size {
		return size
	}
	if err := l.cur.Allocate(want); err != nil {
		l.log.Warn("wal: cannot preallocate the last segment; opening it as it is", "segment", seg.name,
			"size", size, "want", want, "err", err)
		l.spaceLow.Store(true)
		if size, err = l.cur.Size(); err != nil {
			return end // at least what is written
		}
		return size
	}
	return want
}

// checkSegment walks one segment and decides what its end means. In the
// last segment, damage with no valid frame after it is a torn tail — a
// write that was never acknowledged — and is cut back to the last complete
// transaction. Anywhere else, or with a valid frame after it, it is
// corruption.
func (l *Log) checkSegment(f File, seg segment, last bool) (walkResult, int64, error) {
	size, err := f.Size()
	if err != nil {
		return walkResult{}, 0, fmt.Errorf("wal: stat %s: %w", seg.name, err)
	}
	w := newWindow(f, size)
	res, err := walk(w, seg, nil)
	if err != nil {
		return res, 0, err
	}
	garbage, dirty, err := w.firstNonZero(res.stop)
	if err != nil {
		return res, 0, fmt.Errorf("wal: read %s: %w", seg.name, err)
	}
	if res.cause == nil && !dirty && res.end == res.stop {
		return res, size, nil // clean: zero-filled after the last frame
	}
	if !last {
		switch {
		case res.cause != nil:
			return res, 0, fmt.Errorf("%w: %s: offset %d: %w (not the last segment)", ErrCorrupt, seg.name, res.stop, res.cause)
		case dirty:
			return res, 0, fmt.Errorf("%w: %s: offset %d: data after the end of the log (not the last segment)", ErrCorrupt, seg.name, garbage)
		}
		return res, 0, fmt.Errorf("%w: %s: offset %d: transaction without commit (not the last segment)", ErrCorrupt, seg.name, res.end)
	}
	if res.cause != nil || dirty {
		at, found, err := w.validFrameAfter(res.stop)
		if err != nil {
			return res, 0, fmt.Errorf("wal: read %s: %w", seg.name, err)
		}
		if found {
			why := "end of log marker"
			if res.cause != nil {
				why = res.cause.Error()
			}
			return res, 0, fmt.Errorf("%w: %s: offset %d: %s followed by a valid frame at offset %d", ErrCorrupt, seg.name, res.stop, why, at)
		}
	}
	size, err = l.repair(f, seg, size, res)
	if err != nil {
		return res, 0, err
	}
	return res, size, nil
}

// repair saves a copy of the segment, then cuts it back to res.end and
// zero-fills the rest so the zero end marker follows the last good frame.
// It returns the segment's size after the repair. On a full volume it
// repairs without the copy (what it drops was never acknowledged), and a
// tail it cannot preallocate again stays short.
func (l *Log) repair(f File, seg segment, size int64, res walkResult) (int64, error) {
	broken, err := l.saveBroken(f, seg, size)
	if errors.Is(err, syscall.ENOSPC) {
		l.log.Warn("wal: no space for a copy of the damaged segment; repairing without one", "segment", seg.name, "err", err)
		broken, err = "", nil
	}
	if err != nil {
		return 0, err
	}
	reason := "transaction without commit marker"
	if res.cause != nil {
		reason = res.cause.Error()
	} else if res.end == res.stop {
		reason = "garbage after the last frame"
	}
	l.log.Warn("wal: repairing torn tail", "segment", seg.name, "offset", res.end,
		"damage_offset", res.stop, "reason", reason, "copy", broken)
	if err := f.Truncate(res.end); err != nil {
		return 0, fmt.Errorf("wal: repair %s: truncate to %d: %w", seg.name, res.end, err)
	}
	if err := f.Allocate(size); err != nil {
		if !errors.Is(err, syscall.ENOSPC) {
			return 0, fmt.Errorf("wal: repair %s: preallocate: %w", seg.name, err)
		}
		l.log.Warn("wal: no space to preallocate the repaired segment again", "segment", seg.name, "size", res.end, "err", err)
		size = res.end
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("wal: repair %s: sync: %w", seg.name, err)
	}
	return size, nil
}

// saveBroken copies the damaged segment to the first free <name>.broken[.N]
// so an operator can inspect what the repair dropped.
func (l *Log) saveBroken(src File, seg segment, size int64) (string, error) {
	names, err := l.fs.ReadDir(l.opts.Dir)
	if err != nil {
		return "", fmt.Errorf("wal: list %s: %w", l.opts.Dir, err)
	}
	taken := make(map[string]bool, len(names))
	for _, n := range names {
		taken[n] = true
	}
	name := seg.name + ".broken"
	for i := 1; taken[name]; i++ {
		name = fmt.Sprintf("%s.broken.%d", seg.name, i)
	}
	dst, err := l.fs.OpenFile(l.path(name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", fmt.Errorf("wal: save %s: %w", name, err)
	}
	if err := copySegment(dst, src, size); err != nil {
		dst.Close()
		if rerr := l.fs.Remove(l.path(name)); rerr != nil {
			l.log.Warn("wal: remove the partial copy", "copy", name, "err", rerr)
		}
		return "", fmt.Errorf("wal: save %s: %w", name, err)
	}
	if err := dst.Close(); err != nil {
		return "", fmt.Errorf("wal: save %s: %w", name, err)
	}
	if err := l.fs.SyncDir(l.opts.Dir); err != nil {
		return "", fmt.Errorf("wal: sync directory %s: %w", l.opts.Dir, err)
	}
	return name, nil
}

// copySegment copies size bytes of src to dst and syncs dst.
func copySegment(dst, src File, size int64) error {
	buf := make([]byte, min(size, windowSize))
	for off := int64(0); off < size; {
		n := int(min(int64(len(buf)), size-off))
		if _, err := src.ReadAt(buf[:n], off); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if _, err := dst.WriteAt(buf[:n], off); err != nil {
			return err
		}
		off += int64(n)
	}
	if err := dst.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	return nil
}
