package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/proxy/node"
	"github.com/nemocache/nemo/txn"
	"github.com/nemocache/nemo/txn/logrec"
	"github.com/nemocache/nemo/wal"
)

const testVersion = "e2e-1.2.3"

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// nemoBinary builds the real binary once per test run, version-stamped the
// way the Dockerfile does it.
func nemoBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nemo-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "nemo")
		// -buildvcs=true: the commit is recorded (TestVersionNamesCommit)
		// even where GOFLAGS turns it off.
		cmd := exec.Command("go", "build", "-buildvcs=true",
			"-ldflags", "-X main.version="+testVersion, "-o", binPath, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// stableAddr is a free loopback address below the kernel's ephemeral port
// range, for a listener that processes bind one after another (a nemo
// restarted on the address its clients know). A port freeAddr returns is
// an ephemeral one: while no process listens on it (a restart), any
// outgoing connection on the machine may be given it as its local port,
// and the next bind fails with "address already in use" (seen once in
// TestDurabilityKillLoop). Below the range the kernel hands out no port
// by itself.
func stableAddr(t *testing.T) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 2048 {
				low = n
			}
		}
	}
	span := min(low-1024, 12000)
	for range 100 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(low-1-rand.IntN(span)))
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			return addr
		}
	}
	t.Fatalf("no free port in the %d below %d", span, low)
	return ""
}

// seedWAL writes committed transactions into the WAL of dataDir, as a
// previous nemo that was killed after acknowledging them would have left
// them, and returns what the store must hold once they are flushed. nemo
// replays them as dirty records at startup, so the drain on SIGTERM has
// real data to write back.
func seedWAL(t *testing.T, dataDir string, txns, perTxn, valueSize int) map[string]string {
	t.Helper()
	l, err := wal.Open(wal.Options{Dir: filepath.Join(dataDir, "wal")})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := range txns {
		recs := make([]wal.Data, perTxn)
		for j := range recs {
			k := fmt.Sprintf("key-%04d-%03d", i, j)
			v := strings.Repeat(string(rune('a'+(i+j)%26)), valueSize)
			r := logrec.Record{Type: logrec.RecordPut, Keyspace: "e2e", Key: []byte(k), Value: []byte(v)}
			recs[j] = wal.Data{Type: r.WireType(), Body: r.AppendBody(nil)}
			want[k] = v
		}
		if _, err := l.Append(context.Background(), uint64(i+1), recs); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return want
}

// proc is a running nemo binary.
type proc struct {
	cmd   *exec.Cmd
	admin string // the admin listener's address
	http  string // the probe and metrics listener's address
	mu    sync.Mutex
	log   strings.Builder
	seen  map[string]chan struct{} // closed once a line with that msg is logged
	exit  chan error
}

// eventually polls ok until it holds, for up to within, and reports
// whether it did. The tests poll what nemo logged this way too: a line
// nemo logs before it answers a client crosses a pipe to the test and can
// arrive after the answer.
func eventually(within time.Duration, ok func() bool) bool {
	for deadline := time.Now().Add(within); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// logged returns a channel closed once the process has logged a line whose
// msg is msg (at once if it already has).
func (p *proc) logged(msg string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seenLocked(msg)
}

func (p *proc) seenLocked(msg string) chan struct{} {
	if p.seen == nil {
		p.seen = map[string]chan struct{}{}
	}
	c, ok := p.seen[msg]
	if !ok {
		c = make(chan struct{})
		p.seen[msg] = c
	}
	return c
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// startNemo runs `nemo serve` on free loopback ports over dataDir and
// returns once the admin and HTTP listeners are up. env adds NEMO_* settings.
func startNemo(t *testing.T, dataDir string, env ...string) *proc {
	t.Helper()
	return startCmd(t, serveProcess(t, dataDir, nil, env...))
}

// serveProcess is the command startNemo runs; args are added after its flags
// (a flag given twice takes the last value).
func serveProcess(t *testing.T, dataDir string, args []string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(nemoBinary(t), append([]string{"serve",
		"--data-dir", dataDir,
		"--listen-admin", "127.0.0.1:0",
		"--listen-http", "127.0.0.1:0",
		"--listen-azure-table", "127.0.0.1:0",
		"--listen-datastore", "127.0.0.1:0",
		"--log-level", "debug"}, args...)...)
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NEMO_") {
			base = append(base, kv)
		}
	}
	cmd.Env = append(append(base,
		"NEMO_CACHE_MAX_DIRTY_AGE=1h", // keep the replayed records dirty until the drain
		"NEMO_WAL_CHECKPOINT_INTERVAL=1h",
		"NEMO_LOG_FORMAT=json"), env...)
	return cmd
}

// startCmd runs cmd, a `nemo serve` command line logging JSON, and returns
// once its admin and HTTP listeners are up.
func startCmd(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, exit: make(chan error, 1)}
	adminC, httpC := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			ok := json.Unmarshal([]byte(line), &rec) == nil
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			if ok {
				if c := p.seenLocked(rec.Msg); !isClosed(c) {
					close(c)
				}
			}
			p.mu.Unlock()
			if ok {
				switch rec.Msg {
				case "admin listener up":
					adminC <- rec.Addr
				case "http listener up":
					httpC <- rec.Addr
				}
			}
		}
		p.exit <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	})
	for p.admin == "" || p.http == "" {
		select {
		case p.admin = <-adminC:
		case p.http = <-httpC:
		case err := <-p.exit:
			t.Fatalf("nemo exited before its admin and HTTP listeners came up: %v\n%s", err, p.logs())
		case <-time.After(30 * time.Second):
			t.Fatalf("admin and HTTP listeners did not come up:\n%s", p.logs())
		}
	}
	return p
}

// logOnFailure makes a failing test log each process's WARN and ERROR
// lines (at most max of each) and, when the environment variable dirVar
// names a directory, keep each process's whole log there. procs is read
// at the end of the test.
func logOnFailure(t *testing.T, dirVar string, max int, procs func() []*proc) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for i, p := range procs() {
			if dir := os.Getenv(dirVar); dir != "" {
				f := filepath.Join(dir, fmt.Sprintf("%s-%02d.log", strings.ReplaceAll(t.Name(), "/", "_"), i))
				if err := os.WriteFile(f, []byte(p.logs()), 0o644); err == nil {
					t.Logf("process %d log: %s", i, f)
				}
			}
			var lines []string
			for _, l := range strings.Split(p.logs(), "\n") {
				if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
					lines = append(lines, l)
				}
			}
			if len(lines) > max {
				lines = append(lines[:max], fmt.Sprintf("... %d more", len(lines)-max))
			}
			if len(lines) > 0 {
				t.Logf("process %d WARN/ERROR lines:\n%s", i, strings.Join(lines, "\n"))
			}
		}
	})
}

// envSeed is the seed a randomized test runs with: the value of the
// environment variable name, or one from the clock; it is logged, with how
// to repeat the run.
func envSeed(t *testing.T, name string) uint64 {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(name); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		seed = n
	}
	t.Logf("seed %d (%s=%d repeats it)", seed, name, seed)
	return seed
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// get asks the HTTP listener (probes, /metrics).
func (p *proc) get(path string) (int, string) { return getURL("http://" + p.http + path) }

// getAdmin asks the admin listener (the debug API).
func (p *proc) getAdmin(path string) (int, string) { return getURL("http://" + p.admin + path) }

func getURL(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (p *proc) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _ := p.get("/startupz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/startupz never answered 200:\n%s", p.logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := p.get(path); code != http.StatusOK || body != "ok\n" {
			t.Fatalf("%s after startup: %d %q", path, code, body)
		}
	}
}

func (p *proc) waitExit(t *testing.T) int {
	t.Helper()
	select {
	case err := <-p.exit:
		if err == nil {
			return 0
		}
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		t.Fatalf("wait: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatalf("nemo did not exit:\n%s", p.logs())
	}
	return -1
}

// readinessWatcher polls /readyz over one kept-alive connection as fast as
// it answers, until the HTTP listener goes away, and reports every distinct
// answer in order.
// The second channel is closed once the first answer is in.
func (p *proc) readinessWatcher() (<-chan []string, <-chan struct{}) {
	out := make(chan []string, 1)
	first := make(chan struct{})
	go func() {
		client := &http.Client{Timeout: 5 * time.Second}
		var seen []string
		for {
			resp, err := client.Get("http://" + p.http + "/readyz")
			if err != nil {
				if len(seen) == 0 {
					close(first)
				}
				out <- seen
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			s := fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
			if len(seen) == 0 || seen[len(seen)-1] != s {
				seen = append(seen, s)
				if len(seen) == 1 {
					close(first)
				}
			}
		}
	}()
	return out, first
}

// checkReopened is the buffer check for a test of the binary, whose buffer
// lives in another process: at the end of the test (unless it failed) a
// node is opened over the data dir the binary left, replaying its WAL,
// reads every keyspace through the engine and checks its buffer's
// invariants against the store before it closes (without flushing).
func checkReopened(t *testing.T, dataDir string) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		cfg := config.Defaults()
		cfg.Backend.Embedded.DataDir = dataDir
		if err := cfg.Validate(); err != nil {
			t.Errorf("reopen config: %v", err)
			return
		}
		n, err := node.Open(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Errorf("reopen the data dir: %v", err)
			return
		}
		defer n.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		spaces, err := n.Store.Unwrap().(*embedded.Store).Keyspaces()
		if err != nil {
			t.Errorf("list keyspaces: %v", err)
			return
		}
		for _, ks := range spaces {
			if _, _, err := n.Engine.Scan(ctx, ks, nil, nil, 0, txn.ReadLatest); err != nil {
				t.Errorf("scan %q: %v", ks, err)
				return
			}
		}
		if err := n.Buffer.Check(ctx); err != nil {
			t.Errorf("buffer invariants after reopening the data dir: %v", err)
		}
	})
}

// drain sends each process SIGTERM and requires a clean exit (status 0).
func drain(t *testing.T, procs ...*proc) {
	t.Helper()
	for _, p := range procs {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.waitExit(t); code != 0 {
			t.Fatalf("exit %d after SIGTERM:\n%s", code, p.logs())
		}
	}
}

// openStore opens the embedded store a stopped binary left in dataDir,
// closed at the end of the test.
func openStore(t *testing.T, dataDir string) *embedded.Store {
	t.Helper()
	s, err := embedded.Open(dataDir, embedded.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("reopen store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func assertInStore(t *testing.T, dataDir string, want map[string]string) {
	t.Helper()
	s := openStore(t, dataDir)
	recs, _, err := s.GetRange(context.Background(), "e2e", nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range recs {
		got[string(r.Key)] = string(r.Value)
	}
	missing := 0
	for k, v := range want {
		if got[k] != v {
			missing++
		}
	}
	if missing > 0 || len(got) != len(want) {
		t.Fatalf("store holds %d records, want %d; %d missing or wrong", len(got), len(want), missing)
	}
}

// TestBinarySIGTERMFlushesAndExitsZero is the end-to-end shutdown test with
// the real binary: acknowledged writes (in the WAL, replayed as dirty
// records) are in the store after SIGTERM, the exit status is 0, and
// readiness answered 503 while the drain ran.
func TestBinarySIGTERMFlushesAndExitsZero(t *testing.T) {
	dataDir := t.TempDir()
	want := seedWAL(t, dataDir, 400, 50, 512)
	p := startNemo(t, dataDir)
	p.waitReady(t)

	code, metrics := p.get("/metrics")
	if code != http.StatusOK || !strings.Contains(metrics, `nemo_build_info{goversion="`+runtime.Version()+`",version="`+testVersion+`"} 1`) {
		t.Fatalf("/metrics: %d, build info missing", code)
	}
	if strings.Contains(metrics, "\nnemo_cache_dirty_bytes 0\n") || !strings.Contains(metrics, "\nnemo_cache_dirty_bytes ") {
		t.Fatal("replayed WAL records are not dirty in the buffer")
	}
	// The checkpoint that follows a replay is already writing the
	// replayed records back, so some may be clean by now; none is clean
	// that was not replayed.
	code, body := p.getAdmin("/debug/keyspaces")
	m := regexp.MustCompile(`"dirty": (\d+)`).FindStringSubmatch(body)
	if code != http.StatusOK || !strings.Contains(body, `"name": "e2e"`) || m == nil {
		t.Fatalf("/debug/keyspaces: %d %s", code, body)
	}
	if n, _ := strconv.Atoi(m[1]); n == 0 || n > len(want) {
		t.Fatalf("/debug/keyspaces: %d dirty records, want 1 to the %d replayed: %s", n, len(want), body)
	}

	seen, first := p.readinessWatcher()
	<-first // the watcher has seen "200 ok"
	drain(t, p)
	checkReopened(t, dataDir)
	answers := <-seen
	if strings.Join(answers, "|") != "200 ok|503 draining" {
		t.Errorf("/readyz answers during shutdown: %q, want 200 ok then 503 draining until the listener closed", answers)
	}
	assertInStore(t, dataDir, want)
	logs := p.logs()
	for _, want := range []string{`"msg":"wal replayed"`, `"msg":"signal received: draining`, `"msg":"engine drained, store closed"`, `"msg":"nemo stopped"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
}

// TestBinaryShutdownCommand is the preStop path: `nemo shutdown` asks the
// running proxy to drain, waits until it has exited, and the proxy exits 0
// with its data in the store.
func TestBinaryShutdownCommand(t *testing.T) {
	dataDir := t.TempDir()
	want := seedWAL(t, dataDir, 20, 10, 64)
	p := startNemo(t, dataDir)
	p.waitReady(t)

	for _, probe := range []string{"startupz", "healthz", "readyz", "startup", "livez"} {
		out, err := exec.Command(nemoBinary(t), "health", probe, "--listen-http", p.http).CombinedOutput()
		if err != nil || string(out) != probe+": ok\n" {
			t.Errorf("nemo health %s = %q, %v", probe, out, err)
		}
		// The admin listener still answers the probes it served before.
		if probe == "startup" || probe == "livez" || probe == "readyz" {
			if code, body := p.getAdmin("/" + probe); code != http.StatusOK || body != "ok\n" {
				t.Errorf("admin /%s = %d %q", probe, code, body)
			}
		}
	}
	if code, body := p.getAdmin("/metrics"); code != http.StatusOK || !strings.Contains(body, "nemo_build_info") {
		t.Errorf("admin /metrics = %d", code)
	}

	out, err := exec.Command(nemoBinary(t), "shutdown", "--listen-admin", p.admin, "--timeout", "30s").CombinedOutput()
	if err != nil {
		t.Fatalf("nemo shutdown: %v\n%s", err, out)
	}
	if string(out) != "nemo is draining\nnemo has stopped\n" {
		t.Errorf("nemo shutdown printed %q", out)
	}
	if code := p.waitExit(t); code != 0 {
		t.Fatalf("exit status %d after nemo shutdown:\n%s", code, p.logs())
	}
	checkReopened(t, dataDir)
	assertInStore(t, dataDir, want)

	out, err = exec.Command(nemoBinary(t), "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "nemo "+testVersion+" (go") {
		t.Errorf("nemo version = %q, %v", out, err)
	}
}
