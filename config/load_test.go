package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/nemocache/nemo/internal/enum"
)

// mapEnv is an Env lookup over m, so tests never read or change the
// process environment.
func mapEnv(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "nemo.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// nestedYAML renders `key: value` for a dotted key as nested YAML.
func nestedYAML(key, value string) string {
	parts := strings.Split(key, ".")
	var sb strings.Builder
	for i, p := range parts {
		sb.WriteString(strings.Repeat("  ", i) + p + ":")
		if i == len(parts)-1 {
			sb.WriteString(" " + value)
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

func parsedFlags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("nemo", pflag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

func fieldValue(c Config, key string) any {
	return reflect.ValueOf(c).FieldByIndex(schemaByKey[key].index).Interface()
}

func mustLoad(t *testing.T, opts LoadOptions) Config {
	t.Helper()
	if opts.Env == nil {
		opts.Env = mapEnv(nil)
	}
	c, err := Load(opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

// TestPrecedence checks default < file < env < flag for keys of each type.
func TestPrecedence(t *testing.T) {
	for _, tc := range []struct {
		key               string
		file, env         string
		flag, flagVal     string // flag empty: the key has no flag
		wantDef, wantFile any
		wantEnv, wantFlag any
	}{
		{key: "cache.max_bytes", file: "1GiB", env: "512MiB", flag: "cache-max-bytes", flagVal: "300MB",
			wantDef: 256 * MiB, wantFile: GiB, wantEnv: 512 * MiB, wantFlag: ByteSize(300e6)},
		{key: "log.level", file: "warn", env: "debug", flag: "log-level", flagVal: "error",
			wantDef: "info", wantFile: "warn", wantEnv: "debug", wantFlag: "error"},
		{key: "wal.write_mode", file: "through", env: "back", flag: "write-mode", flagVal: "through",
			wantDef: enum.WriteBack, wantFile: enum.WriteThrough, wantEnv: enum.WriteBack, wantFlag: enum.WriteThrough},
		{key: "listen.admin", file: "127.0.0.1:9191", env: "127.0.0.1:9292", flag: "listen-admin", flagVal: "127.0.0.1:9393",
			wantDef: "127.0.0.1:9090", wantFile: "127.0.0.1:9191", wantEnv: "127.0.0.1:9292", wantFlag: "127.0.0.1:9393"},
		{key: "backend.embedded.data_dir", file: "/var/lib/a", env: "/var/lib/b", flag: "data-dir", flagVal: "/var/lib/c",
			wantDef: "./nemo-data", wantFile: "/var/lib/a", wantEnv: "/var/lib/b", wantFlag: "/var/lib/c"},
		{key: "cache.flush_interval", file: "2s", env: "250ms",
			wantDef: time.Second, wantFile: 2 * time.Second, wantEnv: 250 * time.Millisecond},
		{key: "wal.group_commit", file: "false", env: "true",
			wantDef: true, wantFile: false, wantEnv: true},
		{key: "backend.embedded.no_sync", file: "true", env: "false",
			wantDef: false, wantFile: true, wantEnv: false},
		{key: "cache.evict_workers", file: "4", env: "8",
			wantDef: 2, wantFile: 4, wantEnv: 8},
		{key: "txn.pcl_partitions", file: "16", env: "32",
			wantDef: 65536, wantFile: 16, wantEnv: 32},
		{key: "listen.max_request_bytes", file: "4MiB", env: "5242880",
			wantDef: 10 * MiB, wantFile: 4 * MiB, wantEnv: 5 * MiB},
	} {
		t.Run(tc.key, func(t *testing.T) {
			file := writeFile(t, nestedYAML(tc.key, tc.file))
			env := mapEnv(map[string]string{EnvName(tc.key): tc.env})
			check := func(layer string, c Config, want any) {
				t.Helper()
				if got := fieldValue(c, tc.key); !reflect.DeepEqual(got, want) {
					t.Errorf("%s: %s = %#v, want %#v", layer, tc.key, got, want)
				}
			}
			// Registered but unset flags must not shadow lower layers.
			check("default", mustLoad(t, LoadOptions{Flags: parsedFlags(t)}), tc.wantDef)
			check("file", mustLoad(t, LoadOptions{Flags: parsedFlags(t), File: file}), tc.wantFile)
			check("env", mustLoad(t, LoadOptions{Flags: parsedFlags(t), File: file, Env: env}), tc.wantEnv)
			if tc.flag != "" {
				fs := parsedFlags(t, "--"+tc.flag+"="+tc.flagVal)
				check("flag", mustLoad(t, LoadOptions{Flags: fs, File: file, Env: env}), tc.wantFlag)
			}
		})
	}
}

// TestLayersCombine loads one key from each layer at once.
func TestLayersCombine(t *testing.T) {
	file := writeFile(t, "cache:\n  max_bytes: 1GiB\n  evict_batch: 32\nlog:\n  level: warn\n")
	env := mapEnv(map[string]string{"NEMO_CACHE_EVICT_BATCH": "16", "NEMO_LOG_FORMAT": "text"})
	c := mustLoad(t, LoadOptions{Flags: parsedFlags(t, "--log-level", "debug"), File: file, Env: env})
	want := Defaults()
	want.Cache.MaxBytes = GiB
	want.Cache.EvictBatch = 16
	want.Log = Log{Level: "debug", Format: LogFormatText}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("Load =\n%+v\nwant\n%+v", c, want)
	}
}

func TestDurations(t *testing.T) {
	for _, tc := range []struct {
		yaml, env string
		want      time.Duration
		wantErr   string
	}{
		{yaml: "1s", want: time.Second},
		{yaml: "1m30s", want: 90 * time.Second},
		{yaml: "250ms", want: 250 * time.Millisecond},
		{yaml: `"2h"`, want: 2 * time.Hour},
		{env: "1.5s", want: 1500 * time.Millisecond},
		{env: " 3s ", want: 3 * time.Second},
		{yaml: "0", want: 0, wantErr: "cache.flush_interval (NEMO_CACHE_FLUSH_INTERVAL): must be positive; got 0s"},
		{yaml: "5", wantErr: `cache.flush_interval (NEMO_CACHE_FLUSH_INTERVAL): duration 5 has no unit: write e.g. "5s" or "5ms"`},
		{yaml: "2.5", wantErr: `cache.flush_interval (NEMO_CACHE_FLUSH_INTERVAL): duration 2.5 has no unit: write e.g. "2.5s" or "2.5ms"`},
		{env: "5", wantErr: `cache.flush_interval (NEMO_CACHE_FLUSH_INTERVAL): invalid duration "5": want a number with a unit (ns, us, ms, s, m, h) such as "5s"`},
		{env: "soon", wantErr: `cache.flush_interval (NEMO_CACHE_FLUSH_INTERVAL): invalid duration "soon": want a number with a unit (ns, us, ms, s, m, h) such as "5s"`},
		{yaml: "5 s", wantErr: `cache.flush_interval (NEMO_CACHE_FLUSH_INTERVAL): invalid duration "5 s": want a number with a unit (ns, us, ms, s, m, h) such as "5s"`},
		{yaml: "-1s", wantErr: "cache.flush_interval (NEMO_CACHE_FLUSH_INTERVAL): must be positive; got -1s"},
		{yaml: "[1s]", wantErr: "cache.flush_interval (NEMO_CACHE_FLUSH_INTERVAL): "},
	} {
		opts := LoadOptions{Env: mapEnv(map[string]string{"NEMO_CACHE_FLUSH_INTERVAL": tc.env})}
		if tc.yaml != "" {
			opts.File = writeFile(t, "cache:\n  flush_interval: "+tc.yaml+"\n")
		}
		c, err := Load(opts)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n") {
				t.Errorf("yaml %q env %q: error %v, want exactly one starting %q", tc.yaml, tc.env, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("yaml %q env %q: %v", tc.yaml, tc.env, err)
		case c.Cache.FlushInterval != tc.want:
			t.Errorf("yaml %q env %q: flush_interval = %v, want %v", tc.yaml, tc.env, c.Cache.FlushInterval, tc.want)
		}
	}
}

func TestSizesThroughLoad(t *testing.T) {
	for _, tc := range []struct {
		yaml    string
		want    ByteSize
		wantErr string
	}{
		{yaml: "1GiB", want: GiB},
		{yaml: "1073741824", want: GiB},
		{yaml: "1e9", want: 1e9},
		{yaml: `"300 MB"`, want: 300e6},
		{yaml: "512Mi", want: 512 * MiB},
		{yaml: "-1", wantErr: "cache.max_bytes (NEMO_CACHE_MAX_BYTES): byte size -1 is negative"},
		{yaml: "lots", wantErr: `cache.max_bytes (NEMO_CACHE_MAX_BYTES): byte size "lots": want a non-negative number with an optional unit B, KB, KiB, MB, MiB, GB, GiB, TB or TiB`},
		{yaml: "1.5", wantErr: "cache.max_bytes (NEMO_CACHE_MAX_BYTES): byte size 1.5 is not a non-negative whole number of bytes"},
		{yaml: "0", wantErr: "cache.max_bytes (NEMO_CACHE_MAX_BYTES): must be positive; got 0B"},
	} {
		c, err := Load(LoadOptions{Env: mapEnv(nil), File: writeFile(t, "cache:\n  max_bytes: "+tc.yaml+"\n")})
		switch {
		case tc.wantErr != "":
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("max_bytes %s: error %v, want %q", tc.yaml, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("max_bytes %s: %v", tc.yaml, err)
		case c.Cache.MaxBytes != tc.want:
			t.Errorf("max_bytes %s = %d, want %d", tc.yaml, c.Cache.MaxBytes, tc.want)
		}
	}
}

// TestLoadReportsAllProblems: decode errors from every layer and Validate's
// findings come back together, and a value that failed to decode is not
// reported a second time by Validate.
func TestLoadReportsAllProblems(t *testing.T) {
	file := writeFile(t, "cache:\n  max_bytes: lots\n  max_byte: 1GiB\nlog:\n  level: loud\n")
	env := mapEnv(map[string]string{
		"NEMO_CACHE_FLUSH_INTERVAL": "soon",
		"NEMO_WAL_GROUP_COMMIT":     "maybe",
		"NEMO_TXN_PHANTOM":          "mvcc",
	})
	_, err := Load(LoadOptions{Env: env, File: file, Flags: parsedFlags(t, "--listen-admin=nowhere")})
	if err == nil {
		t.Fatal("Load succeeded")
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("errors.Is(err, ErrInvalid) = false for %v", err)
	}
	want := []string{
		"cache.max_byte: unknown key in " + file + " (did you mean cache.max_bytes?)",
		`cache.flush_interval (NEMO_CACHE_FLUSH_INTERVAL): invalid duration "soon": want a number with a unit (ns, us, ms, s, m, h) such as "5s"`,
		`cache.max_bytes (NEMO_CACHE_MAX_BYTES): byte size "lots": want a non-negative number with an optional unit B, KB, KiB, MB, MiB, GB, GiB, TB or TiB`,
		`txn.phantom (NEMO_TXN_PHANTOM): must be one of "nextkey", "pcl"; got "mvcc"`,
		`listen.admin (NEMO_LISTEN_ADMIN): must be host:port with a numeric port; got "nowhere"`,
		`log.level (NEMO_LOG_LEVEL): must be one of "debug", "info", "warn", "error"; got "loud"`,
	}
	lines := strings.Split(err.Error(), "\n")
	// mapstructure's wording for bad booleans is its own; check the key only.
	var rest []string
	for _, l := range lines {
		if strings.HasPrefix(l, "wal.group_commit (NEMO_WAL_GROUP_COMMIT): ") {
			continue
		}
		rest = append(rest, l)
	}
	if len(rest) != len(lines)-1 {
		t.Errorf("want one wal.group_commit error in:\n%v", err)
	}
	if !reflect.DeepEqual(sorted(rest), sorted(want)) {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(rest, "\n"), strings.Join(want, "\n"))
	}
}

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

func TestUnknownKeys(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // with PATH for the file name
	}{
		{"typo", "cache:\n  max_byte: 1GiB\n", []string{"cache.max_byte: unknown key in PATH (did you mean cache.max_bytes?)"}},
		{"misplaced", "cache:\n  data_dir: /x\n", []string{"cache.data_dir: unknown key in PATH (did you mean backend.embedded.data_dir?)"}},
		{"top level", "logging:\n  level: debug\n", []string{"logging: unknown key in PATH"}},
		{"deep", "backend:\n  aztable:\n    acount: a\n", []string{"backend.aztable.acount: unknown key in PATH (did you mean backend.aztable.account?)"}},
		{"under leaf", "log:\n  level:\n    value: info\n", []string{"log.level (NEMO_LOG_LEVEL): "}},
		{"scalar section", "cache: 5\n", []string{"cache: in PATH must be a mapping of keys, got int"}},
		{"several", "zzz: 1\ncache:\n  bogus_thing: 1\n  policy: nemo\n", []string{
			"cache.bogus_thing: unknown key in PATH",
			"zzz: unknown key in PATH",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, tc.yaml)
			_, err := Load(LoadOptions{Env: mapEnv(nil), File: path})
			if err == nil {
				t.Fatal("Load accepted the file")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("not ErrInvalid: %v", err)
			}
			got := strings.Split(err.Error(), "\n")
			if len(got) != len(tc.want) {
				t.Fatalf("errors:\n%v\nwant %d", err, len(tc.want))
			}
			for i, w := range tc.want {
				w = strings.ReplaceAll(w, "PATH", path)
				if got[i] != w && !(strings.HasSuffix(w, ": ") && strings.HasPrefix(got[i], w)) {
					t.Errorf("error %d = %q, want %q", i, got[i], w)
				}
			}
		})
	}
}

// TestEmptySections: a section whose keys are all commented out is valid
// and does not hide environment values beneath it.
func TestEmptySections(t *testing.T) {
	file := writeFile(t, "# nothing\nbackend:\n  aztable:\n    # account: x\ncache:\n")
	c := mustLoad(t, LoadOptions{File: file, Env: mapEnv(map[string]string{"NEMO_BACKEND_AZTABLE_ACCOUNT": "acct"})})
	want := Defaults()
	want.Backend.AzTable.Account = "acct"
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("Load = %+v", c)
	}
	if c := mustLoad(t, LoadOptions{File: writeFile(t, "# only comments\n")}); !reflect.DeepEqual(c, Defaults()) {
		t.Fatalf("comment-only file: %+v", c)
	}
}

func TestEveryKeyHasAnEnvVar(t *testing.T) {
	// A value of each type that differs from every default.
	byType := map[reflect.Kind]string{
		reflect.String:  "x",
		reflect.Int:     "7",
		reflect.Int64:   "3",
		reflect.Float64: "0.25",
	}
	for _, k := range schema {
		def := fieldValue(Defaults(), k.key)
		raw := byType[reflect.TypeOf(def).Kind()]
		switch def := def.(type) {
		case bool:
			raw = fmt.Sprint(!def)
		case ByteSize:
			raw = "3MiB"
		case time.Duration:
			raw = "7s"
		}
		if raw == "" {
			t.Fatalf("%s: no test value for %T", k.key, def)
		}
		// decode, not Load: a lone "x" is no valid backend type, but it
		// must still arrive.
		c, errs, err := decode(LoadOptions{Env: mapEnv(map[string]string{EnvName(k.key): raw})})
		if err != nil || len(errs) > 0 {
			t.Fatalf("%s=%s: %v %v", EnvName(k.key), raw, err, errs.join())
		}
		if got := fieldValue(c, k.key); reflect.DeepEqual(got, def) {
			t.Errorf("%s=%s ignored; %s is still the default %v", EnvName(k.key), raw, k.key, got)
		}
	}
}

func TestDatastoreEmulatorHostEnv(t *testing.T) {
	base := map[string]string{"NEMO_BACKEND_TYPE": "datastore", "NEMO_BACKEND_DATASTORE_PROJECT": "p"}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	c := mustLoad(t, LoadOptions{Env: mapEnv(with(map[string]string{"DATASTORE_EMULATOR_HOST": "localhost:8432"}))})
	if got := c.Backend.Datastore.EmulatorHost; got != "localhost:8432" {
		t.Errorf("DATASTORE_EMULATOR_HOST: emulator_host = %q", got)
	}
	c = mustLoad(t, LoadOptions{Env: mapEnv(with(map[string]string{
		"DATASTORE_EMULATOR_HOST":              "localhost:8432",
		"NEMO_BACKEND_DATASTORE_EMULATOR_HOST": "emu:8000",
	}))})
	if got := c.Backend.Datastore.EmulatorHost; got != "emu:8000" {
		t.Errorf("NEMO_ variable must win: emulator_host = %q", got)
	}
	// The application's variable leaking into nemo is caught.
	_, err := Load(LoadOptions{Env: mapEnv(with(map[string]string{"DATASTORE_EMULATOR_HOST": "localhost:8081"}))})
	want := `backend.datastore.emulator_host (NEMO_BACKEND_DATASTORE_EMULATOR_HOST): "localhost:8081" is nemo's own Datastore listener (listen.datastore "127.0.0.1:8081"), so every miss would loop back; point it at a real emulator or unset DATASTORE_EMULATOR_HOST for nemo`
	if err == nil || err.Error() != want {
		t.Errorf("loop: %v\nwant %s", err, want)
	}
}

// TestMaxBytesAlone: NEMO_CACHE_MAX_BYTES alone is a valid configuration
// from MinDerivedBudget up; below it the one problem says what to set.
func TestMaxBytesAlone(t *testing.T) {
	for _, size := range []string{"64KiB", "1MiB", "32MiB", "1GiB"} {
		if _, err := Load(LoadOptions{Env: mapEnv(map[string]string{"NEMO_CACHE_MAX_BYTES": size})}); err != nil {
			t.Errorf("NEMO_CACHE_MAX_BYTES=%s alone: %v", size, err)
		}
	}
	_, err := Load(LoadOptions{Env: mapEnv(map[string]string{"NEMO_CACHE_MAX_BYTES": "32KiB"})})
	want := "cache.max_bytes (NEMO_CACHE_MAX_BYTES): must be at least 64KiB unless cache.max_key_bytes and cache.max_value_bytes are both set"
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Errorf("32KiB alone: %v\nwant one error starting %q", err, want)
	}
	c := mustLoad(t, LoadOptions{Env: mapEnv(map[string]string{
		"NEMO_CACHE_MAX_BYTES": "32KiB", "NEMO_CACHE_MAX_KEY_BYTES": "1KiB", "NEMO_CACHE_MAX_VALUE_BYTES": "4KiB"})})
	if c.MaxDirtyBytes() != 8*KiB {
		t.Errorf("32KiB with its limits set: max_dirty_bytes %s, want 8KiB", c.MaxDirtyBytes())
	}
}

func TestEmptyEnvIsUnset(t *testing.T) {
	file := writeFile(t, "log:\n  level: warn\n")
	c := mustLoad(t, LoadOptions{File: file, Env: mapEnv(map[string]string{"NEMO_LOG_LEVEL": ""})})
	if c.Log.Level != "warn" {
		t.Errorf("level = %q, want the file's warn", c.Log.Level)
	}
}

// TestFaultThroughLoad: backend.fault from the environment, every problem
// at once with its variable.
func TestFaultThroughLoad(t *testing.T) {
	c := mustLoad(t, LoadOptions{Env: mapEnv(map[string]string{
		"NEMO_BACKEND_FAULT_ENABLED": "true", "NEMO_BACKEND_FAULT_LATENCY": "20ms", "NEMO_BACKEND_FAULT_ERROR_RATE": "0.05",
		"NEMO_BACKEND_FAULT_ERROR": "timeout", "NEMO_BACKEND_FAULT_OUTAGE_SCHEDULE": "1m+10s", "NEMO_BACKEND_FAULT_SEED": "42"})})
	want := FaultBackend{Enabled: true, Seed: 42, Latency: 20 * time.Millisecond, ErrorRate: 0.05, Error: FaultTimeout,
		OutageSchedule: "1m+10s", OutageMode: OutageFail}
	if c.Backend.Fault != want {
		t.Errorf("fault = %+v, want %+v", c.Backend.Fault, want)
	}
	_, err := Load(LoadOptions{Env: mapEnv(map[string]string{
		"NEMO_BACKEND_FAULT_ENABLED": "true", "NEMO_BACKEND_FAULT_ERROR_RATE": "often",
		"NEMO_BACKEND_FAULT_OUTAGE_EVERY": "1m", "NEMO_BACKEND_FAULT_OUTAGE_MODE": "nap"})})
	if err == nil {
		t.Fatal("Load accepted a bad fault plan")
	}
	lines := strings.Split(err.Error(), "\n")
	wantLines := []string{
		"backend.fault.error_rate (NEMO_BACKEND_FAULT_ERROR_RATE): ",
		"backend.fault.outage_for (NEMO_BACKEND_FAULT_OUTAGE_FOR): must be set with backend.fault.outage_every (1m0s): how long each outage lasts",
		`backend.fault.outage_mode (NEMO_BACKEND_FAULT_OUTAGE_MODE): must be one of "fail", "hang"; got "nap"`,
	}
	if len(lines) != len(wantLines) {
		t.Fatalf("errors:\n%v\nwant %d", err, len(wantLines))
	}
	for i, w := range wantLines {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d = %q, want %q", i, lines[i], w)
		}
	}
}

// TestListenerOff: an empty NEMO_LISTEN_DATASTORE or NEMO_LISTEN_AZURE_TABLE
// disables that listener (unlike other empty variables, which count as
// unset), and "off" does in every layer.
func TestListenerOff(t *testing.T) {
	file := writeFile(t, "listen:\n  datastore: 127.0.0.1:9999\n  azure_table: 127.0.0.1:9998\n")
	for _, tc := range []struct {
		name  string
		opts  LoadOptions
		azure string // want listen.azure_table; listen.datastore must be ""
	}{
		{"empty env", LoadOptions{Env: mapEnv(map[string]string{"NEMO_LISTEN_DATASTORE": ""})}, "127.0.0.1:10002"},
		{"empty env over the file", LoadOptions{File: file, Env: mapEnv(map[string]string{"NEMO_LISTEN_DATASTORE": ""})}, "127.0.0.1:9998"},
		{"off in env", LoadOptions{Env: mapEnv(map[string]string{"NEMO_LISTEN_DATASTORE": "off"})}, "127.0.0.1:10002"},
		{"off in the file", LoadOptions{File: writeFile(t, "listen:\n  datastore: off\n")}, "127.0.0.1:10002"},
		{"empty in the file", LoadOptions{File: writeFile(t, "listen:\n  datastore: \"\"\n")}, "127.0.0.1:10002"},
		{"empty flag", LoadOptions{Flags: parsedFlags(t, "--listen-datastore=")}, "127.0.0.1:10002"},
		{"OFF flag", LoadOptions{Flags: parsedFlags(t, "--listen-datastore", "OFF")}, "127.0.0.1:10002"},
	} {
		c := mustLoad(t, tc.opts)
		if c.Listen.Datastore != "" || c.Listen.AzureTable != tc.azure {
			t.Errorf("%s: datastore %q, azure_table %q; want \"\", %q", tc.name, c.Listen.Datastore, c.Listen.AzureTable, tc.azure)
		}
	}
	// Other empty variables still count as unset.
	c := mustLoad(t, LoadOptions{File: file, Env: mapEnv(map[string]string{"NEMO_LISTEN_ADMIN": "", "NEMO_LOG_LEVEL": ""})})
	if c.Listen.Admin != "127.0.0.1:9090" || c.Listen.Datastore != "127.0.0.1:9999" {
		t.Errorf("empty NEMO_LISTEN_ADMIN: admin %q, datastore %q", c.Listen.Admin, c.Listen.Datastore)
	}
	_, err := Load(LoadOptions{Env: mapEnv(map[string]string{"NEMO_LISTEN_DATASTORE": "", "NEMO_LISTEN_AZURE_TABLE": "off"})})
	want := "listen.azure_table (NEMO_LISTEN_AZURE_TABLE): is empty and so is listen.datastore; enable at least one frontend"
	if err == nil || err.Error() != want {
		t.Errorf("both off: %v, want %s", err, want)
	}
}

func TestConfigFileChoice(t *testing.T) {
	a := writeFile(t, "log:\n  level: warn\n")
	b := writeFile(t, "log:\n  level: error\n")
	c := writeFile(t, "log:\n  level: debug\n")
	env := mapEnv(map[string]string{"NEMO_CONFIG": a})
	if got := mustLoad(t, LoadOptions{Env: env}).Log.Level; got != "warn" {
		t.Errorf("NEMO_CONFIG: level %q", got)
	}
	flags := parsedFlags(t, "--config", b)
	if got := mustLoad(t, LoadOptions{Env: env, Flags: flags}).Log.Level; got != "error" {
		t.Errorf("--config over NEMO_CONFIG: level %q", got)
	}
	if got := mustLoad(t, LoadOptions{Env: env, Flags: flags, File: c}).Log.Level; got != "debug" {
		t.Errorf("File over --config: level %q", got)
	}

	_, err := Load(LoadOptions{Env: mapEnv(nil), File: filepath.Join(t.TempDir(), "missing.yaml")})
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrInvalid) {
		t.Errorf("missing file: %v", err)
	}
	_, err = Load(LoadOptions{Env: mapEnv(nil), File: writeFile(t, "cache: [unclosed\n")})
	if err == nil || errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "config: parse ") {
		t.Errorf("malformed YAML: %v", err)
	}
}

func TestRegisterFlags(t *testing.T) {
	fs := parsedFlags(t)
	for _, f := range flagKeys {
		fl := fs.Lookup(f.name)
		if fl == nil {
			t.Fatalf("--%s not registered", f.name)
		}
		if want := fmtDefault(f.key); fl.DefValue != want {
			t.Errorf("--%s default %q, want %q", f.name, fl.DefValue, want)
		}
		if !strings.Contains(fl.Usage, EnvName(f.key)) {
			t.Errorf("--%s usage %q does not name %s", f.name, fl.Usage, EnvName(f.key))
		}
	}
	for _, name := range []string{"config", "backend", "data-dir", "cache-max-bytes", "cache-policy",
		"listen-azure-table", "listen-datastore", "listen-admin", "log-level", "write-mode"} {
		if fs.Lookup(name) == nil {
			t.Errorf("--%s missing", name)
		}
	}
	// A partial flag set (a subcommand registering its own) is fine.
	own := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	own.String("log-level", "", "")
	if err := own.Parse([]string{"--log-level=debug"}); err != nil {
		t.Fatal(err)
	}
	if got := mustLoad(t, LoadOptions{Flags: own}).Log.Level; got != "debug" {
		t.Errorf("partial flag set: level %q", got)
	}
}

func fmtDefault(key string) string {
	v := fieldValue(Defaults(), key)
	if s, ok := v.(interface{ String() string }); ok {
		return s.String()
	}
	return fmt.Sprint(v)
}

// TestInMemoryFlag: --in-memory is a boolean flag (no value needed) and
// NEMO_BACKEND_EMBEDDED_IN_MEMORY its variable; either makes InMemory
// true for the embedded store only.
func TestInMemoryFlag(t *testing.T) {
	if c := mustLoad(t, LoadOptions{Flags: parsedFlags(t, "--in-memory")}); !c.Backend.Embedded.InMemory || !c.InMemory() {
		t.Errorf("--in-memory: in_memory %t, InMemory() %t", c.Backend.Embedded.InMemory, c.InMemory())
	}
	if c := mustLoad(t, LoadOptions{Flags: parsedFlags(t, "--in-memory=false"), Env: mapEnv(map[string]string{"NEMO_BACKEND_EMBEDDED_IN_MEMORY": "true"})}); c.InMemory() {
		t.Error("--in-memory=false does not beat the environment")
	}
	if c := mustLoad(t, LoadOptions{Env: mapEnv(map[string]string{"NEMO_BACKEND_EMBEDDED_IN_MEMORY": "true"})}); !c.InMemory() {
		t.Error("NEMO_BACKEND_EMBEDDED_IN_MEMORY=true: not in memory")
	}
	c := mustLoad(t, LoadOptions{Env: mapEnv(map[string]string{"NEMO_BACKEND_EMBEDDED_IN_MEMORY": "true",
		"NEMO_BACKEND_TYPE": "datastore", "NEMO_BACKEND_DATASTORE_PROJECT": "p"})})
	if c.InMemory() {
		t.Error("InMemory() true in front of Datastore")
	}
}

func TestYAMLRoundTrip(t *testing.T) {
	c := Defaults()
	c.Backend.Type = BackendAzTable
	c.Backend.AzTable = AzTableBackend{Account: "acct", Key: "c2VjcmV0", Endpoint: "https://acct.table.core.windows.net"}
	c.Cache.MaxBytes = 300e6
	c.Cache.FlushInterval = 1500 * time.Millisecond
	c.WAL.Dir = "/wal"
	c.WAL.GroupCommit = false
	c.Listen.Datastore = ""
	c.Log.Format = LogFormatText
	out, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"max_bytes: 300MB\n", "flush_interval: 1.5s\n", "group_commit: false\n", "datastore: \"\"\n"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("YAML lacks %q:\n%s", s, out)
		}
	}
	back := mustLoad(t, LoadOptions{File: writeFile(t, string(out))})
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("round trip:\n%+v\nwant\n%+v", back, c)
	}
}

func TestRedacted(t *testing.T) {
	c := Defaults()
	c.Backend.AzTable.ConnectionString = "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=c2VjcmV0Y29ubg=="
	c.Backend.AzTable.Key = "c2VjcmV0a2V5"
	c.Backend.AzTable.Account = "a"
	c.Frontend.Datastore.Token = "dG9rZW4tdG9rZW4tdG9rZW4="
	orig := c
	r := c.Redacted()
	if !reflect.DeepEqual(c, orig) {
		t.Fatal("Redacted modified its receiver")
	}
	want := c
	want.Backend.AzTable.ConnectionString = "REDACTED"
	want.Backend.AzTable.Key = "REDACTED"
	want.Frontend.Azure.Key = "REDACTED"
	want.Frontend.Datastore.Token = "REDACTED"
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("Redacted =\n%+v\nwant\n%+v", r, want)
	}
	out, err := r.YAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"c2VjcmV0Y29ubg==", "c2VjcmV0a2V5", AzureFrontendKey, "dG9rZW4tdG9rZW4tdG9rZW4="} {
		if strings.Contains(string(out), secret) {
			t.Errorf("redacted YAML contains %q", secret)
		}
	}
	// Unset secrets stay visibly unset.
	empty := Defaults()
	empty.Frontend.Azure.Key = ""
	if r := empty.Redacted(); r.Backend.AzTable.Key != "" || r.Frontend.Azure.Key != "" || r.Backend.AzTable.ConnectionString != "" || r.Frontend.Datastore.Token != "" {
		t.Errorf("empty secrets became %+v", r)
	}
}

func TestWALDir(t *testing.T) {
	c := Defaults()
	if got := c.WALDir(); got != filepath.Join("nemo-data", "wal") {
		t.Errorf("default WALDir = %q", got)
	}
	c.WAL.Dir = "/var/wal"
	if got := c.WALDir(); got != "/var/wal" {
		t.Errorf("WALDir = %q", got)
	}
}

func TestSlogLevel(t *testing.T) {
	for in, want := range map[string]string{"debug": "DEBUG", "info": "INFO", "WARN": "WARN", "error": "ERROR", "bogus": "INFO"} {
		if got := (Log{Level: in}).SlogLevel().String(); got != want {
			t.Errorf("SlogLevel(%q) = %s, want %s", in, got, want)
		}
	}
}

const exampleFile = "nemo.example.yaml"

// TestExampleIsDefaults keeps nemo.example.yaml from drifting from Defaults.
func TestExampleIsDefaults(t *testing.T) {
	c := mustLoad(t, LoadOptions{File: exampleFile})
	if !reflect.DeepEqual(c, Defaults()) {
		t.Fatalf("%s loads as\n%+v\nbut Defaults() is\n%+v", exampleFile, c, Defaults())
	}
}

// TestExampleDocumentsEveryKey: every key is spelled out, and its
// environment variable and flag are named in the comments.
func TestExampleDocumentsEveryKey(t *testing.T) {
	data, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, k := range schema {
		m, parts := doc, strings.Split(k.key, ".")
		for _, p := range parts[:len(parts)-1] {
			m, _ = m[p].(map[string]any)
		}
		if _, ok := m[parts[len(parts)-1]]; !ok {
			t.Errorf("%s: key %s missing", exampleFile, k.key)
		}
		if !strings.Contains(text, "Env "+EnvName(k.key)) {
			t.Errorf("%s: %s does not name its variable %s", exampleFile, k.key, EnvName(k.key))
		}
	}
	for _, f := range flagKeys {
		if !strings.Contains(text, "flag --"+f.name) {
			t.Errorf("%s: flag --%s not mentioned", exampleFile, f.name)
		}
	}
	if len(schema) < 40 {
		t.Errorf("schema has only %d keys; the reflection walk lost some", len(schema))
	}
}

// TestLoadAdvertisesPodIP: in coherence.mode partitioned the peer address
// written into the leases defaults to the downward API's pod IP with the
// port of listen.peer; coherence.advertise, when set, wins.
func TestLoadAdvertisesPodIP(t *testing.T) {
	env := map[string]string{
		"NEMO_BACKEND_TYPE": "datastore", "NEMO_BACKEND_DATASTORE_PROJECT": "p",
		"NEMO_COHERENCE_MODE": "partitioned", "NEMO_WAL_LOCATION": "backend",
		"NEMO_LISTEN_PEER": "0.0.0.0:7946", "NEMO_COHERENCE_PEER_SECRET": "0123456789abcdef",
		PodIPEnv: "10.1.2.3",
	}
	c := mustLoad(t, LoadOptions{Env: mapEnv(env)})
	if got := c.PeerAdvertise(); got != "10.1.2.3:7946" {
		t.Errorf("advertised %q, want the pod IP with the peer port", got)
	}
	env["NEMO_COHERENCE_ADVERTISE"] = "nemo-0.nemo:7946"
	if got := mustLoad(t, LoadOptions{Env: mapEnv(env)}).PeerAdvertise(); got != "nemo-0.nemo:7946" {
		t.Errorf("advertised %q, want coherence.advertise", got)
	}
	delete(env, "NEMO_COHERENCE_ADVERTISE")
	delete(env, PodIPEnv)
	if _, err := Load(LoadOptions{Env: mapEnv(env)}); err == nil || !strings.Contains(err.Error(), "coherence.advertise") {
		t.Errorf("no address to advertise: %v", err)
	}
}
