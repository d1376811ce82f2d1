//go:build linux || darwin

package aztable

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// idleCheck: idleSpoilt can tell, so the lean transport is used.
const idleCheck = true

// idleSpoilt reports whether conn, a kept connection about to be reused,
// received bytes while it was idle (an answer to no request, a 408 before
// the server closes it, a TLS alert) or was closed or reset by its peer:
// the next request would read those bytes as its answer, or fail. It peeks
// at the socket without blocking and without consuming; net/http's
// transport learns the same from the reader goroutine it parks on every
// idle connection.
func idleSpoilt(conn net.Conn) bool {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	spoilt := false
	rerr := rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// n > 0: bytes; n == 0 without error: the peer closed; an error
		// other than "nothing yet": the connection is broken.
		spoilt = n > 0 || err == nil || !(errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR))
		return true
	})
	return spoilt || rerr != nil
}
