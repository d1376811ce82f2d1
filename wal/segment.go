package wal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

const segmentExt = ".wal"

// segment is one log file, named by the LSN of its first record.
type segment struct {
	first uint64
	name  string // base name, e.g. 0000000000000001.wal
}

func segmentName(first uint64) string {
	return fmt.Sprintf("%016x%s", first, segmentExt)
}

// parseSegmentName accepts exactly the names segmentName produces, so
// ".broken" copies and stray files are never mistaken for segments.
func parseSegmentName(name string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, segmentExt)
	if !ok || len(hex) != 16 || strings.ToLower(hex) != hex {
		return 0, false
	}
	v, err := strconv.ParseUint(hex, 16, 64)
	return v, err == nil
}

// listSegments returns the directory's segments in LSN order.
func listSegments(names []string) []segment {
	var segs []segment
	for _, n := range names {
		if first, ok := parseSegmentName(n); ok {
			segs = append(segs, segment{first: first, name: n})
		}
	}
	slices.SortFunc(segs, func(a, b segment) int {
		switch {
		case a.first < b.first:
			return -1
		case a.first > b.first:
			return 1
		}
		return 0
	})
	return segs
}

// windowSize is how much of a segment the reader buffers per read.
const windowSize = 1 << 20

// window serves byte ranges of a file from a buffer refilled with large
// reads, so scanning costs one read per MiB rather than two per frame. A
// returned slice is valid until the next call.
type window struct {
	r     io.ReaderAt
	size  int64
	start int64
	buf   []byte
}

func newWindow(r io.ReaderAt, size int64) *window {
	return &window{r: r, size: size}
}

// bytes returns the n bytes at off, or fewer if the data ends first.
func (w *window) bytes(off int64, n int) ([]byte, error) {
	if off >= w.size {
		return nil, nil
	}
	n = int(min(int64(n), w.size-off))
	if off >= w.start && off+int64(n) <= w.start+int64(len(w.buf)) {
		i := off - w.start
		return w.buf[i : i+int64(n)], nil
	}
	want := int(min(int64(max(n, windowSize)), w.size-off))
	if cap(w.buf) < want {
		w.buf = make([]byte, want)
	}
	w.buf = w.buf[:want]
	got, err := w.r.ReadAt(w.buf, off)
	if got < want && err == nil {
		err = io.ErrUnexpectedEOF
	}
	if err != nil && !(errors.Is(err, io.EOF) && got == want) {
		w.buf = w.buf[:0]
		return nil, err
	}
	w.start = off
	return w.buf[:n], nil
}

// frameAt decodes the frame at off. errShort means the data ends inside it.
func (w *window) frameAt(off int64) (frame, int, error) {
	h, err := w.bytes(off, headerSize)
	if err != nil {
		return frame{}, 0, err
	}
	size, err := frameLen(h)
	if err != nil {
		return frame{}, 0, err
	}
	b, err := w.bytes(off, size)
	if err != nil {
		return frame{}, 0, err
	}
	return decodeFrame(b)
}

// firstNonZero returns the offset of the first non-zero byte in [from, size).
func (w *window) firstNonZero(from int64) (int64, bool, error) {
	for off := from; off < w.size; {
		b, err := w.bytes(off, windowSize)
		if err != nil {
			return 0, false, err
		}
		for i, c := range b {
			if c != 0 {
				return off + int64(i), true, nil
			}
		}
		off += int64(len(b))
	}
	return 0, false, nil
}

// validFrameAfter reports the offset of a frame that decodes cleanly
// somewhere in (from, size): proof that damage at from is not a torn tail.
func (w *window) validFrameAfter(from int64) (int64, bool, error) {
	off := from + frameAlign
	for {
		nz, ok, err := w.firstNonZero(off)
		if err != nil || !ok {
			return 0, false, err
		}
		off = nz &^ (frameAlign - 1)
		// Cheap filter before the checksum: the payload starts with a
		// frame type.
		if b, err := w.bytes(off, headerSize+1); err == nil && len(b) > headerSize && isFrameType(b[headerSize]) {
			if _, _, err := w.frameAt(off); err == nil {
				return off, true, nil
			}
		}
		off += frameAlign
	}
}

// walkResult describes a segment after walk.
type walkResult struct {
	// next is the LSN after the last complete unit (a commit or
	// checkpoint record), end the byte offset just past it.
	next uint64
	end  int64
	// stop is where the walk stopped; cause is nil if it stopped at the
	// zero end marker or the end of the data, else why the frame at stop
	// does not decode. Frames in [end, stop) are a transaction with no
	// commit marker.
	stop  int64
	cause error
	// checkpoint is the checkpoint LSN of the segment's last checkpoint
	// record, if hasCheckpoint.
	checkpoint    uint64
	hasCheckpoint bool
	// lastCommit is the LSN of the segment's last commit record, 0 if none.
	lastCommit uint64
}

// walk reads a segment's frames from the start, checking that LSNs run on
// from seg.first and that every run of data frames is closed by the
// commit of the same transaction. Those checks fail with ErrCorrupt: a
// frame with a good checksum in the wrong place is not a torn write. A frame
// that does not decode only ends the walk (see walkResult.cause); the caller
// decides whether that is a torn tail. emit, if set, receives every committed
// transaction with copies of its data records.
func walk(w *window, seg segment, emit func(txnID uint64, recs []Data, commitLSN uint64) error) (walkResult, error) {
	res := walkResult{next: seg.first}
	var (
		off     int64
		lsn     = seg.first
		pending []Data // data records of the open transaction
		open    bool   // a transaction has records but no commit yet
		openTxn uint64
	)
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: offset %d: %s", ErrCorrupt, seg.name, off, fmt.Sprintf(format, args...))
	}
	for {
		f, size, err := w.frameAt(off)
		if err != nil {
			res.stop = off
			if !errors.Is(err, errEndOfLog) && off < w.size {
				if isFrameError(err) {
					res.cause = err
				} else {
					return res, fmt.Errorf("wal: read %s at offset %d: %w", seg.name, off, err)
				}
			}
			return res, nil
		}
		if f.lsn != lsn {
			return res, corrupt("record has LSN %d, want %d", f.lsn, lsn)
		}
		lsn++
		switch f.typ {
		case typeCommit:
			if open && f.id != openTxn {
				return res, corrupt("commit of transaction %d inside uncommitted transaction %d", f.id, openTxn)
			}
			if emit != nil {
				if err := emit(f.id, pending, f.lsn); err != nil {
					return res, err
				}
			}
			pending, open = nil, false
			res.lastCommit = f.lsn
		case typeCheckpoint:
			if open {
				return res, corrupt("checkpoint record inside uncommitted transaction %d", openTxn)
			}
			res.checkpoint, res.hasCheckpoint = f.id, true
		default: // a data frame (decodePayload allows no other type)
			if open && f.id != openTxn {
				return res, corrupt("record of transaction %d inside uncommitted transaction %d", f.id, openTxn)
			}
			open, openTxn = true, f.id
			if emit != nil {
				// Copied out of the read buffer.
				pending = append(pending, Data{Type: f.typ, Body: bytes.Clone(f.body)})
			}
		}
		off += int64(size)
		if !open {
			res.next, res.end = lsn, off
		}
	}
}

func isFrameError(err error) bool {
	for _, e := range []error{errShort, errBadHeader, errTooLarge, errBadCRC, errBadPad, errBadPayload} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
