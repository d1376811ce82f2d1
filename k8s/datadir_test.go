package k8s

import (
	"bytes"
	"fmt"
	"maps"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/nemocache/nemo/config"
	"github.com/nemocache/nemo/internal/dockerfile"
	"github.com/nemocache/nemo/internal/proctest"
)

// nemoImage is the repository of nemo's image in the examples.
const nemoImage = "ghcr.io/nemocache/nemo:"

// TestManifestDataOnWritableVolume composes, for each nemo container of
// each example workload, what the pod starts nemo with (the Dockerfile's
// ENV, ENTRYPOINT, CMD and WORKDIR, the ConfigMap's nemo.yaml, the
// container's env, command and args), asks the real binary for its
// effective configuration (nemo config print) and checks that everything
// nemo writes there lies on a writable volume of that container: the data
// directory (the embedded store, the node id of exclusive mode), the WAL
// and conflicts.jsonl. The examples run a read-only root, so anything else
// is refused at the first write (issue 38: the image's data directory in
// its environment beat the ConfigMap's and put the node id on the root).
// TestWorkloads requires an example of each coherence mode, so both modes
// are covered.
func TestManifestDataOnWritableVolume(t *testing.T) {
	m := load(t)
	img := image(t)
	bin := proctest.Build(t, "../cmd/nemo")
	n := 0
	for _, w := range workloads(m) {
		spec := w.pod.Spec
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			if !strings.HasPrefix(c.Image, nemoImage) {
				continue
			}
			n++
			t.Run(w.name+"/"+c.Name, func(t *testing.T) {
				cfg := printedConfig(t, bin, img, containerEnv(t, m, spec, c), c)
				t.Logf("coherence mode %s, data_dir %s, WAL %s", cfg.CoherenceMode(), cfg.Backend.Embedded.DataDir, cfg.WALDir())
				for _, p := range dataProblems(cfg, img, w, c) {
					t.Error(p)
				}
			})
		}
	}
	if n < 2 {
		t.Errorf("%d nemo containers in the examples, want one per workload", n)
	}
}

// printedConfig runs bin's `config print` with the flags c passes to
// serve, in exactly env, and decodes what it prints.
func printedConfig(t *testing.T, bin string, img dockerfile.Stage, env map[string]string, c corev1.Container) config.Config {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"config", "print"}, serveFlags(t, img, c)...)...)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nemo config print: %v\n%s", err, stderr.String())
	}
	var cfg config.Config
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("decode nemo config print: %v\n%s", err, out)
	}
	return cfg
}

// serveFlags is what follows "serve" in the command line Kubernetes
// builds for c: its command, else the image's ENTRYPOINT; its args, else
// (without a command of its own) the image's CMD.
func serveFlags(t *testing.T, img dockerfile.Stage, c corev1.Container) []string {
	t.Helper()
	entry, err := img.Entrypoint()
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := img.Cmd()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Command) > 0 {
		entry, cmd = c.Command, nil
	}
	if len(c.Args) > 0 {
		cmd = c.Args
	}
	argv := append(slices.Clone(entry), cmd...)
	if len(argv) == 0 || argv[0] != "/nemo" {
		t.Fatalf("container %s runs %q, not /nemo", c.Name, argv)
	}
	flags := argv[1:]
	if len(flags) > 0 && flags[0] == "serve" {
		flags = flags[1:]
	}
	for _, f := range flags {
		if !strings.HasPrefix(f, "-") {
			t.Fatalf("container %s runs %q: want /nemo serve [flags]", c.Name, argv)
		}
	}
	return flags
}

// dataProblems checks that every directory cfg makes nemo write lies under
// a mount of c that is writable by the user c runs as, on a read-only root.
func dataProblems(cfg config.Config, img dockerfile.Stage, w workload, c corev1.Container) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	spec := w.pod.Spec
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		bad("container %s: root file system not read-only: data off the volumes would land on the container's layer unnoticed", c.Name)
	}
	group := runGroup(img, spec, c)
	for _, d := range []struct{ what, dir string }{
		{"backend.embedded.data_dir (embedded store, node id)", cfg.Backend.Embedded.DataDir},
		{"the WAL (wal.dir)", cfg.WALDir()},
		{"conflicts.jsonl", path.Dir(cfg.ConflictsFile())},
	} {
		dir, err := inContainer(img, c, d.dir)
		if err != nil {
			bad("%v", err)
			continue
		}
		vm := mountOf(c, dir)
		if vm == nil {
			bad("%s: %s is on no volume of container %s (its root is read-only)", d.what, dir, c.Name)
			continue
		}
		if vm.ReadOnly {
			bad("%s: %s is on the read-only mount %s", d.what, dir, vm.MountPath)
		}
		v := volume(spec, vm.Name)
		claim := slices.ContainsFunc(w.claims, func(pc corev1.PersistentVolumeClaim) bool { return pc.Name == vm.Name })
		switch {
		case claim && v == nil:
		case v != nil && (v.EmptyDir != nil || v.Ephemeral != nil):
		case v != nil && v.PersistentVolumeClaim != nil && !v.PersistentVolumeClaim.ReadOnly:
		default:
			bad("%s: %s is on volume %s, which is not an emptyDir or a writable claim", d.what, dir, vm.Name)
			continue
		}
		if fs := spec.SecurityContext; fs == nil || fs.FSGroup == nil || strconv.FormatInt(*fs.FSGroup, 10) != group {
			bad("%s: volume %s is not given to group %s that container %s runs as (set the pod's fsGroup)", d.what, vm.Name, group, c.Name)
		}
	}
	return problems
}

// inContainer is where path p of nemo's configuration is in container c: p
// itself if absolute, else under c's working directory (its own, the
// image's WORKDIR, or /).
func inContainer(img dockerfile.Stage, c corev1.Container, p string) (string, error) {
	if path.IsAbs(p) {
		return path.Clean(p), nil
	}
	wd, err := img.Workdir()
	if err != nil {
		return "", err
	}
	if c.WorkingDir != "" {
		wd = c.WorkingDir
	}
	return path.Join("/", wd, p), nil
}

// runGroup is the group c runs as: its own runAsGroup, the pod's, or the
// image's USER.
func runGroup(img dockerfile.Stage, spec corev1.PodSpec, c corev1.Container) string {
	if sc := c.SecurityContext; sc != nil && sc.RunAsGroup != nil {
		return strconv.FormatInt(*sc.RunAsGroup, 10)
	}
	if sc := spec.SecurityContext; sc != nil && sc.RunAsGroup != nil {
		return strconv.FormatInt(*sc.RunAsGroup, 10)
	}
	_, g := img.User()
	return g
}

// TestManifestDataChecks: dataProblems finds nothing in the examples as
// shipped and catches each mistake it is for.
func TestManifestDataChecks(t *testing.T) {
	m := load(t)
	img := image(t)
	for _, w := range workloads(m) {
		nemo := w.pod.Spec.InitContainers[0]
		cfg := nemoConfig(t, m, w.pod.Spec, nemo)
		if p := dataProblems(cfg, img, w, nemo); len(p) > 0 {
			t.Errorf("%s as shipped: %v", w.name, p)
		}
		for name, edit := range map[string]func(*config.Config, *workload, *corev1.Container){
			"data_dir off the volumes (the old image ENV)": func(cfg *config.Config, _ *workload, _ *corev1.Container) {
				cfg.Backend.Embedded.DataDir = "/data"
			},
			"relative data_dir in a root-owned working directory": func(cfg *config.Config, _ *workload, c *corev1.Container) {
				cfg.Backend.Embedded.DataDir, c.WorkingDir = "nemo-data", "/"
			},
			"WAL elsewhere": func(cfg *config.Config, _ *workload, _ *corev1.Container) { cfg.WAL.Dir = "/tmp/wal" },
			"read-only mounts": func(_ *config.Config, _ *workload, c *corev1.Container) {
				c.VolumeMounts = slices.Clone(c.VolumeMounts)
				for i := range c.VolumeMounts {
					c.VolumeMounts[i].ReadOnly = true
				}
			},
			"writable root": func(_ *config.Config, _ *workload, c *corev1.Container) {
				c.SecurityContext = c.SecurityContext.DeepCopy()
				c.SecurityContext.ReadOnlyRootFilesystem = nil
			},
			"no fsGroup": func(_ *config.Config, w *workload, _ *corev1.Container) {
				w.pod.Spec.SecurityContext = w.pod.Spec.SecurityContext.DeepCopy()
				w.pod.Spec.SecurityContext.FSGroup = nil
			},
			"another group": func(_ *config.Config, _ *workload, c *corev1.Container) {
				c.SecurityContext = c.SecurityContext.DeepCopy()
				g := int64(1000)
				c.SecurityContext.RunAsGroup = &g
			},
			"the config volume": func(cfg *config.Config, _ *workload, _ *corev1.Container) {
				cfg.Backend.Embedded.DataDir = "/etc/nemo/data"
			},
		} {
			cfg, w, c := cfg, w, nemo
			w.pod = *w.pod.DeepCopy()
			edit(&cfg, &w, &c)
			if len(dataProblems(cfg, img, w, c)) == 0 {
				t.Errorf("%s: %s: no problem found", w.name, name)
			}
		}
	}
}
