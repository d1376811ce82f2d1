package wal

import (
	"fmt"
	"os"
	"path/filepath"
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
	l := &Log{opts: opts, fs: opts.FS, log: opts.Logger.With("component", "wal", "dir", opts.Dir)}
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
	l.log.Info("wal opened", "segments", len(l.segs), "next_lsn", l.next, "checkpoint", l.lastCkpt.Load())
	if opts.GroupCommit {
		l.reqs = make(chan *request)
		l.quit = make(chan struct{})
		l.stopped = make(chan struct{})
		go l.run()
	}
	return l, nil
}

func (l *Log) path(name string) string { return filepath.Join(l.opts.Dir, name) }

// createFirst starts an empty log; LSNs start at 1 so that 0 can mean
// "no checkpoint" and "from the last checkpoint".
func (l *Log) createFirst() error {
	seg := segment{first: 1, name: segmentName(1)}
	f, err := l.createSegment(seg, l.opts.SegmentSize)
	if err != nil {
		return err
	}
	l.segs = []segment{seg}
	l.cur, l.capacity, l.next = f, l.opts.SegmentSize, 1
	return nil
}

// createSegment creates, preallocates and syncs a segment file, and syncs
// the directory so the file survives a crash before it is written.
func (l *Log) createSegment(seg segment, size int64) (File, error) {
	f, err := l.fs.OpenFile(l.path(seg.name), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("wal: create %s: %w", seg.name, err)
	}
	if err := f.Allocate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("wal: preallocate %s to %d bytes: %w", seg.name, size, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("wal: sync %s: %w", seg.name, err)
	}
	if err := l.fs.SyncDir(l.opts.Dir); err != nil {
		f.Close()
		return nil, fmt.Errorf("wal: sync directory %s: %w", l.opts.Dir, err)
	}
	return f, nil
}

// recover validates every segment and leaves the last one open for
// appending at the end of its last complete transaction.
func (l *Log) recover() error {
	next := l.segs[0].first
	for i, seg := range l.segs {
		if seg.first != next {
			return fmt.Errorf("%w: %s: segment starts at LSN %d, want %d (a segment is missing)", ErrCorrupt, seg.name, seg.first, next)
		}
		last := i == len(l.segs)-1
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
		if !last {
			if err := f.Close(); err != nil {
				return fmt.Errorf("wal: close %s: %w", seg.name, err)
			}
			continue
		}
		// Keep the tail's room: a repair or an interrupted preallocation
		// may have left the file short.
		if size < l.opts.SegmentSize {
			if err := f.Allocate(l.opts.SegmentSize); err != nil {
				f.Close()
				return fmt.Errorf("wal: preallocate %s: %w", seg.name, err)
			}
			size = l.opts.SegmentSize
		}
		l.cur, l.off, l.capacity = f, res.end, size
	}
	l.next = next
	return nil
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
	if err := l.repair(f, seg, size, res); err != nil {
		return res, 0, err
	}
	return res, size, nil
}

// repair saves a copy of the segment, then cuts it back to res.end and
// zero-fills the rest so the zero end marker follows the last good frame.
func (l *Log) repair(f File, seg segment, size int64, res walkResult) error {
	broken, err := l.saveBroken(f, seg, size)
	if err != nil {
		return err
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
		return fmt.Errorf("wal: repair %s: truncate to %d: %w", seg.name, res.end, err)
	}
	if err := f.Allocate(size); err != nil {
		return fmt.Errorf("wal: repair %s: preallocate: %w", seg.name, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("wal: repair %s: sync: %w", seg.name, err)
	}
	return nil
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
	buf := make([]byte, min(size, windowSize))
	for off := int64(0); off < size; {
		n := int(min(int64(len(buf)), size-off))
		if _, err := src.ReadAt(buf[:n], off); err != nil {
			dst.Close()
			return "", fmt.Errorf("wal: save %s: read: %w", name, err)
		}
		if _, err := dst.WriteAt(buf[:n], off); err != nil {
			dst.Close()
			return "", fmt.Errorf("wal: save %s: %w", name, err)
		}
		off += int64(n)
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		return "", fmt.Errorf("wal: save %s: sync: %w", name, err)
	}
	if err := dst.Close(); err != nil {
		return "", fmt.Errorf("wal: save %s: %w", name, err)
	}
	if err := l.fs.SyncDir(l.opts.Dir); err != nil {
		return "", fmt.Errorf("wal: sync directory %s: %w", l.opts.Dir, err)
	}
	return name, nil
}
