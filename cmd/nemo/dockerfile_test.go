package main

import (
	"path"
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
