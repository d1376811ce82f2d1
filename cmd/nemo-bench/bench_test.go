package main

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestBenchQuickPoint runs "nemo-bench --quick --experiments point" at a
// tiny scale and checks what it wrote: the point table with every policy
// and the plot, a PNG.
func TestBenchQuickPoint(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runArgs("--quick", "--experiments", "point", "--records", "300",
		"--value-size", "128", "--clients", "4", "--measure", "40ms", "--latency", "200us", "--out", out)
	if code != 0 {
		t.Fatalf("nemo-bench = %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	// Not a terminal: plain progress lines, one per run (3 points x 3
	// policies), then the files.
	if n := strings.Count(stdout, "remote/op"); n != 9 {
		t.Errorf("%d progress lines, want 9:\n%s", n, stdout)
	}
	md, err := os.ReadFile(filepath.Join(out, "point.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| none (paper) |", "| record (paper) |", "| nemo (paper) |", "remote/op", "p99"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("point.md lacks %q:\n%s", want, md)
		}
	}
	// Every table names the command line, the commit and the date.
	command := "Produced by `nemo-bench --quick --experiments point --records 300 --value-size 128 --clients 4 --measure 40ms --latency 200us --out " + out + "` on " + time.Now().UTC().Format("2006-01-02")
	for _, f := range []string{"point.md", "index.md"} {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), command) || !regexp.MustCompile("nemo-bench: commit [0-9a-f]{12}").Match(b) {
			t.Errorf("%s does not say what produced it (%s, a commit):\n%s", f, command, b)
		}
	}
	f, err := os.Open(filepath.Join(out, "point.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("point.png: %v", err)
	}
}

// TestBenchUsage: a bad experiment name is a usage error (exit 2), and
// --list names every experiment.
func TestBenchUsage(t *testing.T) {
	code, _, stderr := runArgs("--experiments", "nope", "--out", t.TempDir())
	if code != exitUsage || !strings.Contains(stderr, `experiment "nope"`) {
		t.Errorf("--experiments nope = %d %q", code, stderr)
	}
	code, stdout, _ := runArgs("--list")
	for _, want := range []string{"point", "skew", "negative", "range", "locking"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("--list = %d, lacks %q:\n%s", code, want, stdout)
		}
	}
}

func runArgs(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestBenchBadFlagAndVersion: an unknown flag is a usage error (exit 2);
// --version prints the stamped version.
func TestBenchBadFlagAndVersion(t *testing.T) {
	if code, _, stderr := runArgs("--no-such-flag"); code != exitUsage || !strings.Contains(stderr, "unknown flag") {
		t.Errorf("--no-such-flag = %d %q", code, stderr)
	}
	if code, stdout, _ := runArgs("--version"); code != 0 || stdout != "nemo-bench version dev\n" {
		t.Errorf("--version = %d %q", code, stdout)
	}
}
