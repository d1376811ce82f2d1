package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/enum"
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
	// replicas is how many nemo processes answer (0 means one); the
	// client spreads its requests over them in turn.
	replicas int
	// env is more NEMO_ settings for the nemos (after the others: later
	// settings win).
	env []string
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
	nemo        *child        // the (first) nemo process, when it answers
	nemos       []*child      // every nemo process (stackSpec.replicas)
	metricsURLs []string      // their /metrics
	proxy       *child        // the bare proxy, when it answers
	frontends   []string      // the nemos' frontend addresses, in order
	clientAddrs []string      // the address each client talks to, in order
	ps          []proc
	once        sync.Once
}

// openProcStack starts what spec asks for in front of b and a client of
// it (with spec.replicas, one client per nemo, used in turn). dir holds
// the nemos' data.
func openProcStack(ctx context.Context, o Options, b realBackend, spec stackSpec, dir string) (*procStack, error) {
	s := &procStack{spec: spec}
	addrs := []string{b.directAddr()}
	switch spec.server {
	case serverNemo:
		addrs = nil
		secret := fmt.Sprintf("nemo-bench-peer-secret-%d", os.Getpid())
		for i := range max(spec.replicas, 1) {
			env, frontend := b.nemoEnv()
			rdir := dir
			if spec.replicas > 1 {
				rdir = filepath.Join(dir, strconv.Itoa(i))
				if err := os.MkdirAll(rdir, 0o755); err != nil {
					return nil, errors.Join(err, s.close())
				}
			}
			env = append(env, nemoSpecEnv(spec, rdir)...)
			env = append(env, spec.env...)
			if spec.coherence() != txn.Exclusive && o.MaxStaleness > 0 {
				env = append(env, "NEMO_COHERENCE_MAX_STALENESS="+o.MaxStaleness.String())
			}
			if spec.replicas > 1 {
				// Later settings win (os/exec keeps the last of a name).
				env = append(env, fmt.Sprintf("NEMO_COHERENCE_NODE_ID=nemo-bench-%d", i))
			}
			var (
				c     *child
				ready map[string]string
				err   error
			)
			// The peer port is chosen free and closed before nemo binds
			// it: on a busy machine another process may take it in
			// between; then start again on another.
			for try := 1; ; try++ {
				penv := env
				if spec.coherence() == enum.Partitioned {
					peer, err := freeLoopback()
					if err != nil {
						return nil, errors.Join(err, s.close())
					}
					penv = append(slices.Clip(env), partitionedEnv(peer, secret)...)
				}
				c, ready, err = startNemo(ctx, o.Nemo, penv)
				if err == nil || try == 3 || !strings.Contains(err.Error(), "address already in use") || spec.coherence() != enum.Partitioned {
					break
				}
			}
			if err != nil {
				return nil, errors.Join(err, s.close())
			}
			if s.nemo == nil {
				s.nemo = c
			}
			s.nemos = append(s.nemos, c)
			s.metricsURLs = append(s.metricsURLs, "http://"+ready["http"]+"/metrics")
			addrs = append(addrs, ready[frontend])
			s.frontends = append(s.frontends, ready[frontend])
			s.ps = append(s.ps, proc{role: "server", pid: c.pid()})
		}
	case serverProxy:
		kind, target := b.proxy()
		c, a, err := startBareProxy(ctx, kind, target)
		if err != nil {
			return nil, err
		}
		s.proxy, addrs = c, []string{a}
		s.ps = append(s.ps, proc{role: "server", pid: c.pid()})
	}
	if pid, err := listenerPID(b.backendAddr()); err == nil {
		s.ps = append(s.ps, proc{role: "backend", pid: pid})
	}
	// The clients run in this process: their CPU shows whether a run
	// was bound by the machine's cores or by something else.
	s.ps = append(s.ps, proc{role: "client", pid: os.Getpid()})
	var rs roundRobin
	var closers []func() error
	s.closeClient = func() error {
		var err error
		for _, c := range closers {
			err = errors.Join(err, c())
		}
		return err
	}
	// Direct to the backend, a replicated run's clients are as many.
	for range max(len(addrs), spec.replicas, 1) {
		addr := addrs[len(rs.rs)%len(addrs)]
		s.clientAddrs = append(s.clientAddrs, addr)
		r, closeClient, err := b.client(ctx, addr, &s.sent)
		if err != nil {
			return nil, errors.Join(err, s.close())
		}
		rs.rs, closers = append(rs.rs, r), append(closers, closeClient)
	}
	s.reader = &rs
	if len(rs.rs) == 1 {
		s.reader = rs.rs[0]
	}
	return s, nil
}

// roundRobin spreads requests over several clients (one per replica) in
// turn.
type roundRobin struct {
	rs   []reader
	next atomic.Uint64
}

func (r *roundRobin) pick() reader { return r.rs[(r.next.Add(1)-1)%uint64(len(r.rs))] }

func (r *roundRobin) get(ctx context.Context, key []byte) (int, bool, error) {
	return r.pick().get(ctx, key)
}

func (r *roundRobin) scan(ctx context.Context, start, end []byte, limit int) ([][]byte, error) {
	return r.pick().scan(ctx, start, end, limit)
}

func (r *roundRobin) put(ctx context.Context, key, val []byte) error {
	return r.pick().put(ctx, key, val)
}

// partitionedEnv is what a replica of coherence partitioned adds (as
// cmd/nemo's partitioned tests configure them): its commit log in the
// backend, its own peer listener (which the lease record advertises), the
// replicas' shared secret, a lease of 5 s, and checkpoints and write-back
// every few seconds so that the log stays short and a drain is quick.
func partitionedEnv(peer, secret string) []string {
	return []string{
		"NEMO_WAL_LOCATION=backend", "NEMO_LISTEN_PEER=" + peer,
		"NEMO_COHERENCE_PEER_SECRET=" + secret, "NEMO_COHERENCE_LEASE_TTL=5s",
		"NEMO_CACHE_MAX_DIRTY_AGE=5s", "NEMO_WAL_CHECKPOINT_INTERVAL=3s",
	}
}

// freeLoopback is a loopback address with a port free now.
func freeLoopback() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
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

// metrics reads every nemo's /metrics, summing each metric over its
// labels and the nemos.
func (s *procStack) metrics() (map[string]float64, error) {
	out := map[string]float64{}
	for _, u := range s.metricsURLs {
		if err := readMetrics(u, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readMetrics adds the metrics at url to out, each summed over its labels.
func readMetrics(metricsURL string, out map[string]float64) error {
	resp, err := http.Get(metricsURL)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", metricsURL, resp.Status)
	}
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
	return sc.Err()
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
		Coalesced: c("misses_coalesced_total"),
		UsedBytes: int64(m["nemo_cache_used_bytes"]),
	}
}

// storeCalls is the nemos' calls to the backend so far and the time they
// took (zero without a nemo).
func (s *procStack) storeCalls() storeTally {
	if s.nemo == nil {
		return storeTally{}
	}
	m, err := s.metrics()
	if err != nil {
		return storeTally{}
	}
	return storeTally{
		time:  time.Duration(m["nemo_remote_request_duration_seconds_sum"] * float64(time.Second)),
		calls: uint64(m["nemo_remote_request_duration_seconds_count"]),
	}
}

func (s *procStack) procs() []proc { return s.ps }

// owners is, for replicas in coherence partitioned, how many nemos there
// are and how many of them hold a keyspace's lease (nemo_lease_held): the
// owners, to which the others forward their writes.
func (s *procStack) owners() (replicas, owners int, ok bool) {
	if len(s.metricsURLs) < 2 || s.spec.coherence() != enum.Partitioned {
		return 0, 0, false
	}
	for _, u := range s.metricsURLs {
		m := map[string]float64{}
		if readMetrics(u, m) != nil {
			return 0, 0, false
		}
		if m["nemo_lease_held"] > 0 {
			owners++
		}
	}
	return len(s.metricsURLs), owners, true
}
func (s *procStack) warming(bool) {} // a real backend's latency is what it is

// close closes the client and stops the processes (a nemo drains).
func (s *procStack) close() error {
	var err error
	s.once.Do(func() {
		if s.closeClient != nil {
			err = s.closeClient()
		}
		// The replicas drain together (a partitioned owner writes its
		// tables back and releases their leases), each must exit 0.
		cs := append([]*child{s.proxy}, s.nemos...)
		errs := make([]error, len(cs))
		var wg sync.WaitGroup
		for i, c := range cs {
			if c != nil {
				wg.Go(func() { errs[i] = c.stop() })
			}
		}
		wg.Wait()
		err = errors.Join(append([]error{err}, errs...)...)
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
