package aztable

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/testenv"
)

// nodeModules finds the node_modules holding @azure/data-tables:
// NEMO_TEST_NODE_MODULES, else .ci/.work/node_modules of this repository
// (where .ci/test installs it).
func nodeModules(t *testing.T) string {
	dir := os.Getenv("NEMO_TEST_NODE_MODULES")
	if dir == "" {
		root, err := filepath.Abs("../..")
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, ".ci", ".work", "node_modules")
	}
	if _, err := os.Stat(filepath.Join(dir, "@azure", "data-tables", "package.json")); err != nil {
		testenv.Missing(t, fmt.Sprintf("@azure/data-tables is not installed in %s: %v", dir, err), ".ci/test installs it; or set NEMO_TEST_NODE_MODULES")
	}
	return dir
}

// TestJSSmoke runs testdata/js/smoke.cjs, written against the JavaScript
// SDK @azure/data-tables, with node against nemo.
func TestJSSmoke(t *testing.T) {
	modules := nodeModules(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: ", err)
	}
	for _, ep := range endpoints(t) {
		if ep.azurite {
			continue // the script runs against nemo
		}
		t.Run(ep.name, func(t *testing.T) {
			cmd := exec.CommandContext(ctxT(t), node, "testdata/js/smoke.cjs")
			cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "NEMO_URL="+ep.start(t), "NEMO_ACCOUNT="+aztest.Account, "NEMO_KEY="+aztest.Key)
			cmd.Env = append(cmd.Env, caEnv(t)...)
			out, err := cmd.CombinedOutput()
			t.Logf("%s", out)
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
