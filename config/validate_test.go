package config

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nemocache/nemo/internal/enum"
)

func TestDefaultsValid(t *testing.T) {
	if err := Defaults().Validate(); err != nil {
		t.Fatalf("Defaults() invalid:\n%v", err)
	}
}

// TestValidate checks every message exactly: key path, variable, wording.
func TestValidate(t *testing.T) {
	aztable := func(c *Config) { c.Backend.Type = BackendAzTable }
	datastore := func(c *Config) { c.Backend.Type = BackendDatastore; c.Backend.Datastore.Project = "p" }
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   []string
	}{
		{"backend type", func(c *Config) { c.Backend.Type = "mongo" }, []string{
			`backend.type (NEMO_BACKEND_TYPE): must be one of "embedded", "aztable", "datastore"; got "mongo"`,
		}},
		{"no data dir", func(c *Config) { c.Backend.Embedded.DataDir = "" }, []string{
			`backend.embedded.data_dir (NEMO_BACKEND_EMBEDDED_DATA_DIR): must be set when backend.type is "embedded"`,
			`wal.dir (NEMO_WAL_DIR): must be set when backend.embedded.data_dir is empty`,
		}},
		{"no data dir but wal dir", func(c *Config) {
			c.Backend.Type, c.Backend.Datastore.Project = BackendDatastore, "p"
			c.Backend.Embedded.DataDir, c.WAL.Dir = "", "/wal"
		}, nil},
		{"aztable nothing", aztable, []string{
			`backend.aztable.account (NEMO_BACKEND_AZTABLE_ACCOUNT): must be set when backend.type is "aztable" and connection_string is empty`,
			`backend.aztable.key (NEMO_BACKEND_AZTABLE_KEY): must be set unless use_default_credential is true`,
		}},
		{"aztable connection string", func(c *Config) {
			aztable(c)
			c.Backend.AzTable.ConnectionString = "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=a2V5"
		}, nil},
		{"aztable connection string and account", func(c *Config) {
			aztable(c)
			c.Backend.AzTable.ConnectionString = "AccountName=a"
			c.Backend.AzTable.Account = "a"
		}, []string{
			`backend.aztable.connection_string (NEMO_BACKEND_AZTABLE_CONNECTION_STRING): must not be combined with account, key, endpoint or use_default_credential`,
		}},
		{"aztable key and default credential", func(c *Config) {
			aztable(c)
			c.Backend.AzTable.Account, c.Backend.AzTable.Key, c.Backend.AzTable.UseDefaultCredential = "a", "a2V5", true
		}, []string{
			`backend.aztable.use_default_credential (NEMO_BACKEND_AZTABLE_USE_DEFAULT_CREDENTIAL): must not be true when backend.aztable.key is set`,
		}},
		{"aztable key not base64", func(c *Config) {
			aztable(c)
			c.Backend.AzTable.Account, c.Backend.AzTable.Key = "a", "hunter2!"
		}, []string{
			`backend.aztable.key (NEMO_BACKEND_AZTABLE_KEY): must be base64 (an Azure storage account key)`,
		}},
		{"aztable endpoint", func(c *Config) {
			aztable(c)
			c.Backend.AzTable.Account, c.Backend.AzTable.UseDefaultCredential = "a", true
			c.Backend.AzTable.Endpoint = "localhost:10002"
		}, []string{
			`backend.aztable.endpoint (NEMO_BACKEND_AZTABLE_ENDPOINT): must be an absolute http or https URL; got "localhost:10002"`,
		}},
		{"aztable default credential", func(c *Config) {
			aztable(c)
			c.Backend.AzTable.Account, c.Backend.AzTable.UseDefaultCredential = "a", true
			c.Backend.AzTable.Endpoint = "http://127.0.0.1:10002/devstoreaccount1"
		}, nil},
		{"aztable section ignored for other backends", func(c *Config) {
			c.Backend.AzTable.Key, c.Backend.AzTable.Endpoint = "!!", "nope"
		}, nil},
		{"datastore no project", func(c *Config) { c.Backend.Type = BackendDatastore }, []string{
			`backend.datastore.project (NEMO_BACKEND_DATASTORE_PROJECT): must be set when backend.type is "datastore"`,
		}},
		{"datastore emulator host", func(c *Config) { datastore(c); c.Backend.Datastore.EmulatorHost = "emulator" }, []string{
			`backend.datastore.emulator_host (NEMO_BACKEND_DATASTORE_EMULATOR_HOST): must be host:port with a numeric port; got "emulator"`,
		}},
		{"datastore emulator loop", func(c *Config) { datastore(c); c.Backend.Datastore.EmulatorHost = "[::1]:8081" }, []string{
			`backend.datastore.emulator_host (NEMO_BACKEND_DATASTORE_EMULATOR_HOST): "[::1]:8081" is nemo's own Datastore listener (listen.datastore "127.0.0.1:8081"), so every miss would loop back; point it at a real emulator or unset DATASTORE_EMULATOR_HOST for nemo`,
		}},
		{"datastore emulator elsewhere", func(c *Config) { datastore(c); c.Backend.Datastore.EmulatorHost = "localhost:8432" }, nil},
		{"datastore emulator same port other host", func(c *Config) { datastore(c); c.Backend.Datastore.EmulatorHost = "emulator:8081" }, nil},
		{"fault off ignores its keys", func(c *Config) {
			c.Backend.Fault.ErrorRate, c.Backend.Fault.Error, c.Backend.Fault.OutageSchedule = 7, "boom", "soon"
		}, nil},
		{"fault", func(c *Config) {
			c.Backend.Fault = FaultBackend{Enabled: true, Latency: 20 * time.Millisecond, Jitter: 10 * time.Millisecond, ErrorRate: 0.01,
				Error: FaultTimeout, OutageEvery: time.Minute, OutageFor: 10 * time.Second, OutageSchedule: "30s+10s, 5m+2m", OutageMode: OutageHang}
		}, nil},
		{"fault everything wrong", func(c *Config) {
			c.Backend.Fault = FaultBackend{Enabled: true, Latency: -time.Millisecond, Jitter: -time.Second, ErrorRate: 1.5,
				Error: "crash", OutageEvery: 10 * time.Second, OutageFor: 10 * time.Second, OutageSchedule: "30s", OutageMode: "sleep"}
		}, []string{
			`backend.fault.latency (NEMO_BACKEND_FAULT_LATENCY): must not be negative; got -1ms`,
			`backend.fault.jitter (NEMO_BACKEND_FAULT_JITTER): must not be negative; got -1s`,
			`backend.fault.error_rate (NEMO_BACKEND_FAULT_ERROR_RATE): must be a probability between 0 and 1; got 1.5`,
			`backend.fault.error (NEMO_BACKEND_FAULT_ERROR): must be one of "unavailable", "timeout"; got "crash"`,
			`backend.fault.outage_for (NEMO_BACKEND_FAULT_OUTAGE_FOR): must be less than backend.fault.outage_every (10s), or the backend never comes back; got 10s`,
			`backend.fault.outage_schedule (NEMO_BACKEND_FAULT_OUTAGE_SCHEDULE): window "30s": want START+DURATION, e.g. "30s+10s"`,
			`backend.fault.outage_mode (NEMO_BACKEND_FAULT_OUTAGE_MODE): must be one of "fail", "hang"; got "sleep"`,
		}},
		{"contract off ignores its keys", func(c *Config) { c.Backend.Contract.ShortRate = 3 }, nil},
		{"contract", func(c *Config) {
			datastore(c)
			c.Backend.Contract.Enabled, c.Backend.Contract.Seed, c.Backend.Contract.DefiniteWrites = true, 7, true
		}, nil},
		{"contract everything wrong", func(c *Config) {
			c.Backend.Contract = ContractBackend{Enabled: true, ShortRate: 1, EmptyRate: -0.5, DeferRate: 2, ErrorRate: math.NaN(), LostRate: 1.01}
		}, []string{
			`backend.contract.enabled (NEMO_BACKEND_CONTRACT_ENABLED): applies to backend.type aztable or datastore (the services' API contracts); backend.type is "embedded"`,
			`backend.contract.empty_rate (NEMO_BACKEND_CONTRACT_EMPTY_RATE): must be a probability between 0 and 1; got -0.5`,
			`backend.contract.defer_rate (NEMO_BACKEND_CONTRACT_DEFER_RATE): must be a probability between 0 and 1; got 2`,
			`backend.contract.error_rate (NEMO_BACKEND_CONTRACT_ERROR_RATE): must be a probability between 0 and 1; got NaN`,
			`backend.contract.lost_rate (NEMO_BACKEND_CONTRACT_LOST_RATE): must be a probability between 0 and 1; got 1.01`,
			`backend.contract.short_rate (NEMO_BACKEND_CONTRACT_SHORT_RATE): must be below 1: a batch holding one result can only be cut to an empty one, so a query would never end`,
		}},
		{"fault outage every without for", func(c *Config) {
			c.Backend.Fault.Enabled, c.Backend.Fault.OutageEvery = true, time.Minute
		}, []string{
			`backend.fault.outage_for (NEMO_BACKEND_FAULT_OUTAGE_FOR): must be set with backend.fault.outage_every (1m0s): how long each outage lasts`,
		}},
		{"fault outage for without every", func(c *Config) {
			c.Backend.Fault.Enabled, c.Backend.Fault.OutageFor = true, time.Second
		}, []string{
			`backend.fault.outage_every (NEMO_BACKEND_FAULT_OUTAGE_EVERY): must be set with backend.fault.outage_for (1s): how often an outage begins`,
		}},
		{"fault negative outage", func(c *Config) {
			c.Backend.Fault.Enabled, c.Backend.Fault.OutageEvery, c.Backend.Fault.OutageFor = true, -time.Minute, time.Second
		}, []string{
			`backend.fault.outage_every (NEMO_BACKEND_FAULT_OUTAGE_EVERY): must not be negative; got -1m0s`,
		}},
		{"fault over a cloud backend", func(c *Config) {
			datastore(c)
			c.Backend.Fault = FaultBackend{Enabled: true, Hung: true, Error: FaultUnavailable, OutageMode: OutageFail}
		}, nil},
		{"cache policy", func(c *Config) { c.Cache.Policy = "lru" }, []string{
			`cache.policy (NEMO_CACHE_POLICY): must be one of "nemo", "record", "none"; got "lru"`,
		}},
		{"cache max bytes zero", func(c *Config) { c.Cache.MaxBytes = 0 }, []string{
			`cache.max_bytes (NEMO_CACHE_MAX_BYTES): must be positive; got 0B`,
		}},
		{"cache 1MiB alone", func(c *Config) { c.Cache.MaxBytes = MiB }, nil},
		{"cache 64KiB alone", func(c *Config) { c.Cache.MaxBytes = 64 * KiB }, nil},
		{"cache below the derived minimum", func(c *Config) { c.Cache.MaxBytes = 64*KiB - 1 }, []string{
			`cache.max_bytes (NEMO_CACHE_MAX_BYTES): must be at least 64KiB unless cache.max_key_bytes and cache.max_value_bytes are both set (their defaults, max_bytes/16 and max_bytes/4, would fall below 4KiB and 16KiB); got 65535B`,
		}},
		{"cache below the derived minimum, one limit set", func(c *Config) {
			c.Cache.MaxBytes, c.Cache.MaxKeyBytes = 32*KiB, KiB
		}, []string{
			`cache.max_bytes (NEMO_CACHE_MAX_BYTES): must be at least 64KiB unless cache.max_key_bytes and cache.max_value_bytes are both set (their defaults, max_bytes/16 and max_bytes/4, would fall below 4KiB and 16KiB); got 32KiB`,
		}},
		{"cache small with both limits set", func(c *Config) {
			c.Cache.MaxBytes, c.Cache.MaxKeyBytes, c.Cache.MaxValueBytes = 16*KiB, KiB, 4*KiB
		}, nil},
		{"cache too small for the limits set", func(c *Config) {
			c.Cache.MaxBytes, c.Cache.MaxValueBytes, c.Cache.MaxDirtyBytes = MiB, 2*MiB, 64*MiB
		}, []string{
			`cache.max_bytes (NEMO_CACHE_MAX_BYTES): must hold the largest record, cache.max_key_bytes + cache.max_value_bytes + cache.record_overhead_bytes = 2105408B; got 1MiB`,
			`cache.max_dirty_bytes (NEMO_CACHE_MAX_DIRTY_BYTES): must not exceed cache.max_bytes (1MiB), since dirty records live in the buffer; got 64MiB`,
		}},
		{"cache policy none ignores the budget", func(c *Config) { c.Cache.Policy, c.Cache.MaxBytes = enum.PolicyNone, MiB }, nil},
		{"cache counts", func(c *Config) {
			c.Cache.RecordOverheadBytes, c.Cache.EvictWorkers, c.Cache.EvictBatch = -1, 0, -3
			c.Cache.MaxKeyBytes, c.Cache.MaxValueBytes = -1, -5
		}, []string{
			`cache.record_overhead_bytes (NEMO_CACHE_RECORD_OVERHEAD_BYTES): must not be negative; got -1B`,
			`cache.evict_workers (NEMO_CACHE_EVICT_WORKERS): must be at least 1; got 0`,
			`cache.evict_batch (NEMO_CACHE_EVICT_BATCH): must be at least 1; got -3`,
			`cache.max_key_bytes (NEMO_CACHE_MAX_KEY_BYTES): must not be negative (0 derives it from cache.max_bytes); got -1B`,
			`cache.max_value_bytes (NEMO_CACHE_MAX_VALUE_BYTES): must not be negative (0 derives it from cache.max_bytes); got -5B`,
		}},
		{"cache overflow saturates", func(c *Config) {
			c.Cache.MaxKeyBytes, c.Cache.MaxValueBytes = 1<<62, 1<<62
			c.WAL.SegmentSize = 1 << 62
		}, []string{
			`cache.max_bytes (NEMO_CACHE_MAX_BYTES): must hold the largest record, cache.max_key_bytes + cache.max_value_bytes + cache.record_overhead_bytes = 9223372036854775807B; got 256MiB`,
			`wal.segment_size (NEMO_WAL_SEGMENT_SIZE): must exceed cache.max_key_bytes + cache.max_value_bytes (9223372036854775807B) so the largest record fits in one segment; got 4194304TiB`,
		}},
		{"cache durations", func(c *Config) { c.Cache.FlushInterval, c.Cache.MaxDirtyAge = 0, -time.Second }, []string{
			`cache.flush_interval (NEMO_CACHE_FLUSH_INTERVAL): must be positive; got 0s`,
			`cache.max_dirty_age (NEMO_CACHE_MAX_DIRTY_AGE): must be positive; got -1s`,
		}},
		{"write-back parallelism", func(c *Config) { c.Cache.WriteBackParallelism = 0 }, []string{
			`cache.write_back_parallelism (NEMO_CACHE_WRITE_BACK_PARALLELISM): must be at least 1; got 0`,
		}},
		{"coherence staleness", func(c *Config) { c.Coherence.MaxStaleness = -time.Millisecond }, []string{
			`coherence.max_staleness (NEMO_COHERENCE_MAX_STALENESS): must not be negative (0 means the mode's default: off when exclusive, 1s when shared); got -1ms`,
		}},
		{"cache dirty bytes", func(c *Config) { c.Cache.MaxDirtyBytes = -1 }, []string{
			`cache.max_dirty_bytes (NEMO_CACHE_MAX_DIRTY_BYTES): must not be negative (0 derives it from cache.max_bytes); got -1B`,
		}},
		{"cache dirty bytes over a derived budget", func(c *Config) { c.Cache.MaxBytes, c.Cache.MaxDirtyBytes = 32*MiB, 64*MiB }, []string{
			`cache.max_dirty_bytes (NEMO_CACHE_MAX_DIRTY_BYTES): must not exceed cache.max_bytes (32MiB), since dirty records live in the buffer; got 64MiB`,
		}},
		{"txn", func(c *Config) { c.Txn = Txn{Phantom: "mvcc", LockWait: -time.Second} }, []string{
			`txn.phantom (NEMO_TXN_PHANTOM): must be one of "nextkey", "pcl"; got "mvcc"`,
			`txn.pcl_partitions (NEMO_TXN_PCL_PARTITIONS): must be at least 1; got 0`,
			`txn.idle_timeout (NEMO_TXN_IDLE_TIMEOUT): must be positive; got 0s`,
			`txn.lock_wait (NEMO_TXN_LOCK_WAIT): must not be negative (0: never wait); got -1s`,
			`txn.snapshot_bytes (NEMO_TXN_SNAPSHOT_BYTES): must be positive; got 0B`,
		}},
		{"wal", func(c *Config) {
			c.WAL.WriteMode, c.WAL.SegmentSize, c.WAL.CheckpointInterval, c.WAL.CheckpointBytes = "around", 2*MiB, 0, 0
		}, []string{
			`wal.write_mode (NEMO_WAL_WRITE_MODE): must be one of "back", "through"; got "around"`,
			`wal.segment_size (NEMO_WAL_SEGMENT_SIZE): must exceed cache.max_key_bytes + cache.max_value_bytes (2056KiB) so the largest record fits in one segment; got 2MiB`,
			`wal.checkpoint_interval (NEMO_WAL_CHECKPOINT_INTERVAL): must be positive; got 0s`,
			`wal.checkpoint_bytes (NEMO_WAL_CHECKPOINT_BYTES): must be positive; got 0B`,
		}},
		{"wal segment zero", func(c *Config) { c.WAL.SegmentSize = 0 }, []string{
			`wal.segment_size (NEMO_WAL_SEGMENT_SIZE): must be positive; got 0B`,
		}},
		{"wal location", func(c *Config) { c.WAL.Location = "cloud" }, []string{
			`wal.location (NEMO_WAL_LOCATION): must be one of "local", "backend"; got "cloud"`,
		}},
		{"wal location backend, embedded", func(c *Config) { c.WAL.Location = "backend" }, []string{
			`wal.location (NEMO_WAL_LOCATION): backend keeps the log in the cloud backend beside the leases: it needs backend.type aztable or datastore (the embedded store is this node's disk); got "embedded"`,
		}},
		{"wal location backend, shared", func(c *Config) {
			c.WAL.Location, c.Backend.Type, c.Backend.Datastore.Project = "backend", BackendDatastore, "p"
		}, []string{
			`wal.location (NEMO_WAL_LOCATION): backend is the log of coherence.mode exclusive or partitioned (their leases fence it); coherence.mode is "shared"`,
		}},
		{"wal location backend, early release", func(c *Config) {
			c.WAL.Location, c.Backend.Type, c.Backend.Datastore.Project, c.Coherence.Mode, c.Txn.EarlyRelease = "backend", BackendDatastore, "p", "exclusive", true
		}, []string{
			`wal.location (NEMO_WAL_LOCATION): backend does not release locks before the log has a commit: set txn.early_release false`,
		}},
		{"partitioned, embedded, nothing else", func(c *Config) { c.Coherence.Mode = "partitioned" }, []string{
			`coherence.mode (NEMO_COHERENCE_MODE): partitioned spreads a cloud backend's tables over replicas: it needs backend.type aztable or datastore; got "embedded"`,
			`wal.location (NEMO_WAL_LOCATION): must be backend in coherence.mode partitioned: the next owner of a table replays the log its last owner left; got "local"`,
			`listen.peer (NEMO_LISTEN_PEER): must be set in coherence.mode partitioned (for example 0.0.0.0:7946): the other replicas forward writes there`,
			`coherence.peer_secret (NEMO_COHERENCE_PEER_SECRET): must be at least 16 bytes in coherence.mode partitioned, the same on every replica (from a Secret: NEMO_COHERENCE_PEER_SECRET); got 0 bytes`,
		}},
		{"partitioned", func(c *Config) {
			datastore(c)
			c.Coherence.Mode, c.WAL.Location, c.Listen.Peer, c.Coherence.PeerSecret = "partitioned", "backend", "10.0.0.7:7946", "0123456789abcdef"
		}, nil},
		{"partitioned, no address to advertise", func(c *Config) {
			datastore(c)
			c.Coherence.Mode, c.WAL.Location, c.Listen.Peer, c.Coherence.PeerSecret = "partitioned", "backend", "0.0.0.0:7946", "0123456789abcdef"
		}, []string{
			`coherence.advertise (NEMO_COHERENCE_ADVERTISE): must be set when listen.peer ("0.0.0.0:7946") names no host other replicas can reach: set it to this pod's address and the peer port, or set POD_IP (the downward API's status.podIP)`,
		}},
		{"partitioned, advertised", func(c *Config) {
			datastore(c)
			c.Coherence.Mode, c.WAL.Location, c.Listen.Peer, c.Coherence.PeerSecret = "partitioned", "backend", "0.0.0.0:7946", "0123456789abcdef"
			c.Coherence.Advertise = "10.0.0.7:7946"
		}, nil},
		{"partitioned, rebalancing", func(c *Config) {
			datastore(c)
			c.Coherence.Mode, c.WAL.Location, c.Listen.Peer, c.Coherence.PeerSecret = "partitioned", "backend", "10.0.0.7:7946", "0123456789abcdef"
			c.Coherence.Peers = "nemo-peers:7946, 10.0.0.8:7946"
		}, nil},
		{"partitioned, bad peers", func(c *Config) {
			datastore(c)
			c.Coherence.Mode, c.WAL.Location, c.Listen.Peer, c.Coherence.PeerSecret = "partitioned", "backend", "10.0.0.7:7946", "0123456789abcdef"
			c.Coherence.Peers, c.Coherence.RebalanceInterval = "nemo-peers,:7946", 0
		}, []string{
			`coherence.peers (NEMO_COHERENCE_PEERS): must be comma-separated host:port (a host name may stand for several replicas); got "nemo-peers"`,
			`coherence.peers (NEMO_COHERENCE_PEERS): must be comma-separated host:port (a host name may stand for several replicas); got ":7946"`,
			`coherence.rebalance_interval (NEMO_COHERENCE_REBALANCE_INTERVAL): must be positive; got 0s`,
		}},
		{"peers outside partitioned", func(c *Config) { c.Coherence.Peers = "nemo-peers:7946" }, []string{
			`coherence.peers (NEMO_COHERENCE_PEERS): rebalances replicas of coherence.mode partitioned only; coherence.mode is "exclusive"`,
		}},
		{"peer listener outside partitioned", func(c *Config) { c.Listen.Peer = "127.0.0.1:7946" }, []string{
			`listen.peer (NEMO_LISTEN_PEER): serves replicas of coherence.mode partitioned only; coherence.mode is "exclusive"`,
		}},
		{"listen addresses", func(c *Config) {
			c.Listen.AzureTable, c.Listen.Datastore, c.Listen.HTTP, c.Listen.Admin = "10002", "127.0.0.1:http", "", ""
		}, []string{
			`listen.azure_table (NEMO_LISTEN_AZURE_TABLE): must be host:port with a numeric port; got "10002"`,
			`listen.datastore (NEMO_LISTEN_DATASTORE): must be host:port with a numeric port; got "127.0.0.1:http"`,
			`listen.http (NEMO_LISTEN_HTTP): must be set: health probes and metrics use it`,
			"listen.admin (NEMO_LISTEN_ADMIN): must be set: `nemo shutdown` uses it",
		}},
		{"listen admin off loopback", func(c *Config) { c.Listen.Admin, c.Listen.HTTP = "0.0.0.0:9090", "0.0.0.0:9091" }, []string{
			`listen.admin (NEMO_LISTEN_ADMIN): "0.0.0.0:9090" is not a loopback address: the admin listener serves pprof, buffered records and /quitquitquit; bind 127.0.0.1, or set listen.admin_allow_remote: true`,
		}},
		{"listen admin off loopback allowed", func(c *Config) { c.Listen.Admin, c.Listen.AdminAllowRemote = ":9090", true }, nil},
		{"listen admin localhost", func(c *Config) { c.Listen.Admin = "localhost:9090" }, nil},
		{"listen admin ipv6 loopback", func(c *Config) { c.Listen.Admin = "[::1]:9090" }, nil},
		{"listen port range", func(c *Config) { c.Listen.Admin = "127.0.0.1:65536" }, []string{
			`listen.admin (NEMO_LISTEN_ADMIN): must be host:port with a numeric port; got "127.0.0.1:65536"`,
		}},
		{"listen no frontend", func(c *Config) {
			c.Listen.AzureTable, c.Listen.Datastore = "", ""
			c.Frontend.Azure.Account = "not checked when disabled"
		}, []string{
			`listen.azure_table (NEMO_LISTEN_AZURE_TABLE): is empty and so is listen.datastore; enable at least one frontend`,
		}},
		{"listen one frontend", func(c *Config) { c.Listen.Datastore = "" }, nil},
		{"listen conflicts", func(c *Config) {
			c.Listen.AzureTable, c.Listen.Datastore, c.Listen.Admin = "127.0.0.1:10002", ":10002", "127.0.0.1:10002"
		}, []string{
			`listen.datastore (NEMO_LISTEN_DATASTORE): ":10002" conflicts with listen.azure_table ("127.0.0.1:10002")`,
			`listen.admin (NEMO_LISTEN_ADMIN): "127.0.0.1:10002" conflicts with listen.azure_table ("127.0.0.1:10002")`,
			`listen.admin (NEMO_LISTEN_ADMIN): "127.0.0.1:10002" conflicts with listen.datastore (":10002")`,
		}},
		{"listen same port different hosts", func(c *Config) {
			c.Listen.AzureTable, c.Listen.Datastore = "127.0.0.1:7000", "127.0.0.2:7000"
		}, nil},
		{"listen port zero never conflicts", func(c *Config) {
			c.Listen.AzureTable, c.Listen.Datastore, c.Listen.HTTP, c.Listen.Admin = "127.0.0.1:0", "127.0.0.1:0", ":0", "127.0.0.1:0"
		}, nil},
		{"listen limits", func(c *Config) {
			c.Listen.MaxRequestBytes, c.Listen.ReadTimeout, c.Listen.WriteTimeout, c.Listen.ShutdownGrace = 0, -time.Second, 0, 0
			c.Listen.RequestTimeout = -time.Second
		}, []string{
			`listen.max_request_bytes (NEMO_LISTEN_MAX_REQUEST_BYTES): must be positive; got 0B`,
			`listen.read_timeout (NEMO_LISTEN_READ_TIMEOUT): must not be negative (0 disables it); got -1s`,
			`listen.request_timeout (NEMO_LISTEN_REQUEST_TIMEOUT): must not be negative (0 derives it from the service and the client's deadline); got -1s`,
			`listen.shutdown_grace (NEMO_LISTEN_SHUTDOWN_GRACE): must be positive; got 0s`,
		}},
		{"listen tls half", func(c *Config) { c.Listen.TLS.CertFile, c.Listen.TLS.ReloadInterval = "/tls/tls.crt", 0 }, []string{
			`listen.tls.key_file (NEMO_LISTEN_TLS_KEY_FILE): listen.tls.cert_file and listen.tls.key_file go together: set both (a certificate and its key, e.g. a cert-manager Secret's tls.crt and tls.key) or neither`,
			`listen.tls.reload_interval (NEMO_LISTEN_TLS_RELOAD_INTERVAL): must be positive; got 0s`,
		}},
		{"listen tls", func(c *Config) { c.Listen.TLS.CertFile, c.Listen.TLS.KeyFile = "/tls/tls.crt", "/tls/tls.key" }, nil},
		{"azure frontend", func(c *Config) { c.Frontend.Azure.Account, c.Frontend.Azure.Key = "DevStore", "" }, []string{
			`frontend.azure.account (NEMO_FRONTEND_AZURE_ACCOUNT): must be 3 to 24 lowercase letters and digits, like an Azure storage account; got "DevStore"`,
			`frontend.azure.key (NEMO_FRONTEND_AZURE_KEY): must be set unless frontend.azure.allow_anonymous is true`,
		}},
		{"azure frontend bad key", func(c *Config) { c.Frontend.Azure.Key = "secret!" }, []string{
			`frontend.azure.key (NEMO_FRONTEND_AZURE_KEY): must be base64 (an Azure storage account key)`,
		}},
		{"azure frontend anonymous", func(c *Config) { c.Frontend.Azure.Key, c.Frontend.Azure.AllowAnonymous = "", true }, nil},
		{"azure frontend disabled", func(c *Config) {
			c.Listen.AzureTable, c.Frontend.Azure.Account, c.Frontend.Azure.Key = "", "", ""
		}, nil},
		{"log", func(c *Config) { c.Log = Log{Level: "verbose", Format: "xml"} }, []string{
			`log.level (NEMO_LOG_LEVEL): must be one of "debug", "info", "warn", "error"; got "verbose"`,
			`log.format (NEMO_LOG_FORMAT): must be one of "json", "text"; got "xml"`,
		}},
		{"log level case", func(c *Config) { c.Log.Level = "DEBUG" }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.mutate(&c)
			err := c.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("unexpected errors:\n%v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate passed, want:\n%s", strings.Join(tc.want, "\n"))
			}
			if got, want := err.Error(), strings.Join(tc.want, "\n"); got != want {
				t.Fatalf("errors:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestParseOutageSchedule(t *testing.T) {
	got, err := ParseOutageSchedule(" 30s+10s,5m+2m ,0s+1ms")
	want := []OutageWindow{{30 * time.Second, 10 * time.Second}, {5 * time.Minute, 2 * time.Minute}, {0, time.Millisecond}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("windows %v, %v; want %v", got, err, want)
	}
	if got, err := ParseOutageSchedule("  "); got != nil || err != nil {
		t.Errorf("empty: %v, %v", got, err)
	}
	for in, msg := range map[string]string{
		"30s":          `window "30s": want START+DURATION, e.g. "30s+10s"`,
		"30s+10s,":     `window "": want START+DURATION, e.g. "30s+10s"`,
		"soon+10s":     `window "soon+10s": start "soon" is not a non-negative duration`,
		"-1s+10s":      `window "-1s+10s": start "-1s" is not a non-negative duration`,
		"1s+0s":        `window "1s+0s": duration "0s" is not a positive duration`,
		"1s + forever": `window "1s + forever": duration "forever" is not a positive duration`,
	} {
		if _, err := ParseOutageSchedule(in); err == nil || err.Error() != msg {
			t.Errorf("%q: %v, want %s", in, err, msg)
		}
	}
}

// TestDerivedCacheLimits: with cache.max_bytes alone, the key, value and
// dirty limits follow the budget (a share, capped, floored); a limit that
// is set wins.
func TestDerivedCacheLimits(t *testing.T) {
	for _, tc := range []struct {
		budget, key, value, dirty ByteSize
	}{
		{64 * KiB, 4 * KiB, 16 * KiB, 16 * KiB},
		{100 * KiB, 6400, 25600, 25600},
		{MiB, 8 * KiB, 256 * KiB, 256 * KiB},
		{8 * MiB, 8 * KiB, 2 * MiB, 2 * MiB},
		{32 * MiB, 8 * KiB, 2 * MiB, 8 * MiB},
		{256 * MiB, 8 * KiB, 2 * MiB, 64 * MiB},
		{4 * GiB, 8 * KiB, 2 * MiB, 64 * MiB},
	} {
		c := Defaults()
		c.Cache.MaxBytes = tc.budget
		if k, v, d := c.MaxKeyBytes(), c.MaxValueBytes(), c.MaxDirtyBytes(); k != tc.key || v != tc.value || d != tc.dirty {
			t.Errorf("max_bytes %s: key %s value %s dirty %s, want %s %s %s", tc.budget, k, v, d, tc.key, tc.value, tc.dirty)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("max_bytes %s alone: %v", tc.budget, err)
		}
	}
	c := Defaults()
	c.Cache.MaxBytes = MiB
	c.Cache.MaxKeyBytes, c.Cache.MaxValueBytes, c.Cache.MaxDirtyBytes = KiB, 512*KiB, 100*KiB
	if k, v, d := c.MaxKeyBytes(), c.MaxValueBytes(), c.MaxDirtyBytes(); k != KiB || v != 512*KiB || d != 100*KiB {
		t.Errorf("set limits: key %s value %s dirty %s", k, v, d)
	}
}

// TestValidateReportsEverything: one call returns every problem as its own
// *FieldError, each wrapping ErrInvalid, and never echoes a secret.
func TestValidateReportsEverything(t *testing.T) {
	c := Defaults()
	c.Backend.Type = BackendAzTable
	c.Backend.AzTable.Account = "a"
	c.Backend.AzTable.Key = "not*base64*secret"
	c.Cache.Policy = "lru"
	c.Txn.IdleTimeout = 0
	c.Listen.Admin = "nowhere"
	c.Frontend.Azure.Key = "also*secret"
	c.Log.Format = "xml"
	err := c.Validate()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("errors.Is(ErrInvalid) false: %v", err)
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("%T is not a joined error", err)
	}
	var keys []string
	for _, e := range joined.Unwrap() {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%T is not a *FieldError", e)
		}
		if !errors.Is(fe, ErrInvalid) {
			t.Errorf("%v does not wrap ErrInvalid", fe)
		}
		if fe.Env != EnvName(fe.Key) {
			t.Errorf("%s: Env %q", fe.Key, fe.Env)
		}
		keys = append(keys, fe.Key)
	}
	want := []string{"backend.aztable.key", "cache.policy", "txn.idle_timeout", "listen.admin", "frontend.azure.key", "log.format"}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Errorf("keys %v, want %v", keys, want)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error echoes a secret: %v", err)
	}
}

func TestFieldErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		e    FieldError
		want string
	}{
		{FieldError{Key: "a.b", Env: "NEMO_A_B", Msg: "bad"}, "a.b (NEMO_A_B): bad"},
		{FieldError{Key: "a.zz", Msg: "unknown key"}, "a.zz: unknown key"},
		{FieldError{Msg: "whole config"}, "whole config"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}
