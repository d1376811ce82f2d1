package bench

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The server processes of a run on a real target: nemo (or the bare proxy
// it is compared with) in a process of its own, and the backend (Azurite,
// the Datastore emulator) found by the port it listens on, and this
// process, whose goroutines are the clients. Their CPU time is read from
// /proc before and after the measured phase, so CPU per operation is what
// each server process spent, apart from the clients'; all three together
// over the phase's length are the cores the run kept busy.

// errNoProc is returned when a process's CPU time cannot be read (not
// Linux, or the process is not on this machine).
var errNoProc = errors.New("bench: no such local process")

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux this runs on).
const clockTick = 10 * time.Millisecond

// statFields reads a /proc stat file (a process's or a thread's) and
// returns its fields from the third (the state) on, at least n of them:
// the second, the command name, is in parentheses and may hold spaces. A
// file that cannot be read is errNoProc (wrapping the read's error).
func statFields(path string, n int) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoProc, err)
	}
	s := string(b)
	var f []string
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		f = strings.Fields(s[i+1:])
	}
	if len(f) < n {
		return nil, fmt.Errorf("bench: %s: %q", path, s)
	}
	return f, nil
}

// procCPU is the CPU time, user and system, process pid has used.
func procCPU(pid int) (time.Duration, error) {
	// utime and stime are fields 14 and 15, the 12th and 13th from the
	// state.
	f, err := statFields(fmt.Sprintf("/proc/%d/stat", pid), 13)
	if err != nil {
		return 0, err
	}
	var ticks int64
	for _, x := range f[11:13] {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: /proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}

// listenerPID finds the local process listening on addr's TCP port (a
// loopback or wildcard listener): the inode of the listening socket in
// /proc/net/tcp{,6}, then the process holding it open. errNoProc when addr
// is not on this machine or no such process is visible.
func listenerPID(addr string) (int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return 0, fmt.Errorf("%w: %s is not a loopback address", errNoProc, addr)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return 0, err
	}
	inode, err := listeningInode(uint16(p))
	if err != nil {
		return 0, err
	}
	pids, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	want := fmt.Sprintf("socket:[%s]", inode)
	for _, fd := range pids {
		if link, err := os.Readlink(fd); err == nil && link == want {
			return strconv.Atoi(strings.Split(fd, "/")[2])
		}
	}
	return 0, fmt.Errorf("%w: no process holds the listener on %s", errNoProc, addr)
}

// listeningInode is the inode of the socket listening on port (state 0A,
// LISTEN) in /proc/net/tcp or tcp6.
func listeningInode(port uint16) (string, error) {
	hexPort := fmt.Sprintf(":%04X", port)
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fs := strings.Fields(sc.Text())
			if len(fs) > 9 && strings.HasSuffix(fs[1], hexPort) && fs[3] == "0A" {
				f.Close()
				return fs[9], nil
			}
		}
		f.Close()
	}
	return "", fmt.Errorf("%w: nothing listens on port %d", errNoProc, port)
}

// proc is a server process whose CPU time a run measures.
type proc struct {
	role string // "server" (nemo or the bare proxy), "backend" or "client" (this process)
	pid  int
}

// cpuSnapshot reads the CPU time of every process (a process that has gone
// away reads as an error: the run fails rather than report a wrong figure).
func cpuSnapshot(ps []proc) ([]time.Duration, error) {
	out := make([]time.Duration, len(ps))
	for i, p := range ps {
		d, err := procCPU(p.pid)
		if err != nil {
			return nil, fmt.Errorf("%s process %d: %w", p.role, p.pid, err)
		}
		out[i] = d
	}
	return out, nil
}
