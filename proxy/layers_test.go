package proxy

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// floors is nemo's floor plan, lowest first. Each floor has rooms: a
// package belongs to the room that names it or its longest enclosing
// directory ("internal/" names every directory under internal). A package
// may import a package of its own room or of a lower floor, never one of
// another room of its floor or of a floor above.
var floors = [][]string{
	// Helpers with no product meaning: invariants, obs, enum (the
	// settings' enums, named by config and by the engine), loopback,
	// protosplit, ycsb, tmpfs, the test servers' helpers.
	{"internal/"},
	// The settings: one Config, read from flags, environment and YAML.
	{"config"},
	// The store interface and its backends; the write-ahead log.
	{"adapters", "wal"},
	// The record buffer; the stores' conformance suite, which adapters'
	// tests run.
	{"cache", "internal/contracttest"},
	// The engine, with the lease protocol of coherence exclusive
	// (txn/lease), its log's record format (txn/logrec, which the WAL
	// below stores without knowing it) and the commit log kept in the
	// backend (txn/blog).
	{"txn"},
	// The servers, their frontends and the process wiring (proxy/node).
	{"proxy"},
	// The programs (cmd/nemo-bench with its experiments, which drive both
	// frontends, under cmd/nemo-bench/internal), and the packages that
	// hold the tests of the docs and of the Kubernetes manifests.
	{"cmd/nemo", "cmd/nemo-bench", "docs", "k8s"},
}

// noBackend are the rooms that know no backend: of adapters they import
// the package adapters itself (the Store interface and its types) and
// nothing under it. A backend's codecs, its lease codec and any store it
// provides come from its adapter, handed in by proxy/node.
var noBackend = []string{"wal", "cache", "txn"}

// floorOf returns the floor and room of package dir (relative to the
// module root), or -1 if the plan does not place it.
func floorOf(dir string) (int, string) {
	floor, room := -1, ""
	for i, rooms := range floors {
		for _, r := range rooms {
			in := dir == r || strings.HasPrefix(dir, strings.TrimSuffix(r, "/")+"/")
			if in && len(r) > len(room) {
				floor, room = i, r
			}
		}
	}
	return floor, room
}

// TestFloors checks every package's imports (non-test files: a package's
// tests may reach up to drive it, as adapters' run internal/contracttest)
// against the floor plan, config's included: nothing imports upward or
// sideways.
func TestFloors(t *testing.T) {
	const mod = "github.com/nemocache/nemo/"
	imports := map[string]map[string]bool{} // package dir -> imported dirs of ours
	err := filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != ".." && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(strings.TrimPrefix(p, "../")))
		if imports[dir] == nil {
			imports[dir] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			if q, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(q, mod) {
				imports[dir][strings.TrimPrefix(q, mod)] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"config", "txn/lease", "proxy/node", "cache", "wal", "cmd/nemo-bench/internal/bench"} {
		if imports[want] == nil {
			t.Errorf("found no package %s: is the walk at the module root?", want)
		}
	}
	for dir, deps := range imports {
		f, room := floorOf(dir)
		if f < 0 {
			t.Errorf("package %s is not on the floor plan (proxy/layers_test.go floors): place it", dir)
			continue
		}
		for dep := range deps {
			g, depRoom := floorOf(dep)
			switch {
			case g < 0:
				t.Errorf("%s imports %s, which is not on the floor plan", dir, dep)
			case g > f:
				t.Errorf("%s (floor %d, %s) imports %s (floor %d, %s): an import runs up", dir, f, room, dep, g, depRoom)
			case g == f && depRoom != room:
				t.Errorf("%s (room %s) imports %s (room %s) on the same floor: rooms of a floor do not import each other", dir, room, dep, depRoom)
			case slices.Contains(noBackend, room) && strings.HasPrefix(dep, "adapters/"):
				t.Errorf("%s (room %s) imports %s: the engine knows no backend (proxy/layers_test.go noBackend); let the adapter provide what it needs", dir, room, dep)
			}
		}
	}
}

// TestFrontendsUseOnlyTheEngine enforces the layering: a frontend imports
// the engine (txn), the adapters' shared types, its own codec and
// subpackages, internal/obs (to name its operations for metrics and
// traces), internal/loopback (which classifies client addresses) and
// internal/deadline (a request's deadlines, for the commit that writes
// through), never the buffer (cache), the WAL or another dialect.
func TestFrontendsUseOnlyTheEngine(t *testing.T) {
	const mod = "github.com/nemocache/nemo/"
	allowed := map[string][]string{
		"aztable":   {"txn", "adapters", "adapters/aztable/tablecodec", "proxy/aztable/", "internal/obs", "internal/loopback", "internal/deadline"},
		"datastore": {"txn", "adapters", "adapters/datastore/dscodec", "proxy/datastore/", "internal/obs", "internal/loopback", "internal/deadline"},
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
