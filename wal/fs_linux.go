package wal

import (
	"errors"
	"syscall"
)

// Allocate uses fallocate(2) mode 0, which reserves zeroed blocks and extends
// the size without touching existing data; file systems without it fall back
// to a sparse extension.
func (f osFile) Allocate(size int64) error {
	for {
		err := syscall.Fallocate(int(f.Fd()), 0, 0, size)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.ENOSYS):
			return f.growByTruncate(size)
		}
		return err
	}
}

// Sync uses fdatasync(2): the segment's size is fixed by preallocation, so
// the inode metadata fsync would also flush is not needed to read the data
// back (fdatasync still flushes the extent changes that writing into
// preallocated blocks causes).
func (f osFile) Sync() error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// Available is statfs(2)'s f_bavail in bytes: what an unprivileged writer
// can still allocate.
func (OSFS) Available(dir string) (int64, error) {
	var st syscall.Statfs_t
	for {
		err := syscall.Statfs(dir, &st)
		switch {
		case err == nil:
			return int64(st.Bavail) * int64(st.Bsize), nil
		case errors.Is(err, syscall.EINTR):
			continue
		}
		return 0, err
	}
}
