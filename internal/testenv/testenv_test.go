package testenv

import (
	"flag"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that notes how Missing ended the test.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) {
	r.failed = fmt.Sprint(args...)
	runtime.Goexit()
}

func missing(t *testing.T) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Missing(r, "the thing is missing", "install it")
	}()
	<-done
	return r
}

func setShort(t *testing.T, on bool) {
	was := testing.Short()
	if err := flag.Set("test.short", fmt.Sprint(on)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { flag.Set("test.short", fmt.Sprint(was)) })
}

// Missing fails a test, skips it only under -short, and never under
// NEMO_TEST_REQUIRE_ALL=1.
func TestMissing(t *testing.T) {
	for _, tc := range []struct {
		short      bool
		requireAll string
		skip       bool
	}{
		{false, "", false},
		{true, "", true},
		{false, "1", false},
		{true, "1", false},
		{true, "0", true},
	} {
		setShort(t, tc.short)
		t.Setenv(EnvRequireAll, tc.requireAll)
		r := missing(t)
		name := fmt.Sprintf("-short=%v %s=%q", tc.short, EnvRequireAll, tc.requireAll)
		switch {
		case tc.skip && (r.skipped == "" || r.failed != ""):
			t.Errorf("%s: skipped %q, failed %q; want a skip", name, r.skipped, r.failed)
		case !tc.skip && (r.failed == "" || r.skipped != ""):
			t.Errorf("%s: skipped %q, failed %q; want a failure", name, r.skipped, r.failed)
		case !tc.skip && !strings.Contains(r.failed, "the thing is missing: install it"):
			t.Errorf("%s: failure %q does not say what is missing and how to get it", name, r.failed)
		}
	}
}
