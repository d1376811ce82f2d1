// Package remotetest finds an address of this machine that is not
// loopback, so that tests can bind a listener to it and connect from it:
// the connection's peer is then that address, and nemo classifies the
// client as remote (internal/loopback) over a real network path, with no
// classification injected. A machine with no such address fails the test,
// or skips it under -short outside CI (internal/testenv).
package remotetest

import (
	"net"
	"net/netip"
	"testing"

	"github.com/nemocache/nemo/internal/testenv"
)

// IP returns a global unicast address of an interface that is up,
// IPv4 before IPv6.
func IP(t testing.TB) netip.Addr {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var v6 netip.Addr
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(n.IP)
			if ip = ip.Unmap(); !ok || !ip.IsGlobalUnicast() {
				continue
			}
			if ip.Is4() {
				return ip
			}
			if !v6.IsValid() {
				v6 = ip
			}
		}
	}
	if v6.IsValid() {
		return v6
	}
	testenv.Missing(t, "this machine has no non-loopback interface address", "a remote client cannot be made without one")
	return netip.Addr{}
}

// Listen binds a TCP listener on a free port of IP(t), closed at cleanup
// unless the test closes it first.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(IP(t), 0).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}
