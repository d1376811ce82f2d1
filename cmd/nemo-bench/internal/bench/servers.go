package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/txn"
)

// serverKind is what answers a run's clients on a real target.
type serverKind uint8

const (
	// serverNemo: a nemo process (the binary, Options.Nemo) in front of
	// the backend.
	serverNemo serverKind = iota
	// serverDirect: nothing; the clients talk to the backend itself.
	serverDirect
	// serverProxy: a bare reverse proxy process in front of the backend
	// (child.go).
	serverProxy
)

// stackSpec is what a run opens on a target: the server, and nemo's
// cache policy, coherence mode and budget when the server is nemo.
type stackSpec struct {
	server   serverKind
	policy   cache.Policy
	mode     txn.Coherence // "" is exclusive
	maxBytes int64
}

func (s stackSpec) coherence() txn.Coherence {
	if s.mode == "" {
		return txn.Exclusive
	}
	return s.mode
}

// realBackend is what a real target's stacks need of its backend: how a
// nemo reaches it, how a bare proxy does, and a client of whatever
// answers at an address.
type realBackend interface {
	// nemoEnv configures a nemo process's backend (NEMO_BACKEND_...) and
	// its frontend listener; frontend names the listener in its "nemo
	// ready" line ("aztable", "datastore").
	nemoEnv() (env []string, frontend string)
	// proxy is the bare proxy's kind and target.
	proxy() (kind, target string)
	// backendAddr is the backend's host:port (its process is measured
	// when it is local).
	backendAddr() string
	// directAddr is the address a client of the backend itself uses.
	directAddr() string
	// client opens a reader of the server at addr; sent counts the
	// requests it sends.
	client(ctx context.Context, addr string, sent *atomic.Uint64) (reader, func() error, error)
}

// procStack is a cacheStack on a real target: a client (the SDK) of
// whatever answers, and the processes whose CPU the run measures.
type procStack struct {
	reader
	closeClient func() error
	spec        stackSpec
	sent        atomic.Uint64 // requests the client sent
	nemo        *child        // the nemo process, when it answers
	metricsURL  string        // its /metrics
	proxy       *child        // the bare proxy, when it answers
	ps          []proc
	once        sync.Once
}

// openProcStack starts what spec asks for in front of b and a client of
// it. dir holds the nemo's data.
func openProcStack(ctx context.Context, o Options, b realBackend, spec stackSpec, dir string) (*procStack, error) {
	s := &procStack{spec: spec}
	addr := b.directAddr()
	switch spec.server {
	case serverNemo:
		env, frontend := b.nemoEnv()
		env = append(env, nemoSpecEnv(spec, dir)...)
		if spec.coherence() == txn.Shared && o.MaxStaleness > 0 {
			env = append(env, "NEMO_COHERENCE_MAX_STALENESS="+o.MaxStaleness.String())
		}
		c, ready, err := startNemo(ctx, o.Nemo, env)
		if err != nil {
			return nil, err
		}
		s.nemo, s.metricsURL, addr = c, "http://"+ready["http"]+"/metrics", ready[frontend]
		s.ps = append(s.ps, proc{role: "server", pid: c.pid()})
	case serverProxy:
		kind, target := b.proxy()
		c, a, err := startBareProxy(ctx, kind, target)
		if err != nil {
			return nil, err
		}
		s.proxy, addr = c, a
		s.ps = append(s.ps, proc{role: "server", pid: c.pid()})
	}
	if pid, err := listenerPID(b.backendAddr()); err == nil {
		s.ps = append(s.ps, proc{role: "backend", pid: pid})
	}
	// The clients run in this process: their CPU shows whether a run
	// was bound by the machine's cores or by something else.
	s.ps = append(s.ps, proc{role: "client", pid: os.Getpid()})
	r, closeClient, err := b.client(ctx, addr, &s.sent)
	if err != nil {
		return nil, errors.Join(err, s.close())
	}
	s.reader, s.closeClient = r, closeClient
	return s, nil
}

// nemoSpecEnv is the configuration of a run's nemo beyond its backend: a
// fresh data directory, loopback listeners on free ports, the spec's
// policy, mode and budget. The node ID is fixed, so that a nemo started
// after another takes its exclusive-mode leases at once, and leases live
// long enough that no renewal falls in a run (remote requests then count
// the workload's calls only).
func nemoSpecEnv(spec stackSpec, dir string) []string {
	return []string{
		"NEMO_BACKEND_EMBEDDED_DATA_DIR=" + dir,
		"NEMO_LISTEN_HTTP=127.0.0.1:0", "NEMO_LISTEN_ADMIN=127.0.0.1:0",
		"NEMO_LOG_FORMAT=json", "NEMO_LOG_LEVEL=info",
		"NEMO_CACHE_POLICY=" + string(spec.policy),
		"NEMO_CACHE_MAX_BYTES=" + strconv.FormatInt(spec.maxBytes, 10),
		// Explicit limits, so that small budgets need no derived ones.
		"NEMO_CACHE_MAX_KEY_BYTES=512", "NEMO_CACHE_MAX_VALUE_BYTES=" + strconv.FormatInt(min(max(spec.maxBytes/4, 4<<10), 1<<20), 10),
		"NEMO_COHERENCE_MODE=" + string(spec.coherence()),
		"NEMO_COHERENCE_NODE_ID=nemo-bench", "NEMO_COHERENCE_LEASE_TTL=10m",
	}
}

// startNemo runs the nemo binary with env (over a clean environment: none
// of this process's NEMO_ settings) and waits for its "nemo ready" line,
// whose fields are the listeners' addresses.
func startNemo(ctx context.Context, bin string, env []string) (*child, map[string]string, error) {
	cmd := exec.Command(bin, "serve")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NEMO_") && !strings.HasPrefix(kv, "OTEL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	return startChild(ctx, "nemo", cmd, func(line string) (map[string]string, bool) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "nemo ready" {
			return nil, false
		}
		out := map[string]string{}
		for k, v := range rec {
			out[k] = fmt.Sprint(v)
		}
		return out, true
	})
}

// metrics reads the nemo's /metrics, summing each metric over its labels.
func (s *procStack) metrics() (map[string]float64, error) {
	resp, err := http.Get(s.metricsURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", s.metricsURL, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 {
			name = line[:i]
			if j := strings.LastIndexByte(line, '}'); j > i {
				rest, ok = strings.TrimSpace(line[j+1:]), true
			}
		}
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64); err == nil {
			out[name] += v
		}
	}
	return out, sc.Err()
}

// remote is the store requests so far: nemo's count of its calls to the
// backend, or what the client sent when it talks to the backend (itself
// or through the bare proxy).
func (s *procStack) remote() uint64 {
	if s.nemo == nil {
		return s.sent.Load()
	}
	m, err := s.metrics()
	if err != nil {
		return 0
	}
	return uint64(m["nemo_remote_requests_total"])
}

// buffer is nemo's buffer statistics, from its metrics (zero without a
// nemo).
func (s *procStack) buffer() cache.Stats {
	if s.nemo == nil {
		return cache.Stats{}
	}
	m, err := s.metrics()
	if err != nil {
		return cache.Stats{}
	}
	c := func(name string) uint64 { return uint64(m["nemo_cache_"+name]) }
	return cache.Stats{
		Hits: c("hits_total"), NegativeHits: c("negative_hits_total"), Misses: c("misses_total"),
		RangeHits: c("range_hits_total"), RangeFetches: c("range_fetches_total"),
		RefreshedAhead: c("refreshed_ahead_total"), RefreshSkipped: c("refresh_ahead_skipped_total"),
		UsedBytes: int64(m["nemo_cache_used_bytes"]),
	}
}

func (s *procStack) procs() []proc { return s.ps }
func (s *procStack) warming(bool)  {} // a real backend's latency is what it is

// close closes the client and stops the processes (a nemo drains).
func (s *procStack) close() error {
	var err error
	s.once.Do(func() {
		if s.closeClient != nil {
			err = s.closeClient()
		}
		for _, c := range []*child{s.nemo, s.proxy} {
			if c != nil {
				err = errors.Join(err, c.stop())
			}
		}
	})
	return err
}

// findNemo is the nemo binary a real target runs: path if given, else a
// "nemo" beside this program, else one on $PATH ("" if none).
func findNemo(path string) string {
	if path != "" {
		return path
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "nemo")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	if p, err := exec.LookPath("nemo"); err == nil {
		return p
	}
	return ""
}
