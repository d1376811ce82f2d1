package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/nemocache/nemo/internal/enum"
)

// EnvPrefix starts every environment variable nemo reads.
const EnvPrefix = "NEMO_"

// ConfigFileEnv names the config file when --config is not given.
const ConfigFileEnv = EnvPrefix + "CONFIG"

// DatastoreEmulatorHostEnv is the Google client libraries' variable, honoured
// for backend.datastore.emulator_host when NEMO_BACKEND_DATASTORE_EMULATOR_HOST
// is unset.
const DatastoreEmulatorHostEnv = "DATASTORE_EMULATOR_HOST"

// ListenerOff disables a frontend listener, as an empty address does:
// listen.azure_table and listen.datastore accept it in the file, the
// environment and flags. For these two keys an empty environment variable
// also disables the listener rather than counting as unset.
const ListenerOff = "off"

// emptyDisables lists the keys whose empty value is a setting (the
// listener is off), not an absent one.
var emptyDisables = map[string]bool{"listen.azure_table": true, "listen.datastore": true}

// EnvName is the environment variable for a key: EnvName("cache.max_bytes")
// is "NEMO_CACHE_MAX_BYTES".
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// flagKeys are the keys common enough to get a flag, in help order.
var flagKeys = []struct{ name, key, usage string }{
	{"backend", "backend.type", `store behind the buffer: "embedded", "aztable" or "datastore"`},
	{"data-dir", "backend.embedded.data_dir", "directory of the embedded store (and of the WAL unless wal.dir is set)"},
	{"in-memory", "backend.embedded.in_memory", "keep the embedded store in memory: no WAL, no file; everything is lost at exit (tests)"},
	{"cache-max-bytes", "cache.max_bytes", `record buffer budget, with units ("256MiB")`},
	{"cache-policy", "cache.policy", "cache policy: " + quotedOr(enum.Policies())},
	{"listen-azure-table", "listen.azure_table", `Azure Table listener host:port ("" or "off" disables it)`},
	{"listen-datastore", "listen.datastore", `Datastore listener host:port ("" or "off" disables it)`},
	{"listen-http", "listen.http", "probe and metrics listener host:port (/healthz, /readyz, /startupz, /metrics)"},
	{"listen-admin", "listen.admin", "admin listener host:port, loopback (pprof, debug API, /quitquitquit)"},
	{"log-level", "log.level", `log level: "debug", "info", "warn" or "error"`},
	{"write-mode", "wal.write_mode", "when writes reach the store: " + quotedOr(enum.WriteModes())},
}

// RegisterFlags adds --config and the flags for the common keys to fs, or,
// when keys are given, for those keys only (a command that reads one
// listener's address gets that one flag). Pass the parsed set to Load in
// LoadOptions.Flags; a flag overrides the file and the environment only
// when given on the command line.
func RegisterFlags(fs *pflag.FlagSet, keys ...string) {
	fs.String("config", "", "YAML config file (env "+ConfigFileEnv+")")
	d := reflect.ValueOf(Defaults())
	for _, f := range flagKeys {
		if len(keys) > 0 && !slices.Contains(keys, f.key) {
			continue
		}
		def := d.FieldByIndex(schemaByKey[f.key].index)
		usage := f.usage + " (env " + EnvName(f.key) + ")"
		if def.Kind() == reflect.Bool {
			fs.Bool(f.name, def.Bool(), usage) // --in-memory, --in-memory=false
			continue
		}
		fs.String(f.name, fmt.Sprint(def.Interface()), usage)
	}
}

// quotedOr renders an enum's values for a flag's help as "a", "b" or "c".
func quotedOr[T ~string](vals []T) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = strconv.Quote(string(v))
	}
	return enum.Or(q)
}

// LoadOptions says where Load reads from. The zero value reads the process
// environment and, if NEMO_CONFIG names one, a file.
type LoadOptions struct {
	// Flags is a parsed flag set on which RegisterFlags was called; nil
	// means no flags. Flags missing from the set are skipped.
	Flags *pflag.FlagSet
	// Env looks up an environment variable; nil means os.LookupEnv. A
	// variable set to the empty string counts as unset, as Kubernetes
	// renders optional values that way, except for the listeners that an
	// empty address disables (listen.azure_table, listen.datastore: see
	// ListenerOff).
	Env func(string) (string, bool)
	// File, when non-empty, is the YAML file to read, in place of --config
	// and NEMO_CONFIG.
	File string
}

// Load builds a Config from, in increasing precedence, Defaults(), the YAML
// file, NEMO_* environment variables and the flags the user set, then
// validates it. It reports every problem it finds at once: unknown or
// malformed keys and Validate's findings, joined, each a *FieldError
// wrapping ErrInvalid. Unrelated NEMO_* variables are ignored, not refused:
// Kubernetes injects NEMO_SERVICE_HOST and friends for a Service named nemo.
func Load(opts LoadOptions) (Config, error) {
	c, errs, err := decode(opts)
	if err != nil {
		return Config{}, err
	}
	// A key that failed to decode holds a zero value; Validate's complaint
	// about that zero would only repeat the real problem.
	for _, fe := range c.validate() {
		if !errs.covers(fe.Key) {
			errs = append(errs, fe)
		}
	}
	if len(errs) > 0 {
		return Config{}, errs.join()
	}
	return c, nil
}

// decode layers the sources and decodes them into a Config without
// validating it. Problems with keys and values come back as FieldErrors;
// the error is for failures to read the sources at all.
func decode(opts LoadOptions) (Config, fieldErrors, error) {
	lookup := opts.Env
	if lookup == nil {
		lookup = os.LookupEnv
	}
	env := func(name string) (string, bool) {
		v, ok := lookup(name)
		return v, ok && v != ""
	}

	v := viper.New()
	d := reflect.ValueOf(Defaults())
	for _, k := range schema {
		v.SetDefault(k.key, d.FieldByIndex(k.index).Interface())
	}

	var errs fieldErrors
	layer := map[string]any{}
	if path := configPath(opts, env); path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, nil, fmt.Errorf("config: read file: %w", err)
		}
		if err := yaml.Unmarshal(data, &layer); err != nil {
			return Config{}, nil, fmt.Errorf("config: parse %s: %w", path, err)
		}
		if layer == nil { // an empty or all-comment file
			layer = map[string]any{}
		}
		checkKeys(layer, "", path, &errs)
	}
	for _, k := range schema {
		name := EnvName(k.key)
		val, ok := env(name)
		if emptyDisables[k.key] {
			val, ok = lookup(name)
		}
		if !ok && k.key == "backend.datastore.emulator_host" {
			val, ok = env(DatastoreEmulatorHostEnv)
		}
		if ok {
			setPath(layer, k.key, val)
		}
	}
	// Environment values overwrite the file's in this one map because viper
	// reads the environment only from the process, and Env must be
	// injectable; viper layers the map above defaults and below flags.
	if err := v.MergeConfigMap(layer); err != nil {
		return Config{}, nil, fmt.Errorf("config: merge: %w", err)
	}
	if opts.Flags != nil {
		for _, f := range flagKeys {
			if fl := opts.Flags.Lookup(f.name); fl != nil {
				if err := v.BindPFlag(f.key, fl); err != nil {
					return Config{}, nil, fmt.Errorf("config: bind --%s: %w", f.name, err)
				}
			}
		}
	}

	var c Config
	err := v.Unmarshal(&c,
		viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(ByteSizeHookFunc(), durationHookFunc())),
		func(dc *mapstructure.DecoderConfig) { dc.TagName = "yaml" },
	)
	if err != nil {
		errs.addDecode(err)
	}
	advertisePodIP(&c, env)
	for _, addr := range []*string{&c.Listen.AzureTable, &c.Listen.Datastore} {
		if strings.EqualFold(strings.TrimSpace(*addr), ListenerOff) {
			*addr = ""
		}
	}
	return c, errs, nil
}

// advertisePodIP fills coherence.advertise, when unset, with the pod IP
// (PodIPEnv, from the downward API) and the port of listen.peer.
func advertisePodIP(c *Config, env func(string) (string, bool)) {
	ip, ok := env(PodIPEnv)
	if !ok || c.Coherence.Advertise != "" || c.Listen.Peer == "" {
		return
	}
	if _, port, err := net.SplitHostPort(c.Listen.Peer); err == nil && port != "0" {
		c.Coherence.Advertise = net.JoinHostPort(ip, port)
	}
}

// configPath picks the file: LoadOptions.File, then --config, then NEMO_CONFIG.
func configPath(opts LoadOptions, env func(string) (string, bool)) string {
	if opts.File != "" {
		return opts.File
	}
	if opts.Flags != nil {
		if f := opts.Flags.Lookup("config"); f != nil && f.Changed {
			return f.Value.String()
		}
	}
	p, _ := env(ConfigFileEnv)
	return p
}

// checkKeys reports keys of the file that Config does not have, so a typo
// fails loudly instead of leaving a default in force. It deletes empty
// sections (a heading whose keys are all commented out) so they do not hide
// environment values merged beneath them.
func checkKeys(m map[string]any, prefix, path string, errs *fieldErrors) {
	for _, name := range slices.Sorted(maps.Keys(m)) {
		key, val := prefix+name, m[name]
		_, leaf := schemaByKey[key]
		switch {
		case leaf:
		case sections[key] && val == nil:
			delete(m, name)
		case sections[key]:
			sub, ok := val.(map[string]any)
			if !ok {
				*errs = append(*errs, &FieldError{Key: key, Msg: fmt.Sprintf("in %s must be a mapping of keys, got %T", path, val)})
				continue
			}
			checkKeys(sub, key+".", path, errs)
		default:
			msg := "unknown key in " + path
			if s := suggest(key); s != "" {
				msg += " (did you mean " + s + "?)"
			}
			*errs = append(*errs, &FieldError{Key: key, Msg: msg})
		}
	}
}

// setPath stores val at the dotted key inside m, creating sections and
// replacing a malformed non-mapping section (already reported) on the way.
func setPath(m map[string]any, key string, val any) {
	parts := strings.Split(key, ".")
	for _, p := range parts[:len(parts)-1] {
		sub, ok := m[p].(map[string]any)
		if !ok {
			sub = map[string]any{}
			m[p] = sub
		}
		m = sub
	}
	m[parts[len(parts)-1]] = val
}

// suggest names the known key an unknown one most likely meant: one a few
// edits away, else one with the same last segment in another section.
func suggest(key string) string {
	best, bestDist := "", 4
	for _, k := range schema {
		if d := editDistance(key, k.key); d < bestDist {
			best, bestDist = k.key, d
		}
	}
	if best != "" {
		return best
	}
	last := key[strings.LastIndexByte(key, '.')+1:]
	for _, k := range schema {
		if strings.HasSuffix(k.key, "."+last) {
			return k.key
		}
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

var durationType = reflect.TypeFor[time.Duration]()

// durationHookFunc parses durations from strings and refuses bare numbers:
// mapstructure would read "flush_interval: 5" as 5ns, which is never meant.
// Zero needs no unit.
func durationHookFunc() mapstructure.DecodeHookFuncType {
	return func(from, to reflect.Type, data any) (any, error) {
		if to != durationType || from == durationType {
			return data, nil
		}
		v := reflect.ValueOf(data)
		switch {
		case from.Kind() == reflect.String:
			d, err := time.ParseDuration(strings.TrimSpace(v.String()))
			if err != nil {
				return nil, fmt.Errorf("invalid duration %q: want a number with a unit (ns, us, ms, s, m, h) such as \"5s\"", v.String())
			}
			return d, nil
		case v.CanInt() && v.Int() == 0, v.CanUint() && v.Uint() == 0, v.CanFloat() && v.Float() == 0:
			return time.Duration(0), nil
		case v.CanInt(), v.CanUint(), v.CanFloat():
			return nil, fmt.Errorf("duration %v has no unit: write e.g. \"%vs\" or \"%vms\"", data, data, data)
		}
		return data, nil
	}
}

// field describes one leaf key of Config.
type field struct {
	key   string
	index []int // for reflect.Value.FieldByIndex
}

// schema lists every leaf key in struct order; schemaByKey and sections index
// it. They are derived from the yaml tags so that a new field is bound to
// its environment variable, default and unknown-key check without more code.
var (
	schema      []field
	schemaByKey = map[string]field{}
	sections    = map[string]bool{}
)

func init() {
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				panic("config: field " + f.Name + " needs a yaml tag")
			}
			key := prefix + name
			idx := append(append([]int(nil), index...), i)
			if f.Type.Kind() == reflect.Struct {
				sections[key] = true
				walk(f.Type, key+".", idx)
				continue
			}
			schema = append(schema, field{key: key, index: idx})
			schemaByKey[key] = schema[len(schema)-1]
		}
	}
	walk(reflect.TypeFor[Config](), "", nil)
}

// fieldErrors collects problems in the order found.
type fieldErrors []*FieldError

// covers reports whether a problem was already recorded for key or for a
// section containing it.
func (fe fieldErrors) covers(key string) bool {
	for _, e := range fe {
		if e.Key == key || strings.HasPrefix(key, e.Key+".") {
			return true
		}
	}
	return false
}

// addDecode turns mapstructure's errors into FieldErrors for the keys they
// name. mapstructure joins one error per field and wraps a section's errors
// in a DecodeError naming the section, so descend to the innermost one.
func (fe *fieldErrors) addDecode(err error) {
	if de, ok := err.(*mapstructure.DecodeError); ok && !hasNested(de.Unwrap()) {
		if !fe.covers(de.Name()) {
			*fe = append(*fe, &FieldError{Key: de.Name(), Env: EnvName(de.Name()), Msg: de.Unwrap().Error()})
		}
		return
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			fe.addDecode(e)
		}
	case interface{ Unwrap() error }:
		fe.addDecode(u.Unwrap())
	default:
		*fe = append(*fe, &FieldError{Msg: err.Error()})
	}
}

// hasNested reports whether err still contains a DecodeError, meaning the
// one around it names a section rather than the offending key.
func hasNested(err error) bool {
	var de *mapstructure.DecodeError
	return errors.As(err, &de)
}

func (fe fieldErrors) join() error {
	errs := make([]error, len(fe))
	for i, e := range fe {
		errs[i] = e
	}
	return errors.Join(errs...)
}
