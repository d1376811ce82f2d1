package main

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/dockerfile"
)

func readDockerfile(t *testing.T) []dockerfile.Stage {
	t.Helper()
	stages, err := dockerfile.Read("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	return stages
}

// TestDockerfilePinsBaseImages: every FROM of the Dockerfile names a
// tagged image pinned by digest (image:tag@sha256:<64 hex>), or an
// earlier stage.
func TestDockerfilePinsBaseImages(t *testing.T) {
	pinned := regexp.MustCompile(`^[a-z0-9./-]+:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}$`)
	stages := readDockerfile(t)
	for i, st := range stages {
		earlier := slices.ContainsFunc(stages[:i], func(s dockerfile.Stage) bool { return s.Name == st.From })
		if !earlier && !pinned.MatchString(st.From) {
			t.Errorf("FROM %s: not pinned as image:tag@sha256:digest", st.From)
		}
	}
	if len(stages) < 2 {
		t.Errorf("%d FROM lines in the Dockerfile, want the build and the final stage", len(stages))
	}
}

// TestDockerfileDataDir: the image leaves the data directory to nemo's
// configuration and gives its default a place the nonroot user can write.
// It sets no NEMO_* variable (the environment beats the configuration file,
// so one baked into the image would override every ConfigMap: issue 38's
// data_dir, which sent the WAL to the container's layer or, with a
// read-only root, crash-looped exclusive mode), runs as a numeric nonroot
// user in a working directory that a COPY --chown made that user's, and
// nemo's default data directory and WAL are relative, so they land there.
func TestDockerfileDataDir(t *testing.T) {
	img := dockerfile.Final(readDockerfile(t))
	env, err := img.Env()
	if err != nil {
		t.Fatal(err)
	}
	for k := range env {
		if strings.HasPrefix(k, config.EnvPrefix) {
			t.Errorf("the image sets %s: it would override every configuration file's setting", k)
		}
	}
	uid, gid := img.User()
	if u, ok := dockerfile.ID(uid); !ok || u == 0 {
		t.Errorf("USER %q: want a numeric user other than root (Kubernetes' runAsNonRoot checks a number)", uid)
	}
	wd, err := img.Workdir()
	if err != nil || wd == "" || wd == "/" {
		t.Fatalf("WORKDIR %q (%v): want a directory of nemo's own", wd, err)
	}
	owned := slices.ContainsFunc(img.Copies(), func(in dockerfile.Instruction) bool {
		owner, _ := in.Flag("chown")
		return path.Clean(in.Dest()) == wd && owner == uid+":"+gid
	})
	if !owned {
		t.Errorf("no COPY --chown=%s:%s creates WORKDIR %s: a directory WORKDIR creates is root's, and nemo could not write its data there", uid, gid, wd)
	}
	d := config.Defaults()
	if dir := d.Backend.Embedded.DataDir; path.IsAbs(dir) || d.WAL.Dir != "" {
		t.Errorf("default data_dir %q, wal.dir %q: want relative defaults, which land in WORKDIR %s", dir, d.WAL.Dir, wd)
	}
	if ep, err := img.Entrypoint(); err != nil || !slices.Equal(ep, []string{"/nemo"}) {
		t.Errorf("ENTRYPOINT %q (%v): want [\"/nemo\"] (the examples' preStop runs /nemo shutdown)", ep, err)
	}
}

// git runs git with args in the test's directory and returns its output,
// trimmed.
func git(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// TestVersionNamesCommit: a go build inside the checkout (nemoBinary, as
// go build and go run build) says which commit it is, from the build
// information the go tool records, and says "modified" only when the tree
// has local changes (in CI, a clean clone, it has none).
//
// The go tool records no commit for a build in a git worktree (a .git
// file, not a directory): there the test builds HEAD in a clone.
func TestVersionNamesCommit(t *testing.T) {
	bin := nemoBinary(t)
	if git(t, "rev-parse", "--git-dir") != git(t, "rev-parse", "--git-common-dir") {
		dir := t.TempDir()
		git(t, "clone", "-q", "--shared", git(t, "rev-parse", "--show-toplevel"), dir)
		bin = filepath.Join(t.TempDir(), "nemo")
		build := exec.Command("go", "build", "-buildvcs=true", "-ldflags", "-X main.version="+testVersion, "-o", bin, "./cmd/nemo")
		build.Dir = dir
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build in a clone: %v\n%s", err, out)
		}
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	head := git(t, "rev-parse", "HEAD")
	if !strings.HasPrefix(got, "nemo "+testVersion+" (") || !strings.Contains(got, ", commit "+head[:12]+", ") {
		t.Errorf("--version = %q, want version %s and commit %s", got, testVersion, head[:12])
	}
	if !regexp.MustCompile(`, commit [0-9a-f]{12}, \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ[,)]`).MatchString(got) {
		t.Errorf("--version = %q: no commit time after the commit", got)
	}
	if git(t, "status", "--porcelain") == "" && strings.Contains(got, "modified") {
		t.Errorf("--version = %q says modified in a clean tree", got)
	}
}

// TestDockerfileStampsVersion: the image's --version names the tag and the
// commit given as build arguments. The build stage declares VERSION and
// COMMIT, and the binary built with its go build's ldflags, the arguments
// put in, prints both (an -X naming a variable main does not have would be
// ignored silently: only running it shows).
func TestDockerfileStampsVersion(t *testing.T) {
	stages := readDockerfile(t)
	i := slices.IndexFunc(stages, func(s dockerfile.Stage) bool {
		return slices.ContainsFunc(s.Runs(), func(in dockerfile.Instruction) bool { return strings.Contains(in.Rest, "go build") })
	})
	if i < 0 {
		t.Fatal("no stage runs go build")
	}
	args := stages[i].Args()
	for _, a := range []string{"VERSION", "COMMIT"} {
		if _, ok := args[a]; !ok {
			t.Errorf("the build stage declares no ARG %s", a)
		}
	}
	var ldflags string
	for _, in := range stages[i].Runs() {
		if m := regexp.MustCompile(`-ldflags "([^"]*)"`).FindStringSubmatch(in.Rest); m != nil {
			ldflags = m[1]
		}
	}
	if ldflags == "" {
		t.Fatal(`the go build passes no -ldflags "..."`)
	}
	const tag = "v9.8.7-3-gabcdef1"
	head := git(t, "rev-parse", "HEAD")
	flags := strings.NewReplacer("${VERSION}", tag, "${COMMIT}", head).Replace(ldflags)
	bin := filepath.Join(t.TempDir(), "nemo")
	build := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", flags, "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -ldflags %q: %v\n%s", flags, err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`^nemo ` + regexp.QuoteMeta(tag) + ` \(go[^ ]+ linux/[a-z0-9]+, commit ` + head[:12] + `\)\n$`)
	if !want.Match(out) {
		t.Errorf("--version of the image's build = %q, want %s", out, want)
	}
}
