//go:build !linux

package embedded

import (
	"errors"
	"fmt"
	"os"
)

// memFile is the file of an in-memory store where there is no anonymous
// memory file: a temporary file removed as soon as it is open, so no
// directory names it and the system frees it with the last descriptor. A
// system that cannot remove an open file (Windows) has no in-memory store.
func memFile(name string) (*os.File, error) {
	f, err := os.CreateTemp("", name+"-*")
	if err != nil {
		return nil, fmt.Errorf("embedded: in-memory store file: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		return nil, errors.Join(fmt.Errorf("embedded: an in-memory store needs a file removed while open: %w", err), f.Close(), os.Remove(f.Name()))
	}
	return f, nil
}
