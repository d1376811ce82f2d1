package config

import (
	"fmt"
	"strings"
	"testing"
)

// FuzzParseOutageSchedule: a schedule either parses into windows with a
// non-negative start and a positive duration, which spell a schedule that
// parses to the same windows, or is refused with a message naming the
// window at fault.
func FuzzParseOutageSchedule(f *testing.F) {
	for _, s := range []string{"30s+10s, 2m+1m", "", " ", "0s+1ms", "-1s+1s", "1s+0s", "1s", "1s+1s,,", "1h30m+1.5s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ws, err := ParseOutageSchedule(s)
		if err != nil {
			if !strings.Contains(err.Error(), "window ") {
				t.Fatalf("ParseOutageSchedule(%q): %v names no window", s, err)
			}
			return
		}
		var parts []string
		for _, w := range ws {
			if w.Start < 0 || w.Duration <= 0 {
				t.Fatalf("ParseOutageSchedule(%q) = %+v", s, ws)
			}
			parts = append(parts, fmt.Sprintf("%s+%s", w.Start, w.Duration))
		}
		again, err := ParseOutageSchedule(strings.Join(parts, ","))
		if err != nil || fmt.Sprint(again) != fmt.Sprint(ws) {
			t.Fatalf("%q parsed to %v, which spells %q, which parses to %v, %v", s, ws, strings.Join(parts, ","), again, err)
		}
	})
}
