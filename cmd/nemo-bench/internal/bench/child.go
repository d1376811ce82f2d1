package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// child is a server process a run starts: a nemo, or a bare proxy (this
// same program, run as one: RunChild). Its output is kept (the last lines,
// for errors) and scanned for the line that says it is ready.
type child struct {
	name  string
	cmd   *exec.Cmd
	stdin io.Closer // a bare proxy's standard input: it exits when this closes
	mu    sync.Mutex
	tail  []string
	done  chan struct{}
	// killed: the run killed it (SIGKILL), stop does not wait for a
	// clean exit; replayed: the entries its "commit log replayed" log
	// lines reported (a nemo taking over a keyspace's backend log).
	killed   bool
	replayed atomic.Int64
}

// startChild starts cmd and waits until ready accepts one of its output
// lines (stdout and stderr), returning what ready extracted from it.
func startChild(ctx context.Context, name string, cmd *exec.Cmd, ready func(line string) (map[string]string, bool)) (*child, map[string]string, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	found := make(chan map[string]string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			if c.tail = append(c.tail, line); len(c.tail) > 40 {
				c.tail = c.tail[1:]
			}
			c.mu.Unlock()
			c.watch(line)
			if m, ok := ready(line); ok {
				select {
				case found <- m:
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(c.done)
	}()
	select {
	case m := <-found:
		return c, m, nil
	case <-c.done:
		return nil, nil, fmt.Errorf("%s exited before it was ready: %s", name, c.output())
	case <-time.After(time.Minute):
	case <-ctx.Done():
	}
	err = errors.Join(fmt.Errorf("%s not ready: %s", name, c.output()), ctx.Err())
	return nil, nil, errors.Join(err, c.stop())
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// watch counts the entries of a nemo's "commit log replayed" lines (its
// JSON log).
func (c *child) watch(line string) {
	if !strings.Contains(line, `"commit log replayed"`) {
		return
	}
	var rec struct{ Entries int64 }
	if json.Unmarshal([]byte(line), &rec) == nil {
		c.replayed.Add(rec.Entries)
	}
}

// kill kills the child (SIGKILL: no drain) and waits for it to go.
func (c *child) kill() {
	c.mu.Lock()
	c.killed = true
	c.mu.Unlock()
	_ = c.cmd.Process.Kill()
	<-c.done
}

// output is the child's last lines of output.
func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.tail, "\n")
}

// stop asks the child to exit (SIGTERM: nemo drains) and waits, killing it
// after a minute. A nemo exit status other than 0 is an error.
func (c *child) stop() error {
	select {
	case <-c.done:
	default:
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(time.Minute):
			_ = c.cmd.Process.Kill()
			<-c.done
			return fmt.Errorf("%s did not stop within a minute: %s", c.name, c.output())
		}
	}
	c.mu.Lock()
	killed := c.killed
	c.mu.Unlock()
	if code := c.cmd.ProcessState.ExitCode(); code != 0 && !killed {
		return fmt.Errorf("%s exited %d: %s", c.name, code, c.output())
	}
	return nil
}

// Bare proxies. The baseline of the forward experiment is a reverse proxy
// that does nothing but forward: net/http/httputil.ReverseProxy for the
// Azure Table API, and for Datastore a grpc-go server whose unknown-service
// handler passes every call's request and response frames through as
// bytes (no protobuf decoding). Each runs in a process of its own, this
// program started again with the environment below (RunChild), so that its
// CPU time is its own.
const (
	childProxyEnv  = "NEMO_BENCH_BARE_PROXY"  // "http" or "grpc"
	childTargetEnv = "NEMO_BENCH_BARE_TARGET" // the backend: an http URL, or host:port
	proxyReadyLine = "bare proxy listening on "
)

// RunChild serves a bare proxy and exits if this process was started as
// one (its environment says so); otherwise it returns at once. A program
// that runs nemo-bench's real targets calls it first (cmd/nemo-bench's
// main, this package's TestMain): the proxies are that program run again.
func RunChild() {
	kind := os.Getenv(childProxyEnv)
	if kind == "" {
		return
	}
	if err := serveBareProxy(kind, os.Getenv(childTargetEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "bare proxy:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveBareProxy serves a bare proxy of kind to target on a loopback port,
// announces the port on stdout and serves until SIGTERM or its standard
// input closes.
func serveBareProxy(kind, target string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() {
		select {
		case <-eof:
		case <-term:
		}
		close(stop)
	}()
	switch kind {
	case "http":
		u, err := url.Parse(target)
		if err != nil {
			return err
		}
		rp := &httputil.ReverseProxy{
			Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(&url.URL{Scheme: u.Scheme, Host: u.Host}) },
			// Keep a connection per client: the default two idle
			// connections per host would open one per request under
			// load.
			Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute},
		}
		srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
		go func() { <-stop; srv.Close() }()
		fmt.Println(proxyReadyLine + ln.Addr().String())
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	case "grpc":
		cc, err := grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer cc.Close()
		srv := grpc.NewServer(grpc.UnknownServiceHandler(passThrough(cc)), grpc.ForceServerCodec(rawCodec{}))
		go func() { <-stop; srv.Stop() }()
		fmt.Println(proxyReadyLine + ln.Addr().String())
		return srv.Serve(ln)
	}
	return fmt.Errorf("unknown bare proxy kind %q", kind)
}

// passThrough forwards a unary call's request frame to cc and its
// response frame back, with the caller's metadata, as bytes.
func passThrough(cc *grpc.ClientConn) grpc.StreamHandler {
	return func(_ any, ss grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(ss)
		var req []byte
		if err := ss.RecvMsg(&req); err != nil {
			return err
		}
		md, _ := metadata.FromIncomingContext(ss.Context())
		out := metadata.MD{}
		for k, v := range md {
			if !strings.HasPrefix(k, ":") && !strings.HasPrefix(k, "grpc-") && k != "content-type" && k != "user-agent" {
				out[k] = v
			}
		}
		var resp []byte
		if err := cc.Invoke(metadata.NewOutgoingContext(ss.Context(), out), method, &req, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
			return err
		}
		return ss.SendMsg(&resp)
	}
}

// rawCodec passes protobuf frames through as bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// startBareProxy runs a bare proxy of kind ("http", "grpc") to target in
// a process of its own and returns it with its address.
func startBareProxy(ctx context.Context, kind, target string) (*child, string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childProxyEnv+"="+kind, childTargetEnv+"="+target)
	stdin, err := cmd.StdinPipe() // closed when we exit: the proxy goes too
	if err != nil {
		return nil, "", err
	}
	c, m, err := startChild(ctx, "bare "+kind+" proxy", cmd, func(line string) (map[string]string, bool) {
		addr, ok := strings.CutPrefix(line, proxyReadyLine)
		return map[string]string{"addr": addr}, ok
	})
	if err != nil {
		return nil, "", errors.Join(err, stdin.Close())
	}
	c.stdin = stdin
	return c, m["addr"], nil
}
