package wal

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"
)

const killChildEnv = "WAL_TEST_KILL_CHILD_DIR"

// TestKillNine appends from a child process, kills it with SIGKILL while
// it is committing, and checks that every transaction the child reported
// as acknowledged is replayed.
func TestKillNine(t *testing.T) {
	if dir := os.Getenv(killChildEnv); dir != "" {
		appendUntilKilled(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillNine$")
	cmd.Env = append(os.Environ(), killChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Keep draining the child's output so that it is committing, not
	// blocked on a full pipe, when the kill lands.
	var (
		mu    sync.Mutex
		acked = map[uint64]uint64{} // txn ID -> commit LSN
		eof   = make(chan struct{})
	)
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var id, lsn uint64
			if _, err := fmt.Sscanf(sc.Text(), "ack %d %d", &id, &lsn); err == nil {
				mu.Lock()
				acked[id] = lsn
				mu.Unlock()
			}
		}
	}()
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 400 {
			break
		}
		if time.Since(start) > 20*time.Second {
			cmd.Process.Kill()
			t.Fatalf("child acknowledged only %d transactions", n)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-eof
	cmd.Wait()

	l := mustOpen(t, testOptions(t, dir))
	defer l.Close()
	replayed := map[uint64]uint64{}
	var lsns []uint64
	err = l.replay(0, func(id uint64, recs []Data, commitLSN uint64) error {
		if want := putRec("ks", fmt.Sprint(id), ""); len(recs) != 1 || !bytes.HasPrefix(recs[0].Body, want.Body[:len(want.Body)-1]) {
			return fmt.Errorf("transaction %d replayed as %+v", id, recs)
		}
		replayed[id] = commitLSN
		lsns = append(lsns, commitLSN)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSorted(lsns) {
		t.Fatal("replay is not in LSN order")
	}
	for id, lsn := range acked {
		if replayed[id] != lsn {
			t.Fatalf("acknowledged transaction %d (commit LSN %d) replayed with LSN %d", id, lsn, replayed[id])
		}
	}
	t.Logf("%d acknowledged before SIGKILL, %d replayed", len(acked), len(replayed))
}

// appendUntilKilled is the child: 8 committers print each acknowledgement
// after Append returns. It gives up after 30 s in case the parent died.
func appendUntilKilled(dir string) {
	l, err := Open(Options{Dir: dir, SegmentSize: 32 << 10 /* rotate often */})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var mu sync.Mutex
	deadline := time.Now().Add(30 * time.Second)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := uint64(0); time.Now().Before(deadline); i++ {
				id := uint64(g)<<32 | i
				lsn, err := l.Append(context.Background(), id, []Data{putRec("ks", fmt.Sprint(id), value(100, int(i)))})
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				mu.Lock()
				fmt.Printf("ack %d %d\n", id, lsn)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	os.Exit(2)
}
