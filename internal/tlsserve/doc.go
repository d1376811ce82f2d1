// Package tlsserve serves nemo's listeners over TLS with a certificate that
// follows its files: a Reloader holds the pair read from listen.tls.cert_file
// and listen.tls.key_file and, at most once per interval, on a handshake,
// reads the files again and takes a new pair when they changed (cert-manager
// and the kubelet rotate a mounted Secret in place). A new pair that does not
// load keeps the old one and logs a warning, once per bad pair.
//
// Listen wraps a listener so each connection is sorted by its first byte: a
// TLS handshake record (0x16) is served over TLS, anything else as plaintext
// when the peer is on loopback (internal/loopback) or plaintext is allowed
// for everyone; a plaintext connection from any other peer is answered
// "400 Bad Request" with a line saying TLS is required, and closed. The
// sorting happens on the connection's first Read, in the server's own
// goroutine and under its read deadline, so Accept never waits on a client.
package tlsserve
