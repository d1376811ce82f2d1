package bench

import (
	"context"
	"fmt"
	"os/exec"
	"runtime/debug"
	"strings"
	"time"
	"unicode"
)

// source is the line every table and the index of a run carry, so that a
// table copied into a document keeps what produced it: the command line,
// the commit nemo-bench was built from, for a real target the nemo binary
// it ran (its own `nemo version`), and when the run began.
func source(ctx context.Context, o Options, began time.Time) string {
	s := fmt.Sprintf("Produced by `%s` on %s; nemo-bench: %s", commandLine(o.Args), began.UTC().Format(time.RFC3339), buildCommit())
	if o.real() {
		s += "; the nemo it ran: " + nemoVersion(ctx, o.Nemo)
	}
	return s
}

// commandLine is nemo-bench with args, quoted as a shell would need them.
func commandLine(args []string) string {
	plain := func(r rune) bool {
		return unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_./=:,@%+", r)
	}
	words := []string{"nemo-bench"}
	for _, a := range args {
		if a == "" || strings.IndexFunc(a, func(r rune) bool { return !plain(r) }) >= 0 {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		words = append(words, a)
	}
	return strings.Join(words, " ")
}

// buildCommit is the commit this binary was built from as the go tool
// recorded it ("+dirty" with local changes). A build without that stamp
// (go run, -buildvcs=false) gets the working directory's checkout as git
// reports it, said to be only that.
func buildCommit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision":
				rev = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "+dirty"
			}
		}
		if rev != "" {
			return "commit " + rev[:min(len(rev), 12)] + dirty
		}
	}
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "commit not recorded (the binary carries no VCS stamp and git found no checkout here)"
	}
	dirty := ""
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err != nil || len(st) > 0 {
		dirty = "+dirty"
	}
	return "commit " + strings.TrimSpace(string(out)) + dirty + " of the checkout it ran in (the binary carries no VCS stamp)"
}

// nemoVersion is what `bin version` prints (its version, Go version and,
// when stamped, commit; without one it says so), or why it could not be
// asked.
func nemoVersion(ctx context.Context, bin string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "version").Output()
	if err != nil {
		return fmt.Sprintf("%s (`version` failed: %v)", bin, err)
	}
	v := strings.TrimSpace(string(out))
	if !strings.Contains(v, "commit") {
		v += ", built without its commit stamped (-buildvcs)"
	}
	return v
}
