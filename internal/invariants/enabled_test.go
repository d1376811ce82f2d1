//go:build invariants

package invariants

import "testing"

func TestEnabledUnderTag(t *testing.T) {
	if !Enabled {
		t.Fatal("built with -tags invariants but Enabled is false")
	}
}
