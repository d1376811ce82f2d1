package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
)

// A shutdown ends within listen.shutdown_grace whatever the backend does
// (issue 13): with Azurite behind a network fault (connections refused, a
// backend that accepts and never answers as a SIGSTOPped one does, one that
// answers slowly) and acknowledged writes still unflushed, SIGTERM makes
// nemo exit within the grace plus a second, with status 3 and a log line
// saying what stayed in the WAL; the next start, with the backend healthy,
// writes all of it to Azurite and exits 0.
//
// NEMO_TEST_GRACE_CYCLES=N repeats each mode N times (a campaign; CI runs
// one of each).
func TestBinaryShutdownWithinGrace(t *testing.T) {
	const grace = 4 * time.Second
	cycles := 1
	if v := os.Getenv("NEMO_TEST_GRACE_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		cycles = n
	}
	for c := range cycles * 3 {
		mode := []faultMode{faultRefuse, faultHang, faultSlow}[c%3]
		t.Run(fmt.Sprintf("%s/%d", mode, c/3), func(t *testing.T) {
			azurite := aztest.Azurite(t)
			fp := startFaultProxy(t, azurite)
			conn := aztest.ConnectionString(fp.url, aztest.Key)
			table := aztest.TableName("grace")
			direct, err := aztables.NewServiceClientFromConnectionString(aztest.ConnectionString(azurite, aztest.Key), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = direct.DeleteTable(context.Background(), table, nil) })
			dataDir := t.TempDir()
			env := []string{"NEMO_BACKEND_TYPE=aztable", "NEMO_BACKEND_AZTABLE_CONNECTION_STRING=" + conn,
				"NEMO_COHERENCE_MODE=exclusive", "NEMO_LISTEN_SHUTDOWN_GRACE=" + grace.String()}
			p := startNemo(t, dataDir, env...)
			p.waitReady(t)
			svc := azNemoService(t, p)
			ctx := context.Background()
			if _, err := svc.CreateTable(ctx, table, nil); err != nil {
				t.Fatal(err)
			}
			tc := svc.NewClient(table)
			const rows = 1000
			for i := range rows {
				e := fmt.Sprintf(`{"PartitionKey":"p%d","RowKey":"r%04d","V":"v%d"}`, i%10, i, i)
				if _, err := tc.UpsertEntity(ctx, []byte(e), nil); err != nil {
					t.Fatalf("%v\n%s", err, p.logs())
				}
			}
			// Acknowledged, and dirty until the drain (max dirty age 1h).
			fp.set(mode)
			began := time.Now()
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			code := p.waitExit(t)
			took := time.Since(began)
			t.Logf("%s: exit %d after %v (grace %v)", mode, code, took.Round(10*time.Millisecond), grace)
			if took > grace+time.Second {
				t.Errorf("exited after %v, past the grace %v + 1s:\n%s", took, grace, p.logs())
			}
			if code != exitUnflushed {
				t.Errorf("exit status %d, want %d (unflushed writes in the WAL):\n%s", code, exitUnflushed, p.logs())
			}
			if !strings.Contains(p.logs(), `"msg":"drain: out of time; unflushed writes stay in the WAL for the next start"`) {
				t.Errorf("no log line saying what stayed unflushed:\n%s", p.logs())
			}

			// The backend is back: the next start replays the WAL and
			// its drain writes everything to Azurite.
			fp.set(faultPass)
			q := startNemo(t, dataDir, env...)
			q.waitReady(t)
			drain(t, q)
			if n := countEntities(t, direct.NewClient(table)); n != rows {
				t.Fatalf("Azurite holds %d entities after the restart's drain, want %d:\n%s", n, rows, q.logs())
			}
		})
	}
}

// faultMode is what the fault proxy does to the connections through it.
type faultMode int

const (
	faultPass   faultMode = iota // forward
	faultRefuse                  // close every connection at once: the backend is down
	faultHang                    // accept, forward nothing: the backend is stopped (SIGSTOP)
	faultSlow                    // forward each chunk after a delay
)

func (m faultMode) String() string {
	return [...]string{"pass", "refused", "hung", "slow"}[m]
}

// faultProxy is a TCP proxy in front of a backend, whose fault mode a test
// switches at any moment; a switch also closes the connections open then
// (a connection pool must not keep the old behaviour).
type faultProxy struct {
	url  string // the backend's URL with the proxy's host:port
	mu   sync.Mutex
	mode faultMode
	open map[net.Conn]bool
}

func startFaultProxy(t *testing.T, backend string) *faultProxy {
	t.Helper()
	u, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	u.Host = ln.Addr().String()
	fp := &faultProxy{url: u.String(), open: map[net.Conn]bool{}}
	t.Cleanup(func() {
		ln.Close()
		fp.set(faultRefuse)
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go fp.serve(c, target)
		}
	}()
	return fp
}

func (fp *faultProxy) set(m faultMode) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	fp.mode = m
	for c := range fp.open {
		c.Close()
	}
	clear(fp.open)
}

func (fp *faultProxy) track(cs ...net.Conn) faultMode {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	for _, c := range cs {
		fp.open[c] = true
	}
	return fp.mode
}

func (fp *faultProxy) serve(c net.Conn, target string) {
	switch fp.track(c) {
	case faultRefuse:
		c.Close()
		return
	case faultHang:
		return // held open, unanswered, until the mode changes
	}
	b, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	mode := fp.track(b)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if mode == faultSlow {
					time.Sleep(500 * time.Millisecond)
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	go pipe(b, c)
	pipe(c, b)
}

// A request whose backend does not answer gets the protocol's timeout error
// before the server's write timeout, never a closed connection (issue 13):
// an uncached read through each frontend with its backend hung behind the
// fault proxy.
func TestBinaryHungBackendAnswersInTime(t *testing.T) {
	const write = 4 * time.Second
	t.Run("aztable", func(t *testing.T) {
		fp := startFaultProxy(t, aztest.Azurite(t))
		p := startNemo(t, t.TempDir(), "NEMO_BACKEND_TYPE=aztable",
			"NEMO_BACKEND_AZTABLE_CONNECTION_STRING="+aztest.ConnectionString(fp.url, aztest.Key),
			"NEMO_COHERENCE_MODE=shared", "NEMO_LISTEN_WRITE_TIMEOUT="+write.String())
		p.waitReady(t)
		ctx := context.Background()
		table := aztest.TableName("hung")
		svc := azNemoService(t, p)
		if _, err := svc.CreateTable(ctx, table, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			fp.set(faultPass)
			_, _ = svc.DeleteTable(context.Background(), table, nil)
		})
		fp.set(faultHang)
		began := time.Now()
		_, err := svc.NewClient(table).GetEntity(ctx, "p", "never-read", nil)
		took := time.Since(began)
		var re *azcore.ResponseError
		if !errors.As(err, &re) || (re.ErrorCode != "OperationTimedOut" && re.ErrorCode != "ServerBusy") {
			t.Fatalf("uncached read with the backend hung: %v, want 500 OperationTimedOut or 503 ServerBusy", err)
		}
		if took > write {
			t.Errorf("answered after %v, past the write timeout %v", took, write)
		}
		t.Logf("%d %s after %v", re.StatusCode, re.ErrorCode, took.Round(10*time.Millisecond))
	})
	t.Run("datastore", func(t *testing.T) {
		fp := startFaultProxy(t, "http://"+dstest.Emulator(t))
		project := dstest.Project(t)
		p := startNemo(t, t.TempDir(), "NEMO_BACKEND_TYPE=datastore", "NEMO_BACKEND_DATASTORE_PROJECT="+project,
			"NEMO_BACKEND_DATASTORE_EMULATOR_HOST="+strings.TrimPrefix(fp.url, "http://"),
			"NEMO_COHERENCE_MODE=shared", "NEMO_LISTEN_WRITE_TIMEOUT="+write.String())
		p.waitReady(t)
		_, dsAddr := frontendAddrs(t, p)
		c := dsClient(t, project, dsAddr)
		fp.set(faultHang)
		t.Cleanup(func() { fp.set(faultPass) })
		began := time.Now()
		var v struct{ N int }
		err := c.Get(context.Background(), datastore.NameKey("Hung", "never-read", nil), &v)
		took := time.Since(began)
		if code := status.Code(err); code != codes.DeadlineExceeded && code != codes.Unavailable {
			t.Fatalf("uncached lookup with the backend hung: %v, want DEADLINE_EXCEEDED or UNAVAILABLE", err)
		}
		if took > write {
			t.Errorf("answered after %v, past the write timeout %v", took, write)
		}
		t.Logf("%v after %v", status.Code(err), took.Round(10*time.Millisecond))
	})
}

// countEntities lists every entity of a table through tc and counts them.
func countEntities(t *testing.T, tc *aztables.Client) int {
	t.Helper()
	n := 0
	pager := tc.NewListEntitiesPager(nil)
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Entities)
	}
	return n
}

// azuriteTable creates a fresh table in Azurite, deleted at cleanup, and
// returns Azurite's connection string, a client on Azurite and the name.
func azuriteTable(t *testing.T, prefix string) (string, *aztables.ServiceClient, string) {
	t.Helper()
	conn := aztest.ConnectionString(aztest.Azurite(t), aztest.Key)
	name := aztest.TableName(prefix)
	direct, err := aztables.NewServiceClientFromConnectionString(conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.CreateTable(context.Background(), name, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = direct.DeleteTable(context.Background(), name, nil) })
	return conn, direct, name
}
