package datastore

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/internal/loopback"
)

// Client authentication (Options.Token): a client not on loopback must
// send "authorization: Bearer <token>", as gRPC metadata or as the REST
// request's Authorization header; the Google client libraries send
// exactly that for an OAuth access token. Clients on loopback send
// nothing, as emulator clients do. Whether a client is on loopback is the
// connection's peer address (internal/loopback), never a header.

// The refusals' messages: Google's own for a call without credentials and
// with bad ones, up to where they name what is expected.
const (
	msgNoCredentials  = "Request is missing required authentication credential. Expected a bearer token (nemo's frontend.datastore.token) from a client that is not on loopback."
	msgBadCredentials = "Request had invalid authentication credentials. Expected the bearer token nemo's frontend.datastore.token configures."
)

// tokenCheck verifies bearer tokens against the configured one. It
// compares SHA-256 digests in constant time, so neither the token's
// characters nor its length show in the time a refusal takes.
type tokenCheck struct{ want [sha256.Size]byte }

func newTokenCheck(token string) *tokenCheck {
	return &tokenCheck{want: sha256.Sum256([]byte(token))}
}

// verify checks the authorization values a request carries, from the
// client at remote.
func (t *tokenCheck) verify(remote string, values []string) error {
	if loopback.Client(remote) {
		return nil
	}
	if len(values) == 0 {
		return status.Error(codes.Unauthenticated, msgNoCredentials)
	}
	// One credential only: which of several counts would be a guess.
	scheme, token, ok := strings.Cut(values[0], " ")
	if len(values) > 1 || !ok || !strings.EqualFold(scheme, "Bearer") {
		return status.Error(codes.Unauthenticated, msgBadCredentials)
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	if subtle.ConstantTimeCompare(got[:], t.want[:]) != 1 {
		return status.Error(codes.Unauthenticated, msgBadCredentials)
	}
	return nil
}

// authenticate checks Options.Token for a gRPC call (the frontend's
// interceptor, bounded, asks first).
func (f *Frontend) authenticate(ctx context.Context) error {
	if f.tokens == nil {
		return nil
	}
	remote := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return f.tokens.verify(remote, md.Get("authorization"))
}

// authenticateREST checks Options.Token for a REST request; on failure it
// has written the 401 (Google's JSON error, and the WWW-Authenticate
// challenge RFC 6750 asks for) and returns false.
func (f *Frontend) authenticateREST(w http.ResponseWriter, r *http.Request) bool {
	if f.tokens == nil {
		return true
	}
	err := f.tokens.verify(r.RemoteAddr, r.Header.Values("Authorization"))
	if err == nil {
		return true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="nemo"`)
	writeRESTError(w, err)
	return false
}
