package enum

import "testing"

func TestOr(t *testing.T) {
	for _, tc := range []struct {
		vals []string
		want string
	}{
		{nil, ""},
		{[]string{"a"}, "a"},
		{[]string{"a", "b"}, "a or b"},
		{[]string{"nemo", "record", "none"}, "nemo, record or none"},
	} {
		if got := Or(tc.vals); got != tc.want {
			t.Errorf("Or(%q) = %q, want %q", tc.vals, got, tc.want)
		}
	}
}
