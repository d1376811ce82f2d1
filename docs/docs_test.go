package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nemocache/nemo/internal/proctest"
)

// notRunHere are the documented commands this test does not run, each
// with why and what checks it instead.
var notRunHere = map[string]string{
	"NEMO_TEST_DURABILITY_CYCLES=50 go test -count=1 -timeout 90m -v -run 'TestDurability' ./cmd/nemo/": "about an hour; CI runs the same campaigns short (cmd/nemo TestDurability*)",
	".ci/test":             "the test command itself: .ci/run ends by running it",
	".ci/test ./cache/...": "the test command on some packages: .ci/run runs all of them",
	"docker build --build-arg VERSION=$(git describe --tags --always --dirty) --build-arg COMMIT=$(git rev-parse HEAD) -t nemo .":                                                           "no Docker daemon here; cmd/nemo TestDockerfilePinsBaseImages, TestDockerfileDataDir and TestDockerfileStampsVersion (which builds with its ldflags) check the Dockerfile",
	"kubectl apply -f k8s/configmap.yaml -f k8s/secret.example.yaml -f k8s/deployment-shared.yaml":                                                                                          "no cluster here; k8s/manifests_test.go decodes and checks every manifest, k8s/datadir_test.go where nemo writes",
	"kubectl apply -f k8s/configmap.yaml -f k8s/secret.example.yaml -f k8s/statefulset-exclusive.yaml":                                                                                      "no cluster here; k8s/manifests_test.go decodes and checks every manifest, k8s/datadir_test.go where nemo writes",
	"kubectl apply -f k8s/configmap.yaml -f k8s/secret.example.yaml -f k8s/deployment-partitioned.yaml":                                                                                     "no cluster here; k8s/manifests_test.go decodes and checks every manifest",
	"kubectl create secret generic nemo-credentials --from-literal=azure-connection-string=\"$AZURE_STORAGE_CONNECTION_STRING\" --from-literal=frontend-key=\"$(openssl rand -base64 64)\"": "no cluster here; k8s/helm/test checks that the chart references only keys of k8s/secret.example.yaml",
	"helm install orders k8s/helm/nemo -f k8s/helm/nemo/examples/shared.yaml":                                                                                                               "no cluster here; k8s/helm/test renders the chart with these values, decodes every object strictly and compares it with k8s/deployment-shared.yaml",
	"helm install ledger k8s/helm/nemo -f k8s/helm/nemo/examples/exclusive.yaml":                                                                                                            "no cluster here; k8s/helm/test renders the chart with these values, decodes every object strictly and compares it with k8s/statefulset-exclusive.yaml",
	"helm install inventory k8s/helm/nemo -f k8s/helm/nemo/examples/partitioned.yaml":                                                                                                       "no cluster here; k8s/helm/test renders the chart with these values, decodes every object strictly and compares it with k8s/deployment-partitioned.yaml",
	"cd k8s/helm/test && go test ./...": "the chart's tests, a module of their own: .ci/test runs them",
	"go run ./cmd/nemo-bench":           "about 10 minutes; cmd/nemo-bench TestBenchQuickPoint runs the same program at a small scale",
	"go run ./cmd/nemo-bench --quick":   "a minute of both cores; cmd/nemo-bench TestBenchQuickPoint runs a quick experiment",
	"go run ./cmd/nemo-bench --target azurite --nemo ./nemo --experiments point,range,forward,servers":                                       "minutes in front of Azurite; cmd/nemo-bench/internal/bench's target tests run these experiments at a small scale",
	"go run ./cmd/nemo-bench --target emulator --nemo ./nemo --experiments point,range,forward,servers":                                      "minutes in front of the Datastore emulator; cmd/nemo-bench/internal/bench's target tests run these experiments at a small scale",
	"go run ./cmd/nemo-bench --target azurite --nemo ./nemo --experiments replicas --measure 4s --rtt 10ms":                                  "minutes in front of Azurite with three nemo processes per series; cmd/nemo-bench/internal/bench's TestReplicas runs the experiment at a small scale behind a 5 ms round trip",
	"go run ./cmd/nemo-bench --target azurite --nemo ./nemo --experiments replicas-bank,replicas-takeover --measure 4s --rtt 10ms":           "minutes in front of Azurite with three nemo processes per series and three owners killed; cmd/nemo-bench/internal/bench's TestReplicasBank (Azurite and the emulator) and TestReplicasTakeover run them at a small scale",
	"go run ./cmd/nemo-bench --target azurite --nemo ./nemo --experiments servers-point --workload longtail --measure 8s --slices 4":         "minutes in front of Azurite with 20,000 entities; cmd/nemo-bench/internal/bench's TestServers and TestForward run the experiment and the slices at a small scale",
	"go run ./cmd/nemo-bench --target azurite --nemo ./nemo --experiments forward --records 20000 --value-size 1024 --measure 8s --slices 4": "minutes in front of Azurite; cmd/nemo-bench/internal/bench's TestForward runs the experiment at a small scale",
}

var (
	fence   = regexp.MustCompile("(?s)```(sh|bash|shell|console)\n(.*?)```")
	inline  = regexp.MustCompile("`((?:go (?:test|run|build)|\\.ci/test)[^`]*)`")
	envWord = regexp.MustCompile(`^[A-Z][A-Z0-9_]*=`)
)

// documentedCommands returns every command of the documentation, with the
// file it is in.
func documentedCommands(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../README.md", "../k8s/README.md")
	out := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := scriptBlock.ReplaceAllString(string(data), "") // run as scripts: TestScriptBlocks
		for _, m := range fence.FindAllStringSubmatch(text, -1) {
			for _, c := range blockCommands(m[2]) {
				out[c] = f
			}
		}
		for _, m := range inline.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
			out[strings.Join(strings.Fields(m[1]), " ")] = f
		}
	}
	return out
}

// blockCommands splits a shell block into commands: continuation lines
// joined, comments and blank lines dropped.
func blockCommands(block string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(block, "\n") {
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			continue
		}
		cont := strings.HasSuffix(line, "\\")
		cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
		if !cont {
			if c := strings.Join(strings.Fields(cur.String()), " "); c != "" {
				out = append(out, c)
			}
			cur.Reset()
		}
	}
	return out
}

// TestDocumentedCommands runs or checks every documented command (see the
// package comment).
func TestDocumentedCommands(t *testing.T) {
	cmds := documentedCommands(t)
	if len(cmds) < 15 {
		t.Fatalf("found %d commands in the documentation", len(cmds))
	}
	for c := range notRunHere {
		if _, ok := cmds[c]; !ok {
			t.Errorf("allow-listed command %q is not in the documentation any more", c)
		}
	}
	bins := buildBinaries(t)
	var names []string
	for c := range cmds {
		names = append(names, c)
	}
	slices.Sort(names)
	for _, c := range names {
		if why, ok := notRunHere[c]; ok {
			t.Logf("not run: %s (%s)", c, why)
			continue
		}
		env, args := splitCommand(c)
		t.Run(c, func(t *testing.T) {
			switch {
			case len(args) >= 3 && args[0] == "go" && args[1] == "run" && args[2] == "./cmd/nemo":
				runNemo(t, bins.nemo, env, args[3:])
			case len(args) >= 3 && args[0] == "go" && args[1] == "run" && args[2] == "./cmd/nemo-bench":
				run(t, exec.Command(bins.bench, args[3:]...), env)
			case len(args) == 3 && args[0] == "go" && args[1] == "build":
				run(t, exec.Command("go", "build", "-o", filepath.Join(t.TempDir(), "out"), "../"+strings.TrimPrefix(args[2], "./")), nil)
			case len(args) > 2 && args[0] == "go" && args[1] == "test":
				checkGoTest(t, args[2:])
			default:
				t.Errorf("%s (%s): not runnable by this test and not allow-listed with a reason", c, cmds[c])
			}
		})
	}
}

// splitCommand splits leading VAR=value words off a command and the rest
// into words (single and double quotes group).
func splitCommand(c string) (env, args []string) {
	var words []string
	var cur strings.Builder
	quote := rune(0)
	in := false
	for _, r := range c {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	for len(words) > 0 && envWord.MatchString(words[0]) {
		env, words = append(env, words[0]), words[1:]
	}
	return env, words
}

type binaries struct{ nemo, bench string }

func buildBinaries(t *testing.T) binaries {
	t.Helper()
	return binaries{proctest.Build(t, "../cmd/nemo"), proctest.Build(t, "../cmd/nemo-bench")}
}

func run(t *testing.T, cmd *exec.Cmd, env []string) string {
	t.Helper()
	cmd.Env = proctest.Env(env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	return string(out)
}

// runNemo runs a documented nemo command line. A serving one (no
// subcommand, or serve) runs in a fresh directory, holding a copy of
// config/nemo.example.yaml as nemo.yaml, on free ports, until it is ready;
// then SIGTERM must make it exit 0. health and shutdown run against a nemo
// started for them; anything else runs to completion. Each must exit 0.
func runNemo(t *testing.T, bin string, env, args []string) {
	sub := "" // serve: nemo with no subcommand serves
	switch {
	case len(args) == 0:
	case !strings.HasPrefix(args[0], "-"):
		sub = args[0]
	case args[0] == "--version" || args[0] == "--help":
		sub = args[0]
	}
	dir := t.TempDir()
	example, err := os.ReadFile("../config/nemo.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nemo.yaml"), example, 0o644); err != nil {
		t.Fatal(err)
	}
	switch sub {
	case "", "serve":
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		p := proctest.Start(t, cmd, append(env, proctest.FreeListeners(dir)...)...)
		p.WaitReady(t)
		p.Stop(t)
	case "health", "shutdown":
		server := proctest.Start(t, exec.Command(bin, "serve"), proctest.FreeListeners(dir)...)
		addrs := server.WaitReady(t)
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		out := run(t, cmd, append(env, "NEMO_LISTEN_HTTP="+addrs["http"], "NEMO_LISTEN_ADMIN="+addrs["admin"]))
		if sub == "shutdown" {
			if !strings.Contains(out, "nemo has stopped") {
				t.Errorf("nemo shutdown printed %q", out)
			}
			server.WaitExit(t, 0)
		}
		server.Stop(t)
	default:
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		run(t, cmd, env)
	}
}

// checkGoTest checks a documented go test command without running what it
// measures: `go test -list` must find the tests (-run), benchmarks (-bench)
// or fuzz target (-fuzz) it names in its packages. The tests are the
// suite's own, which .ci/test runs; the benchmarks' runs are the
// measurements docs/benchmarks.md reports; a fuzz target's corpus runs as
// a test.
func checkGoTest(t *testing.T, args []string) {
	var pkgs []string
	pattern, kind := "", "Test"
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-bench":
			pattern, kind = args[i+1], "Benchmark"
			i++
		case a == "-run" && args[i+1] != "XXX":
			if kind != "Benchmark" {
				pattern = args[i+1]
			}
			i++
		case a == "-fuzz":
			pattern, kind = args[i+1], "Fuzz"
			i++
		case a == "-run" || a == "-benchtime" || a == "-count" || a == "-fuzztime":
			i++
		case strings.HasPrefix(a, "./"):
			pkgs = append(pkgs, "../"+strings.TrimPrefix(a, "./"))
		}
	}
	if len(pkgs) == 0 || pattern == "" {
		t.Fatalf("cannot tell what %v runs", args)
	}
	// -list matches top-level names only: drop subtest parts.
	var alts []string
	for _, alt := range strings.Split(pattern, "|") {
		alt, _, _ = strings.Cut(alt, "/")
		alts = append(alts, alt)
	}
	cmd := exec.Command("go", append([]string{"test", "-list", strings.Join(alts, "|")}, pkgs...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	found := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, kind) {
			found++
		}
	}
	if found == 0 {
		t.Errorf("go test %s: no %s matches %q in %v\n%s", strings.Join(args, " "), kind, pattern, pkgs, out)
	}
}

// TestDocumentationLinks: every relative link of README.md, docs/*.md and
// k8s/README.md names a file or directory that exists, and a #fragment
// into a markdown file names one of its headings.
func TestDocumentationLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)#\s]*)(#[^)\s]*)?\)`)
	files, _ := filepath.Glob("*.md")
	files = append(files, "../README.md", "../k8s/README.md")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target, frag := m[1], strings.TrimPrefix(m[2], "#")
			if strings.Contains(target, "://") {
				continue
			}
			path := f
			if target != "" {
				path = filepath.Join(filepath.Dir(f), target)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link to %s: %v", f, target, err)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(path, ".md") && !slices.Contains(anchors(t, path), frag) {
				t.Errorf("%s: link to %s#%s: no such heading", f, target, frag)
			}
		}
	}
}

// anchors are the heading anchors of a markdown file, as GitHub makes them.
func anchors(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		h, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		h = strings.ToLower(strings.TrimSpace(strings.TrimLeft(h, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// TestBenchmarkTablesSayTheirSource: every table of benchmarks.md (typed
// from a run, not generated) has above it a "Source:" line naming the
// command that produced it, in backticks, and the commit of the code it
// measured, or "not recorded".
func TestBenchmarkTablesSayTheirSource(t *testing.T) {
	data, err := os.ReadFile("benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	source := regexp.MustCompile("^Source: .*`[^`]+`.*; code: (not recorded|commit `[0-9a-f]{7,12}\\^?`)")
	lines := strings.Split(string(data), "\n")
	tables := 0
	for i, line := range lines {
		if !strings.HasPrefix(line, "|") || i > 0 && strings.HasPrefix(lines[i-1], "|") {
			continue
		}
		tables++
		if i < 2 || lines[i-1] != "" || !source.MatchString(lines[i-2]) {
			t.Errorf("benchmarks.md:%d: table %q has no Source line above it (the command and the commit that produced it, or \"not recorded\")", i+1, line)
		}
	}
	if tables < 20 {
		t.Fatalf("found %d tables in benchmarks.md", tables)
	}
}
