package config

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nemocache/nemo/internal/enum"
)

// Config is everything nemo can be told. Each field's yaml tag is its key
// (nested with dots: cache.max_bytes); its environment variable is NEMO_ plus
// the key upper-cased with dots replaced by underscores
// (NEMO_CACHE_MAX_BYTES). nemo.example.yaml in this directory lists every key
// with its default.
type Config struct {
	// Backend is the real store behind the buffer.
	Backend Backend `yaml:"backend"`
	// Cache is the record buffer.
	Cache Cache `yaml:"cache"`
	// Coherence is how the buffer copes with writers it does not see.
	Coherence Coherence `yaml:"coherence"`
	// Txn is the transaction engine.
	Txn Txn `yaml:"txn"`
	// WAL is the write-ahead log that makes buffered writes durable.
	WAL WAL `yaml:"wal"`
	// Listen holds the listeners and their HTTP limits.
	Listen Listen `yaml:"listen"`
	// Frontend holds what the emulated APIs present to clients.
	Frontend Frontend `yaml:"frontend"`
	// Log configures the process logger.
	Log Log `yaml:"log"`
	// Tracing configures OpenTelemetry tracing.
	Tracing Tracing `yaml:"tracing"`
}

// Tracing configures OpenTelemetry traces: a span per client request and
// child spans for its remote calls and WAL fsyncs, exported over OTLP.
// The exporter, sampler and resource take the standard OTEL_* variables
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,
// OTEL_TRACES_SAMPLER, OTEL_SERVICE_NAME, ...).
type Tracing struct {
	// Enabled turns tracing on. OTEL_TRACES_EXPORTER=otlp turns it on
	// too; OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true keep it
	// off whatever this says.
	Enabled bool `yaml:"enabled"`
}

// BackendType names a store implementation.
type BackendType string

// The backends.
const (
	// BackendEmbedded is the on-disk ordered store: nemo is then a local
	// emulator for both APIs with no cloud account.
	BackendEmbedded BackendType = "embedded"
	// BackendAzTable is Azure Table Storage (or Azurite).
	BackendAzTable BackendType = "aztable"
	// BackendDatastore is Google Cloud Datastore / Firestore in Datastore
	// mode (or its emulator).
	BackendDatastore BackendType = "datastore"
)

// Backend selects and configures the store. Only the section named by Type
// is read; the others are ignored and not validated.
type Backend struct {
	// Type is "embedded" (default), "aztable" or "datastore".
	Type BackendType `yaml:"type"`
	// Embedded configures the on-disk store.
	Embedded EmbeddedBackend `yaml:"embedded"`
	// AzTable configures Azure Table Storage.
	AzTable AzTableBackend `yaml:"aztable"`
	// Datastore configures Google Cloud Datastore.
	Datastore DatastoreBackend `yaml:"datastore"`
	// Fault injects failures into every call to the backend, whichever
	// Type is, to rehearse a slow or failing store.
	Fault FaultBackend `yaml:"fault"`
	// Contract makes an aztable or datastore backend answer as its
	// service's API contract allows and production does, where the
	// emulators are friendlier.
	Contract ContractBackend `yaml:"contract"`
}

// EmbeddedBackend configures the on-disk store.
type EmbeddedBackend struct {
	// DataDir holds the store's files and, unless wal.dir is set, the WAL.
	DataDir string `yaml:"data_dir"`
	// NoSync skips fsync in the store. Only for tests and benchmarks: the
	// WAL is truncated after a checkpoint flush, so a machine crash can
	// then lose flushed writes.
	NoSync bool `yaml:"no_sync"`
	// InMemory keeps the store in memory and writes no file at all: no
	// WAL (whatever wal.* says), nothing in DataDir. Acknowledged writes
	// live only in the process's memory and are lost when it exits; for
	// test suites and throwaway emulators. The admin listener's
	// POST /reset empties it.
	InMemory bool `yaml:"in_memory"`
}

// AzTableBackend configures Azure Table Storage. Give exactly one of:
// ConnectionString; Account with Key; Account with UseDefaultCredential.
type AzTableBackend struct {
	// ConnectionString is a storage connection string
	// ("DefaultEndpointsProtocol=https;AccountName=…;AccountKey=…", or
	// "TableEndpoint=…;SharedAccessSignature=…" with an account SAS).
	// Secret.
	ConnectionString string `yaml:"connection_string"`
	// Account is the storage account name.
	Account string `yaml:"account"`
	// Key is the account's base64 shared key. Secret.
	Key string `yaml:"key"`
	// Endpoint overrides the service URL, default
	// https://<account>.table.core.windows.net (set it for Azurite or a
	// sovereign cloud).
	Endpoint string `yaml:"endpoint"`
	// UseDefaultCredential authenticates with the Azure default credential
	// chain (workload identity, managed identity, az login) instead of a key.
	UseDefaultCredential bool `yaml:"use_default_credential"`
	// ETagMemory is how many entities nemo wrote the adapter remembers, so
	// that the ETag a client was given stays valid after the entity is
	// evicted and fetched again (about 160 bytes each); -1 remembers none.
	ETagMemory int `yaml:"etag_memory"`
}

// DatastoreBackend configures Google Cloud Datastore.
type DatastoreBackend struct {
	// Project is the Google Cloud project ID. Required.
	Project string `yaml:"project"`
	// Database is the database ID; empty means the default database.
	Database string `yaml:"database"`
	// EmulatorHost (host:port) sends requests to a Datastore emulator with
	// no credentials. When its NEMO_ variable is unset, DATASTORE_EMULATOR_HOST
	// is honoured, as the Google client libraries do.
	EmulatorHost string `yaml:"emulator_host"`
	// CredentialsFile is a service-account JSON file; empty means Google
	// application default credentials.
	CredentialsFile string `yaml:"credentials_file"`
}

// FaultError names the error an injected failure returns.
type FaultError string

// The injected errors.
const (
	// FaultUnavailable: the backend refused service or could not be
	// reached (Azure 503 ServerBusy, Datastore UNAVAILABLE).
	FaultUnavailable FaultError = "unavailable"
	// FaultTimeout: the call ran out of time (Azure 500
	// OperationTimedOut, Datastore DEADLINE_EXCEEDED).
	FaultTimeout FaultError = "timeout"
)

// FaultOutageMode says what a call does during an outage.
type FaultOutageMode string

// The outage modes.
const (
	// OutageFail: calls fail at once with backend.fault.error.
	OutageFail FaultOutageMode = "fail"
	// OutageHang: calls block until their deadline, or until the outage
	// ends and then fail.
	OutageHang FaultOutageMode = "hang"
)

// FaultBackend wraps the backend (whatever backend.type is) in fault
// injection (adapters/fault), so users and benchmarks can rehearse a slow
// or failing store: every call nemo makes to it (reads, write-back,
// write-through, leases, table creation) suffers the latency, errors,
// outages and hangs configured here. Off unless Enabled; when off the other
// keys are ignored and not validated.
type FaultBackend struct {
	// Enabled turns fault injection on.
	Enabled bool `yaml:"enabled"`
	// Seed seeds the random draws (jitter, errors), so a run can be
	// repeated; 0 picks one from the clock (logged at startup).
	Seed int64 `yaml:"seed"`
	// Latency is added to every call.
	Latency time.Duration `yaml:"latency"`
	// Jitter adds a uniform random delay in [0, Jitter) to every call.
	Jitter time.Duration `yaml:"jitter"`
	// ErrorRate is the probability, in [0, 1], that a call fails (after
	// its delay) with Error.
	ErrorRate float64 `yaml:"error_rate"`
	// Error is what failed calls and failing outages return:
	// "unavailable" (default) or "timeout".
	Error FaultError `yaml:"error"`
	// OutageEvery and OutageFor schedule a periodic outage: up for
	// OutageEvery-OutageFor, then down for OutageFor, repeating from
	// startup. Set both, OutageFor less than OutageEvery.
	OutageEvery time.Duration `yaml:"outage_every"`
	OutageFor   time.Duration `yaml:"outage_for"`
	// OutageSchedule lists further outages as "START+DURATION" offsets
	// from startup, separated by commas: "30s+10s, 2m+1m".
	OutageSchedule string `yaml:"outage_schedule"`
	// OutageMode is what calls do during an outage: "fail" (default) at
	// once, or "hang" until their deadline or the outage's end.
	OutageMode FaultOutageMode `yaml:"outage_mode"`
	// Hung makes every call block until its context ends: a backend that
	// accepts requests and never answers.
	Hung bool `yaml:"hung"`
}

// ContractBackend puts the aztable or datastore backend under its
// service's API contract (adapters/contract), on the wire below nemo's
// adapter: query batches and pages cut short at random (some empty, with
// the service's continuation), Datastore Lookups answering part of the
// keys as deferred, and transient errors (Azure 503 ServerBusy and 500
// OperationTimedOut, Datastore UNAVAILABLE and ABORTED) on any call,
// before it reaches the backend or after the backend carried it out. It
// is for rehearsing production behaviour against an emulator; against the
// services it only adds more of what they already do. Off unless Enabled;
// when off the other keys are ignored and not validated.
type ContractBackend struct {
	// Enabled turns contract mode on.
	Enabled bool `yaml:"enabled"`
	// Seed seeds the random draws, so a run can be repeated; 0 picks
	// one from the clock (logged at startup).
	Seed int64 `yaml:"seed"`
	// ShortRate is the probability, in [0, 1), that a query batch or page
	// is cut short.
	ShortRate float64 `yaml:"short_rate"`
	// EmptyRate is the probability that a batch or page cut short is
	// empty.
	EmptyRate float64 `yaml:"empty_rate"`
	// DeferRate is the probability that each key of a Datastore Lookup is
	// answered as deferred.
	DeferRate float64 `yaml:"defer_rate"`
	// ErrorRate is the probability that a call fails before it reaches
	// the backend.
	ErrorRate float64 `yaml:"error_rate"`
	// LostRate is the probability that a call reaches the backend, which
	// carries it out, and then fails (its answer lost).
	LostRate float64 `yaml:"lost_rate"`
	// DefiniteWrites makes writes fail only with errors the services
	// document as not applied (Azure 503 ServerBusy, Datastore ABORTED).
	DefiniteWrites bool `yaml:"definite_writes"`
}

// OutageWindow is one outage of backend.fault.outage_schedule.
type OutageWindow struct {
	Start, Duration time.Duration
}

// ParseOutageSchedule parses backend.fault.outage_schedule: "START+DURATION"
// windows separated by commas ("30s+10s, 2m+1m"); empty is none.
func ParseOutageSchedule(s string) ([]OutageWindow, error) {
	var out []OutageWindow
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		start, dur, ok := strings.Cut(part, "+")
		if !ok {
			return nil, fmt.Errorf("window %q: want START+DURATION, e.g. \"30s+10s\"", part)
		}
		st, err := time.ParseDuration(strings.TrimSpace(start))
		if err != nil || st < 0 {
			return nil, fmt.Errorf("window %q: start %q is not a non-negative duration", part, strings.TrimSpace(start))
		}
		d, err := time.ParseDuration(strings.TrimSpace(dur))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("window %q: duration %q is not a positive duration", part, strings.TrimSpace(dur))
		}
		out = append(out, OutageWindow{Start: st, Duration: d})
	}
	return out, nil
}

// Cache configures the record buffer.
type Cache struct {
	// Policy is "nemo" (default), "record" or "none": the buffer's own
	// enum.Policy values (see enum.Policies).
	Policy enum.Policy `yaml:"policy"`
	// MaxBytes is the buffer's budget; keys, values, tombstones, sentinels
	// and RecordOverheadBytes per record all count against it.
	MaxBytes ByteSize `yaml:"max_bytes"`
	// RecordOverheadBytes is the fixed cost charged per buffered record for
	// its header and tree slot.
	RecordOverheadBytes ByteSize `yaml:"record_overhead_bytes"`
	// MemoryLimit is the Go runtime's soft memory limit (GOMEMLIMIT),
	// which keeps the process near its budget: 0 (the default) means
	// 1.5 × max_bytes + 64 MiB, lowered to 90% of the container's memory
	// limit when that is smaller. The GOMEMLIMIT environment variable,
	// when set, wins.
	MemoryLimit ByteSize `yaml:"memory_limit"`
	// EvictWorkers is the number of background eviction goroutines.
	EvictWorkers int `yaml:"evict_workers"`
	// EvictBatch is how many records the clock hand examines per step; one
	// admission never overshoots the budget by more than one batch.
	EvictBatch int `yaml:"evict_batch"`
	// MaxKeyBytes bounds an encoded key. 0 (the default) derives it from
	// MaxBytes: MaxBytes/16 between 4KiB and 8KiB (see
	// Config.MaxKeyBytes). 8KiB fits Datastore's 6 KiB key limit and
	// Azure's two 1 KiB key properties after escaping; 4KiB still fits
	// every Azure key.
	MaxKeyBytes ByteSize `yaml:"max_key_bytes"`
	// MaxValueBytes bounds an encoded value. 0 (the default) derives it
	// from MaxBytes: MaxBytes/4 between 16KiB and 2MiB (see
	// Config.MaxValueBytes). Both backends cap an entity at 1 MiB; 2MiB
	// leaves room for codec overhead so no entity the backend accepts is
	// refused here, which holds from an 8MiB budget up.
	MaxValueBytes ByteSize `yaml:"max_value_bytes"`
	// FlushInterval is how often the flusher looks for old dirty records.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// MaxDirtyBytes starts write-back at once when dirty records exceed it
	// (and holds writers back while they do). 0 (the default) derives it
	// from MaxBytes: MaxBytes/4, at most 64MiB (see Config.MaxDirtyBytes).
	MaxDirtyBytes ByteSize `yaml:"max_dirty_bytes"`
	// MaxDirtyAge is the longest a dirty record should wait for its
	// write-back to the store to end: write-back takes records dirty for
	// half of it less FlushInterval (so each is taken within half of it),
	// leaving the other half for the store calls; and while the store answers write-back more slowly
	// than writers dirty records, writers are held back so that the oldest
	// dirty record stays within it (docs/coherence.md, "Write-back pace").
	MaxDirtyAge time.Duration `yaml:"max_dirty_age"`
	// WriteBackParallelism bounds the store calls one write-back of a
	// table or namespace has in flight at once: its records go in key
	// order, a batch per call, so calls hold different partitions or
	// entity groups, and each key is in one call. 1 sends them one after
	// another.
	WriteBackParallelism int `yaml:"write_back_parallelism"`
	// WriteBackConflict is what write-back does when the store refuses a
	// buffered write because another writer changed the key since nemo
	// last saw it: "store" (default: the other writer's change stands,
	// nemo's record is dropped and refetched) or "overwrite". Either way
	// the losing write is counted, logged and appended to ConflictsFile.
	WriteBackConflict enum.ConflictPolicy `yaml:"write_back_conflict"`
}

// Coherence configures how the buffer copes with other writers of the
// store (other replicas, clients that do not go through nemo).
type Coherence struct {
	// Mode is "exclusive", "shared" (enum.Coherences), or empty for the
	// backend's default: exclusive on the embedded store (nothing else
	// can write it), shared in front of Azure or Datastore (other
	// replicas and outside clients may write the same tables). See
	// Config.CoherenceMode.
	Mode enum.Coherence `yaml:"mode"`
	// MaxStaleness bounds how old buffered knowledge may be when a read
	// outside a transaction answers from it: a record, a negative result
	// or an empty range the store last confirmed longer ago is fetched
	// again (cache.Options.MaxStaleness). It bounds how long a change
	// made behind nemo's back stays hidden from such reads. 0 (default)
	// means the mode's default: never expire in exclusive mode (right
	// when nemo is the only writer), 1s in shared mode. See
	// Config.MaxStaleness.
	MaxStaleness time.Duration `yaml:"max_staleness"`
	// RefreshAheadShare bounds refreshing ahead within max_staleness: a
	// hit on a record read at least twice since the store last confirmed
	// it, once three quarters of the bound have passed, fetches it again
	// in the background so later reads need not wait. Such refreshes may
	// be at most this share of nemo's calls to the store (over the last
	// two bounds, their own included); the ones it declines are counted in
	// nemo_cache_refresh_ahead_skipped_total. 0 turns refresh ahead off,
	// 1 leaves it unbounded.
	RefreshAheadShare float64 `yaml:"refresh_ahead_share"`
	// LeaseTTL is how long a lease lives unrenewed in exclusive mode in
	// front of Azure or Datastore (renewed every third of it). A nemo that
	// cannot renew stops acknowledging writes after four fifths of it;
	// another takes the keyspace over after all of it.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// NodeID names this nemo as a lease holder. It must be stable across
	// restarts (a restarted nemo takes back its own leases at once and
	// replays its WAL under them) and unique among live nemos. Empty
	// means an ID generated once and kept in <data_dir>/node-id.
	NodeID string `yaml:"node_id"`
	// Advertise is the host:port other replicas reach this nemo's peer
	// listener at (coherence.mode partitioned): it is written into the
	// leases this nemo holds. Empty means the pod IP (the POD_IP
	// environment variable, from the downward API) with the port of
	// listen.peer, or listen.peer itself when it names a host.
	Advertise string `yaml:"advertise"`
	// PeerSecret authenticates replicas to each other on listen.peer
	// (coherence.mode partitioned): every replica must have the same one,
	// at least 16 bytes. Secret: from a Kubernetes Secret, env
	// NEMO_COHERENCE_PEER_SECRET.
	PeerSecret string `yaml:"peer_secret"`
	// Peers turns automatic rebalancing on (coherence.mode partitioned):
	// the replicas' peer addresses, comma-separated host:port, a host
	// name standing for every address it resolves to (a headless Service
	// over the pods' peer port); this replica's own address may be among
	// them. Every RebalanceInterval a replica that owns more tables or
	// namespaces than its share, and two more than the least loaded
	// peer, hands its coldest over to that peer. Empty (the default): no
	// rebalancing; ownership moves with drains and POST /debug/handover.
	Peers string `yaml:"peers"`
	// RebalanceInterval is how often a replica with Peers compares what
	// it owns with its peers and moves at most one keyspace.
	RebalanceInterval time.Duration `yaml:"rebalance_interval"`
}

// PeerList is coherence.peers split at its commas, blanks trimmed.
func (c Coherence) PeerList() []string {
	var out []string
	for _, p := range strings.Split(c.Peers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// SharedDefaultStaleness is coherence.max_staleness in shared and
// partitioned mode when it is not set.
const SharedDefaultStaleness = time.Second

// CoherenceMode is the effective coherence mode: coherence.mode, or the
// backend's default when it is empty.
func (c Config) CoherenceMode() enum.Coherence {
	if c.Coherence.Mode != "" {
		return c.Coherence.Mode
	}
	if c.Backend.Type == BackendEmbedded || c.Backend.Type == "" {
		return enum.Exclusive
	}
	return enum.Shared
}

// MaxStaleness is the effective staleness bound: coherence.max_staleness,
// or SharedDefaultStaleness in shared and partitioned mode when it is 0.
func (c Config) MaxStaleness() time.Duration {
	if c.Coherence.MaxStaleness == 0 && c.CoherenceMode() != enum.Exclusive {
		return SharedDefaultStaleness
	}
	return c.Coherence.MaxStaleness
}

// The limits derived from cache.max_bytes when cache.max_key_bytes,
// cache.max_value_bytes or cache.max_dirty_bytes is 0: a share of the
// budget, capped at what a buffer of 256MiB and more has (the caps) and, for
// keys and values, floored so that ordinary entities still fit (the
// floors). MinDerivedBudget is the smallest budget whose shares reach the
// floors; below it both limits must be set.
const (
	MaxKeyBytesCap     = 8 * KiB
	MaxKeyBytesFloor   = 4 * KiB
	MaxValueBytesCap   = 2 * MiB
	MaxValueBytesFloor = 16 * KiB
	MaxDirtyBytesCap   = 64 * MiB
	MinDerivedBudget   = 64 * KiB
)

// MaxKeyBytes is the effective key limit: cache.max_key_bytes, or when it is
// 0, cache.max_bytes/16 kept between MaxKeyBytesFloor and MaxKeyBytesCap.
func (c Config) MaxKeyBytes() ByteSize {
	if c.Cache.MaxKeyBytes != 0 {
		return c.Cache.MaxKeyBytes
	}
	return min(max(c.Cache.MaxBytes/16, MaxKeyBytesFloor), MaxKeyBytesCap)
}

// MaxValueBytes is the effective value limit: cache.max_value_bytes, or when
// it is 0, cache.max_bytes/4 kept between MaxValueBytesFloor and
// MaxValueBytesCap.
func (c Config) MaxValueBytes() ByteSize {
	if c.Cache.MaxValueBytes != 0 {
		return c.Cache.MaxValueBytes
	}
	return min(max(c.Cache.MaxBytes/4, MaxValueBytesFloor), MaxValueBytesCap)
}

// AzureBodyCacheBytes is the slice of cache.max_bytes the Azure frontend
// keeps rendered JSON bodies of hot point reads in; the buffer gets the
// rest (Config.BufferBytes). It is max_bytes/64 up to 4MiB, and nothing
// under policy none, below a 16MiB budget, or where the buffer would be
// left too small for its largest record or its dirty bound.
func (c Config) AzureBodyCacheBytes() ByteSize {
	k := c.Cache
	if k.Policy == enum.PolicyNone || k.MaxBytes < 16*MiB {
		return 0
	}
	r := min(k.MaxBytes/64, 4*MiB)
	if rest := k.MaxBytes - r; rest < addSat(c.MaxKeyBytes(), c.MaxValueBytes(), k.RecordOverheadBytes) || rest < c.MaxDirtyBytes() {
		return 0
	}
	return r
}

// BufferBytes is the record buffer's budget: cache.max_bytes less the
// Azure frontend's body cache.
func (c Config) BufferBytes() ByteSize { return c.Cache.MaxBytes - c.AzureBodyCacheBytes() }

// MaxDirtyBytes is the effective dirty-bytes bound: cache.max_dirty_bytes,
// or when it is 0, cache.max_bytes/4 up to MaxDirtyBytesCap.
func (c Config) MaxDirtyBytes() ByteSize {
	if c.Cache.MaxDirtyBytes != 0 {
		return c.Cache.MaxDirtyBytes
	}
	return max(min(c.Cache.MaxBytes/4, MaxDirtyBytesCap), 1)
}

// Txn configures the transaction engine.
type Txn struct {
	// Phantom is "nextkey" (default) or "pcl": the engine's phantom strategies
	// (see enum.Phantoms). nextkey locks the gaps between buffered
	// records, with sentinels at range bounds (the paper's method); pcl
	// locks fixed key partitions covering a range (the paper's baseline,
	// for benchmarks).
	Phantom enum.Phantom `yaml:"phantom"`
	// PCLPartitions is how many equal partitions the key space is cut
	// into under phantom: pcl (by a key's first eight bytes read as a
	// big-endian integer): the lock table's budget.
	PCLPartitions int `yaml:"pcl_partitions"`
	// IdleTimeout aborts a client transaction (Datastore BeginTransaction)
	// that has made no call for this long, releasing its locks.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// LockWait is how long a lock request waits, in all, for the
	// transactions holding a conflicting lock before it fails (ABORTED,
	// 409/503); a wait that would deadlock fails at once, and a wait
	// ends so too just before its request's deadline (the client's, or
	// listen.request_timeout), so that the client hears that nothing was
	// applied. 0 means never wait (NO_WAIT).
	LockWait time.Duration `yaml:"lock_wait"`
	// SnapshotBytes bounds the versions kept for read-only transactions'
	// snapshots (coherence exclusive); past it the oldest snapshots are
	// given up (their next read is ABORTED).
	SnapshotBytes ByteSize `yaml:"snapshot_bytes"`
	// EarlyRelease lets a commit's locks go once its log records are
	// sequenced and its writes buffered, before the fsync; what read its
	// writes is acknowledged only once they are durable. It applies
	// where a WAL is written (write mode back, coherence exclusive, a
	// policy other than none). A failed fsync then stops writes until a
	// restart.
	EarlyRelease bool `yaml:"early_release"`
}

// WAL configures the write-ahead log.
type WAL struct {
	// Dir holds the log segments; empty means <backend.embedded.data_dir>/wal
	// (see Config.WALDir).
	Dir string `yaml:"dir"`
	// WriteMode is "back" (default) or "through": the engine's own
	// enum.WriteMode values (see enum.WriteModes). back acknowledges after the
	// WAL fsync and writes the store later; through writes the store before
	// acknowledging. Ignored under cache policy "none", which always writes
	// through.
	WriteMode enum.WriteMode `yaml:"write_mode"`
	// Location is where the commit log lives: "local" (default), segment
	// files in Dir; or "backend", one log per table or namespace in the
	// backend itself beside its lease (coherence exclusive in front of
	// aztable or datastore), so that a node whose disk is gone (an
	// emptyDir) loses no acknowledged write: the next holder of the lease
	// replays the log before it answers anything of that table.
	Location enum.WALLocation `yaml:"location"`
	// SegmentSize is the size at which the log rolls to a new segment file.
	SegmentSize ByteSize `yaml:"segment_size"`
	// GroupCommit lets concurrent commits share one fsync.
	GroupCommit bool `yaml:"group_commit"`
	// CheckpointInterval is how often a fuzzy checkpoint flushes dirty
	// records and truncates the log, bounding recovery time.
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// CheckpointBytes starts a checkpoint once this much has been logged
	// since the last one, bounding what a restart replays whatever the
	// write rate.
	CheckpointBytes ByteSize `yaml:"checkpoint_bytes"`
}

// Listen configures the listeners. Addresses are host:port with a numeric
// port; port 0 picks a free port.
type Listen struct {
	// AzureTable serves the Azure Table REST API (Azurite's port); empty
	// disables it (Load also takes "off", and an empty
	// NEMO_LISTEN_AZURE_TABLE: see ListenerOff).
	AzureTable string `yaml:"azure_table"`
	// Datastore serves Datastore gRPC and REST (the emulator's port); empty
	// disables it (Load also takes "off", and an empty
	// NEMO_LISTEN_DATASTORE).
	Datastore string `yaml:"datastore"`
	// HTTP serves the probes (/healthz, /readyz, /startupz) and /metrics;
	// it may bind the pod IP (0.0.0.0) so that kubelet and Prometheus reach
	// it. It serves nothing that reads data or changes state.
	HTTP string `yaml:"http"`
	// Peer serves the peer API of coherence.mode partitioned: other
	// replicas forward the writes and transactions of the tables and
	// namespaces this nemo owns to it (authenticated with
	// coherence.peer_secret). Empty (the default) disables it; it must be
	// set in partitioned mode and nowhere else.
	Peer string `yaml:"peer"`
	// Admin serves pprof, the debug API (which returns buffered records)
	// and /quitquitquit (what `nemo shutdown` calls). It must be a loopback
	// address unless AdminAllowRemote is set.
	Admin string `yaml:"admin"`
	// AdminAllowRemote lets listen.admin bind an address other than
	// loopback (a WARN line at startup says so).
	AdminAllowRemote bool `yaml:"admin_allow_remote"`
	// MaxRequestBytes bounds a request body. The default, 10MiB, is
	// Datastore's request limit; Azure's own 4 MiB batch limit is enforced
	// by its frontend.
	MaxRequestBytes ByteSize `yaml:"max_request_bytes"`
	// ReadTimeout bounds reading a whole request; 0 disables it.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds handling a request and writing its response; 0
	// disables it.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// RequestTimeout bounds how long a request waits for the backend
	// (and for locks) before it is answered with the protocol's
	// retryable error (Azure 500 OperationTimedOut / 503 ServerBusy,
	// Datastore DEADLINE_EXCEEDED / UNAVAILABLE). 0 (the default) derives
	// it from the service, as the service itself would bound the request:
	// Azure 30 s, or less by the request's timeout parameter; Datastore
	// the client's own call deadline less a margin to answer in (a fifth
	// of it, at most a second), or 60 s (the clients' own) when the call
	// carries none. Either way listen.write_timeout (less the same
	// margin) caps it. A commit already sent to the store runs on past
	// it, to the client's own deadline within that cap
	// (internal/deadline).
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// ShutdownGrace bounds the drain and final flush after SIGTERM. The 25s
	// default fits Kubernetes' 30 s terminationGracePeriodSeconds.
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	// AllowRemote lets nemo start in front of Azure or Datastore with a
	// listener off loopback that anyone who reaches it may use (see
	// Config.Exposures): the risk is then accepted, and logged as a
	// warning at every start.
	AllowRemote bool `yaml:"allow_remote"`
	// TLS serves the frontends and listen.http over TLS.
	TLS ListenTLS `yaml:"tls"`
}

// ListenTLS is the certificate the frontends (listen.azure_table,
// listen.datastore) and listen.http serve. With it, a frontend's clients
// that are not on loopback must connect over TLS (unless
// listen.allow_remote); clients on loopback, and every client of
// listen.http, may use either. The admin and peer listeners stay plaintext.
type ListenTLS struct {
	// CertFile is the PEM certificate chain (a cert-manager Secret's
	// tls.crt); empty (the default) serves plaintext. Set with KeyFile.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM private key of CertFile's certificate (tls.key).
	KeyFile string `yaml:"key_file"`
	// ReloadInterval is how often, at most, a TLS handshake reads the two
	// files again to pick up a renewed certificate; a pair that does not
	// load keeps the one served (and a warning is logged).
	ReloadInterval time.Duration `yaml:"reload_interval"`
}

// Enabled reports whether listen.tls names a certificate.
func (t ListenTLS) Enabled() bool { return t.CertFile != "" }

// Frontend configures what the emulated APIs present to clients.
type Frontend struct {
	// Azure is the Azure Table frontend.
	Azure AzureFrontend `yaml:"azure"`
	// Datastore is the Datastore frontend.
	Datastore DatastoreFrontend `yaml:"datastore"`
}

// AzureFrontendAccount and AzureFrontendKey are Azurite's well-known
// development account, so existing emulator connection strings
// ("UseDevelopmentStorage=true") work unchanged.
const (
	AzureFrontendAccount = "devstoreaccount1"
	AzureFrontendKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// AzureFrontend is the account clients authenticate as.
type AzureFrontend struct {
	// Account is the first path segment of every request URL.
	Account string `yaml:"account"`
	// Key verifies Shared Key and Shared Key Lite signatures. Secret.
	Key string `yaml:"key"`
	// AllowAnonymous accepts requests with no Authorization header.
	AllowAnonymous bool `yaml:"allow_anonymous"`
	// SASAcceptHTTP accepts shared access signatures restricted to HTTPS
	// (spr=https) on nemo's plain-HTTP listener; Azure refuses them there.
	SASAcceptHTTP bool `yaml:"sas_accept_http"`
	// RequireSAS refuses Shared Key, Shared Key Lite and anonymous
	// requests from clients not on loopback: they must present a shared
	// access signature. Clients on loopback (the pod's own application)
	// are exempt.
	RequireSAS bool `yaml:"require_sas"`
}

// DatastoreFrontend configures the Datastore frontend.
type DatastoreFrontend struct {
	// Project, when set, rejects requests for any other project ID; empty
	// accepts any, as the emulator does.
	Project string `yaml:"project"`
	// Token, when set, is the bearer token a client not on loopback must
	// send ("authorization: Bearer <token>", gRPC metadata or an HTTP
	// header); clients on loopback send none, as emulator clients do.
	// Secret.
	Token string `yaml:"token"`
}

// LogFormat is the log encoding.
type LogFormat string

// The log formats.
const (
	LogFormatJSON LogFormat = "json"
	LogFormatText LogFormat = "text"
)

// Log configures the process logger.
type Log struct {
	// Level is "debug", "info", "warn" or "error".
	Level string `yaml:"level"`
	// Format is "json" (default) or "text".
	Format LogFormat `yaml:"format"`
}

// Defaults returns the configuration nemo runs with when told nothing: an
// embedded store in ./nemo-data, both frontends on their emulators' ports.
func Defaults() Config {
	return Config{
		Backend: Backend{
			Type:     BackendEmbedded,
			AzTable:  AzTableBackend{ETagMemory: 100_000},
			Embedded: EmbeddedBackend{DataDir: "./nemo-data"},
			Fault:    FaultBackend{Error: FaultUnavailable, OutageMode: OutageFail},
			Contract: ContractBackend{ShortRate: 0.5, EmptyRate: 0.2, DeferRate: 0.3, ErrorRate: 0.02, LostRate: 0.02},
		},
		Cache: Cache{
			Policy:               enum.PolicyNemo,
			MaxBytes:             256 * MiB,
			RecordOverheadBytes:  64,
			EvictWorkers:         2,
			EvictBatch:           64,
			FlushInterval:        time.Second,
			MaxDirtyAge:          5 * time.Second,
			WriteBackParallelism: 8,
			WriteBackConflict:    enum.ConflictStoreWins,
		},
		Coherence: Coherence{LeaseTTL: 15 * time.Second, RefreshAheadShare: 0.5, RebalanceInterval: 30 * time.Second},
		Txn: Txn{
			Phantom:       enum.NextKey,
			PCLPartitions: 65536,
			IdleTimeout:   30 * time.Second,
			LockWait:      5 * time.Second,
			SnapshotBytes: 64 * MiB,
		},
		WAL: WAL{
			WriteMode:          enum.WriteBack,
			Location:           enum.WALLocal,
			SegmentSize:        64 * MiB,
			GroupCommit:        true,
			CheckpointInterval: time.Minute,
			CheckpointBytes:    64 * MiB,
		},
		Listen: Listen{
			AzureTable:      "127.0.0.1:10002",
			Datastore:       "127.0.0.1:8081",
			HTTP:            "127.0.0.1:9091",
			Admin:           "127.0.0.1:9090",
			MaxRequestBytes: 10 * MiB,
			ReadTimeout:     30 * time.Second,
			WriteTimeout:    60 * time.Second,
			ShutdownGrace:   25 * time.Second,
			TLS:             ListenTLS{ReloadInterval: 10 * time.Second},
		},
		Frontend: Frontend{
			Azure: AzureFrontend{Account: AzureFrontendAccount, Key: AzureFrontendKey},
		},
		Log: Log{Level: "info", Format: LogFormatJSON},
	}
}

// ConflictsFile is where write-back conflicts are appended, one JSON
// object a line: beside the WAL directory, in the data directory.
func (c Config) ConflictsFile() string {
	return filepath.Join(filepath.Dir(c.WALDir()), "conflicts.jsonl")
}

// InMemory reports whether nemo keeps everything in memory: the embedded
// store with backend.embedded.in_memory, no WAL and no file.
func (c Config) InMemory() bool {
	return c.Backend.Type == BackendEmbedded && c.Backend.Embedded.InMemory
}

// WALDir is the directory the WAL lives in: wal.dir, or <data_dir>/wal.
func (c Config) WALDir() string {
	if c.WAL.Dir != "" {
		return c.WAL.Dir
	}
	return filepath.Join(c.Backend.Embedded.DataDir, "wal")
}

// SlogLevel is log.level as a slog.Level. It assumes Validate passed and
// returns slog.LevelInfo for an unparsable level.
func (l Log) SlogLevel() slog.Level {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(l.Level)); err != nil {
		return slog.LevelInfo
	}
	return lvl
}

// RedactedValue replaces a non-empty secret; empty secrets stay empty
// so the printout still shows that one is unset.
const RedactedValue = "REDACTED"

// PodIPEnv is the environment variable the Kubernetes downward API sets to
// the pod's IP (status.podIP) in nemo's manifests: coherence.advertise
// defaults to it with the port of listen.peer.
const PodIPEnv = "POD_IP"

// PeerAdvertise is the address other replicas reach this one's peer
// listener at: coherence.advertise, or (Load fills it from POD_IP) the
// pod IP with listen.peer's port, or listen.peer when it names a host
// other than the unspecified address; "" when none of these says.
func (c Config) PeerAdvertise() string {
	if c.Coherence.Advertise != "" {
		return c.Coherence.Advertise
	}
	host, port, err := net.SplitHostPort(c.Listen.Peer)
	if err != nil || port == "0" {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return ""
	}
	return c.Listen.Peer
}

// Redacted returns a copy of c with every secret replaced by "REDACTED", for
// printing and logging.
func (c Config) Redacted() Config {
	for _, s := range []*string{
		&c.Backend.AzTable.ConnectionString,
		&c.Backend.AzTable.Key,
		&c.Frontend.Azure.Key,
		&c.Frontend.Datastore.Token,
		&c.Coherence.PeerSecret,
	} {
		if *s != "" {
			*s = RedactedValue
		}
	}
	return c
}

// YAML renders c in the file format Load reads (sizes as "256MiB",
// durations as "1s"), for `nemo config print`. Call Redacted first unless
// the output is meant to hold secrets.
func (c Config) YAML() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2) // as in nemo.example.yaml
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("config: render YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: render YAML: %w", err)
	}
	return buf.Bytes(), nil
}
