//go:build !linux && !darwin

package aztable

import "net"

// idleCheck: this system has no idle check (see h1idle_unix.go), so the
// lean transport is not used: a kept connection could hold bytes that
// arrived while it was idle, and the next read would take them for its
// answer. Point reads go through net/http's transport, which watches its
// idle connections.
const idleCheck = false

func idleSpoilt(net.Conn) bool { return false }
