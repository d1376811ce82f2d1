package loopback

import "testing"

func TestListen(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:10002":        true,
		"127.1.2.3:10002":        true, // all of 127.0.0.0/8
		"[::1]:8081":             true,
		"[::ffff:127.0.0.1]:1":   true,
		"localhost:9090":         true,
		"LocalHost:9090":         true,
		":10002":                 false, // all interfaces
		"0.0.0.0:10002":          false,
		"[::]:8081":              false,
		"[::ffff:0.0.0.0]:8081":  false,
		"10.12.0.7:8081":         false, // a pod IP
		"192.0.2.2:8081":         false,
		"[fd00::2]:8081":         false,
		"[fe80::1%eth0]:8081":    false,
		"nemo:8081":              false, // a name may resolve to anything
		"nemo.default.svc:8081":  false,
		"localhost.example:9090": false,
		"my.localhost:9090":      false,
		"127.0.0.1":              false, // no port: malformed
		"":                       false,
	} {
		if got := Listen(addr); got != want {
			t.Errorf("Listen(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestClient(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:50000":          true,
		"127.0.0.53:50000":         true,
		"[::1]:50000":              true,
		"[::ffff:127.0.0.1]:50000": true,
		"192.0.2.2:50000":          false,
		"[::ffff:192.0.2.2]:50000": false,
		"[fe80::1%eth0]:50000":     false,
		"0.0.0.0:50000":            false,
		"localhost:50000":          false, // peers are addresses, never names
		"127.0.0.1":                false,
		"@":                        false, // a unix socket's peer
		"":                         false,
		"garbage":                  false,
	} {
		if got := Client(addr); got != want {
			t.Errorf("Client(%q) = %v, want %v", addr, got, want)
		}
	}
}
