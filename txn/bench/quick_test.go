package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nemocache/nemo/txn"
)

// testSpec is ycsbBench shrunk for go test -race: 1,000 records, 100 µs
// per remote call, a fifth of the transactions inserting, every scan
// checked against the model.
var testSpec = ycsbSpec{
	domainBits: 16, regionBits: 16, budgetBits: 6,
	records: 1000, valueSize: 32, latency: 100 * time.Microsecond, cacheFrac: 0.3,
	workers: 8, insertPct: 20, scanLen: 8,
	measure: 300 * time.Millisecond, check: true, seed: 7,
}

// TestWorkloads runs every benchmark workload briefly and checks what holds
// at any scale: each committed scan agrees with the model of committed
// keys, the buffer's invariants hold afterwards (no lock, pin or sentinel
// left), and the engine counted exactly the conflicts the clients saw.
func TestWorkloads(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*ycsbSpec)
	}{
		{"domain=2^16", func(*ycsbSpec) {}},
		{"domain=2^64", func(sp *ycsbSpec) { sp.domainBits, sp.regionBits = 64, 64 }},
		{"dense/domain=2^32", func(sp *ycsbSpec) { sp.domainBits, sp.regionBits = 32, 12 }},
		{"unbounded", func(sp *ycsbSpec) { sp.unbounded = true }},
	} {
		sp := testSpec
		tc.edit(&sp)
		d := newDataset(t, sp)
		for _, p := range []txn.Phantom{txn.NextKey, txn.PCL} {
			t.Run(tc.name+"/"+string(p), func(t *testing.T) {
				r := d.run(t, p)
				t.Log(r)
				for _, e := range r.errs {
					t.Error(e)
				}
				if r.checkErr != nil {
					t.Error(r.checkErr)
				}
				if r.scans == 0 || r.inserts == 0 {
					t.Errorf("%d scans and %d inserts committed; want some of each", r.scans, r.inserts)
				}
				if got, want := r.eng.Conflicts, uint64(r.conflicts()); got != want {
					t.Errorf("engine counted %d conflicts, the clients saw %d", got, want)
				}
			})
		}
	}
}

// falseConflictSpec puts every key in one PCL partition (16 partitions of
// 4,096 keys; the data is in the lowest 1,024 keys): scanners hold ranges
// open while inserters add keys the scans do not cover. Every conflict
// PCL reports there is false.
var falseConflictSpec = ycsbSpec{
	domainBits: 16, regionBits: 10, budgetBits: 4,
	records: 200, valueSize: 16, latency: 100 * time.Microsecond, cacheFrac: 1,
	workers: 6, insertPct: 50, scanLen: 2,
	measure: 300 * time.Millisecond, scanHold: 300 * time.Microsecond, check: true, seed: 3,
}

// TestPCLFalseConflicts checks the point of next-key locking: a scan
// protects only its range, so an insert outside it proceeds, where PCL's
// partition lock refuses it. First deterministically, then as a workload
// in which nextkey aborts no more often than pcl.
func TestPCLFalseConflicts(t *testing.T) {
	ctx := context.Background()
	d := newDataset(t, falseConflictSpec)
	lo, hi := d.keys[10], d.keys[12]
	// outside: an absent key after keys[100], far above the scanned range.
	outside := d.keys[100] + 1
	for _, ok := slices.BinarySearch(d.keys, outside); ok; _, ok = slices.BinarySearch(d.keys, outside) {
		outside++
	}
	for _, p := range []txn.Phantom{txn.NextKey, txn.PCL} {
		t.Run("deterministic/"+string(p), func(t *testing.T) {
			s := d.open(t, p)
			defer s.close()
			scan, err := s.eng.Begin(false) // locking: a read-only one would read a snapshot
			if err != nil {
				t.Fatal(err)
			}
			recs, _, err := scan.Scan(ctx, ks, encKey(lo), encKey(hi), 0)
			if err != nil || len(recs) != 2 {
				t.Fatalf("scan [%d, %d): %d records, err %v; want 2", lo, hi, len(recs), err)
			}
			ins, err := s.eng.Begin(false)
			if err != nil {
				t.Fatal(err)
			}
			// The insert waits for a conflicting lock; 200ms of waiting
			// shows the conflict.
			ictx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			err = ins.Insert(ictx, ks, encKey(outside), []byte("x"))
			cancel()
			switch {
			case p == txn.NextKey && err != nil:
				t.Errorf("nextkey: insert of %d outside the scanned [%d, %d): %v, want success", outside, lo, hi, err)
			case p == txn.PCL && !errors.Is(err, txn.ErrConflict):
				t.Errorf("pcl: insert of %d into the scan's partition: %v, want ErrConflict", outside, err)
			}
			if err == nil {
				if err := ins.Commit(ctx); err != nil {
					t.Error(err)
				}
			}
			ins.Abort()
			if err := scan.Commit(ctx); err != nil {
				t.Error(err)
			}
			s.eng.Close()
			s.buf.Close() // quiescent for Check
			if err := s.buf.Check(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	t.Run("workload", func(t *testing.T) {
		// Scans cover [keys[i], keys[i+2]) from the zipfian ranks, inserts
		// land anywhere in the data's range, so some real conflicts happen
		// too; PCL sees those and all the false ones.
		nk, pcl := d.run(t, txn.NextKey), d.run(t, txn.PCL)
		for _, r := range []result{nk, pcl} {
			t.Log(r)
			for _, e := range r.errs {
				t.Error(e)
			}
			if r.checkErr != nil {
				t.Error(r.checkErr)
			}
		}
		if pcl.conflicts() == 0 && pcl.eng.LockWaits == 0 {
			t.Error("pcl: no conflicts or lock waits although every key shares one partition with held scans")
		}
		// Rates, not counts: the strategies commit different numbers of
		// transactions in the same time.
		if nk.abortRate() > pcl.abortRate() {
			t.Errorf("nextkey abort rate %.3f > pcl %.3f", nk.abortRate(), pcl.abortRate())
		}
	})
}

// TestCommitAndRecovery runs the commit benchmark's loop and the recovery
// benchmark's log writer and restart at tiny sizes and checks the
// counters agree and that every acknowledged write survives a restart.
func TestCommitAndRecovery(t *testing.T) {
	for _, group := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit/group=%v", group), func(t *testing.T) {
			r := runCommits(t, commitSpec{group: group, committers: 4, keys: 16, valueSize: 100, dur: 200 * time.Millisecond})
			t.Log(r)
			for _, e := range r.errs {
				t.Error(e)
			}
			if r.commits == 0 || r.wal.Commits != r.commits {
				t.Errorf("%d commits acknowledged, the WAL counted %d; want equal and > 0", r.commits, r.wal.Commits)
			}
			if !group && r.wal.Batches != r.wal.Commits {
				t.Errorf("fsync per commit: %d batches for %d commits", r.wal.Batches, r.wal.Commits)
			}
			// A logged write carries at least its key and value.
			if r.bytesPerWrite() < 8+100 {
				t.Errorf("%.1f WAL bytes per write, less than the key and value", r.bytesPerWrite())
			}
		})
	}
	t.Run("recovery", func(t *testing.T) {
		l := writeLog(t, logSpec{target: 1 << 20, writers: 4, perTxn: 4, keys: 64, valueSize: 256, segmentSize: 256 << 10})
		if l.bytes < 1<<20 || len(l.last) != 4*64 {
			t.Fatalf("log of %d bytes with %d keys; want >= 1 MiB and 256 keys", l.bytes, len(l.last))
		}
		took := l.recover(t) // checks every key's last value
		t.Logf("replayed %d bytes (%d transactions) in %v", l.bytes, l.txns, took)
		took2 := l.recover(t) // replay is repeatable: the restart wrote nothing
		t.Logf("again in %v", took2)
	})
}
