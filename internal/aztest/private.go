package aztest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nemocache/nemo/internal/testenv"
)

// EnvNodeModules names the node_modules directory that holds Azurite
// (.ci/test installs it and sets the variable).
const EnvNodeModules = "NEMO_TEST_NODE_MODULES"

// Private starts an Azurite of the test's own (in memory, on a free
// loopback port) and returns its table endpoint, as Azurite does for the
// shared one; it is killed at the end of the test. For tests whose nemo
// processes must not meet other tests' data in the shared account: a nemo
// keeping commit logs in the backend recovers, at start, every log it
// finds pending in its account, other tests' killed owners' included.
func Private(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv(EnvNodeModules)
	if dir == "" {
		testenv.Missing(tb, EnvNodeModules+" is unset (the node_modules holding Azurite)", ".ci/test installs Azurite and sets it")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	logPath := filepath.Join(tb.TempDir(), "azurite.log")
	logf, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(dir, ".bin", "azurite-table"), "--tableHost", "127.0.0.1", "--tablePort", port,
		"--inMemoryPersistence", "--skipApiVersionCheck", "--loose", "--disableTelemetry")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start Azurite: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tb.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // its process group: node and what it started
		<-exited
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second); err == nil {
			c.Close()
			break
		}
		select {
		case err := <-exited:
			exited <- err
			b, _ := os.ReadFile(logPath)
			tb.Fatalf("Azurite exited before it listened on %s: %v\n%s", port, err, b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			tb.Fatalf("Azurite did not listen on %s within 30 s:\n%s", port, b)
		}
	}
	return fmt.Sprintf("http://127.0.0.1:%s/%s", port, Account)
}
