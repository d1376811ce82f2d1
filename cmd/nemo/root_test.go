package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

func runArgs(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestVersion(t *testing.T) {
	code, out, _ := runArgs("version")
	if code != 0 || !strings.HasPrefix(out, "nemo dev (go") {
		t.Errorf("version = %d %q", code, out)
	}
	code, flag, _ := runArgs("--version")
	if code != 0 || flag != out {
		t.Errorf("--version = %d %q, want %q", code, flag, out)
	}
}

// TestVCSSource: the commit a build says it is: the go tool's record
// (revision, time, local changes), or the commit stamped with -ldflags,
// which wins (the image's build records none).
func TestVCSSource(t *testing.T) {
	rec := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-12-07T00:28:16Z"}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		stamped  string
		settings []debug.BuildSetting
		want     string
	}{
		{"", rec, "commit 0123456789ab, 2026-12-07T00:28:16Z, modified"},
		{"", rec[:3], "commit 0123456789ab, 2026-12-07T00:28:16Z"},
		{"fedcba9876543210", rec, "commit fedcba987654"},
		{"abc", nil, "commit abc"},
		{"", nil, ""},
	} {
		if got := vcsSource(tc.stamped, tc.settings); got != tc.want {
			t.Errorf("vcsSource(%q, %v) = %q, want %q", tc.stamped, tc.settings, got, tc.want)
		}
	}
}

// TestSubcommandHelp: every command has long help and an example, and its
// help lists only the flags it reads (no server flags on version, health
// or shutdown).
func TestSubcommandHelp(t *testing.T) {
	var ran bool
	root := newRoot(io.Discard, io.Discard, &ran)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Long == "" || c.Example == "" {
			t.Errorf("%q: long help %t, example %t", c.CommandPath(), c.Long != "", c.Example != "")
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for _, tc := range []struct {
		args      []string
		want, not []string
	}{
		{[]string{"serve", "--help"}, []string{"--cache-max-bytes", "--listen-http", "--listen-admin", "--config", "Examples:"}, nil},
		{[]string{"version", "--help"}, []string{"nemo --version"}, []string{"--cache-max-bytes", "--listen-admin", "--config"}},
		{[]string{"health", "--help"}, []string{"--listen-http", "--timeout", "--config"}, []string{"--cache-max-bytes", "--listen-admin"}},
		{[]string{"shutdown", "--help"}, []string{"--listen-admin", "--wait", "--timeout"}, []string{"--cache-max-bytes", "--listen-http"}},
		{[]string{"config", "print", "--help"}, []string{"--cache-max-bytes", "--listen-http"}, nil},
	} {
		code, out, errOut := runArgs(tc.args...)
		if code != 0 {
			t.Errorf("%v: exit %d %s", tc.args, code, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v lacks %q:\n%s", tc.args, w, out)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(out, n) {
				t.Errorf("%v lists %q:\n%s", tc.args, n, out)
			}
		}
	}
}

// TestSidecarLinksNoBenchmark: the sidecar binary links neither the
// benchmark (cmd/nemo-bench and its internal/bench) nor any plotting, PDF,
// LaTeX or font package.
func TestSidecarLinksNoBenchmark(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), out)
	}
	for _, p := range deps {
		for _, bad := range []string{"gonum.org/", "/go-fonts/", "/go-latex/", "/go-pdf/", "/sbinet/gg", "ajstarks/svgo", "golang/freetype", "golang.org/x/image", "nemo/cmd/nemo-bench"} {
			if strings.Contains(p, bad) {
				t.Errorf("cmd/nemo links %s", p)
			}
		}
	}
}

func TestConfigPrintPrecedenceAndRedaction(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "nemo.yaml")
	if err := os.WriteFile(file, []byte("cache:\n  max_bytes: 1GiB\n  policy: record\nlog:\n  level: warn\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NEMO_CONFIG", file)
	t.Setenv("NEMO_CACHE_MAX_BYTES", "512MiB")          // env beats the file
	t.Setenv("NEMO_FRONTEND_AZURE_KEY", "c2VjcmV0a2V5") // a secret
	code, out, errOut := runArgs("config", "print", "--cache-max-bytes", "64MiB")
	if code != 0 {
		t.Fatalf("config print = %d %s", code, errOut)
	}
	for _, want := range []string{
		"max_bytes: 64MiB", // the flag beats env and file
		"policy: record",   // from the file
		"level: warn",      // from the file
		"key: REDACTED",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("config print lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "c2VjcmV0a2V5") {
		t.Error("config print shows the secret")
	}
}

func TestInvalidConfigExits2(t *testing.T) {
	t.Setenv("NEMO_CACHE_POLICY", "lru")
	for _, args := range [][]string{
		{"--cache-max-bytes", "lots"},
		{"serve", "--cache-max-bytes", "lots"},
		{"config", "print", "--cache-max-bytes", "lots"},
	} {
		code, out, errOut := runArgs(args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want 2; stderr %s", args, code, errOut)
		}
		// Every problem at once, each with its key and variable.
		for _, want := range []string{
			`cache.max_bytes (NEMO_CACHE_MAX_BYTES): byte size "lots"`,
			`cache.policy (NEMO_CACHE_POLICY): must be one of "nemo", "record", "none"; got "lru"`,
		} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%v: stderr lacks %q:\n%s", args, want, errOut)
			}
		}
		if out != "" {
			t.Errorf("%v: printed %q on stdout", args, out)
		}
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"bogus"},
		{"--no-such-flag"},
		{"version", "extra"},
		{"shutdown", "--wait=maybe"},
		{"health", "sideways"},
		{"health", "livez", "readyz"},
		// Each subcommand takes its own flags only.
		{"version", "--cache-max-bytes", "1GiB"},
		{"health", "--listen-admin", "127.0.0.1:9090"},
		{"shutdown", "--listen-http", "127.0.0.1:9091"},
		{"shutdown", "--backend", "aztable"},
	} {
		code, _, errOut := runArgs(args...)
		if code != exitUsage || !strings.Contains(errOut, "Run 'nemo help' for usage.") {
			t.Errorf("%v: exit %d, stderr %q; want 2 with a usage hint", args, code, errOut)
		}
	}
}

func TestShutdownWithNoProxyFails(t *testing.T) {
	code, _, errOut := runArgs("shutdown", "--listen-admin", freeAddr(t), "--timeout", "2s")
	if code != exitFailure || !strings.Contains(errOut, "shutdown:") {
		t.Errorf("shutdown with nothing listening: %d %q, want 1", code, errOut)
	}
}

func TestHealthWithNoProxyFails(t *testing.T) {
	code, out, errOut := runArgs("health", "livez", "--listen-http", freeAddr(t))
	if code != exitFailure || out != "" || !strings.Contains(errOut, "health:") {
		t.Errorf("health with nothing listening: %d %q %q, want 1", code, out, errOut)
	}
}

func TestDialAddr(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:9090": "127.0.0.1:9090",
		":9090":          "127.0.0.1:9090",
		"0.0.0.0:9090":   "127.0.0.1:9090",
		"[::]:9090":      "127.0.0.1:9090",
		"[::1]:9090":     "[::1]:9090",
		"localhost:1":    "localhost:1",
	} {
		if got := dialAddr(in); got != want {
			t.Errorf("dialAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWatchSignals(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	sigs := make(chan os.Signal, 2)
	ctx, cancel := context.WithCancelCause(context.Background())
	exited := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchSignals(sigs, cancel, quiet, func() { close(exited) })
	}()
	sigs <- syscall.SIGTERM
	<-ctx.Done()
	if cause := context.Cause(ctx); cause == nil || cause.Error() != "signal terminated" {
		t.Errorf("cause = %v", cause)
	}
	select {
	case <-exited:
		t.Fatal("first signal exited")
	case <-time.After(20 * time.Millisecond):
	}
	sigs <- syscall.SIGINT
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("second signal did not exit")
	}
	<-done

	// Closing the channel before any signal just returns.
	sigs = make(chan os.Signal)
	ctx, cancel = context.WithCancelCause(context.Background())
	close(sigs)
	watchSignals(sigs, cancel, quiet, func() { t.Error("exit without a signal") })
	if ctx.Err() != nil {
		t.Error("cancelled without a signal")
	}
}
