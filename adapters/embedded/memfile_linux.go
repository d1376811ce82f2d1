package embedded

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// memFile is the file of an in-memory store: an anonymous memory file
// (memfd_create(2)), which no directory names, so nothing is left behind
// whatever way the process ends, and the kernel frees it with the last
// descriptor. bbolt maps, grows, locks and syncs it as any file (a sync is
// a no-op). Its pages count as the process's shared memory (the pod's
// memory limit counts them too).
func memFile(name string) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("embedded: memfd_create: %w", err)
	}
	return os.NewFile(uintptr(fd), "memfd:"+name), nil
}
