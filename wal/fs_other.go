//go:build !linux

package wal

// Allocate extends the file sparsely: the portable path has no fallocate.
func (f osFile) Allocate(size int64) error { return f.growByTruncate(size) }

// Sync is fsync.
func (f osFile) Sync() error { return f.File.Sync() }
