//go:build !linux

package wal

import "errors"

// Allocate extends the file sparsely: the portable path has no fallocate.
func (f osFile) Allocate(size int64) error { return f.growByTruncate(size) }

// Sync is fsync.
func (f osFile) Sync() error { return f.File.Sync() }

// Available is unknown on the portable path: segments are preallocated at
// their full size.
func (OSFS) Available(string) (int64, error) {
	return 0, errors.New("wal: free space is not known on this platform")
}
