package aztable

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
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
	if auth == "" {
		if isSAS(q) {
			return f.verifySAS(r, q, time.Now())
		}
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
	want, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		return errAuth.because(fmt.Errorf("signature is not base64"))
	}
	date := r.Header.Get("x-ms-date")
	if date == "" {
		date = r.Header.Get("Date")
	}
	when, err := http.ParseTime(date)
	if err != nil {
		return errAuth.because(fmt.Errorf("request date %q", date))
	}
	if d := time.Since(when); d > maxClockSkew || d < -maxClockSkew {
		return errAuth.because(fmt.Errorf("request date %s is %v off", date, d.Round(time.Second)))
	}
	var prefix string
	switch scheme {
	case "SharedKeyLite":
		prefix = date + "\n"
	case "SharedKey":
		prefix = r.Method + "\n" + r.Header.Get("Content-MD5") + "\n" + r.Header.Get("Content-Type") + "\n" + date + "\n"
	default:
		return errAuth.because(fmt.Errorf("authorization scheme %q", scheme))
	}
	comp := ""
	if q.Has("comp") {
		comp = "?comp=" + q.Get("comp")
	}
	below := strings.TrimPrefix(rawPath, "/"+f.opts.Account)
	if below == "" {
		below = "/"
	}
	for _, path := range [2]string{rawPath, below} {
		if hmac.Equal(f.sign(prefix+"/"+f.opts.Account+path+comp), want) {
			return nil
		}
	}
	return errAuth.because(fmt.Errorf("signature mismatch"))
}

func (f *Frontend) sign(s string) []byte {
	h := hmac.New(sha256.New, f.key)
	h.Write([]byte(s))
	return h.Sum(nil)
}
