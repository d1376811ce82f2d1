package txn

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters/storetest"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/testenv"
	"github.com/nemocache/nemo/internal/tmpfs"
	"github.com/nemocache/nemo/wal"
)

// TestCheckpointByLogSize: with the checkpoint interval an hour off, a
// checkpoint still runs each time CheckpointBytes have been logged, so
// what a crash leaves to replay stays bounded by it.
func TestCheckpointByLogSize(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := openEnvWith(t, dir, nil, func(_ *cache.Options, o *Options) { o.CheckpointBytes = 16 << 10 })
	val := make([]byte, 100)
	const writes = 1000 // ~170 KiB of log
	for i := range writes {
		if err := d.eng.Upsert(ctx, "t", k(i), val); err != nil {
			t.Fatal(err)
		}
	}
	// The last one due has run: the log since it is below CheckpointBytes.
	testenv.WaitFor(t, 10*time.Second, "the checkpoint due by log size", func() bool { return d.eng.checkpointDue() != "log size" })
	st, _ := d.eng.WALStats()
	d.close()
	n := walTxns(t, dir)
	t.Logf("%d commits, %d checkpoint records; a restart replays %d", writes, st.Checkpoints, n)
	if st.Checkpoints < 5 || n > 2*(16<<10)/150 {
		t.Fatalf("%d checkpoints, %d transactions to replay: want a checkpoint per 16 KiB of log", st.Checkpoints, n)
	}
}

// TestCheckpointWhenClean: once write-back has caught up (nothing dirty),
// a checkpoint follows within about a second, although the interval is
// an hour and the log is small: a crash then replays nothing.
func TestCheckpointWhenClean(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := openEnvWith(t, dir, nil, func(c *cache.Options, _ *Options) {
		c.FlushInterval, c.MaxDirtyAge = 10*time.Millisecond, 10*time.Millisecond
	})
	for i := range 20 {
		if err := d.eng.Upsert(ctx, "t", k(i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	waitCheckpoint(t, d)
	d.close()
	if n := walTxns(t, dir); n != 0 {
		t.Fatalf("a restart would replay %d transactions the store already has", n)
	}
}

// volFS is a small volume for the WAL (see wal's tests for the same
// idea): every file's size counts against capacity, what would exceed it
// fails with ENOSPC, fill lets another tenant take what is left. An open
// file keeps its entry across a rename, as an inode does.
type volFS struct {
	wal.OSFS
	mu       sync.Mutex
	capacity int64
	other    int64
	files    map[string]*int64 // path -> bytes held
}

func (v *volFS) used() int64 {
	n := v.other
	for _, s := range v.files {
		n += *s
	}
	return n
}

func (v *volFS) fill(*testing.T) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.other = 0
	v.other = v.capacity - v.used()
}

// resize accounts a file growing (or, with shrink, changing) to size.
func (v *volFS) resize(held *int64, size int64, shrink bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if size > *held && v.used()+size-*held > v.capacity {
		return syscall.ENOSPC
	}
	if size > *held || shrink {
		*held = size
	}
	return nil
}

func (v *volFS) Available(string) (int64, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.capacity - v.used(), nil
}

func (v *volFS) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	f, err := v.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	size, err := f.Size()
	if err != nil {
		f.Close()
		return nil, err
	}
	v.mu.Lock()
	held, ok := v.files[name]
	if !ok {
		held = new(int64)
		v.files[name] = held
	}
	*held = size
	v.mu.Unlock()
	return volFile{f, v, held}, nil
}

func (v *volFS) Remove(name string) error {
	if err := v.OSFS.Remove(name); err != nil {
		return err
	}
	v.mu.Lock()
	delete(v.files, name)
	v.mu.Unlock()
	return nil
}

func (v *volFS) Rename(oldpath, newpath string) error {
	if err := v.OSFS.Rename(oldpath, newpath); err != nil {
		return err
	}
	v.mu.Lock()
	v.files[newpath] = v.files[oldpath]
	delete(v.files, oldpath)
	v.mu.Unlock()
	return nil
}

type volFile struct {
	wal.File
	v    *volFS
	held *int64
}

func (f volFile) Allocate(size int64) error {
	if err := f.v.resize(f.held, size, false); err != nil {
		return err
	}
	return f.File.Allocate(size)
}

func (f volFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.v.resize(f.held, off+int64(len(p)), false); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f volFile) Truncate(size int64) error {
	if err := f.File.Truncate(size); err != nil {
		return err
	}
	return f.v.resize(f.held, size, true)
}

// tmpfsVolume is a real 1 MiB tmpfs (root only) that a filler file fills.
type tmpfsVolume struct{ mnt string }

func mountTmpfs(t *testing.T) *tmpfsVolume {
	return &tmpfsVolume{tmpfs.Mount(t, "1m")}
}

func (v *tmpfsVolume) fill(t *testing.T) { tmpfs.Fill(t, v.mnt) }

// TestFullWALVolume: the WAL's volume fills up (another tenant takes the
// rest). Writes are refused with ErrCommitLog wrapping wal.ErrNoSpace and
// reads go on; the refusal starts a checkpoint that frees space, so
// writes are accepted again with the volume still full; a checkpoint with
// nothing dirty succeeds on the full volume; with the store down the log
// fills, and a restart on the full volume replays, checkpoints and
// accepts writes; a drain completes. Every
// acknowledged write reaches the store. On a fault file system that
// accounts a small volume, and on a real tmpfs when run as root.
func TestFullWALVolume(t *testing.T) {
	t.Run("faultfs", func(t *testing.T) {
		vol := &volFS{capacity: 512 << 10, files: map[string]*int64{}}
		testFullWALVolume(t, vol, vol.fill, "")
	})
	t.Run("tmpfs", func(t *testing.T) {
		vol := mountTmpfs(t)
		testFullWALVolume(t, nil, vol.fill, filepath.Join(vol.mnt, "wal"))
	})
}

func testFullWALVolume(t *testing.T, fsys wal.FS, fill func(*testing.T), walDir string) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func() *durableEnv {
		return openEnvWith(t, dir, fsys, func(_ *cache.Options, o *Options) {
			if walDir != "" {
				o.WAL.Dir = walDir
			}
		})
	}
	acked := map[int]string{}
	next := 0
	// write commits until the log refuses one for lack of space.
	write := func(d *durableEnv) error {
		for {
			v := fmt.Sprintf("%0200d", next)
			err := d.eng.Upsert(ctx, "t", k(next), []byte(v))
			if err != nil {
				return err
			}
			acked[next] = v
			next++
		}
	}
	refused := func(d *durableEnv) {
		t.Helper()
		err := write(d)
		if !errors.Is(err, ErrCommitLog) || !errors.Is(err, wal.ErrNoSpace) {
			t.Fatalf("write %d on a full volume: %v, want ErrCommitLog wrapping wal.ErrNoSpace", next, err)
		}
		if v, ok, err := d.eng.Get(ctx, "t", k(0), ReadLatest); err != nil || !ok || string(v) != acked[0] {
			t.Fatalf("reads must go on: %v %v", ok, err)
		}
	}
	accepted := func(d *durableEnv) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			v := fmt.Sprintf("%0200d", next)
			err := d.eng.Upsert(ctx, "t", k(next), []byte(v))
			if err == nil {
				acked[next] = v
				next++
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("writes still refused on the full volume: %v", err)
			}
		}
	}

	d := open()
	fill(t)
	refused(d)
	t.Logf("%d writes filled the volume", next)
	accepted(d) // the refusal started a checkpoint, which made room

	fill(t)
	refused(d)
	if err := d.eng.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.eng.Checkpoint(ctx); err != nil {
		t.Fatalf("checkpoint with nothing dirty on a full volume: %v", err)
	}
	accepted(d)

	// The store goes down, so no checkpoint can free the log; then a
	// crash with acknowledged writes only in the log, on a full volume.
	// The restart (with the store back) replays, and its checkpoint makes
	// room.
	d.fault.SetDown(true)
	fill(t)
	refused(d)
	d.close()
	fill(t)
	d = open()
	defer d.close()
	waitCheckpoint(t, d)
	accepted(d)
	if err := d.eng.Drain(ctx); err != nil {
		t.Fatalf("drain on a full volume: %v", err)
	}
	for i, want := range acked {
		vals, err := storetest.Values(d.store.Get(ctx, "t", [][]byte{k(i)}))
		if err != nil || string(vals[0]) != want {
			t.Fatalf("acknowledged write %d not in the store after the drain: %q %v", i, vals, err)
		}
	}
	t.Logf("%d acknowledged writes in the store", len(acked))
}
