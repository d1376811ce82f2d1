package datastore

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
	"github.com/nemocache/nemo/internal/testenv"
)

// EnvNodeModules names a directory whose node_modules holds
// @google-cloud/datastore (.ci/test installs it).
const EnvNodeModules = "NEMO_TEST_NODE_DATASTORE"

// TestNodeSmoke runs testdata/node/smoke.js with the Node client against
// nemo over the embedded store and in front of the Firestore emulator, in
// both coherence modes.
func TestNodeSmoke(t *testing.T) {
	dir := os.Getenv(EnvNodeModules)
	if dir == "" {
		testenv.Missing(t, EnvNodeModules+" is not set", ".ci/test installs @google-cloud/datastore and sets it")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found: %v", err)
	}
	for _, b := range append([]backend{embeddedBackend(t.TempDir())}, firestoreBackends(t)...) {
		t.Run(b.name, func(t *testing.T) {
			project := dstest.Project(t)
			n := startNemo(t, b, project, cache.Options{})
			// Plaintext from loopback (tlsserve takes it) with
			// NEMO_TEST_TLS=1 too.
			n.Plaintext = "the Node client speaks plaintext to DATASTORE_EMULATOR_HOST"
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "node", "smoke.js"))
			cmd.Env = append(os.Environ(),
				"DATASTORE_EMULATOR_HOST="+n.addr,
				"DATASTORE_PROJECT_ID="+project,
				"NODE_PATH="+filepath.Join(dir, "node_modules"),
				"METADATA_SERVER_DETECTION=none") // no GCE metadata probe
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("node smoke failed: %v\n%s", err, out)
			}
			t.Logf("%s", out)
		})
	}
}
