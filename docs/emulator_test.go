package docs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nemocache/nemo/internal/proctest"
)

// TestEmulatorExample: the Go test helper docs/emulator.md shows is
// testdata/nemotest/nemo_test.go, verbatim, and its tests pass against a
// nemo built from this tree: started --in-memory by its TestMain, reset
// before each test (the second finds nothing of the first).
func TestEmulatorExample(t *testing.T) {
	doc, err := os.ReadFile("emulator.md")
	if err != nil {
		t.Fatal(err)
	}
	code, err := os.ReadFile("testdata/nemotest/nemo_test.go")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllSubmatch(doc, -1)
	if len(blocks) != 1 || string(blocks[0][1]) != string(code) {
		t.Fatalf("emulator.md's Go block (%d blocks) is not testdata/nemotest/nemo_test.go verbatim", len(blocks))
	}
	bin := proctest.Build(t, "../cmd/nemo")
	cmd := exec.Command("go", "test", "-count=1", "-v", "./testdata/nemotest")
	cmd.Env = proctest.Env("NEMO_BIN=" + bin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test ./testdata/nemotest: %v\n%s", err, out)
	}
	for _, name := range []string{"TestPlaceOrder", "TestStartsEmpty"} {
		if !strings.Contains(string(out), "--- PASS: "+name) {
			t.Errorf("%s did not pass:\n%s", name, out)
		}
	}
}

// scriptBlock is a bash block docs_test runs as a script against a nemo
// it starts (TestScriptBlocks), marked by the comment before it with what
// its output must contain.
var scriptBlock = regexp.MustCompile("(?s)<!-- docs_test: bash against nemo; prints (.*?) -->\n```bash\n(.*?)```")

// TestScriptBlocks runs each marked bash block of the documentation as a
// script (bash -eo pipefail) against a nemo --in-memory started for it,
// with NEMO set to its Azure Table endpoint (the block defaults to
// 127.0.0.1:10002) and the Azure CLI's state in a temporary directory; it
// must exit 0 and print what its marker says.
func TestScriptBlocks(t *testing.T) {
	files := append([]string{"../README.md"}, mustGlob(t, "*.md")...)
	var bin string
	found := 0
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range scriptBlock.FindAllStringSubmatch(string(doc), -1) {
			found++
			want, script := m[1], m[2]
			t.Run(fmt.Sprintf("%s#%d", f, i), func(t *testing.T) {
				if bin == "" {
					bin = proctest.Build(t, "../cmd/nemo")
				}
				dir := t.TempDir()
				p := proctest.Start(t, exec.Command(bin, "--in-memory"), proctest.FreeListeners(dir)...)
				addrs := p.WaitReady(t)
				cmd := exec.Command("bash", "-eo", "pipefail", "-c", script)
				cmd.Dir = dir
				cmd.Env = proctest.Env("NEMO=http://"+addrs["aztable"]+"/devstoreaccount1", "AZURE_CONFIG_DIR="+t.TempDir())
				out, err := cmd.CombinedOutput()
				if err != nil || !strings.Contains(string(out), want) {
					t.Errorf("%s block %d: %v; output (want %s):\n%s", f, i, err, want, out)
				}
				p.Stop(t)
			})
		}
	}
	if found == 0 {
		t.Fatal("no marked bash block in the documentation")
	}
}

func mustGlob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
