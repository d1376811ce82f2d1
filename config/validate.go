package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nemocache/nemo/internal/enum"
	"github.com/nemocache/nemo/internal/loopback"
)

// ErrInvalid is wrapped by every *FieldError, so callers can tell a bad
// configuration (exit code 2, fix the manifest) from an I/O failure with
// errors.Is(err, ErrInvalid).
var ErrInvalid = errors.New("invalid configuration")

// FieldError is one problem with one key.
type FieldError struct {
	// Key is the dotted key path, e.g. "cache.max_bytes".
	Key string
	// Env is the key's environment variable, e.g. "NEMO_CACHE_MAX_BYTES";
	// empty for keys that exist only in a file (unknown keys).
	Env string
	// Msg says what is wrong; it never quotes a secret.
	Msg string
}

// Error renders "key (ENV): msg".
func (e *FieldError) Error() string {
	switch {
	case e.Key == "":
		return e.Msg
	case e.Env == "":
		return e.Key + ": " + e.Msg
	}
	return e.Key + " (" + e.Env + "): " + e.Msg
}

// Unwrap returns ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// Validate reports every problem with c at once, as errors.Join of
// *FieldError in key order. Sections for backends other than backend.type,
// and the Azure frontend when its listener is disabled, are not checked.
func (c Config) Validate() error {
	if errs := c.validate(); len(errs) > 0 {
		return errs.join()
	}
	return nil
}

// validate runs one check per section, in key order: backend, cache, coherence, txn,
// wal, listen, frontend, log; the exposure rule (exposure.go) spans listen and
// frontend and runs after them. Each appends to the one shared list.
func (c Config) validate() fieldErrors {
	var v validator
	c.validateBackend(&v)
	c.validateFault(&v)
	c.validateContract(&v)
	c.validateCache(&v)
	c.validateCoherence(&v)
	c.validateTxn(&v)
	c.validateWAL(&v)
	c.validateListen(&v)
	c.validateFrontend(&v)
	c.validateExposure(&v)
	c.validateLog(&v)
	return v.errs
}

// validator collects the problems the section checks find, in the order
// they find them.
type validator struct{ errs fieldErrors }

func (v *validator) bad(key, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Key: key, Env: EnvName(key), Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) oneOf(key, got string, allowed ...string) bool {
	if slices.Contains(allowed, got) {
		return true
	}
	quoted := make([]string, len(allowed))
	for i, a := range allowed {
		quoted[i] = strconv.Quote(a)
	}
	v.bad(key, "must be one of %s; got %q", strings.Join(quoted, ", "), got)
	return false
}

func (v *validator) positive(key string, d time.Duration) {
	if d <= 0 {
		v.bad(key, "must be positive; got %s", d)
	}
}

func (v *validator) positiveSize(key string, b ByteSize) bool {
	if b <= 0 {
		v.bad(key, "must be positive; got %s", b)
		return false
	}
	return true
}

// derivedSize checks a size whose 0 means "derived from another key".
func (v *validator) derivedSize(key string, b ByteSize) bool {
	if b < 0 {
		v.bad(key, "must not be negative (0 derives it from cache.max_bytes); got %s", b)
		return false
	}
	return true
}

func (v *validator) atLeastOne(key string, n int) {
	if n < 1 {
		v.bad(key, "must be at least 1; got %d", n)
	}
}

func (c Config) validateBackend(v *validator) {
	b := c.Backend
	v.oneOf("backend.type", string(b.Type), string(BackendEmbedded), string(BackendAzTable), string(BackendDatastore))
	switch b.Type {
	case BackendEmbedded:
		if b.Embedded.DataDir == "" {
			v.bad("backend.embedded.data_dir", `must be set when backend.type is "embedded"`)
		}
	case BackendAzTable:
		a := b.AzTable
		if a.ETagMemory < -1 {
			v.bad("backend.aztable.etag_memory", "must be -1 (remember none), 0 (the default) or a positive count; got %d", a.ETagMemory)
		}
		if a.ConnectionString != "" {
			if a.Account != "" || a.Key != "" || a.Endpoint != "" || a.UseDefaultCredential {
				v.bad("backend.aztable.connection_string", "must not be combined with account, key, endpoint or use_default_credential")
			}
			break
		}
		if a.Account == "" {
			v.bad("backend.aztable.account", `must be set when backend.type is "aztable" and connection_string is empty`)
		}
		switch {
		case a.Key != "" && a.UseDefaultCredential:
			v.bad("backend.aztable.use_default_credential", "must not be true when backend.aztable.key is set")
		case a.Key == "" && !a.UseDefaultCredential:
			v.bad("backend.aztable.key", "must be set unless use_default_credential is true")
		case a.Key != "" && !isBase64(a.Key):
			v.bad("backend.aztable.key", "must be base64 (an Azure storage account key)")
		}
		if a.Endpoint != "" && !isHTTPURL(a.Endpoint) {
			v.bad("backend.aztable.endpoint", "must be an absolute http or https URL; got %q", a.Endpoint)
		}
	case BackendDatastore:
		d := b.Datastore
		if d.Project == "" {
			v.bad("backend.datastore.project", `must be set when backend.type is "datastore"`)
		}
		switch {
		case d.EmulatorHost == "":
		case !isHostPort(d.EmulatorHost):
			v.bad("backend.datastore.emulator_host", "must be host:port with a numeric port; got %q", d.EmulatorHost)
		case isHostPort(c.Listen.Datastore) && sameEndpoint(d.EmulatorHost, c.Listen.Datastore):
			// Typically DATASTORE_EMULATOR_HOST exported for the
			// application leaked into nemo's own environment.
			v.bad("backend.datastore.emulator_host", "%q is nemo's own Datastore listener (listen.datastore %q), so every miss would loop back; point it at a real emulator or unset %s for nemo",
				d.EmulatorHost, c.Listen.Datastore, DatastoreEmulatorHostEnv)
		}
	}
}

// validateFault checks backend.fault when it is enabled.
func (c Config) validateFault(v *validator) {
	f := c.Backend.Fault
	if !f.Enabled {
		return
	}
	for _, d := range []struct {
		key string
		d   time.Duration
	}{{"backend.fault.latency", f.Latency}, {"backend.fault.jitter", f.Jitter}} {
		if d.d < 0 {
			v.bad(d.key, "must not be negative; got %s", d.d)
		}
	}
	if f.ErrorRate < 0 || f.ErrorRate > 1 || math.IsNaN(f.ErrorRate) {
		v.bad("backend.fault.error_rate", "must be a probability between 0 and 1; got %v", f.ErrorRate)
	}
	v.oneOf("backend.fault.error", string(f.Error), string(FaultUnavailable), string(FaultTimeout))
	switch every, dur := f.OutageEvery, f.OutageFor; {
	case every < 0:
		v.bad("backend.fault.outage_every", "must not be negative; got %s", every)
	case dur < 0:
		v.bad("backend.fault.outage_for", "must not be negative; got %s", dur)
	case every > 0 && dur == 0:
		v.bad("backend.fault.outage_for", "must be set with backend.fault.outage_every (%s): how long each outage lasts", every)
	case every == 0 && dur > 0:
		v.bad("backend.fault.outage_every", "must be set with backend.fault.outage_for (%s): how often an outage begins", dur)
	case dur >= every && every > 0:
		v.bad("backend.fault.outage_for", "must be less than backend.fault.outage_every (%s), or the backend never comes back; got %s", every, dur)
	}
	if _, err := ParseOutageSchedule(f.OutageSchedule); err != nil {
		v.bad("backend.fault.outage_schedule", "%v", err)
	}
	v.oneOf("backend.fault.outage_mode", string(f.OutageMode), string(OutageFail), string(OutageHang))
}

// validateContract checks backend.contract when it is enabled.
func (c Config) validateContract(v *validator) {
	k := c.Backend.Contract
	if !k.Enabled {
		return
	}
	if c.Backend.Type != BackendAzTable && c.Backend.Type != BackendDatastore {
		v.bad("backend.contract.enabled", "applies to backend.type aztable or datastore (the services' API contracts); backend.type is %q", c.Backend.Type)
	}
	for _, r := range []struct {
		key string
		p   float64
	}{{"backend.contract.short_rate", k.ShortRate}, {"backend.contract.empty_rate", k.EmptyRate}, {"backend.contract.defer_rate", k.DeferRate},
		{"backend.contract.error_rate", k.ErrorRate}, {"backend.contract.lost_rate", k.LostRate}} {
		if r.p < 0 || r.p > 1 || math.IsNaN(r.p) {
			v.bad(r.key, "must be a probability between 0 and 1; got %v", r.p)
		}
	}
	if k.ShortRate == 1 {
		v.bad("backend.contract.short_rate", "must be below 1: a batch holding one result can only be cut to an empty one, so a query would never end")
	}
}

// recordPartsOK reports, silently, whether the sizes a record is made of
// are valid (validateCache reports them), so that checks built on their sum
// run only then.
func (c Config) recordPartsOK() bool {
	return c.Cache.RecordOverheadBytes >= 0 && c.MaxKeyBytes() > 0 && c.MaxValueBytes() > 0
}

func (c Config) validateCache(v *validator) {
	k := c.Cache
	v.oneOf("cache.policy", string(k.Policy), strs(enum.Policies())...)
	if k.MemoryLimit < 0 {
		v.bad("cache.memory_limit", "must not be negative (0: derived from cache.max_bytes); got %s", k.MemoryLimit)
	}
	if k.RecordOverheadBytes < 0 {
		v.bad("cache.record_overhead_bytes", "must not be negative; got %s", k.RecordOverheadBytes)
	}
	v.atLeastOne("cache.evict_workers", k.EvictWorkers)
	v.atLeastOne("cache.evict_batch", k.EvictBatch)
	v.derivedSize("cache.max_key_bytes", k.MaxKeyBytes)
	v.derivedSize("cache.max_value_bytes", k.MaxValueBytes)
	maxBytesOK := v.positiveSize("cache.max_bytes", k.MaxBytes)
	budgeted := maxBytesOK && k.Policy != enum.PolicyNone
	derived := k.MaxKeyBytes == 0 || k.MaxValueBytes == 0
	switch record := addSat(c.MaxKeyBytes(), c.MaxValueBytes(), k.RecordOverheadBytes); {
	case !budgeted:
	case derived && k.MaxBytes < MinDerivedBudget:
		// The shares would fall below the floors; the floors would not
		// leave room for a second record.
		v.bad("cache.max_bytes", "must be at least %s unless cache.max_key_bytes and cache.max_value_bytes are both set (their defaults, max_bytes/16 and max_bytes/4, would fall below %s and %s); got %s",
			MinDerivedBudget, MaxKeyBytesFloor, MaxValueBytesFloor, k.MaxBytes)
	case c.recordPartsOK() && k.MaxBytes < record:
		// Otherwise the largest legal record could never be admitted.
		v.bad("cache.max_bytes", "must hold the largest record, cache.max_key_bytes + cache.max_value_bytes + cache.record_overhead_bytes = %s; got %s", record, k.MaxBytes)
	}
	v.positive("cache.flush_interval", k.FlushInterval)
	if v.derivedSize("cache.max_dirty_bytes", k.MaxDirtyBytes) && budgeted && c.MaxDirtyBytes() > k.MaxBytes {
		v.bad("cache.max_dirty_bytes", "must not exceed cache.max_bytes (%s), since dirty records live in the buffer; got %s", k.MaxBytes, k.MaxDirtyBytes)
	}
	v.positive("cache.max_dirty_age", k.MaxDirtyAge)
	v.atLeastOne("cache.write_back_parallelism", k.WriteBackParallelism)
	v.oneOf("cache.write_back_conflict", string(k.WriteBackConflict), strs(enum.ConflictPolicies())...)
}

func (c Config) validateCoherence(v *validator) {
	if c.Coherence.Mode != "" {
		v.oneOf("coherence.mode", string(c.Coherence.Mode), strs(enum.Coherences())...)
	}
	if d := c.Coherence.MaxStaleness; d < 0 {
		v.bad("coherence.max_staleness", "must not be negative (0 means the mode's default: off when exclusive, 1s when shared); got %s", d)
	}
	if f := c.Coherence.RefreshAheadShare; f < 0 || f > 1 || math.IsNaN(f) {
		v.bad("coherence.refresh_ahead_share", "must be a share between 0 (off) and 1; got %v", f)
	}
	if d := c.Coherence.LeaseTTL; d < time.Second {
		v.bad("coherence.lease_ttl", "must be at least 1s; got %s", d)
	}
	c.validatePartitioned(v)
}

// validatePartitioned checks what coherence.mode partitioned needs: a
// cloud backend, the commit logs beside the leases (the next owner replays
// them), a peer listener others can reach, and the shared secret.
func (c Config) validatePartitioned(v *validator) {
	if c.CoherenceMode() != enum.Partitioned {
		if c.Listen.Peer != "" {
			v.bad("listen.peer", "serves replicas of coherence.mode partitioned only; coherence.mode is %q", c.CoherenceMode())
		}
		if c.Coherence.Peers != "" {
			v.bad("coherence.peers", "rebalances replicas of coherence.mode partitioned only; coherence.mode is %q", c.CoherenceMode())
		}
		return
	}
	for _, p := range c.Coherence.PeerList() {
		if host, port, err := net.SplitHostPort(p); err != nil || host == "" || port == "" {
			v.bad("coherence.peers", "must be comma-separated host:port (a host name may stand for several replicas); got %q", p)
		}
	}
	v.positive("coherence.rebalance_interval", c.Coherence.RebalanceInterval)
	if c.Backend.Type != BackendAzTable && c.Backend.Type != BackendDatastore {
		v.bad("coherence.mode", "partitioned spreads a cloud backend's tables over replicas: it needs backend.type aztable or datastore; got %q", c.Backend.Type)
	}
	if c.WAL.Location != enum.WALBackend {
		v.bad("wal.location", "must be backend in coherence.mode partitioned: the next owner of a table replays the log its last owner left; got %q", c.WAL.Location)
	}
	if c.Listen.Peer == "" {
		v.bad("listen.peer", "must be set in coherence.mode partitioned (for example 0.0.0.0:7946): the other replicas forward writes there")
	} else if _, _, err := net.SplitHostPort(c.Listen.Peer); err != nil {
		v.bad("listen.peer", "must be host:port; got %q", c.Listen.Peer)
	} else if c.PeerAdvertise() == "" {
		v.bad("coherence.advertise", "must be set when listen.peer (%q) names no host other replicas can reach: set it to this pod's address and the peer port, or set %s (the downward API's status.podIP)", c.Listen.Peer, PodIPEnv)
	}
	if len(c.Coherence.PeerSecret) < 16 {
		v.bad("coherence.peer_secret", "must be at least 16 bytes in coherence.mode partitioned, the same on every replica (from a Secret: %s); got %d bytes", EnvName("coherence.peer_secret"), len(c.Coherence.PeerSecret))
	}
}

func (c Config) validateTxn(v *validator) {
	v.oneOf("txn.phantom", string(c.Txn.Phantom), strs(enum.Phantoms())...)
	v.atLeastOne("txn.pcl_partitions", c.Txn.PCLPartitions)
	v.positive("txn.idle_timeout", c.Txn.IdleTimeout)
	if c.Txn.LockWait < 0 {
		v.bad("txn.lock_wait", "must not be negative (0: never wait); got %s", c.Txn.LockWait)
	}
	v.positiveSize("txn.snapshot_bytes", c.Txn.SnapshotBytes)
}

func (c Config) validateWAL(v *validator) {
	w := c.WAL
	if w.Dir == "" && c.Backend.Embedded.DataDir == "" {
		v.bad("wal.dir", "must be set when backend.embedded.data_dir is empty")
	}
	v.oneOf("wal.write_mode", string(w.WriteMode), strs(enum.WriteModes())...)
	if v.oneOf("wal.location", string(w.Location), strs(enum.WALLocations())...) && w.Location == enum.WALBackend {
		switch {
		case c.Backend.Type != BackendAzTable && c.Backend.Type != BackendDatastore:
			v.bad("wal.location", "backend keeps the log in the cloud backend beside the leases: it needs backend.type aztable or datastore (the embedded store is this node's disk); got %q", c.Backend.Type)
		case c.CoherenceMode() == enum.Shared:
			v.bad("wal.location", "backend is the log of coherence.mode exclusive or partitioned (their leases fence it); coherence.mode is %q", c.CoherenceMode())
		case w.WriteMode != enum.WriteBack || c.Cache.Policy == "none":
			v.bad("wal.location", "backend is a log of write-back: it needs wal.write_mode back and a cache.policy other than none")
		case c.Txn.EarlyRelease:
			v.bad("wal.location", "backend does not release locks before the log has a commit: set txn.early_release false")
		}
	}
	if record := addSat(c.MaxKeyBytes(), c.MaxValueBytes()); v.positiveSize("wal.segment_size", w.SegmentSize) && c.recordPartsOK() && w.SegmentSize <= record {
		v.bad("wal.segment_size", "must exceed cache.max_key_bytes + cache.max_value_bytes (%s) so the largest record fits in one segment; got %s", record, w.SegmentSize)
	}
	v.positive("wal.checkpoint_interval", w.CheckpointInterval)
	v.positiveSize("wal.checkpoint_bytes", w.CheckpointBytes)
}

func (c Config) validateListen(v *validator) {
	l := c.Listen
	addrs := []struct{ key, addr string }{
		{"listen.azure_table", l.AzureTable},
		{"listen.datastore", l.Datastore},
		{"listen.http", l.HTTP},
		{"listen.admin", l.Admin},
	}
	for i, a := range addrs {
		switch {
		case a.addr == "" && a.key == "listen.admin":
			v.bad(a.key, "must be set: `nemo shutdown` uses it")
		case a.addr == "" && a.key == "listen.http":
			v.bad(a.key, "must be set: health probes and metrics use it")
		case a.addr == "":
		case !isHostPort(a.addr):
			v.bad(a.key, "must be host:port with a numeric port; got %q", a.addr)
		default:
			for _, prev := range addrs[:i] {
				if isHostPort(prev.addr) && bindConflict(prev.addr, a.addr) {
					v.bad(a.key, "%q conflicts with %s (%q)", a.addr, prev.key, prev.addr)
				}
			}
		}
	}
	if isHostPort(l.Admin) && !l.AdminAllowRemote && !loopback.Listen(l.Admin) {
		v.bad("listen.admin", "%q is not a loopback address: the admin listener serves pprof, buffered records and /quitquitquit; bind 127.0.0.1, or set listen.admin_allow_remote: true", l.Admin)
	}
	if l.AzureTable == "" && l.Datastore == "" {
		v.bad("listen.azure_table", "is empty and so is listen.datastore; enable at least one frontend")
	}
	v.positiveSize("listen.max_request_bytes", l.MaxRequestBytes)
	for _, t := range []struct {
		key, zero string
		d         time.Duration
	}{{"listen.read_timeout", "disables it", l.ReadTimeout}, {"listen.write_timeout", "disables it", l.WriteTimeout},
		{"listen.request_timeout", "derives it from the service and the client's deadline", l.RequestTimeout}} {
		if t.d < 0 {
			v.bad(t.key, "must not be negative (0 %s); got %s", t.zero, t.d)
		}
	}
	v.positive("listen.shutdown_grace", l.ShutdownGrace)
	if (l.TLS.CertFile == "") != (l.TLS.KeyFile == "") {
		v.bad("listen.tls.key_file", "listen.tls.cert_file and listen.tls.key_file go together: set both (a certificate and its key, e.g. a cert-manager Secret's tls.crt and tls.key) or neither")
	}
	v.positive("listen.tls.reload_interval", l.TLS.ReloadInterval)
}

func (c Config) validateFrontend(v *validator) {
	if az := c.Frontend.Azure; c.Listen.AzureTable != "" {
		if !azureAccountRE.MatchString(az.Account) {
			v.bad("frontend.azure.account", "must be 3 to 24 lowercase letters and digits, like an Azure storage account; got %q", az.Account)
		}
		switch {
		case az.Key == "" && !az.AllowAnonymous:
			v.bad("frontend.azure.key", "must be set unless frontend.azure.allow_anonymous is true")
		case az.Key != "" && !isBase64(az.Key):
			v.bad("frontend.azure.key", "must be base64 (an Azure storage account key)")
		}
	}
}

func (c Config) validateLog(v *validator) {
	var lvl slog.Level
	if lvl.UnmarshalText([]byte(c.Log.Level)) != nil {
		v.bad("log.level", `must be one of "debug", "info", "warn", "error"; got %q`, c.Log.Level)
	}
	v.oneOf("log.format", string(c.Log.Format), string(LogFormatJSON), string(LogFormatText))
}

// strs converts an enum's list of values (enum.Policies, enum.Phantoms,
// enum.WriteModes) for oneOf, so each list is written down only once.
func strs[T ~string](vals []T) []string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = string(v)
	}
	return out
}

var azureAccountRE = regexp.MustCompile(`^[a-z0-9]{3,24}$`)

func isBase64(s string) bool {
	b, err := base64.StdEncoding.DecodeString(s)
	return err == nil && len(b) > 0
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// isHostPort accepts host:port with a numeric port; the host may be empty
// (all interfaces).
func isHostPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	_, err = strconv.ParseUint(port, 10, 16)
	return err == nil
}

// sameEndpoint reports whether dialing a reaches a listener bound to b, as
// far as the strings tell: equal ports and hosts that are equal or both
// local.
func sameEndpoint(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	return pa == pb && (strings.EqualFold(ha, hb) || isLocalHost(ha) && isLocalHost(hb))
}

// bindConflict reports whether listeners on a and b would collide: same
// non-zero port, and the same host or one bound to all interfaces.
func bindConflict(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	if pa != pb || pa == "0" {
		return false
	}
	return strings.EqualFold(ha, hb) || isUnspecified(ha) || isUnspecified(hb)
}

func isUnspecified(h string) bool {
	ip := net.ParseIP(h)
	return h == "" || ip != nil && ip.IsUnspecified()
}

func isLocalHost(h string) bool {
	ip := net.ParseIP(h)
	return isUnspecified(h) || strings.EqualFold(h, "localhost") || ip != nil && ip.IsLoopback()
}

// addSat adds sizes, saturating at the maximum instead of wrapping, so that
// absurd limits produce a sensible message rather than a negative sum.
func addSat(sizes ...ByteSize) ByteSize {
	var sum ByteSize
	for _, s := range sizes {
		if s > 0 && sum > math.MaxInt64-s {
			return math.MaxInt64
		}
		sum += s
	}
	return sum
}
