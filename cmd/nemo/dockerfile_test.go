package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDockerfilePinsBaseImages: every FROM of the Dockerfile names a
// tagged image pinned by digest (image:tag@sha256:<64 hex>), or an
// earlier stage.
func TestDockerfilePinsBaseImages(t *testing.T) {
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	pinned := regexp.MustCompile(`^[a-z0-9./-]+:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}$`)
	stages := map[string]bool{}
	froms := 0
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.EqualFold(f[0], "FROM") {
			continue
		}
		froms++
		image := f[1]
		if !stages[image] && !pinned.MatchString(image) {
			t.Errorf("FROM %s: not pinned as image:tag@sha256:digest", image)
		}
		if len(f) == 4 && strings.EqualFold(f[2], "AS") {
			stages[f[3]] = true
		}
	}
	if froms < 2 {
		t.Errorf("%d FROM lines in the Dockerfile, want the build and the final stage", froms)
	}
}
