//go:build invariants || race

package invariants

import "testing"

func TestEnabledUnderTag(t *testing.T) {
	if !Enabled {
		t.Fatal("built with -tags invariants or -race but Enabled is false")
	}
}
