package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/config"
)

// ErrCredentialRefused is returned by Open when the start-up check's call
// to the backend was refused for its credential (adapters.ErrAccessDenied,
// wrapped too): nemo would fail every call it makes.
var ErrCredentialRefused = errors.New("node: the backend refused nemo's credential")

// checkBackend is the start-up check, as cloud-sql-proxy makes one: one
// cheap, authenticated call to the backend (adapters.Pinger, through any
// fault injection), within probeTimeout. A refused credential is an error:
// nemo must not start. A backend that does not answer is not (a pod would
// crash-loop on a network blip, and a WAL may hold acknowledged writes):
// it is logged and returned as unreached, and the node starts with the
// backend down, for readiness to say. The embedded store needs no check.
func checkBackend(store adapters.Store, cfg config.Config, log *slog.Logger) (unreached, err error) {
	p, ok := store.(adapters.Pinger)
	if !ok {
		return nil, nil
	}
	attrs := []any{"backend", string(cfg.Backend.Type), "endpoint", endpointOf(store), "credential", credentialSource(cfg, store)}
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	perr := p.Ping(ctx)
	took := time.Since(began).Round(time.Millisecond).String()
	switch {
	case perr == nil:
		log.Info("backend answered the start-up check", append(attrs, "took", took)...)
		return nil, nil
	case errors.Is(perr, adapters.ErrAccessDenied):
		log.Error("backend refused nemo's credential: fix the credential and start again", append(attrs, "err", perr.Error())...)
		return nil, fmt.Errorf("%w: the %s backend at %s refused the credential from %s: %w",
			ErrCredentialRefused, cfg.Backend.Type, endpointOf(store), credentialSource(cfg, store), perr)
	}
	msg := "backend did not answer the start-up check: starting anyway, not ready until it answers"
	if followsWAL(cfg) {
		msg = "backend did not answer the start-up check: starting anyway, ready while the WAL takes writes"
	}
	log.Warn(msg, append(attrs, "took", took, "err", perr.Error())...)
	return perr, nil
}

// endpointOf is where the backend under store's wrappers sends its calls,
// if it says.
func endpointOf(store adapters.Store) string {
	if e, ok := innermost(store).(interface{ Endpoint() string }); ok {
		return e.Endpoint()
	}
	return "unknown"
}

// credentialSource says, without the secret, which credential nemo
// presents to the backend and which setting it came from.
func credentialSource(cfg config.Config, store adapters.Store) string {
	key := func(k string) string { return k + " (" + config.EnvName(k) + ")" }
	switch cfg.Backend.Type {
	case config.BackendAzTable:
		c := cfg.Backend.AzTable
		auth := "credential"
		if a, ok := innermost(store).(interface{ Auth() string }); ok {
			auth = a.Auth()
		}
		switch {
		case c.ConnectionString != "":
			return "the " + auth + " of " + key("backend.aztable.connection_string")
		case c.UseDefaultCredential:
			return "the " + auth + " (" + key("backend.aztable.use_default_credential") + "): workload identity, managed identity, environment or az login"
		}
		return "the account key of " + c.Account + " in " + key("backend.aztable.key")
	case config.BackendDatastore:
		c := cfg.Backend.Datastore
		switch {
		case c.EmulatorHost != "":
			return "none: an emulator (" + key("backend.datastore.emulator_host") + ") takes any"
		case c.CredentialsFile != "":
			return "the service account file " + c.CredentialsFile + " in " + key("backend.datastore.credentials_file")
		}
		if f := os.Getenv("GOOGLE_APPLICATION_CREDENTIALS"); f != "" {
			return "Google application default credentials: GOOGLE_APPLICATION_CREDENTIALS=" + f
		}
		return "Google application default credentials: gcloud's, or the metadata server's service account"
	}
	return "none"
}
