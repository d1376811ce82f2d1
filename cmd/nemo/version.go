package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is stamped at build time:
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/nemo
var version = "dev"

func versionCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and build details",
		Long: `Print nemo's version (stamped at build time with
-ldflags "-X main.version=..."), the Go version, the platform and the commit
the binary was built from when the go tool recorded it. nemo --version
prints the same line.`,
		Example: `  nemo version
  nemo --version`,
		Args: cobra.NoArgs,
		Run: func(*cobra.Command, []string) {
			fmt.Fprintln(stdout, versionString())
		},
	}
}

// versionString is "nemo <version> (<go version> <os>/<arch>[, commit <rev>])".
func versionString() string {
	s := fmt.Sprintf("nemo %s (%s %s/%s", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if rev := vcsRevision(); rev != "" {
		s += ", commit " + rev
	}
	return s + ")"
}

// vcsRevision is the commit the binary was built from, when the go tool
// recorded it (a build inside a git checkout), with "+dirty" for local
// changes.
func vcsRevision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}
