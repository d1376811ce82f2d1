package wal

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// File is the part of an open file the log uses. Every call the log makes to
// storage goes through File or FS, so a test can fail any one of them.
type File interface {
	io.ReaderAt
	io.WriterAt
	// Sync makes written data durable (fsync or fdatasync).
	Sync() error
	// Truncate sets the file's size.
	Truncate(size int64) error
	// Allocate makes the file at least size bytes long, zero-filled past
	// the old end, reserving the blocks where the OS can so that a full
	// disk shows up at rotation rather than mid-commit.
	Allocate(size int64) error
	// Size reports the file's current size.
	Size() (int64, error)
	Close() error
}

// FS is the part of a file system the log uses.
type FS interface {
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	// ReadDir returns the names of the entries in dir.
	ReadDir(dir string) ([]string, error)
	Remove(name string) error
	// Rename renames oldpath to newpath, replacing it if it exists.
	Rename(oldpath, newpath string) error
	MkdirAll(dir string, perm fs.FileMode) error
	// SyncDir makes creations, renames and removals in dir durable.
	SyncDir(dir string) error
	// Available reports how many bytes the file system holding dir can
	// still allocate to the log (statfs f_bavail). An error means unknown:
	// the log then preallocates full segments and lets the allocation
	// decide.
	Available(dir string) (int64, error)
}

// OSFS is the operating system's file system.
type OSFS struct{}

// OpenFile opens name with os.OpenFile.
func (OSFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// ReadDir lists dir.
func (OSFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

// Remove removes name.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// Rename renames oldpath to newpath with os.Rename.
func (OSFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// MkdirAll creates dir and its parents.
func (OSFS) MkdirAll(dir string, perm fs.FileMode) error { return os.MkdirAll(dir, perm) }

// SyncDir fsyncs the directory itself.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(filepath.Clean(dir))
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

type osFile struct{ *os.File }

func (f osFile) Size() (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// growByTruncate is Allocate's portable fallback: a sparse extension, which
// reads as zeros but reserves no blocks.
func (f osFile) growByTruncate(size int64) error {
	cur, err := f.Size()
	if err != nil {
		return err
	}
	if cur >= size {
		return nil
	}
	return f.File.Truncate(size)
}
