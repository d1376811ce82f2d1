package wal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/nemocache/nemo/internal/tmpfs"
)

// fillLog appends ~330-byte transactions from id on until one fails, and
// returns the acknowledged ones and the error.
func fillLog(t *testing.T, l *Log, id uint64) ([]txn, error) {
	t.Helper()
	var acked []txn
	for i := 0; i < 10_000; i++ {
		recs := []Data{putRec("a", "k", value(300, int(id)))}
		lsn, err := l.Append(context.Background(), id, recs)
		if err != nil {
			return acked, err
		}
		acked = append(acked, txn{id: id, lsn: lsn, recs: recs})
		id++
	}
	t.Fatal("the volume never filled")
	return nil, nil
}

// checkNoSpace asserts err is a refused Append on a full volume that left
// the log writable, and no file but segments behind.
func checkNoSpace(t *testing.T, l *Log, dir string, err error) {
	t.Helper()
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append on a full volume: %v, want ErrNoSpace wrapping ENOSPC", err)
	}
	if l.Err() != nil {
		t.Fatalf("a full volume failed the log: %v", l.Err())
	}
	if st := l.Stats(); !st.SpaceLow {
		t.Fatalf("Stats.SpaceLow is false after %v", err)
	}
	checkFiles(t, dir)
}

// checkFiles asserts the directory holds segments only, none of them
// empty.
func checkFiles(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := parseSegmentName(e.Name()); !ok || fi.Size() == 0 {
			t.Errorf("file %s (%d bytes) left in the log directory", e.Name(), fi.Size())
		}
	}
}

// TestCheckpointWithoutCommitsWritesNothing: a checkpoint that covers no
// commit the last one did not writes no record, so an idle log does not
// grow and a full segment's reserve is not used up.
func TestCheckpointWithoutCommitsWritesNothing(t *testing.T) {
	l := mustOpen(t, testOptions(t, t.TempDir()))
	defer l.Close()
	if err := l.Checkpoint(l.NextLSN()); err != nil || l.Stats().Checkpoints != 0 {
		t.Fatalf("checkpoint of an empty log: %v, %d records", err, l.Stats().Checkpoints)
	}
	mustAppend(t, l, 1, putRec("a", "k", "v"))
	for range 3 {
		if err := l.Checkpoint(l.NextLSN()); err != nil {
			t.Fatal(err)
		}
	}
	if st := l.Stats(); st.Checkpoints != 1 || l.LastCheckpoint() != 3 {
		t.Fatalf("3 checkpoints after one commit wrote %d records (last %d), want 1 at 3", st.Checkpoints, l.LastCheckpoint())
	}
}

// TestFullVolumeCheckpointFreesSegments: the volume holds two segments.
// Appends fill both and are then refused with ErrNoSpace, leaving the log
// writable and no half-created segment behind; a checkpoint still
// completes (its record goes into the reserve) and frees the older
// segment, so appends go on.
func TestFullVolumeCheckpointFreesSegments(t *testing.T) {
	dir := t.TempDir()
	vol := newVolumeFS(2*minSegmentSize + 1000)
	vol.unknown = true // full-size segments
	opts := testOptions(t, dir)
	opts.FS = vol
	l := mustOpen(t, opts)
	acked, err := fillLog(t, l, 1)
	checkNoSpace(t, l, dir, err)
	if n := len(segmentFiles(t, dir)); n != 2 {
		t.Fatalf("%d segments on a volume that holds 2", n)
	}
	ckpt := l.NextLSN()
	if err := l.Checkpoint(ckpt); err != nil {
		t.Fatalf("checkpoint on a full volume: %v", err)
	}
	if n := len(segmentFiles(t, dir)); n != 1 {
		t.Fatalf("%d segments after the checkpoint, want 1", n)
	}
	more, err := fillLog(t, l, 1000)
	if len(more) == 0 {
		t.Fatalf("no append after the checkpoint freed a segment: %v", err)
	}
	checkNoSpace(t, l, dir, err)
	l.Close()
	l = mustOpen(t, opts)
	defer l.Close()
	checkReplay(t, replayAll(t, l, 0), more)
	if l.LastCheckpoint() != ckpt || acked[len(acked)-1].lsn >= ckpt {
		t.Fatalf("after reopen LastCheckpoint = %d, want %d", l.LastCheckpoint(), ckpt)
	}
}

// TestFullVolumeRecyclesTheCheckpointedSegment: the volume holds one
// segment only. Once a checkpoint covers everything in it, the next
// append that needs a new segment reuses it, renamed after the next LSN.
func TestFullVolumeRecyclesTheCheckpointedSegment(t *testing.T) {
	dir := t.TempDir()
	vol := newVolumeFS(minSegmentSize + 1000)
	vol.unknown = true // full-size segments
	opts := testOptions(t, dir)
	opts.FS = vol
	l := mustOpen(t, opts)
	_, err := fillLog(t, l, 1)
	checkNoSpace(t, l, dir, err)
	if err := l.Checkpoint(l.NextLSN()); err != nil {
		t.Fatalf("checkpoint on a full volume: %v", err)
	}
	next := l.NextLSN()
	more, err := fillLog(t, l, 1000)
	if len(more) == 0 {
		t.Fatalf("no append after the checkpoint: %v", err)
	}
	checkNoSpace(t, l, dir, err)
	if segs := segmentFiles(t, dir); len(segs) != 1 || segs[0].first != next {
		t.Fatalf("segments %v, want the recycled one alone, named after LSN %d", segs, next)
	}
	l.Close()
	l = mustOpen(t, opts)
	defer l.Close()
	checkReplay(t, replayAll(t, l, 0), more)
}

// TestCheckpointStartsASegment: a checkpoint in a segment holding more
// than 1/32 of its size and 1 MiB moves the log on, so a restart does not
// read much of the history checkpoints covered: one that leaves a commit
// uncovered makes the next commit open a new segment (the next checkpoint
// drops the old one); one that covers everything starts the new segment
// with a copy of itself and drops the old one at once.
func TestCheckpointStartsASegment(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	opts.SegmentSize = 4 << 20
	big := func(i int) Data { return putRec("a", "k", value(600<<10, i)) }
	l := mustOpen(t, opts)
	mustAppend(t, l, 1, big(1))
	ckpt := l.NextLSN()
	mustAppend(t, l, 2, big(2))
	if err := l.Checkpoint(ckpt); err != nil {
		t.Fatal(err)
	}
	if segs := segmentFiles(t, dir); len(segs) != 1 {
		t.Fatalf("a checkpoint below a commit moved the log: %v", segs)
	}
	third := mustAppend(t, l, 3, putRec("a", "k", "x"))
	if segs := segmentFiles(t, dir); len(segs) != 2 || segs[1].first != third.lsn-1 {
		t.Fatalf("segments %v: the commit after the checkpoint should open one at LSN %d", segs, third.lsn-1)
	}
	ckpt = l.NextLSN()
	if err := l.Checkpoint(ckpt); err != nil {
		t.Fatal(err)
	}
	if segs := segmentFiles(t, dir); len(segs) != 1 || segs[0].first != third.lsn-1 {
		t.Fatalf("segments %v: the checkpoint should have dropped the first", segs)
	}
	mustAppend(t, l, 4, big(4))
	mustAppend(t, l, 5, big(5))
	ckpt = l.NextLSN()
	if err := l.Checkpoint(ckpt); err != nil {
		t.Fatal(err)
	}
	if segs := segmentFiles(t, dir); len(segs) != 1 || segs[0].first != ckpt+1 {
		t.Fatalf("segments %v, want one starting with the covering checkpoint's copy at LSN %d", segs, ckpt+1)
	}
	after := mustAppend(t, l, 6, putRec("a", "k", "x"))
	l.Close()
	l = mustOpen(t, opts)
	defer l.Close()
	if l.LastCheckpoint() != ckpt {
		t.Fatalf("LastCheckpoint after reopen = %d, want %d", l.LastCheckpoint(), ckpt)
	}
	checkReplay(t, replayAll(t, l, 1), []txn{after})
}

// TestRestartOnFullVolume: a full volume and a 0-byte segment left by an
// earlier rotation that could not preallocate (as logs written before
// rotation cleaned up after itself hold). Open needs no space: it removes
// the empty segment, replays, and a checkpoint followed by an append
// works; nothing empty is left behind.
func TestRestartOnFullVolume(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	l := mustOpen(t, opts)
	var acked []txn
	for i := range 8 {
		acked = append(acked, mustAppend(t, l, uint64(i+1), putRec("a", "k", value(300, i))))
	}
	empty := filepath.Join(dir, segmentName(l.NextLSN()))
	l.Close()
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	vol := newVolumeFS(1 << 20)
	vol.fill(true)
	opts.FS = vol
	l = mustOpen(t, opts)
	vol.fill(true) // whatever Open freed, another tenant takes
	checkReplay(t, replayAll(t, l, 0), acked)
	checkFiles(t, dir)
	if err := l.Checkpoint(l.NextLSN()); err != nil {
		t.Fatalf("checkpoint after a restart on a full volume: %v", err)
	}
	after := mustAppend(t, l, 100, putRec("a", "k", value(2000, 1)))
	checkFiles(t, dir)
	l.Close()
	opts.FS = nil
	l = mustOpen(t, opts)
	defer l.Close()
	checkReplay(t, replayAll(t, l, 0), []txn{after})
}

// TestCheckpointRecyclesAFullTail: the last segment has no room left at
// all (cut at its last frame, as a repair on a full volume or a log
// written before the reserve leaves it) and the volume is full. The
// checkpoint that covers everything goes into the recycled segment.
func TestCheckpointRecyclesAFullTail(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	l := mustOpen(t, opts)
	for i := range 4 {
		mustAppend(t, l, uint64(i+1), putRec("a", "k", value(300, i)))
	}
	l.Close()
	path := filepath.Join(dir, segmentName(1))
	if err := os.Truncate(path, dataEnd(t, path)); err != nil {
		t.Fatal(err)
	}
	vol := newVolumeFS(1 << 20)
	vol.fill(true)
	opts.FS = vol
	l = mustOpen(t, opts)
	vol.fill(true)
	ckpt := l.NextLSN()
	if err := l.Checkpoint(ckpt); err != nil {
		t.Fatalf("checkpoint with no room in the segment on a full volume: %v", err)
	}
	if segs := segmentFiles(t, dir); len(segs) != 1 || segs[0].first != ckpt {
		t.Fatalf("segments %v, want the recycled one, named after the checkpoint record's LSN %d", segs, ckpt)
	}
	after := mustAppend(t, l, 9, putRec("a", "k", "x"))
	l.Close()
	opts.FS = nil
	l = mustOpen(t, opts)
	defer l.Close()
	if l.LastCheckpoint() != ckpt {
		t.Fatalf("LastCheckpoint after reopen = %d, want %d", l.LastCheckpoint(), ckpt)
	}
	checkReplay(t, replayAll(t, l, 1), []txn{after})
}

// TestOpenOnFullVolume: a first start with no space at all, and a restart
// whose only segment is empty, both open; appends fail with ErrNoSpace
// until space is freed.
func TestOpenOnFullVolume(t *testing.T) {
	dir := t.TempDir()
	vol := newVolumeFS(0)
	opts := testOptions(t, dir)
	opts.FS = vol
	for range 2 {
		l := mustOpen(t, opts)
		if _, err := l.Append(context.Background(), 1, []Data{putRec("a", "k", "v")}); !errors.Is(err, ErrNoSpace) {
			t.Fatalf("append with no space: %v", err)
		}
		l.Close()
	}
	vol.capacity = 1 << 20
	l := mustOpen(t, opts)
	defer l.Close()
	want := mustAppend(t, l, 1, putRec("a", "k", "v"))
	checkReplay(t, replayAll(t, l, 0), []txn{want})
}

// TestSmallVolumeGetsSmallSegments: a 1 MiB volume with the default 64 MiB
// segment size starts, with segments a quarter of the free space, and
// keeps appending as long as checkpoints free segments.
func TestSmallVolumeGetsSmallSegments(t *testing.T) {
	dir := t.TempDir()
	vol := newVolumeFS(1 << 20)
	opts := Options{Dir: dir}
	opts.FS, opts.Logger = vol, testLogger(t)
	l := mustOpen(t, opts)
	defer l.Close()
	if st := l.Stats(); st.SegmentBytes != 256<<10 || !st.SpaceLow {
		t.Fatalf("first segment %d bytes (space low %v), want 256 KiB", st.SegmentBytes, st.SpaceLow)
	}
	val := value(1000, 1)
	for i := range 5000 { // 5 MB through a 1 MiB volume
		if _, err := l.Append(context.Background(), uint64(i), []Data{putRec("a", "k", val)}); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if i%100 == 99 {
			if err := l.Checkpoint(l.NextLSN()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestRepairOnFullVolume: a torn tail on a full volume is repaired without
// the copy there is no room for.
func TestRepairOnFullVolume(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	l := mustOpen(t, opts)
	want := []txn{mustAppend(t, l, 1, putRec("a", "k1", "v1"))}
	l.Close()
	path := filepath.Join(dir, segmentName(1))
	writeAt(t, path, dataEnd(t, path), appendFrame(nil, &frame{typ: 1, lsn: 3, id: 2, body: putRec("a", "torn", "x").Body}))
	vol := newVolumeFS(1 << 20)
	vol.fill(true)
	opts.FS = vol
	l = mustOpen(t, opts)
	defer l.Close()
	checkReplay(t, replayAll(t, l, 0), want)
	checkFiles(t, dir)
}

// TestRotationLeavesNoFile: when a rotation cannot remove the file it
// failed to preallocate, the next append still goes to a new segment
// (the file's name is the next LSN), and the log reopens.
func TestRotationLeavesNoFile(t *testing.T) {
	dir := t.TempDir()
	vol := newVolumeFS(minSegmentSize + 1000)
	vol.unknown = true // full-size segments
	opts := testOptions(t, dir)
	opts.FS = vol
	l := mustOpen(t, opts)
	acked, err := fillLog(t, l, 1)
	checkNoSpace(t, l, dir, err)
	vol.mu.Lock()
	vol.removeErr = syscall.EIO
	vol.mu.Unlock()
	if _, err := l.Append(context.Background(), 99, []Data{putRec("a", "big", value(600, 1))}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("append: %v", err)
	}
	vol.mu.Lock()
	vol.removeErr = nil
	vol.capacity = 1 << 20
	vol.mu.Unlock()
	small := mustAppend(t, l, 100, putRec("a", "small", "x"))
	if segs := segmentFiles(t, dir); len(segs) != 2 || segs[1].first != small.lsn-1 {
		t.Fatalf("segments %v: the small commit (LSN %d) should open the next one", segs, small.lsn)
	}
	l.Close()
	l = mustOpen(t, opts)
	defer l.Close()
	checkReplay(t, replayAll(t, l, 0), append(acked, small))
}

// TestTmpfsVolume runs the log on a real 1 MiB tmpfs with the default
// segment size: it starts, refuses appends with ErrNoSpace once full,
// checkpoints its way out, and restarts, replays, checkpoints and appends
// on a volume another file has filled. It needs root (mount): without it
// the test fails (internal/tmpfs).
func TestTmpfsVolume(t *testing.T) {
	mnt := tmpfs.Mount(t, "1m")
	dir := filepath.Join(mnt, "wal")
	opts := Options{Dir: dir}
	opts.Logger = testLogger(t)
	l := mustOpen(t, opts)
	acked, err := fillLog(t, l, 1)
	checkNoSpace(t, l, dir, err)
	t.Logf("%d transactions filled the volume in %d segments", len(acked), len(segmentFiles(t, dir)))
	if err := l.Checkpoint(l.NextLSN()); err != nil {
		t.Fatalf("checkpoint on a full tmpfs: %v", err)
	}
	more, err := fillLog(t, l, 10_000)
	if len(more) == 0 {
		t.Fatalf("no append after the checkpoint: %v", err)
	}
	checkNoSpace(t, l, dir, err)
	l.Close()

	// Another file takes whatever is left.
	f, err := os.Create(filepath.Join(mnt, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for buf := make([]byte, 4096); ; {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
	l = mustOpen(t, opts)
	defer l.Close()
	checkReplay(t, replayAll(t, l, 0), more)
	if err := l.Checkpoint(l.NextLSN()); err != nil {
		t.Fatalf("checkpoint after a restart on a full tmpfs: %v", err)
	}
	last := mustAppend(t, l, 20_000, putRec("a", "k", "after"))
	checkFiles(t, dir)
	if segs := segmentFiles(t, dir); !slices.ContainsFunc(segs, func(s segment) bool { return s.first <= last.lsn }) {
		t.Fatalf("segments %v do not hold LSN %d", segs, last.lsn)
	}
}
