package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// testLogger sends the log's slog output to t.Log so failures show it.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

func testOptions(t testing.TB, dir string) Options {
	return Options{Dir: dir, SegmentSize: minSegmentSize, Logger: testLogger(t)}
}

func mustOpen(t testing.TB, opts Options) *Log {
	t.Helper()
	l, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

// txn is a replayed or appended transaction as the tests compare it.
type txn struct {
	id   uint64
	lsn  uint64 // commit LSN
	recs []Data
}

// putRec and delRec are a plain put's and delete's data records as the
// engine encodes them (txn/logrec: types 1 and 2, the body the uvarint
// length-prefixed keyspace, key and, for a put, value), so that the
// golden segments hold what the engine writes. To the log they are
// opaque.
func putRec(ks, key, val string) Data {
	return Data{Type: 1, Body: lenPrefixed(ks, key, val)}
}

func delRec(ks, key string) Data {
	return Data{Type: 2, Body: lenPrefixed(ks, key)}
}

func lenPrefixed(parts ...string) []byte {
	var b []byte
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

func mustAppend(t testing.TB, l *Log, id uint64, recs ...Data) txn {
	t.Helper()
	lsn, err := l.Append(context.Background(), id, recs)
	if err != nil {
		t.Fatalf("Append txn %d: %v", id, err)
	}
	return txn{id: id, lsn: lsn, recs: recs}
}

// replayAll collects what Replay(from) passes to its callback, with each
// transaction's commit LSN.
func replayAll(t testing.TB, l *Log, from uint64) []txn {
	t.Helper()
	var out []txn
	err := l.replay(from, func(id uint64, recs []Data, commitLSN uint64) error {
		out = append(out, txn{id: id, lsn: commitLSN, recs: recs})
		return nil
	})
	if err != nil {
		t.Fatalf("Replay(%d): %v", from, err)
	}
	return out
}

// checkReplay asserts that got holds exactly want, in order, with the LSNs
// Append promised.
func checkReplay(t testing.TB, got, want []txn) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("replayed %d transactions, want %d:\ngot  %v\nwant %v", len(got), len(want), txnIDs(got), txnIDs(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.id != w.id || g.lsn != w.lsn || len(g.recs) != len(w.recs) {
			t.Fatalf("transaction %d: got id %d, commit LSN %d with %d records, want id %d, commit LSN %d with %d",
				i, g.id, g.lsn, len(g.recs), w.id, w.lsn, len(w.recs))
		}
		for j, r := range w.recs {
			if g.recs[j].Type != r.Type || !bytes.Equal(g.recs[j].Body, r.Body) || g.recs[j].Body == nil {
				t.Fatalf("transaction %d record %d: got %+v, want %+v", w.id, j, g.recs[j], r)
			}
		}
	}
}

func txnIDs(ts []txn) []uint64 {
	ids := make([]uint64, len(ts))
	for i, x := range ts {
		ids[i] = x.id
	}
	return ids
}

func segmentFiles(t testing.TB, dir string) []segment {
	t.Helper()
	names, err := OSFS{}.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return listSegments(names)
}

// dataEnd returns the offset of the end marker in a segment file.
func dataEnd(t testing.TB, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := 0
	for {
		_, n, err := decodeFrame(b[off:])
		if err != nil {
			return int64(off)
		}
		off += n
	}
}

// faultFS wraps the OS file system and fails chosen operations while the
// corresponding error is set.
type faultFS struct {
	OSFS
	mu       sync.Mutex
	syncErr  error // every File.Sync fails
	writeErr error // every WriteAt writes half its bytes, then fails
	allocErr error // every Allocate fails
	// syncHold, when set, holds every File.Sync until it is closed; a
	// held Sync says so on syncHeld when that is set (without blocking).
	syncHold, syncHeld chan struct{}
	writes             atomic.Int64
	syncs              atomic.Int64
}

func (f *faultFS) set(fn func(*faultFS)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *faultFS) get() (syncErr, writeErr, allocErr error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.syncErr, f.writeErr, f.allocErr
}

func (f *faultFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f}, nil
}

type faultFile struct {
	File
	fs *faultFS
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.writes.Add(1)
	if _, err, _ := f.fs.get(); err != nil {
		n, _ := f.File.WriteAt(p[:len(p)/2], off)
		return n, err
	}
	return f.File.WriteAt(p, off)
}

func (f *faultFile) Sync() error {
	f.fs.mu.Lock()
	hold, held := f.fs.syncHold, f.fs.syncHeld
	f.fs.mu.Unlock()
	if hold != nil {
		select {
		case held <- struct{}{}:
		default:
		}
		<-hold
	}
	f.fs.syncs.Add(1)
	if err, _, _ := f.fs.get(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultFile) Allocate(size int64) error {
	if _, _, err := f.fs.get(); err != nil {
		return err
	}
	return f.File.Allocate(size)
}

func value(n int, seed int) string {
	return fmt.Sprintf("%0*d", n, seed)
}

// volumeFS is a small volume over the OS file system: every file's size
// (preallocation and writes past the end alike) counts against capacity,
// and what would exceed it fails with ENOSPC, as on a full disk; a
// preallocation that does not fit changes nothing. Available reports what
// is left. Files that exist when first opened are counted from then on;
// an open file keeps its entry across a rename, as an inode does.
type volumeFS struct {
	OSFS
	mu        sync.Mutex
	capacity  int64
	other     int64             // bytes another tenant of the volume holds
	files     map[string]*int64 // path -> bytes held
	removeErr error             // every Remove fails
	unknown   bool              // Available fails: the log preallocates full segments
}

func newVolumeFS(capacity int64) *volumeFS {
	return &volumeFS{capacity: capacity, files: map[string]*int64{}}
}

func (v *volumeFS) usedLocked() int64 {
	n := v.other
	for _, s := range v.files {
		n += *s
	}
	return n
}

// fill makes another tenant take all the space that is left, or give it
// back (fill(false)).
func (v *volumeFS) fill(full bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.other = 0
	if full {
		v.other = v.capacity - v.usedLocked()
	}
}

// resize accounts a file growing (or, with shrink, changing) to size, if
// it fits.
func (v *volumeFS) resize(held *int64, size int64, shrink bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if size > *held && v.usedLocked()+size-*held > v.capacity {
		return syscall.ENOSPC
	}
	if size > *held || shrink {
		*held = size
	}
	return nil
}

func (v *volumeFS) Available(string) (int64, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.unknown {
		return 0, errors.New("statfs: not known")
	}
	return v.capacity - v.usedLocked(), nil
}

func (v *volumeFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	file, err := v.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	size, err := file.Size()
	if err != nil {
		file.Close()
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	held, ok := v.files[name]
	if !ok {
		held = new(int64)
		v.files[name] = held
	}
	*held = size
	return &volumeFile{File: file, v: v, held: held}, nil
}

func (v *volumeFS) Remove(name string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.removeErr != nil {
		return v.removeErr
	}
	if err := v.OSFS.Remove(name); err != nil {
		return err
	}
	delete(v.files, name)
	return nil
}

func (v *volumeFS) Rename(oldpath, newpath string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.OSFS.Rename(oldpath, newpath); err != nil {
		return err
	}
	v.files[newpath] = v.files[oldpath]
	delete(v.files, oldpath)
	return nil
}

type volumeFile struct {
	File
	v    *volumeFS
	held *int64
}

func (f *volumeFile) Allocate(size int64) error {
	if err := f.v.resize(f.held, size, false); err != nil {
		return err
	}
	return f.File.Allocate(size)
}

func (f *volumeFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.v.resize(f.held, off+int64(len(p)), false); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *volumeFile) Truncate(size int64) error {
	if err := f.File.Truncate(size); err != nil {
		return err
	}
	return f.v.resize(f.held, size, true)
}
