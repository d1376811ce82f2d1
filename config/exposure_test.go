package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// secretKey is a frontend key other than Azurite's published one.
const secretKey = "c2VjcmV0LWZyb250ZW5kLWtleQ=="

func azureBackend(c *Config) {
	c.Backend.Type = BackendAzTable
	c.Backend.AzTable.ConnectionString = "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=a2V5"
}

func datastoreBackend(c *Config) {
	c.Backend.Type = BackendDatastore
	c.Backend.Datastore.Project = "p"
}

// TestExposuresClassifyAddresses: anything but a loopback IP or
// "localhost" is off loopback, and every listener is classified.
func TestExposuresClassifyAddresses(t *testing.T) {
	for addr, exposed := range map[string]bool{
		"127.0.0.1:7000":            false,
		"127.0.0.2:7000":            false,
		"[::1]:7000":                false,
		"localhost:7000":            false,
		":7000":                     true,
		"0.0.0.0:7000":              true,
		"[::]:7000":                 true,
		"10.244.1.17:7000":          true, // a pod IP
		"[fd00::2]:7000":            true,
		"nemo:7000":                 true,
		"nemo.prod.svc:7000":        true,
		"host.docker.internal:7000": true,
	} {
		for _, key := range []string{"listen.azure_table", "listen.datastore"} {
			c := Defaults()
			switch key {
			case "listen.azure_table":
				c.Listen.AzureTable = addr
			case "listen.datastore":
				c.Listen.Datastore = addr
			}
			got := c.Exposures()
			if exposed != (len(got) == 1 && got[0].Key == key && got[0].Addr == addr) || !exposed && len(got) != 0 {
				t.Errorf("%s %q: exposures %+v, want exposed=%v", key, addr, got, exposed)
			}
		}
	}
}

// TestExposuresOpen: what makes each listener open to whoever reaches it.
func TestExposuresOpen(t *testing.T) {
	open := func(c Config, key string) bool {
		for _, e := range c.Exposures() {
			if e.Key == key {
				return e.Open != ""
			}
		}
		t.Fatalf("%s not exposed", key)
		return false
	}
	c := Defaults()
	c.Listen.AzureTable, c.Listen.Datastore, c.Listen.Admin = "0.0.0.0:10002", "0.0.0.0:8081", "0.0.0.0:9090"
	for _, tc := range []struct {
		name string
		edit func(*Config)
		key  string
		want bool
	}{
		{"azure well-known key", func(*Config) {}, "listen.azure_table", true},
		{"azure well-known key and require_sas", func(c *Config) { c.Frontend.Azure.RequireSAS = true }, "listen.azure_table", true},
		{"azure secret key", func(c *Config) { c.Frontend.Azure.Key = secretKey }, "listen.azure_table", false},
		{"azure secret key, anonymous", func(c *Config) { c.Frontend.Azure.Key, c.Frontend.Azure.AllowAnonymous = secretKey, true }, "listen.azure_table", true},
		{"azure secret key, anonymous, require_sas", func(c *Config) {
			c.Frontend.Azure.Key, c.Frontend.Azure.AllowAnonymous, c.Frontend.Azure.RequireSAS = secretKey, true, true
		}, "listen.azure_table", false},
		{"datastore no token", func(*Config) {}, "listen.datastore", true},
		{"datastore token", func(c *Config) { c.Frontend.Datastore.Token = "0123456789abcdefgh" }, "listen.datastore", false},
	} {
		cc := c
		tc.edit(&cc)
		if got := open(cc, tc.key); got != tc.want {
			t.Errorf("%s: open %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestExposureRefused: in front of a cloud backend an open listener off
// loopback refuses to start, naming the setting and the safe alternatives,
// whatever the backend's endpoint (an emulator's counts the same);
// listen.allow_remote or authentication lets it start; over the embedded
// store it starts.
func TestExposureRefused(t *testing.T) {
	emulator := func(c *Config) {
		c.Backend.AzTable.ConnectionString = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;TableEndpoint=http://127.0.0.1:10002/devstoreaccount1;"
		c.Backend.Datastore.EmulatorHost = "127.0.0.1:8080"
	}
	for _, tc := range []struct {
		name string
		edit []func(*Config)
		want []string // keys refused
	}{
		{"azure on all interfaces", []func(*Config){azureBackend, func(c *Config) { c.Listen.AzureTable = ":10002" }}, []string{"listen.azure_table"}},
		{"azure on a pod IP, Azurite backend", []func(*Config){azureBackend, emulator, func(c *Config) { c.Listen.AzureTable = "10.1.2.3:10002" }}, []string{"listen.azure_table"}},
		{"azure anonymous", []func(*Config){azureBackend, func(c *Config) {
			c.Listen.AzureTable, c.Frontend.Azure.Key, c.Frontend.Azure.AllowAnonymous = "0.0.0.0:10002", "", true
		}}, []string{"listen.azure_table"}},
		{"azure secret key, plaintext", []func(*Config){azureBackend, func(c *Config) { c.Listen.AzureTable, c.Frontend.Azure.Key = "0.0.0.0:10002", secretKey }}, []string{"listen.azure_table"}},
		{"azure secret key, TLS", []func(*Config){azureBackend, withTLS, func(c *Config) { c.Listen.AzureTable, c.Frontend.Azure.Key = "0.0.0.0:10002", secretKey }}, nil},
		{"azure secret key, plaintext, allow_remote", []func(*Config){azureBackend, func(c *Config) {
			c.Listen.AzureTable, c.Frontend.Azure.Key, c.Listen.AllowRemote = "0.0.0.0:10002", secretKey, true
		}}, nil},
		{"azure secret key and require_sas, plaintext", []func(*Config){azureBackend, func(c *Config) {
			c.Listen.AzureTable, c.Frontend.Azure.Key, c.Frontend.Azure.RequireSAS = "0.0.0.0:10002", secretKey, true
		}}, []string{"listen.azure_table"}},
		{"azure secret key and require_sas, TLS", []func(*Config){azureBackend, withTLS, func(c *Config) {
			c.Listen.AzureTable, c.Frontend.Azure.Key, c.Frontend.Azure.RequireSAS = "0.0.0.0:10002", secretKey, true
		}}, nil},
		{"azure development key, TLS", []func(*Config){azureBackend, withTLS, func(c *Config) { c.Listen.AzureTable = "0.0.0.0:10002" }}, []string{"listen.azure_table"}},
		{"azure allow_remote", []func(*Config){azureBackend, func(c *Config) { c.Listen.AzureTable, c.Listen.AllowRemote = "0.0.0.0:10002", true }}, nil},
		{"datastore listener unused by azure", []func(*Config){azureBackend, func(c *Config) { c.Listen.Datastore = "0.0.0.0:8081" }}, nil},
		{"datastore on all interfaces", []func(*Config){datastoreBackend, func(c *Config) { c.Listen.Datastore = "[::]:8081" }}, []string{"listen.datastore"}},
		{"datastore by name, emulator backend", []func(*Config){datastoreBackend, emulator, func(c *Config) { c.Listen.Datastore = "nemo:8081" }}, []string{"listen.datastore"}},
		{"datastore token, plaintext", []func(*Config){datastoreBackend, func(c *Config) { c.Listen.Datastore, c.Frontend.Datastore.Token = "0.0.0.0:8081", "0123456789abcdefgh" }}, []string{"listen.datastore"}},
		{"datastore token, TLS", []func(*Config){datastoreBackend, withTLS, func(c *Config) { c.Listen.Datastore, c.Frontend.Datastore.Token = "0.0.0.0:8081", "0123456789abcdefgh" }}, nil},
		{"datastore token, plaintext, allow_remote", []func(*Config){datastoreBackend, func(c *Config) {
			c.Listen.Datastore, c.Frontend.Datastore.Token, c.Listen.AllowRemote = "0.0.0.0:8081", "0123456789abcdefgh", true
		}}, nil},
		{"embedded, token, plaintext", []func(*Config){func(c *Config) { c.Listen.Datastore, c.Frontend.Datastore.Token = "0.0.0.0:8081", "0123456789abcdefgh" }}, nil},
		{"datastore allow_remote", []func(*Config){datastoreBackend, func(c *Config) { c.Listen.Datastore, c.Listen.AllowRemote = "0.0.0.0:8081", true }}, nil},
		{"azure listener unused by datastore", []func(*Config){datastoreBackend, func(c *Config) { c.Listen.AzureTable = "0.0.0.0:10002" }}, nil},
		{"admin", []func(*Config){datastoreBackend, func(c *Config) { c.Listen.Admin = "0.0.0.0:9090" }}, []string{"listen.admin"}},
		{"all three", []func(*Config){azureBackend, func(c *Config) {
			c.Listen.AzureTable, c.Listen.Datastore, c.Listen.Admin = ":10002", ":8081", ":9090"
		}}, []string{"listen.admin", "listen.azure_table"}},
		{"embedded, all open", []func(*Config){func(c *Config) {
			c.Listen.AzureTable, c.Listen.Datastore, c.Listen.Admin = ":10002", ":8081", ":9090"
		}}, []string{"listen.admin"}},
		{"embedded, frontends open, admin allowed", []func(*Config){func(c *Config) {
			c.Listen.AzureTable, c.Listen.Datastore, c.Listen.Admin, c.Listen.AdminAllowRemote = ":10002", ":8081", ":9090", true
		}}, nil},
		{"loopback", []func(*Config){azureBackend, func(c *Config) { c.Listen.AzureTable, c.Listen.Admin = "localhost:10002", "[::1]:9090" }}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			for _, e := range tc.edit {
				e(&c)
			}
			var got []string
			for _, fe := range c.validate() {
				got = append(got, fe.Key)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("refused %v, want %v: %v", got, tc.want, c.Validate())
			}
		})
	}
}

// withTLS sets listen.tls (the files are read at start, not by Validate).
func withTLS(c *Config) { c.Listen.TLS.CertFile, c.Listen.TLS.KeyFile = "/tls/tls.crt", "/tls/tls.key" }

// TestExposureMessage checks the refusal's wording: the setting, its
// variable, why it is open and the safe alternatives.
func TestExposureMessage(t *testing.T) {
	c := Defaults()
	azureBackend(&c)
	c.Listen.AzureTable = "0.0.0.0:10002"
	want := `listen.azure_table (NEMO_LISTEN_AZURE_TABLE): "0.0.0.0:10002" is not a loopback address and this listener accepts requests signed with Azurite's published development key (frontend.azure.key is its default), ` +
		`so in front of the aztable backend anyone who can reach it gets at the store with nemo's credentials. ` +
		`Bind it to a loopback address such as 127.0.0.1 (the pod's own containers reach it there); ` +
		`or set frontend.azure.key to a secret key (NEMO_FRONTEND_AZURE_KEY from a Secret), and frontend.azure.require_sas: true to give remote clients only shared access signatures; ` +
		`or set listen.allow_remote: true to accept the risk`
	err := c.Validate()
	if err == nil || err.Error() != want || !errors.Is(err, ErrInvalid) {
		t.Fatalf("got:\n%v\nwant:\n%s", err, want)
	}
	c = Defaults()
	datastoreBackend(&c)
	c.Listen.Datastore, c.Listen.Admin = "10.0.0.5:8081", "10.0.0.5:9090"
	msg := c.Validate().Error()
	for _, s := range []string{
		`listen.datastore (NEMO_LISTEN_DATASTORE): "10.0.0.5:8081" is not a loopback address and this listener has no client authentication (frontend.datastore.token is empty)`,
		`or set frontend.datastore.token (NEMO_FRONTEND_DATASTORE_TOKEN from a Secret), which remote clients send as "authorization: Bearer <token>"; or set listen.allow_remote: true`,
		`listen.admin (NEMO_LISTEN_ADMIN): "10.0.0.5:9090" is not a loopback address: the admin listener serves pprof, buffered records and /quitquitquit; bind 127.0.0.1, or set listen.admin_allow_remote: true`,
		`(the pod's own containers reach it there); or set frontend.datastore.token (NEMO_FRONTEND_DATASTORE_TOKEN from a Secret)`,
	} {
		if !strings.Contains(msg, s) {
			t.Errorf("message lacks %q:\n%s", s, msg)
		}
	}
	c.Listen.Admin, c.Frontend.Datastore.Token = "127.0.0.1:9090", "0123456789abcdefgh"
	want = `listen.datastore (NEMO_LISTEN_DATASTORE): "10.0.0.5:8081" is not a loopback address and listen.tls is not set, so remote clients would send the bearer token frontend.datastore.token in the clear: ` +
		`in front of the datastore backend anyone on the network path could replay what they send. ` +
		`Bind it to a loopback address such as 127.0.0.1 (the pod's own containers reach it there); ` +
		`or set listen.tls.cert_file and listen.tls.key_file (NEMO_LISTEN_TLS_CERT_FILE, NEMO_LISTEN_TLS_KEY_FILE: a certificate and key, e.g. a cert-manager Secret mounted in the pod) so that remote clients must use TLS; ` +
		`or set listen.allow_remote: true to accept the risk`
	if err := c.Validate(); err == nil || err.Error() != want {
		t.Fatalf("got:\n%v\nwant:\n%s", err, want)
	}
}

// TestExposureThroughLoad: the settings by their environment variables,
// as a Kubernetes manifest sets them.
func TestExposureThroughLoad(t *testing.T) {
	base := map[string]string{
		"NEMO_BACKEND_TYPE":                    "datastore",
		"NEMO_BACKEND_DATASTORE_PROJECT":       "p",
		"NEMO_BACKEND_DATASTORE_EMULATOR_HOST": "127.0.0.1:8080",
		"NEMO_LISTEN_DATASTORE":                "0.0.0.0:8081",
	}
	load := func(extra ...string) error {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		for i := 0; i < len(extra); i += 2 {
			env[extra[i]] = extra[i+1]
		}
		_, err := Load(LoadOptions{Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
		return err
	}
	if err := load(); err == nil || !strings.Contains(err.Error(), "listen.datastore (NEMO_LISTEN_DATASTORE)") {
		t.Errorf("open Datastore listener loaded: %v", err)
	}
	if err := load("NEMO_LISTEN_ALLOW_REMOTE", "true"); err != nil {
		t.Errorf("allow_remote: %v", err)
	}
	if err := load("NEMO_FRONTEND_DATASTORE_TOKEN", "Zm9vYmFyYmF6cXV4cXV1eA=="); err == nil || !strings.Contains(err.Error(), "listen.tls is not set") {
		t.Errorf("token over plaintext loaded: %v", err)
	}
	if err := load("NEMO_FRONTEND_DATASTORE_TOKEN", "Zm9vYmFyYmF6cXV4cXV1eA==",
		"NEMO_LISTEN_TLS_CERT_FILE", "/tls/tls.crt", "NEMO_LISTEN_TLS_KEY_FILE", "/tls/tls.key"); err != nil {
		t.Errorf("token over TLS: %v", err)
	}
}

func TestTokenForm(t *testing.T) {
	for token, ok := range map[string]bool{
		"":                                true, // unset
		"0123456789abcdef":                true,
		"Zm9vYmFyYmF6cXV4cXV1eA==":        true,
		"a-b.c_d~e+f/g0123456789=":        true,
		"0123456789abcde":                 false, // 15 characters
		"0123456789abcdef ghij":           false,
		"0123456789abcdef\n":              false,
		"0123456789abcdef=x":              false,
		"0123456789abcdefé":               false,
		"===============================": false,
	} {
		c := Defaults()
		c.Frontend.Datastore.Token = token
		err := c.Validate()
		if (err == nil) != ok {
			t.Errorf("token %q: %v, want ok=%v", token, err, ok)
		}
		if err != nil && strings.Contains(err.Error(), token) {
			t.Errorf("token %q: the message quotes it: %v", token, err)
		}
	}
}
