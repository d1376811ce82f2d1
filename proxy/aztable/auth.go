package aztable

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nemocache/nemo/internal/loopback"
)

// maxClockSkew is how far a request's date may be from nemo's clock, as
// in Azure (15 minutes).
const maxClockSkew = 15 * time.Minute

// authenticate verifies a Shared Key or Shared Key Lite signature against
// the account key or, for a request without Authorization whose query
// carries a signature, a shared access signature (verifySAS), which it
// returns for route and the handlers to authorize each operation with.
// rawPath is the request path as sent (percent-encoded), beginning with
// "/<account>". A request with neither passes only when the frontend
// allows anonymous access.
//
// The canonicalized resource is "/" + account + the URI path, plus
// "?comp=<value>" when there is a comp parameter. Path-style endpoints
// (Azurite's layout) leave it ambiguous whether the path includes the
// account segment: the Go and JS SDKs sign the full path
// ("/acct/acct/Tables"), others the path below it ("/acct/Tables"), and
// Azurite accepts both. So does nemo.
func (f *Frontend) authenticate(r *http.Request, rawPath string, q url.Values) (*sasToken, *apiError) {
	auth := r.Header.Get("Authorization")
	sas := auth == "" && isSAS(q)
	if f.opts.RequireSAS && !sas && !loopback.Client(r.RemoteAddr) {
		if auth != "" {
			return nil, errKeyAuth.because(fmt.Errorf("an Authorization header from remote client %s under require_sas", r.RemoteAddr))
		}
		return nil, errAuth.because(fmt.Errorf("remote client %s sent no shared access signature under require_sas", r.RemoteAddr))
	}
	if sas {
		return f.verifySAS(r, q, time.Now())
	}
	if auth == "" {
		if f.opts.AllowAnonymous {
			return nil, nil
		}
		return nil, errAuth.because(fmt.Errorf("no Authorization header"))
	}
	return nil, f.verifySharedKey(r, auth, rawPath, q)
}

// verifySharedKey checks an Authorization header's Shared Key or Shared
// Key Lite signature.
func (f *Frontend) verifySharedKey(r *http.Request, auth, rawPath string, q url.Values) *apiError {
	scheme, cred, ok := strings.Cut(auth, " ")
	if !ok {
		return errAuth.because(fmt.Errorf("malformed Authorization header"))
	}
	account, sig, ok := strings.Cut(cred, ":")
	if !ok || account != f.opts.Account {
		return errAuth.because(fmt.Errorf("authorization for account %q", account))
	}
	// A signature is 32 bytes: a longer one cannot match (and would not
	// fit the buffer).
	if len(sig) > base64.StdEncoding.EncodedLen(sha256.Size) {
		return errAuth.because(fmt.Errorf("signature of %d characters", len(sig)))
	}
	var wantBuf [sha256.Size + 3]byte
	n, err := base64.StdEncoding.Decode(wantBuf[:], []byte(sig))
	if err != nil {
		return errAuth.because(fmt.Errorf("signature is not base64"))
	}
	want := wantBuf[:n]
	date := r.Header.Get("X-Ms-Date")
	if date == "" {
		date = r.Header.Get("Date")
	}
	when, err := f.dates.parse(date)
	if err != nil {
		return errAuth.because(fmt.Errorf("request date %q", date))
	}
	if d := time.Since(when); d > maxClockSkew || d < -maxClockSkew {
		return errAuth.because(fmt.Errorf("request date %s is %v off", date, d.Round(time.Second)))
	}
	m := f.mac()
	defer f.macs.Put(m)
	switch scheme {
	case "SharedKeyLite":
		m.buf = append(append(m.buf[:0], date...), '\n')
	case "SharedKey":
		m.buf = append(append(m.buf[:0], r.Method...), '\n')
		m.buf = append(append(m.buf, r.Header.Get("Content-Md5")...), '\n')
		m.buf = append(append(m.buf, r.Header.Get("Content-Type")...), '\n')
		m.buf = append(append(m.buf, date...), '\n')
	default:
		return errAuth.because(fmt.Errorf("authorization scheme %q", scheme))
	}
	m.buf = append(append(m.buf, '/'), f.opts.Account...)
	common := len(m.buf)
	below := strings.TrimPrefix(rawPath, "/"+f.opts.Account)
	if below == "" {
		below = "/"
	}
	for _, path := range [2]string{rawPath, below} {
		m.buf = append(m.buf[:common], path...)
		if q.Has("comp") {
			m.buf = append(append(m.buf, "?comp="...), q.Get("comp")...)
		}
		if m.verify(want) {
			return nil
		}
	}
	return errAuth.because(fmt.Errorf("signature mismatch"))
}

// mac is a pooled HMAC-SHA256 keyed with the account key, and the buffer
// a string to sign is assembled in.
type mac struct {
	h   hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

// mac takes a keyed HMAC from the pool; give it back with f.macs.Put.
func (f *Frontend) mac() *mac {
	if m, _ := f.macs.Get().(*mac); m != nil {
		return m
	}
	return &mac{h: hmac.New(sha256.New, f.key)}
}

// verify reports whether want is the signature of m.buf.
func (m *mac) verify(want []byte) bool {
	m.h.Reset()
	m.h.Write(m.buf)
	return hmac.Equal(m.h.Sum(m.sum[:0]), want)
}

// dateCache remembers the last request date parsed: clients sign with the
// current second, so consecutive requests carry the same string.
type dateCache struct{ last atomic.Pointer[parsedDate] }

type parsedDate struct {
	s string
	t time.Time
}

func (c *dateCache) parse(s string) (time.Time, error) {
	if p := c.last.Load(); p != nil && p.s == s {
		return p.t, nil
	}
	t, err := http.ParseTime(s)
	if err == nil {
		c.last.Store(&parsedDate{s: s, t: t})
	}
	return t, err
}
