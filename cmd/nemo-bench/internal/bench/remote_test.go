package bench

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// threadNices is every thread's nice value in process pid.
func threadNices(t *testing.T, pid int) map[int]int {
	t.Helper()
	tids, err := threadIDs(pid)
	if err != nil {
		t.Fatal(err)
	}
	nices := map[int]int{}
	for _, tid := range tids {
		if n, err := threadNice(pid, tid); err == nil {
			nices[tid] = n
		}
	}
	if len(nices) == 0 {
		t.Fatalf("no threads read in process %d", pid)
	}
	return nices
}

// TestRemoteBackendNice: Options.BackendNice sets every thread of the
// process listening on the backend's port (here a child process of this
// test binary: the bare proxy) for the session, the delay proxy still
// stands in front of it, and close puts each thread back (raising a nice
// needs no privilege; lowering it back needs CAP_SYS_NICE: as root the
// old values come back, otherwise close says it could not).
func TestRemoteBackendNice(t *testing.T) {
	c, addr, err := startBareProxy(context.Background(), "http", "http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.stop() })
	before := threadNices(t, c.pid())
	var want int
	for _, n := range before {
		want = max(want, n)
	}
	want = min(want+5, 19)

	r, err := openRemote(addr, Options{BackendNice: want, RTT: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.nice == nil || r.nice.pid != c.pid() {
		t.Fatalf("reniced %+v, want the bare proxy's process %d", r.nice, c.pid())
	}
	for tid, n := range threadNices(t, c.pid()) {
		if _, old := before[tid]; old && n != want {
			t.Errorf("thread %d: nice %d, want %d", tid, n, want)
		}
	}
	if r.delayProxy() == nil || r.far == addr {
		t.Errorf("far %s, delay proxy %v: want the delay proxy in front of %s", r.far, r.delayProxy(), addr)
	}
	if conn, err := net.Dial("tcp", r.far); err != nil {
		t.Errorf("dialing through the delay proxy: %v", err)
	} else {
		conn.Close()
	}

	err = r.close()
	if os.Geteuid() == 0 {
		if err != nil {
			t.Fatalf("close as root: %v", err)
		}
		for tid, n := range threadNices(t, c.pid()) {
			if old, ok := before[tid]; ok && n != old {
				t.Errorf("thread %d: nice %d after close, want its old %d", tid, n, old)
			}
		}
	} else if !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EACCES) {
		t.Errorf("close without privilege: %v, want EPERM or EACCES", err)
	}
	if err := r.nice.restore(); err != nil {
		t.Errorf("a second restore: %v, want nothing left to do", err)
	}
}

// TestRemoteBackendNiceNoListener: nothing listens on the port, so there
// is no process to set, and the session does not start.
func TestRemoteBackendNiceNoListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, err := openRemote(addr, Options{BackendNice: 5}); !errors.Is(err, errNoProc) {
		t.Errorf("openRemote(%s) with nothing listening: %v, want errNoProc", addr, err)
	}
	r, err := openRemote(addr, Options{})
	if err != nil || r.far != addr || r.nice != nil || r.delayProxy() != nil {
		t.Errorf("openRemote without rtt or nice: %+v, %v: want straight to %s", r, err, addr)
	}
	if err := r.close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

// TestStatFields: a stat line's fields are counted from the state, after
// a command name that holds spaces and parentheses; a short line is an
// error, and a missing file is errNoProc that still says it does not
// exist (a thread that ended).
func TestStatFields(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/stat"
	if err := os.WriteFile(path, []byte("42 (a (b) c) S 1 2 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := statFields(path, 4)
	if err != nil || len(f) != 4 || f[0] != "S" || f[3] != "3" {
		t.Errorf("statFields = %q, %v; want [S 1 2 3]", f, err)
	}
	if _, err := statFields(path, 5); err == nil {
		t.Error("a line of 4 fields gave 5")
	}
	_, err = statFields(dir+"/gone", 1)
	if !errors.Is(err, errNoProc) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want errNoProc and fs.ErrNotExist", err)
	}
}
