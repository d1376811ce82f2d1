package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/dstest"
)

// The readiness rule's numbers (proxy/node/health.go), as the tests expect
// them: down once nothing has succeeded for 10 s (and the last 3 calls or
// probes failed), up again after 3 successes; probes every 2 s, each
// bounded at 10 s.
const (
	downAfter    = 10 * time.Second
	probeIdle    = 2 * time.Second
	probeTimeout = 10 * time.Second
)

// dsBehindFaultProxy starts nemo (with env) in front of the Datastore
// emulator behind a fault proxy and returns the proxy, nemo and a client
// of its Datastore frontend.
func dsBehindFaultProxy(t *testing.T, env ...string) (*faultProxy, *proc, *datastore.Client) {
	t.Helper()
	fp := startFaultProxy(t, "http://"+dstest.Emulator(t))
	project := dstest.Project(t)
	p := startNemo(t, t.TempDir(), append(env, "NEMO_BACKEND_TYPE=datastore", "NEMO_BACKEND_DATASTORE_PROJECT="+project,
		"NEMO_BACKEND_DATASTORE_EMULATOR_HOST="+strings.TrimPrefix(fp.url, "http://"))...)
	t.Cleanup(func() { fp.set(faultPass) })
	p.waitReady(t)
	_, addr := frontendAddrs(t, p)
	return fp, p, dsClient(t, project, addr)
}

// waitProbe polls path on p's HTTP listener until it answers code, for up
// to limit, and returns how long that took and the body.
func (p *proc) waitProbe(t *testing.T, path string, code int, limit time.Duration) (time.Duration, string) {
	t.Helper()
	began := time.Now()
	for {
		got, body := p.get(path)
		if got == code {
			return time.Since(began), body
		}
		if time.Since(began) > limit {
			t.Fatalf("%s still %d %q after %v, want %d", path, got, body, limit, code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBinaryReadinessFollowsOutage: in coherence shared nemo serves
// nothing without the backend, so /readyz follows a sustained outage: with
// the backend refusing connections (Azurite) or hanging them (the Datastore
// emulator) behind a TCP proxy and no client traffic, the probes find it
// down and /readyz answers 503 "backend unavailable" once nothing has
// succeeded for 10 s and the last 3 probes failed (a probe started 2 s
// after the last success, and every 2 s after it, fails by its 10 s bound
// at the latest: 503 by about 16 s), nemo_backend_up is 0 and a warning
// says so; with the backend back it is 200 after three successes.
func TestBinaryReadinessFollowsOutage(t *testing.T) {
	const most = 3*probeIdle + probeTimeout + 5*time.Second // 5 s for a loaded machine
	for _, c := range []struct {
		backend string
		mode    faultMode
	}{{"aztable", faultRefuse}, {"datastore", faultHang}} {
		t.Run(c.backend+"/"+c.mode.String(), func(t *testing.T) {
			t.Parallel()
			var fp *faultProxy
			var p *proc
			if c.backend == "aztable" {
				fp, p, _, _ = azBehindFaultProxy(t, "ready", "NEMO_COHERENCE_MODE=shared")
			} else {
				fp, p, _ = dsBehindFaultProxy(t, "NEMO_COHERENCE_MODE=shared")
			}
			if v := p.metric(t, "nemo_backend_up"); v != 1 {
				t.Fatalf("nemo_backend_up %v with the backend answering", v)
			}
			fp.set(c.mode)
			took, body := p.waitProbe(t, "/readyz", http.StatusServiceUnavailable, most+10*time.Second)
			// The last success may precede the outage by up to a
			// probe interval (probes run while nothing else succeeds).
			if took < downAfter-probeIdle || took > most || body != "backend unavailable\n" {
				t.Errorf("/readyz answered 503 %q %v into the outage, want \"backend unavailable\" between %v and %v", body, took, downAfter-probeIdle, most)
			}
			var warn struct {
				For      string `json:"for"`
				Failures int    `json:"failures"`
			}
			p.logLine(t, "backend unavailable: no call to it has succeeded for a while", &warn)
			if d, err := time.ParseDuration(warn.For); err != nil || d < downAfter || warn.Failures < 3 {
				t.Errorf("down after %q without a success and %d failures, want at least %v and 3", warn.For, warn.Failures, downAfter)
			}
			if v := p.metric(t, "nemo_backend_up"); v != 0 {
				t.Errorf("nemo_backend_up %v once not ready", v)
			}
			if code, _ := p.get("/healthz"); code != http.StatusOK {
				t.Errorf("/healthz with the backend down: %d, want 200 (the process serves)", code)
			}
			fp.set(faultPass)
			back, _ := p.waitProbe(t, "/readyz", http.StatusOK, 30*time.Second)
			if v := p.metric(t, "nemo_backend_up"); v != 1 {
				t.Errorf("nemo_backend_up %v once ready again", v)
			}
			<-p.logged("backend available again")
			t.Logf("503 %v into the outage (%s without a success, %d failures), 200 again %v after it ended",
				took.Round(100*time.Millisecond), warn.For, warn.Failures, back.Round(100*time.Millisecond))
			drain(t, p)
		})
	}
}

// logLine decodes the first log line whose msg is msg into v.
// The line may still be crossing the pipe from nemo when the test asks
// (nemo logs it before it answers what the test waited on): it waits for
// the line for up to 10 s.
func (p *proc) logLine(t *testing.T, msg string, v any) {
	t.Helper()
	select {
	case <-p.logged(msg):
	case <-time.After(10 * time.Second):
	}
	for _, l := range strings.Split(p.logs(), "\n") {
		if strings.Contains(l, `"msg":"`+msg+`"`) {
			if err := json.Unmarshal([]byte(l), v); err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return
		}
	}
	t.Fatalf("no log line %q", msg)
}

// TestBinaryReadinessOutlastsABlip: an outage shorter than 10 s, with calls
// failing all through it (backend.fault: an outage from 4 s after start,
// 4 s long, every call failing at once), never turns /readyz 503 nor
// nemo_backend_up 0 in coherence shared, though clients see the failures.
func TestBinaryReadinessOutlastsABlip(t *testing.T) {
	conn, _, table := azuriteTable(t, "blip")
	began := time.Now() // the outage's clock starts later, when nemo opens the backend
	p := startNemo(t, t.TempDir(), "NEMO_COHERENCE_MODE=shared", "NEMO_BACKEND_TYPE=aztable",
		"NEMO_BACKEND_AZTABLE_CONNECTION_STRING="+conn,
		"NEMO_BACKEND_FAULT_ENABLED=true", "NEMO_BACKEND_FAULT_OUTAGE_SCHEDULE=4s+4s")
	p.waitReady(t)
	answers, first := p.readinessWatcher()
	<-first
	tc := azNemoService(t, p).NewClient(table)
	failed := 0
	for i := 0; time.Since(began) < 4*time.Second+4*time.Second+downAfter+time.Second; i++ {
		_, err := tc.GetEntity(context.Background(), "p", fmt.Sprint("absent", i), nil)
		switch st, _ := aztest.Status(err); st {
		case http.StatusNotFound:
		case http.StatusServiceUnavailable:
			failed++
		default:
			t.Fatalf("uncached read: %v, want 404, or 503 in the outage", err)
		}
		if v := p.metric(t, "nemo_backend_up"); v != 1 {
			t.Fatalf("nemo_backend_up %v %v after start, in or after an outage of 4 s", v, time.Since(began))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if failed == 0 {
		t.Fatal("no read failed: the outage never began")
	}
	drain(t, p)
	seen := <-answers
	if len(seen) == 0 || seen[0] != "200 ok" || len(seen) > 1 && seen[1] != "503 draining" {
		t.Errorf("/readyz answers %q, want 200 ok all through the blip, then (once draining) 503 draining", seen)
	}
	t.Logf("%d reads failed in the outage; /readyz answered %q", failed, seen)
}

// TestBinaryExclusiveReadyWithBackendDown: in coherence exclusive nemo
// acknowledges writes from its WAL, so with the backend refusing
// connections /readyz stays 200 while nemo_backend_up turns 0, and writes
// are acknowledged.
func TestBinaryExclusiveReadyWithBackendDown(t *testing.T) {
	fp, p, svc, table := azBehindFaultProxy(t, "excl", "NEMO_COHERENCE_MODE=exclusive")
	tc := svc.NewClient(table)
	upsert := func(i int) error {
		e := fmt.Sprintf(`{"PartitionKey":"p","RowKey":"r%d","N":%d}`, i, i)
		_, err := tc.UpsertEntity(context.Background(), []byte(e), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
		return err
	}
	if err := upsert(0); err != nil {
		t.Fatal(err)
	}
	fp.set(faultRefuse)
	began := time.Now()
	acked := 0
	for p.metric(t, "nemo_backend_up") != 0 {
		if time.Since(began) > 30*time.Second {
			t.Fatal("nemo_backend_up still 1 30 s into the outage")
		}
		if code, body := p.get("/readyz"); code != http.StatusOK {
			t.Fatalf("/readyz %v into the outage: %d %q, want 200 (the WAL takes writes)", time.Since(began), code, body)
		}
		if err := upsert(acked + 1); err == nil {
			acked++
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, body := p.get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz with the backend down: %d %q, want 200", code, body)
	}
	if acked == 0 {
		t.Error("no write acknowledged with the backend down")
	}
	t.Logf("nemo_backend_up 0 after %v; %d writes acknowledged meanwhile; /readyz 200", time.Since(began).Round(100*time.Millisecond), acked)
	fp.set(faultPass)
	drain(t, p)
}

// TestBinaryBadCredentialExits: in front of Azurite with a wrong account
// key nemo logs an error naming the backend, the endpoint and the setting
// the credential came from, and exits 1 before it is ready, in either
// coherence mode.
func TestBinaryBadCredentialExits(t *testing.T) {
	wrong := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("w"), 64))
	for _, mode := range []string{"shared", "exclusive"} {
		t.Run(mode, func(t *testing.T) {
			p := startBare(t, t.TempDir(), []string{"--listen-azure-table", "127.0.0.1:0", "--listen-datastore", "off"},
				"NEMO_BACKEND_TYPE=aztable", "NEMO_COHERENCE_MODE="+mode,
				"NEMO_BACKEND_AZTABLE_CONNECTION_STRING="+aztest.ConnectionString(aztest.Azurite(t), wrong))
			if code := p.waitExit(t); code != exitFailure {
				t.Fatalf("exit %d with a wrong account key, want %d", code, exitFailure)
			}
			var line string
			for _, l := range strings.Split(p.logs(), "\n") {
				if strings.Contains(l, `"msg":"backend refused nemo's credential: fix the credential and start again"`) {
					line = l
				}
			}
			for _, want := range []string{`"level":"ERROR"`, `"backend":"aztable"`, `"endpoint":"` + aztest.Azurite(t) + `"`, "NEMO_BACKEND_AZTABLE_CONNECTION_STRING"} {
				if !strings.Contains(line, want) {
					t.Errorf("the error line lacks %s: %q", want, line)
				}
			}
			if strings.Contains(p.logs(), "nemo ready") || strings.Contains(p.logs(), wrong) {
				t.Error("nemo said it was ready, or logged the key")
			}
		})
	}
}
