// Package config defines nemo's single configuration struct, [Config], and
// loads it with viper from, in increasing precedence, [Defaults], a YAML
// file (--config or NEMO_CONFIG), NEMO_* environment variables (the key path
// upper-cased with dots turned into underscores, so cache.max_bytes is
// NEMO_CACHE_MAX_BYTES) and command-line flags for the common keys. Loading
// is strict: an unknown key in the file is an error, sizes take units
// ("256MiB"), durations must carry a unit, and [Config.Validate] reports
// every problem at once, each naming the key and its environment variable, so
// an operator fixes a broken sidecar manifest in one round trip rather than
// one error per restart. The package imports nothing else from nemo; the
// engine packages receive plain values from it.
package config
