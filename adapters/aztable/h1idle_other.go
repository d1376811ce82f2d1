//go:build !linux && !darwin

package aztable

import "net"

// idleSpoilt reports whether a kept connection received bytes while idle;
// here it cannot tell without blocking, and says no (h1idle_unix.go).
func idleSpoilt(net.Conn) bool { return false }
