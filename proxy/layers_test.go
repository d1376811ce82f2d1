package proxy

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestFrontendsUseOnlyTheEngine enforces the layering: a frontend imports
// the engine (txn), the adapters' shared types, its own codec and
// subpackages, internal/obs (to name its operations for metrics and
// traces) and internal/loopback (which classifies client addresses), never
// the buffer (cache), the WAL or another dialect.
func TestFrontendsUseOnlyTheEngine(t *testing.T) {
	const mod = "github.com/nemocache/nemo/"
	allowed := map[string][]string{
		"aztable":   {"txn", "adapters", "adapters/aztable/tablecodec", "proxy/aztable/", "internal/obs", "internal/loopback"},
		"datastore": {"txn", "adapters", "adapters/datastore/dscodec", "proxy/datastore/", "internal/obs", "internal/loopback"},
	}
	for dialect, ok := range allowed {
		root := dialect
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				inner, ours := strings.CutPrefix(p, mod)
				if !ours {
					continue
				}
				fine := false
				for _, a := range ok {
					fine = fine || inner == a || strings.HasSuffix(a, "/") && strings.HasPrefix(inner, a)
				}
				if !fine {
					t.Errorf("%s imports %s: a frontend talks to the engine (txn), the adapters' types and its own codec only", path, p)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
