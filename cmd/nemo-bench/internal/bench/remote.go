package bench

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"
)

// The backend at a scheduling priority of its own (Options.BackendNice).
// On this machine the backend (Azurite's one JavaScript thread, the
// emulator's JVM) shares the cores with nemo, the clients and the delay
// proxy, so the more work a series makes the clients and nemo do, the
// longer the backend's answers wait for a core: its service time then
// depends on the series measured. In production the store's CPU is not on
// the node. A nice below the others' (-10: a weight about ten times
// theirs) lets the backend take a core when it has work, as a store with
// CPU of its own would; the clients, nemo and the delay proxy share the
// rest. Set on every thread of the process that listens on the backend's
// port when the run loads its data, and put back when the run ends.

// reniced is a process whose threads a run set to a nice value, with each
// thread's value before, to put back.
type reniced struct {
	pid  int
	prev map[int]int // thread id → its nice before
}

// reniceListener sets every thread of the local process listening on
// addr's port to nice. A nice below a thread's current one needs
// CAP_SYS_NICE (root).
func reniceListener(addr string, nice int) (*reniced, error) {
	pid, err := listenerPID(addr)
	if err != nil {
		return nil, fmt.Errorf("backend nice: %w", err)
	}
	tids, err := threadIDs(pid)
	if err != nil {
		return nil, fmt.Errorf("backend nice: %w", err)
	}
	r := &reniced{pid: pid, prev: map[int]int{}}
	for _, tid := range tids {
		old, err := threadNice(pid, tid)
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread ended meanwhile
		}
		if err == nil {
			err = syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice)
		}
		if errors.Is(err, syscall.ESRCH) {
			continue
		}
		if err != nil {
			err = fmt.Errorf("backend nice %d: thread %d of process %d: %w (a nice below the current one needs CAP_SYS_NICE)", nice, tid, pid, err)
			return nil, errors.Join(err, r.restore())
		}
		r.prev[tid] = old
	}
	return r, nil
}

// restore puts every thread r changed back to its nice before (a thread
// that ended meanwhile is skipped). Safe on a nil r.
func (r *reniced) restore() error {
	if r == nil {
		return nil
	}
	var errs []error
	for tid, old := range r.prev {
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, old); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("backend nice: putting thread %d of process %d back to %d: %w", tid, r.pid, old, err))
		}
	}
	r.prev = nil
	return errors.Join(errs...)
}

// threadIDs lists the threads of process pid (/proc/<pid>/task); a
// process that cannot be read is errNoProc.
func threadIDs(pid int) ([]int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoProc, err)
	}
	var tids []int
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// threadNice is thread tid's nice value, field 19 of
// /proc/<pid>/task/<tid>/stat.
func threadNice(pid, tid int) (int, error) {
	f, err := statFields(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid), 17)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f[16]) // field 19, the 17th from the state
}

// remote is how a session's series reach the backend: at far, through the
// delay proxy of a simulated round trip (Options.RTT) or straight to it,
// with the backend's process at Options.BackendNice for the session.
type remote struct {
	far   string      // host:port every series reaches the backend at
	delay *delayProxy // nil without Options.RTT
	nice  *reniced    // nil without Options.BackendNice
}

// openRemote sets up the way to the backend at host (host:port) that o
// asks for.
func openRemote(host string, o Options) (remote, error) {
	r := remote{far: host}
	if o.BackendNice != 0 {
		var err error
		if r.nice, err = reniceListener(host, o.BackendNice); err != nil {
			return remote{}, err
		}
	}
	if o.RTT > 0 || o.RTTJitter > 0 {
		p, err := startDelayProxy(host, o.RTT, o.RTTJitter)
		if err != nil {
			return remote{}, errors.Join(err, r.nice.restore())
		}
		r.delay, r.far = p, p.addr()
	}
	return r, nil
}

// close stops the delay proxy and puts the backend's nice back.
func (r remote) close() error {
	var err error
	if r.delay != nil {
		err = r.delay.close()
	}
	return errors.Join(err, r.nice.restore())
}

// delayProxy is the simulated round trip's proxy, or nil.
func (r remote) delayProxy() *delayProxy { return r.delay }
