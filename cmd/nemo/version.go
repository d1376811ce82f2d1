package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version and commit are stamped at build time where the go tool cannot
// read the repository (the image's build: .dockerignore leaves .git out):
//
//	go build -ldflags "-X main.version=v1.2.3 -X main.commit=$(git rev-parse HEAD)" ./cmd/nemo
//
// A go build or go run inside a git checkout needs neither: the commit, its
// time and whether the tree had local changes come from the build
// information the go tool records (vcs.revision, vcs.time, vcs.modified).
var (
	version = "dev"
	commit  = ""
)

func versionCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and build details",
		Long: `Print nemo's version (stamped at build time with
-ldflags "-X main.version=...", "dev" otherwise), the Go version, the
platform and the commit the binary was built from: the one the go tool
recorded for a build inside a git checkout (with its time, and "modified"
when the tree had local changes), or the one stamped with
-ldflags "-X main.commit=..." (the image's build). nemo --version prints
the same line.`,
		Example: `  nemo version
  nemo --version`,
		Args: cobra.NoArgs,
		Run: func(*cobra.Command, []string) {
			fmt.Fprintln(stdout, versionString())
		},
	}
}

// versionString is "nemo <version> (<go version> <os>/<arch>[, commit
// <rev>[, <time>][, modified]])".
func versionString() string {
	s := fmt.Sprintf("nemo %s (%s %s/%s", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	var settings []debug.BuildSetting
	if bi, ok := debug.ReadBuildInfo(); ok {
		settings = bi.Settings
	}
	if src := vcsSource(commit, settings); src != "" {
		s += ", " + src
	}
	return s + ")"
}

// vcsSource says which commit the binary was built from: "commit <rev>"
// (12 hex digits), then the commit's time and "modified" when the go tool
// recorded them; stamped, a commit wins over the recorded one (the
// stamped build has none). "" when neither says.
func vcsSource(stamped string, settings []debug.BuildSetting) string {
	var rev, at string
	modified := false
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if stamped != "" {
		rev, at, modified = stamped, "", false
	}
	if rev == "" {
		return ""
	}
	parts := []string{"commit " + rev[:min(len(rev), 12)]}
	if at != "" {
		parts = append(parts, at)
	}
	if modified {
		parts = append(parts, "modified")
	}
	return strings.Join(parts, ", ")
}
