package invariants

import (
	"errors"
	"strings"
	"testing"
)

func TestErrorf(t *testing.T) {
	err := Errorf("dirty bytes %d", -3)
	if !errors.Is(err, ErrViolated) || !strings.Contains(err.Error(), "dirty bytes -3") {
		t.Fatalf("Errorf = %v", err)
	}
}
