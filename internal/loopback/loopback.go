// Package loopback tells addresses that only this host (in Kubernetes: this
// pod) can use from every other address, for the listeners' exposure rule
// (config) and for the frontends' checks of remote clients (a SAS-only
// Azure frontend, the Datastore bearer token). It is the one definition of
// "loopback" nemo uses: a loopback IP literal (127.0.0.0/8, ::1, and
// IPv4-mapped ::ffff:127.x) or, for a listen address only, the name
// "localhost". Everything else is not loopback: an empty host or 0.0.0.0
// or :: (all interfaces), a pod or host IP, any other name (it may resolve
// to anything). Client addresses are the connection's peer as the kernel
// reports it, never a header such as X-Forwarded-For; one that does not
// parse counts as remote.
package loopback

import (
	"net"
	"net/netip"
	"strings"
)

// Host reports whether a listener bound to host (a listen address's host
// part) is reachable from this host only.
func Host(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// Listen reports whether a listener on addr (host:port) is reachable from
// this host only; a malformed address is not.
func Listen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && Host(host)
}

// Client reports whether a connection's peer address (net/http's
// Request.RemoteAddr, or a net.Addr's String: "ip:port") is on this host.
// A zone ("[fe80::1%eth0]:1") is allowed; anything unparsable is remote.
func Client(remote string) bool {
	ap, err := netip.ParseAddrPort(remote)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}
