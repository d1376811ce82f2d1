// Package proctest runs nemo binaries in tests: build one, start it with a
// clean environment (none of the test process's NEMO_ or OTEL_ variables),
// collect its log, wait for its "nemo ready" line and the addresses it
// names, and stop it (SIGTERM, or a kill at the end of the test). The
// processes a test starts are gone when it ends.
package proctest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build builds the main package pkg (a path as go build takes it) into a
// temporary directory of t and returns the binary's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	if o, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, o)
	}
	return out
}

// Env is the test process's environment without NEMO_ and OTEL_ settings,
// plus env.
func Env(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NEMO_") && !strings.HasPrefix(kv, "OTEL_") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// FreeListeners are the settings that put every listener of a nemo on a
// free loopback port, its data in dir and its log in JSON.
func FreeListeners(dir string) []string {
	return []string{
		"NEMO_LISTEN_AZURE_TABLE=127.0.0.1:0", "NEMO_LISTEN_DATASTORE=127.0.0.1:0",
		"NEMO_LISTEN_HTTP=127.0.0.1:0", "NEMO_LISTEN_ADMIN=127.0.0.1:0",
		"NEMO_BACKEND_EMBEDDED_DATA_DIR=" + filepath.Join(dir, "nemo-data"), "NEMO_LOG_FORMAT=json",
	}
}

// Proc is a process a test started.
type Proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  bytes.Buffer
	done chan struct{}
}

// Start runs cmd with Env(env...), collecting its stdout and stderr; the
// process is killed at the end of the test if it still runs.
func Start(t testing.TB, cmd *exec.Cmd, env ...string) *Proc {
	t.Helper()
	cmd.Env = Env(env...)
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
		cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// Logs is what the process has written so far.
func (p *Proc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// WaitReady waits for nemo's "nemo ready" log line (JSON) and returns the
// fields it names: the listeners' addresses under "http", "admin",
// "aztable", "datastore".
func (p *Proc) WaitReady(t testing.TB) map[string]string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(p.Logs(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "nemo ready" {
				continue
			}
			out := map[string]string{}
			for k, v := range rec {
				out[k] = fmt.Sprint(v)
			}
			return out
		}
		select {
		case <-p.done:
			t.Fatalf("nemo exited before it was ready:\n%s", p.Logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("nemo not ready after 30s:\n%s", p.Logs())
	return nil
}

// WaitExit waits up to a minute for the process to exit and requires
// status want.
func (p *Proc) WaitExit(t testing.TB, want int) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatalf("%s did not exit:\n%s", filepath.Base(p.cmd.Path), p.Logs())
	}
	if got := p.cmd.ProcessState.ExitCode(); got != want {
		t.Errorf("%s exited %d, want %d:\n%s", filepath.Base(p.cmd.Path), got, want, p.Logs())
	}
}

// Stop sends SIGTERM (unless the process has exited) and requires exit 0.
func (p *Proc) Stop(t testing.TB) {
	t.Helper()
	select {
	case <-p.done:
		return
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.WaitExit(t, 0)
}
