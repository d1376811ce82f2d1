package config

import (
	"fmt"
	"regexp"

	"github.com/nemocache/nemo/internal/loopback"
)

// Exposure is a listener that other hosts can reach: bound to anything but
// a loopback IP or "localhost" (an empty host, 0.0.0.0, ::, a pod IP, any
// other name; see internal/loopback).
type Exposure struct {
	// Key is the listener's setting ("listen.azure_table").
	Key string
	// Addr is the address it binds.
	Addr string
	// Open, when not empty, says why anyone who reaches Addr may use it:
	// no secret of the operator's stands in the way.
	Open string
	// Fix names what makes it safe besides binding it to loopback; empty
	// when nothing does.
	Fix string
	// Clear, when not empty (and Open is), says what credentials remote
	// clients would send over plaintext: the listener authenticates them,
	// but listen.tls is not set, so anyone on the network path can read
	// and replay what they send.
	Clear string
}

// tlsFix is how to stop remote clients' credentials crossing the network
// in the clear.
const tlsFix = "set listen.tls.cert_file and listen.tls.key_file (NEMO_LISTEN_TLS_CERT_FILE, NEMO_LISTEN_TLS_KEY_FILE: a certificate and key, e.g. a cert-manager Secret mounted in the pod) so that remote clients must use TLS"

// AzureTableListener is the Azure Table frontend's address: listen.azure_table,
// or "" (not served) when the backend cannot hold Azure tables (Datastore).
func (c Config) AzureTableListener() string {
	if c.Backend.Type == BackendDatastore {
		return ""
	}
	return c.Listen.AzureTable
}

// DatastoreListener is the Datastore frontend's address: listen.datastore,
// or "" (not served) when the backend cannot hold Datastore entities (Azure).
func (c Config) DatastoreListener() string {
	if c.Backend.Type == BackendAzTable {
		return ""
	}
	return c.Listen.Datastore
}

// Exposures lists the frontends nemo would open off loopback, each with
// whether it is open to anyone who reaches it or, when it is not, whether
// remote clients would authenticate over plaintext. In front of Azure or
// Datastore an open one holds nemo's credentials for everyone, and a
// plaintext one hands replayable credentials to whoever is on the network
// path, so Validate refuses both unless listen.allow_remote is true; over the
// embedded store it is allowed (a local emulator), and warned about. The
// admin listener is not among them: it must be on loopback whatever the
// backend (validateListen), unless listen.admin_allow_remote.
func (c Config) Exposures() []Exposure {
	var out []Exposure
	add := func(key, addr, open, fix, creds string) {
		if addr == "" || !isHostPort(addr) || loopback.Listen(addr) {
			return
		}
		e := Exposure{Key: key, Addr: addr, Open: open, Fix: fix}
		if open == "" && !c.Listen.TLS.Enabled() {
			e.Clear, e.Fix = creds, tlsFix
		}
		out = append(out, e)
	}
	az := c.Frontend.Azure
	azOpen := ""
	switch {
	case az.Key == AzureFrontendKey:
		azOpen = "accepts requests signed with Azurite's published development key (frontend.azure.key is its default)"
	case az.AllowAnonymous && !az.RequireSAS:
		azOpen = "accepts unsigned requests (frontend.azure.allow_anonymous)"
	}
	add("listen.azure_table", c.AzureTableListener(), azOpen,
		"set frontend.azure.key to a secret key (NEMO_FRONTEND_AZURE_KEY from a Secret), and frontend.azure.require_sas: true to give remote clients only shared access signatures",
		"Shared Key signatures and shared access signatures, which can be replayed")
	dsOpen := ""
	if c.Frontend.Datastore.Token == "" {
		dsOpen = "has no client authentication (frontend.datastore.token is empty)"
	}
	add("listen.datastore", c.DatastoreListener(), dsOpen,
		"set frontend.datastore.token (NEMO_FRONTEND_DATASTORE_TOKEN from a Secret), which remote clients send as \"authorization: Bearer <token>\"",
		"the bearer token frontend.datastore.token")
	return out
}

// validateExposure refuses, in front of a cloud backend, every listener
// Exposures finds open or taking remote credentials in the clear, unless
// listen.allow_remote accepts the risk; and
// checks frontend.datastore.token's form.
func (c Config) validateExposure(v *validator) {
	if t := c.Frontend.Datastore.Token; t != "" && !bearerTokenRE.MatchString(t) {
		// The message never quotes the token.
		v.bad("frontend.datastore.token", "must be at least %d characters of A-Z a-z 0-9 - . _ ~ + / followed by optional = padding (a bearer token, e.g. from openssl rand -base64 32)", minTokenLen)
	}
	if c.Listen.AllowRemote || (c.Backend.Type != BackendAzTable && c.Backend.Type != BackendDatastore) {
		return
	}
	for _, e := range c.Exposures() {
		fix := ""
		if e.Fix != "" {
			fix = "; or " + e.Fix
		}
		switch {
		case e.Open != "":
			v.bad(e.Key, "%q is not a loopback address and this listener %s, so in front of the %s backend anyone who can reach it gets at the store with nemo's credentials. "+
				"Bind it to a loopback address such as 127.0.0.1 (the pod's own containers reach it there)%s; or set listen.allow_remote: true to accept the risk",
				e.Addr, e.Open, c.Backend.Type, fix)
		case e.Clear != "":
			v.bad(e.Key, "%q is not a loopback address and listen.tls is not set, so remote clients would send %s in the clear: in front of the %s backend anyone on the network path could replay what they send. "+
				"Bind it to a loopback address such as 127.0.0.1 (the pod's own containers reach it there)%s; or set listen.allow_remote: true to accept the risk",
				e.Addr, e.Clear, c.Backend.Type, fix)
		}
	}
}

// minTokenLen is the shortest frontend.datastore.token accepted.
const minTokenLen = 16

// bearerTokenRE is RFC 6750's b64token, at least minTokenLen characters
// before the padding.
var bearerTokenRE = regexp.MustCompile(fmt.Sprintf(`^[A-Za-z0-9\-._~+/]{%d,}=*$`, minTokenLen))
