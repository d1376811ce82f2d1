//go:build !invariants && !race

package invariants

import "testing"

// The release pass of .ci/test (no tag, no race detector) builds what
// users run: Enabled must be off there, or that pass tests nothing new.
func TestDisabledWithoutTag(t *testing.T) {
	if Enabled {
		t.Fatal("built with neither -tags invariants nor -race but Enabled is true")
	}
}
