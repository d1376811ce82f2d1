package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nemocache/nemo/internal/obs"
)

func TestOptionsValidate(t *testing.T) {
	o := Options{Dir: "d"}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.SegmentSize != DefaultSegmentSize || o.Logger == nil || o.FS == nil {
		t.Fatalf("defaults not filled: %+v", o)
	}
	if o.NoGroupCommit {
		t.Fatal("the zero Options turn group commit off: production's setting must be the zero value")
	}
	bad := Options{SegmentSize: 4100}
	err := bad.Validate()
	if err == nil || !strings.Contains(err.Error(), "Dir") || !strings.Contains(err.Error(), "multiple of 8") {
		t.Fatalf("want both problems reported, got %v", err)
	}
	small := Options{Dir: "d", SegmentSize: 512}
	if err := small.Validate(); err == nil || !strings.Contains(err.Error(), "minimum") {
		t.Fatalf("want minimum size error, got %v", err)
	}
}

func TestOptionsEnsureDefaults(t *testing.T) {
	o := Options{Dir: "d"}
	if err := o.Validate(); err != nil || o.SegmentSize != 0 || o.Logger != nil || o.FS != nil {
		t.Fatalf("Validate changed or refused the options: %v, %+v", err, o)
	}
	o.EnsureDefaults()
	again := o
	again.EnsureDefaults()
	if again != o {
		t.Errorf("EnsureDefaults is not idempotent: %+v, then %+v", o, again)
	}
	set := Options{Dir: "d", SegmentSize: 8 << 10, NoGroupCommit: true}
	set.EnsureDefaults()
	if set.SegmentSize != 8<<10 {
		t.Errorf("EnsureDefaults overwrote SegmentSize: %d", set.SegmentSize)
	}
	if !set.NoGroupCommit {
		t.Error("EnsureDefaults turned group commit back on")
	}
}

func TestAppendReplayReopen(t *testing.T) {
	for _, group := range []bool{true, false} {
		t.Run(fmt.Sprintf("group=%v", group), func(t *testing.T) {
			dir := t.TempDir()
			opts := testOptions(t, dir)
			opts.NoGroupCommit = !group
			l := mustOpen(t, opts)
			if got := l.NextLSN(); got != 1 {
				t.Fatalf("NextLSN of a new log = %d, want 1", got)
			}
			want := []txn{
				mustAppend(t, l, 10, putRec("a", "k1", "v1"), delRec("a", "k2")),
				mustAppend(t, l, 11, putRec("b", "k", "")),
				mustAppend(t, l, 12),
			}
			if want[0].lsn != 3 || want[1].lsn != 5 || want[2].lsn != 6 || l.NextLSN() != 7 {
				t.Fatalf("commit LSNs %d %d %d, next %d; want 3 5 6, next 7", want[0].lsn, want[1].lsn, want[2].lsn, l.NextLSN())
			}
			checkReplay(t, replayAll(t, l, 0), want)
			checkReplay(t, replayAll(t, l, 0), want) // idempotent
			checkReplay(t, replayAll(t, l, 4), want[1:])
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append(context.Background(), 1, nil); !errors.Is(err, ErrClosed) {
				t.Fatalf("Append after Close: %v, want ErrClosed", err)
			}
			if err := l.Replay(0, func(uint64, []Data) error { return nil }); !errors.Is(err, ErrClosed) {
				t.Fatalf("Replay after Close: %v, want ErrClosed", err)
			}

			l = mustOpen(t, opts)
			defer l.Close()
			if l.NextLSN() != 7 {
				t.Fatalf("NextLSN after reopen = %d, want 7", l.NextLSN())
			}
			checkReplay(t, replayAll(t, l, 0), want)
			want = append(want, mustAppend(t, l, 13, putRec("a", "k3", "v3")))
			checkReplay(t, replayAll(t, l, 0), want)
			if _, err := os.Stat(filepath.Join(dir, "0000000000000001.wal.broken")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a clean reopen left a .broken file (stat: %v)", err)
			}
		})
	}
}

func TestAppendRejectsInvalidRecords(t *testing.T) {
	l := mustOpen(t, testOptions(t, t.TempDir()))
	defer l.Close()
	ctx := context.Background()
	for name, recs := range map[string][]Data{
		"commit":        {{Type: typeCommit}},
		"checkpoint":    {{Type: typeCheckpoint, Body: []byte{1}}},
		"zero type":     {{Body: []byte("k")}},
		"type past 63":  {{Type: maxDataType + 1, Body: []byte("k")}},
		"type 0xff":     {{Type: 0xff}},
		"too large":     {{Type: 1, Body: make([]byte, maxPayload)}},
		"second bad":    {putRec("a", "b", "c"), {Type: typeCommit}},
		"largest + one": {{Type: 1, Body: make([]byte, maxPayload-2*binary.MaxVarintLen64)}},
	} {
		if _, err := l.Append(ctx, 1, recs); !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("%s: got %v, want ErrInvalidRecord", name, err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Append(cancelled, 1, []Data{putRec("a", "b", "c")}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: got %v", err)
	}
	if l.NextLSN() != 1 {
		t.Fatalf("rejected appends consumed LSNs: next %d", l.NextLSN())
	}
}

func TestReplayStopsOnCallbackError(t *testing.T) {
	l := mustOpen(t, testOptions(t, t.TempDir()))
	defer l.Close()
	mustAppend(t, l, 1, putRec("a", "1", "x"))
	mustAppend(t, l, 2, putRec("a", "2", "x"))
	boom := errors.New("boom")
	calls := 0
	err := l.Replay(0, func(uint64, []Data) error { calls++; return boom })
	if !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("got %v after %d calls, want boom after 1", err, calls)
	}
}

// TestRotationAndCheckpoint fills several small segments, checkpoints in the
// middle and checks exactly the segments wholly below the checkpoint go.
func TestRotationAndCheckpoint(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	l := mustOpen(t, opts)
	var all []txn
	for i := range 60 {
		all = append(all, mustAppend(t, l, uint64(i+1), putRec("ks", fmt.Sprintf("key-%03d", i), value(300, i))))
	}
	before := segmentFiles(t, dir)
	if len(before) < 4 {
		t.Fatalf("only %d segments after 60 x 300-byte writes into 4 KiB segments", len(before))
	}
	for i, s := range before {
		if i > 0 && s.first <= before[i-1].first {
			t.Fatalf("segments out of order: %v", before)
		}
		fi, err := os.Stat(filepath.Join(dir, s.name))
		if err != nil || fi.Size() != minSegmentSize {
			t.Fatalf("segment %s: size %v (err %v), want preallocated %d", s.name, fi.Size(), err, minSegmentSize)
		}
	}
	ckpt := all[29].lsn + 1
	var keep []segment
	for i, s := range before {
		if i+1 < len(before) && before[i+1].first <= ckpt {
			continue
		}
		keep = append(keep, s)
	}
	if len(keep) == len(before) {
		t.Fatal("test setup: checkpoint would remove nothing")
	}
	if err := l.Checkpoint(ckpt); err != nil {
		t.Fatal(err)
	}
	if got := segmentFiles(t, dir); !slices.Equal(got, keep) {
		t.Fatalf("segments after checkpoint %d:\ngot  %v\nwant %v", ckpt, got, keep)
	}
	if l.LastCheckpoint() != ckpt {
		t.Fatalf("LastCheckpoint = %d, want %d", l.LastCheckpoint(), ckpt)
	}
	checkReplay(t, replayAll(t, l, 0), all[30:])
	if err := l.Checkpoint(ckpt - 1); err == nil {
		t.Fatal("a checkpoint below the last one was accepted")
	}
	if err := l.Checkpoint(l.NextLSN() + 1); err == nil {
		t.Fatal("a checkpoint beyond NextLSN was accepted")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l = mustOpen(t, opts)
	defer l.Close()
	if l.LastCheckpoint() != ckpt {
		t.Fatalf("LastCheckpoint after reopen = %d, want %d", l.LastCheckpoint(), ckpt)
	}
	checkReplay(t, replayAll(t, l, 0), all[30:])
	// From LSN 1, everything still on disk comes back: the remaining
	// segments start at or below the checkpoint.
	var onDisk []txn
	for _, x := range all {
		if x.lsn >= keep[0].first {
			onDisk = append(onDisk, x)
		}
	}
	checkReplay(t, replayAll(t, l, 1), onDisk)
	// A transaction larger than a segment gets a segment of its own.
	big := mustAppend(t, l, 100, putRec("ks", "big", value(3*minSegmentSize, 1)))
	after := mustAppend(t, l, 101, putRec("ks", "after", "x"))
	checkReplay(t, replayAll(t, l, 0), append(slices.Clone(all[30:]), big, after))
}

// TestReplayIgnoresTornTransaction writes a transaction's Put frames with no
// commit marker at the end of the log, as a crash in the middle of a write
// leaves it, with the same transaction ID the next process will reuse.
func TestReplayIgnoresTornTransaction(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	l := mustOpen(t, opts)
	want := []txn{mustAppend(t, l, 1, putRec("a", "k1", "v1")), mustAppend(t, l, 2, putRec("a", "k2", "v2"))}
	l.Close()

	path := filepath.Join(dir, segmentName(1))
	torn := appendFrame(nil, &frame{typ: 1, lsn: 5, id: 3, body: putRec("a", "torn1", "x").Body})
	torn = appendFrame(torn, &frame{typ: 1, lsn: 6, id: 3, body: putRec("a", "torn2", "y").Body})
	writeAt(t, path, dataEnd(t, path), torn)

	l = mustOpen(t, opts)
	checkReplay(t, replayAll(t, l, 0), want)
	if l.NextLSN() != 5 {
		t.Fatalf("NextLSN = %d, want 5 (the torn records' LSNs are reused)", l.NextLSN())
	}
	if _, err := os.Stat(path + ".broken"); err != nil {
		t.Fatalf("repair left no copy: %v", err)
	}
	want = append(want, mustAppend(t, l, 3, putRec("a", "k3", "v3")))
	l.Close()
	l = mustOpen(t, opts)
	defer l.Close()
	checkReplay(t, replayAll(t, l, 0), want)
}

func writeAt(t testing.TB, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentAppenders(t *testing.T) {
	for _, group := range []bool{true, false} {
		t.Run(fmt.Sprintf("group=%v", group), func(t *testing.T) {
			dir := t.TempDir()
			opts := testOptions(t, dir)
			opts.NoGroupCommit = !group
			opts.SegmentSize = 64 << 10
			l := mustOpen(t, opts)
			const writers, each = 32, 25
			results := make([][]txn, writers)
			var wg sync.WaitGroup
			for g := range writers {
				wg.Go(func() {
					for i := range each {
						id := uint64(g*1000 + i)
						recs := []Data{putRec("ks", fmt.Sprintf("g%d-%d", g, i), value(50, i))}
						if i%3 == 0 {
							recs = append(recs, delRec("ks", fmt.Sprintf("g%d-old", g)))
						}
						lsn, err := l.Append(context.Background(), id, recs)
						if err != nil {
							t.Errorf("writer %d: %v", g, err)
							return
						}
						results[g] = append(results[g], txn{id: id, lsn: lsn, recs: recs})
					}
				})
			}
			wg.Wait()
			var all []txn
			for g, rs := range results {
				for i := 1; i < len(rs); i++ {
					if rs[i].lsn <= rs[i-1].lsn {
						t.Fatalf("writer %d: commit LSNs not increasing: %d then %d", g, rs[i-1].lsn, rs[i].lsn)
					}
				}
				all = append(all, rs...)
			}
			slices.SortFunc(all, func(a, b txn) int { return int(a.lsn) - int(b.lsn) })
			// Each transaction owns the LSNs from its first record to its
			// commit marker; no two may overlap.
			for i := 1; i < len(all); i++ {
				if first := all[i].lsn - uint64(len(all[i].recs)); first <= all[i-1].lsn {
					t.Fatalf("transactions %d and %d share LSNs (%d..%d after %d)", all[i-1].id, all[i].id, first, all[i].lsn, all[i-1].lsn)
				}
			}
			if len(all) != writers*each {
				t.Fatalf("%d acknowledged, want %d", len(all), writers*each)
			}
			st := l.Stats()
			if st.Commits != writers*each || st.Batches == 0 || st.Bytes == 0 {
				t.Fatalf("stats %+v", st)
			}
			if !group && st.Batches != st.Commits {
				t.Fatalf("without group commit every commit is its own batch: %+v", st)
			}
			t.Logf("%d commits in %d batches", st.Commits, st.Batches)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = mustOpen(t, opts)
			defer l.Close()
			checkReplay(t, replayAll(t, l, 0), all)
		})
	}
}

// TestSyncFailureIsSticky fails one fsync: that Append fails with ErrSync,
// later ones fail without touching the file, and after Reset the log
// resumes with the failed transaction erased.
func TestSyncFailureIsSticky(t *testing.T) {
	for _, group := range []bool{true, false} {
		t.Run(fmt.Sprintf("group=%v", group), func(t *testing.T) {
			dir := t.TempDir()
			ffs := &faultFS{}
			opts := testOptions(t, dir)
			opts.NoGroupCommit = !group
			opts.FS = ffs
			l := mustOpen(t, opts)
			want := []txn{mustAppend(t, l, 1, putRec("a", "1", "x")), mustAppend(t, l, 2, putRec("a", "2", "x"))}

			ffs.set(func(f *faultFS) { f.syncErr = syscall.EIO })
			// Larger than what follows, so that leftovers would show.
			_, err := l.Append(context.Background(), 3, []Data{putRec("a", "3", value(300, 3)), putRec("a", "3b", "lost")})
			if !errors.Is(err, ErrSync) || !errors.Is(err, syscall.EIO) {
				t.Fatalf("Append during fsync failure: %v, want ErrSync wrapping EIO", err)
			}
			if l.Err() == nil || l.NextLSN() != 5 {
				t.Fatalf("after failure: Err %v, NextLSN %d (want sticky error, next 5)", l.Err(), l.NextLSN())
			}
			ffs.set(func(f *faultFS) { f.syncErr = nil })
			writes, syncs := ffs.writes.Load(), ffs.syncs.Load()
			if _, err := l.Append(context.Background(), 4, []Data{putRec("a", "4", "x")}); !errors.Is(err, ErrSync) {
				t.Fatalf("Append after failure: %v, want the sticky ErrSync", err)
			}
			if err := l.Checkpoint(l.NextLSN()); !errors.Is(err, ErrSync) {
				t.Fatalf("Checkpoint after failure: %v, want the sticky ErrSync", err)
			}
			if ffs.writes.Load() != writes || ffs.syncs.Load() != syncs {
				t.Fatal("a failed log still wrote to or synced its segment")
			}
			if err := l.Reset(); err != nil {
				t.Fatal(err)
			}
			if l.Err() != nil {
				t.Fatalf("Err after Reset: %v", l.Err())
			}
			want = append(want, mustAppend(t, l, 5, putRec("a", "5", "x")))
			if want[2].lsn != 6 {
				t.Fatalf("first commit after Reset got LSN %d, want 6 (the failed batch's LSNs are reused)", want[2].lsn)
			}
			checkReplay(t, replayAll(t, l, 0), want)
			l.Close()
			l = mustOpen(t, Options{Dir: dir, SegmentSize: minSegmentSize, Logger: testLogger(t)})
			defer l.Close()
			checkReplay(t, replayAll(t, l, 0), want)
			if _, err := os.Stat(filepath.Join(dir, segmentName(1)+".broken")); !errors.Is(err, os.ErrNotExist) {
				t.Fatal("reopen needed a repair: Reset left the failed batch behind")
			}
		})
	}
}

// TestWriteFailureENOSPC: a write that stops halfway with ENOSPC fails the
// Append; closing the failed log erases the half frame, so reopening needs
// no repair and replays only what was acknowledged.
func TestWriteFailureENOSPC(t *testing.T) {
	dir := t.TempDir()
	ffs := &faultFS{}
	opts := testOptions(t, dir)
	opts.FS = ffs
	l := mustOpen(t, opts)
	want := []txn{mustAppend(t, l, 1, putRec("a", "1", value(200, 1)))}
	ffs.set(func(f *faultFS) { f.writeErr = syscall.ENOSPC })
	if _, err := l.Append(context.Background(), 2, []Data{putRec("a", "2", value(200, 2))}); !errors.Is(err, ErrSync) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("got %v, want ErrSync wrapping ENOSPC", err)
	}
	ffs.set(func(f *faultFS) { f.writeErr = nil })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, testOptions(t, dir))
	defer l.Close()
	checkReplay(t, replayAll(t, l, 0), want)
	if _, err := os.Stat(filepath.Join(dir, segmentName(1)+".broken")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("reopen needed a repair: the half-written frame was not erased")
	}
}

// TestRotationFailure: preallocating the next segment fails with ENOSPC.
// The Append fails with ErrNoSpace, the log is not failed, and the file
// that could not be preallocated is gone, so a commit that still fits
// goes into the old segment; once space is back a new segment opens, and
// reopening works.
func TestRotationFailure(t *testing.T) {
	dir := t.TempDir()
	ffs := &faultFS{}
	opts := testOptions(t, dir)
	opts.FS = ffs
	l := mustOpen(t, opts)
	var want []txn
	for i := range 10 { // 10 x ~330 bytes fit in 4 KiB less the checkpoint reserve; the 13th does not
		want = append(want, mustAppend(t, l, uint64(i), putRec("a", "k", value(300, i))))
	}
	ffs.set(func(f *faultFS) { f.allocErr = syscall.ENOSPC })
	var err error
	for i := 10; err == nil; i++ {
		var lsn uint64
		recs := []Data{putRec("a", "k", value(300, i))}
		if lsn, err = l.Append(context.Background(), uint64(i), recs); err == nil {
			want = append(want, txn{id: uint64(i), lsn: lsn, recs: recs})
		}
		if i > 20 {
			t.Fatal("no rotation happened")
		}
	}
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrSync) {
		t.Fatalf("rotation failure: %v, want ErrNoSpace wrapping ENOSPC", err)
	}
	if l.Err() != nil {
		t.Fatalf("a rotation without space failed the log: %v", l.Err())
	}
	if segs := segmentFiles(t, dir); len(segs) != 1 {
		t.Fatalf("segments %v after a failed rotation, want the first alone", segs)
	}
	small := mustAppend(t, l, 98, putRec("a", "small", "x"))
	want = append(want, small)
	if segs := segmentFiles(t, dir); len(segs) != 1 {
		t.Fatalf("segments %v: the small commit fits in the first", segs)
	}
	ffs.set(func(f *faultFS) { f.allocErr = nil })
	big := mustAppend(t, l, 99, putRec("a", "big", value(600, 1)))
	want = append(want, big)
	if segs := segmentFiles(t, dir); len(segs) != 2 || segs[1].first != big.lsn-1 {
		t.Fatalf("the big commit (LSN %d) should open segment %s, have %v", big.lsn, segmentName(big.lsn-1), segs)
	}
	l.Close()
	l = mustOpen(t, testOptions(t, dir))
	defer l.Close()
	checkReplay(t, replayAll(t, l, 0), want)
}

// TestCheckpointConcurrentWithAppends runs checkpoints while writers append
// into small segments, then checks that reopening replays every
// acknowledged transaction at or above the last checkpoint.
func TestCheckpointConcurrentWithAppends(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	l := mustOpen(t, opts)
	const writers, each = 8, 60
	var (
		mu    sync.Mutex
		acked []txn
		wg    sync.WaitGroup
		done  = make(chan struct{})
	)
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				id, recs := uint64(g*1000+i), []Data{putRec("ks", fmt.Sprintf("%d/%d", g, i), value(150, i))}
				lsn, err := l.Append(context.Background(), id, recs)
				if err != nil {
					t.Errorf("writer %d: %v", g, err)
					return
				}
				mu.Lock()
				acked = append(acked, txn{id: id, lsn: lsn, recs: recs})
				mu.Unlock()
			}
		})
	}
	checkpoints := 0
	var ckptErr error
	ckptDone := make(chan struct{})
	go func() {
		defer close(ckptDone)
		for {
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
			if err := l.Checkpoint(l.NextLSN()); err != nil {
				ckptErr = err
				return
			}
			checkpoints++
		}
	}()
	wg.Wait()
	close(done)
	<-ckptDone
	if ckptErr != nil {
		t.Fatal(ckptErr)
	}
	if checkpoints == 0 {
		t.Fatal("no checkpoint ran during the appends")
	}
	ckpt := l.LastCheckpoint()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if segs := segmentFiles(t, dir); segs[0].first == 1 {
		t.Fatalf("checkpoints removed no segment: %v", segs)
	}

	l = mustOpen(t, opts)
	defer l.Close()
	if l.LastCheckpoint() != ckpt {
		t.Fatalf("LastCheckpoint after reopen %d, want %d", l.LastCheckpoint(), ckpt)
	}
	slices.SortFunc(acked, func(a, b txn) int { return int(a.lsn) - int(b.lsn) })
	var want []txn
	for _, x := range acked {
		if x.lsn >= ckpt {
			want = append(want, x)
		}
	}
	checkReplay(t, replayAll(t, l, 0), want)
	t.Logf("%d checkpoints, last %d, %d of %d transactions above it", checkpoints, ckpt, len(want), len(acked))
}

func TestKeyspaceRecordsReplayInOrder(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	l := mustOpen(t, opts)
	want := []txn{
		mustAppend(t, l, 1, Data{Type: 5, Body: lenPrefixed("a")}, putRec("__tables__", "a", "a")),
		mustAppend(t, l, 2, putRec("a", "k1", "v1")),
		mustAppend(t, l, 3, delRec("__tables__", "a"), Data{Type: 6, Body: lenPrefixed("a")}),
		mustAppend(t, l, 4, Data{Type: 5, Body: lenPrefixed("a")}, putRec("a", "k2", "v2"), Data{Type: maxDataType, Body: []byte{}}),
	}
	checkReplay(t, replayAll(t, l, 0), want)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, opts)
	defer l.Close()
	checkReplay(t, replayAll(t, l, 0), want)
}

// TestWriteBackRecordsReplay: write-back records appended like a
// transaction come back from Replay, in log order among the commits, and
// survive a reopen.
func TestWriteBackRecordsReplay(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(testOptions(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put := []Data{putRec("t", "k", "v")}
	sent := []Data{{Type: 9, Body: append(lenPrefixed("t", "k"), 1, 0, 0, 0, 0, 0, 0, 0, 42)}}
	for _, recs := range [][]Data{put, sent, put} {
		if _, err := l.Append(ctx, 7, recs); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = Open(testOptions(t, dir)); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var types []byte
	if err := l.Replay(0, func(_ uint64, recs []Data) error {
		for _, r := range recs {
			types = append(types, r.Type)
			if r.Type == 9 && !bytes.Equal(r.Body, sent[0].Body) {
				t.Errorf("write-back record replayed as %+v", r)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []byte{1, 9, 1}; !slices.Equal(types, want) {
		t.Fatalf("replayed %v, want %v", types, want)
	}
}

// TestSlowFsyncWarnsAndIsMeasured: an fsync over a second is logged at
// WARN with its duration, and every fsync and the commits of each batch
// land in the Stats histograms.
func TestSlowFsyncWarnsAndIsMeasured(t *testing.T) {
	ffs := &faultFS{}
	var logs lockedBuffer
	opts := testOptions(t, t.TempDir())
	opts.FS = ffs
	// nemo's logger (cmd/nemo) writes a Duration as "1.5s".
	opts.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{ReplaceAttr: obs.LogDurations}))
	l := mustOpen(t, opts)
	defer l.Close()
	mustAppend(t, l, 1, putRec("ks", "a", "1"))
	if strings.Contains(logs.String(), "slow fsync") {
		t.Fatalf("a fast fsync was logged as slow:\n%s", logs.String())
	}
	hold, held := make(chan struct{}), make(chan struct{}, 1)
	ffs.set(func(f *faultFS) { f.syncHold, f.syncHeld = hold, held })
	done := make(chan error, 1)
	go func() {
		_, err := l.Append(context.Background(), 2, []Data{putRec("ks", "b", "2")})
		done <- err
	}()
	<-held
	time.Sleep(slowFsync + 100*time.Millisecond) // the fsync takes that long
	ffs.set(func(f *faultFS) { f.syncHold, f.syncHeld = nil, nil })
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, `"level":"WARN","msg":"wal: slow fsync"`) || !strings.Contains(out, `"took":"1.`) || !strings.Contains(out, `"commits":1`) {
		t.Errorf("no WARN with the fsync's duration:\n%s", out)
	}
	st := l.Stats()
	if c := st.Fsyncs.Cumulative(); st.Fsyncs.Count < 2 || c[2.5]-c[1] != 1 || st.Fsyncs.Sum < slowFsync.Seconds() {
		t.Errorf("fsync histogram %+v does not hold the slow fsync in (1s, 2.5s]", st.Fsyncs)
	}
	if st.SyncTime < slowFsync {
		t.Errorf("SyncTime %v, want at least %v", st.SyncTime, slowFsync)
	}
	if st.GroupSizes.Count != st.Batches || st.GroupSizes.Raw != int64(st.Commits) {
		t.Errorf("group sizes %+v for %d batches of %d commits", st.GroupSizes, st.Batches, st.Commits)
	}
}

// lockedBuffer is a log sink safe for the writer goroutine and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
