package bench

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/enum"
	"github.com/nemocache/nemo/internal/ycsb"
	"github.com/nemocache/nemo/txn"
)

// op is what one client operation of a run does.
type op uint8

const (
	opGet       op = iota // a point read (ReadLatest)
	opScan                // a bounded range read of scanLen records (ReadLatest)
	opYCSBE               // YCSB-E: a locking scan transaction, or an insert
	opBank                // the bank: transfers and audits (bank.go)
	opTakeover            // upserts through partitioned replicas, the owner killed (takeover.go)
	opWriteback           // the write-back soak through one exclusive nemo (writeback.go)
)

// runSpec is one measured run: a workload, a buffer and an engine.
type runSpec struct {
	op       op
	workload ycsb.Workload
	theta    float64      // zipfian skew of the requested items
	buffer   float64      // buffer budget as a fraction of the loaded records
	negative float64      // fraction of requests for absent keys or empty ranges
	scanLen  int          // records per range read
	policy   cache.Policy // the buffer's policy
	// Real targets: what answers the clients (nemo, nothing, a bare
	// proxy), nemo's coherence mode, and the workload's shape.
	server    serverKind
	mode      txn.Coherence
	updatePct int  // percent of operations that write an item (YCSB-B: 5)
	pass      bool // items in turn (none twice within a pass) instead of zipfian
	replicas  int  // nemo processes in front of the backend (0: one), the clients spread over them
	cold      bool // nothing warmed before measuring
	// The locking experiment (opYCSBE).
	phantom    txn.Phantom
	workers    int  // clients; 0 means Scale.Workers
	domainBits uint // keys are integers in [0, 2^domainBits)
	regionBits uint // data and inserts in [0, 2^regionBits): dense when < domainBits
	insertPct  int  // percent of transactions that insert
	noWait     bool // NO_WAIT 2PL (txn.lock_wait 0): a conflicting lock request aborts at once
}

// generator is the run's request generator over n items.
func (sp runSpec) generator(n uint64) (ycsb.Ranked, error) {
	if sp.pass {
		return newPass(n), nil
	}
	if sp.workload == WorkloadLongTail {
		return ycsb.WorkloadScrambled.Generator(n, sp.theta)
	}
	return sp.workload.Generator(n, sp.theta)
}

// pass hands out the n items in turn, in an order spread over the key
// space (the i-th is i*step mod n, step coprime with n), to all the
// clients together: no item is asked for twice within n requests, so a
// read never finds what an earlier read of the run buffered (unless the
// run outlasts a pass, and the pass outlasts the staleness bound).
type pass struct {
	n, step uint64
	next    atomic.Uint64
}

func newPass(n uint64) *pass {
	step := uint64(0x9E3779B97F4A7C15) % n
	for step == 0 || gcd(step, n) != 1 {
		step++
	}
	return &pass{n: n, step: step}
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func (p *pass) Next(*rand.Rand) uint64  { return p.next.Add(1) * p.step % p.n }
func (p *pass) Items() uint64           { return p.n }
func (p *pass) Item(rank uint64) uint64 { return rank * p.step % p.n }

// series is one line of a figure: a name, what it changes in the spec,
// and its group (a workload, a data layout): rows are compared with the
// baseline series of the same group.
type series struct {
	name, group string
	set         func(*runSpec)
}

// label is the series' name in tables and legends.
func (s series) label() string {
	if s.group == "" {
		return s.name
	}
	return s.name + " (" + s.group + ")"
}

// figure is one sweep: a plot and a section of its experiment's table.
type figure struct {
	name, title, xlabel string
	xs                  []float64
	xfmt                func(float64) string
	base                runSpec
	vary                func(*runSpec, float64)
	series              []series
	// baseline is the series the others are compared with.
	baseline string
	// perWorkload repeats the series for every workload asked for.
	perWorkload bool
	logX        bool // a logarithmic x axis
	// firstIfShort: with Scale.Short only the first point (a kill of
	// the take-over experiment is long whatever the scale).
	firstIfShort bool
}

// experiment is a named set of figures, mirroring one of the paper's.
type experiment struct {
	name  string
	about string // one line for --list
	paper string // what the paper reports for it, for the table's header
	// real: the experiment also runs on the azurite, URL and emulator
	// targets; realOnly: only there.
	real, realOnly bool
	figures        []figure
}

// runsOn reports whether the experiment runs on a target (real or not).
func (e experiment) runsOn(real bool) bool {
	if real {
		return e.real || e.realOnly
	}
	return !e.realOnly
}

func policies(ps ...cache.Policy) []series {
	out := make([]series, len(ps))
	for i, p := range ps {
		out[i] = series{name: string(p), set: func(s *runSpec) { s.policy = p }}
	}
	return out
}

// phantoms is next-key and PCL locking, each over a dense and a sparse
// layout of the data in the key domain, each under NO_WAIT 2PL (the
// paper's protocol: a conflicting lock request aborts and the client
// retries) and under waiting for the conflicting lock (nemo's default).
func phantoms() []series {
	var out []series
	for _, layout := range []string{"dense", "sparse"} {
		for _, proto := range []string{"no-wait", "wait"} {
			for _, p := range []txn.Phantom{txn.NextKey, txn.PCL} {
				out = append(out, series{name: string(p), group: layout + ", " + proto, set: func(s *runSpec) {
					s.phantom = p
					s.noWait = proto == "no-wait"
					s.regionBits = s.domainBits
					if layout == "dense" {
						s.regionBits = min(denseBits, s.domainBits)
					}
				}})
			}
		}
	}
	return out
}

// denseBits: the dense layout keeps the data in the lowest 2^16 keys of
// the domain (small ids in a wide key type); pclBudgetBits: PCL gets 2^12
// partitions over the domain whatever its size (its lock-table budget).
const (
	denseBits     = 16
	pclBudgetBits = 12
)

func pct(x float64) string              { return fmt.Sprintf("%.0f%%", 100*x) }
func num(x float64) string              { return fmt.Sprintf("%g", x) }
func pow2(x float64) string             { return fmt.Sprintf("2^%.0f", x) }
func setBuffer(s *runSpec, x float64)   { s.buffer = x }
func setTheta(s *runSpec, x float64)    { s.theta = x }
func setNegative(s *runSpec, x float64) { s.negative = x }
func setScanLen(s *runSpec, x float64)  { s.scanLen = int(x) }
func setWorkers(s *runSpec, x float64)  { s.workers = int(x) }
func setDomain(s *runSpec, x float64)   { s.domainBits = uint(x) }

// The forward experiment's x: a read (0) or a write (1) of an item.
func opName(x float64) string {
	if x == 1 {
		return "write"
	}
	return "read"
}
func setWrites(s *runSpec, x float64) { s.updatePct = int(100 * x) }

// servers is the servers experiment's series: the backend alone (the
// clients talk to it), and nemo in front of it in either coherence mode,
// with a buffer that holds the table (a sidecar's budget).
func servers() []series {
	return []series{
		{name: "direct", set: func(s *runSpec) { s.server = serverDirect }},
		{name: "exclusive", set: func(s *runSpec) { s.policy, s.mode = cache.PolicyNemo, txn.Exclusive }},
		{name: "shared", set: func(s *runSpec) { s.policy, s.mode = cache.PolicyNemo, txn.Shared }},
	}
}

// serversFigure is one workload of the servers experiment, over skew.
func serversFigure(name, what string, base runSpec) figure {
	base.buffer = 1
	return figure{
		name: "servers-" + name, title: what + ": nemo vs the backend alone (buffer holds the table)", xlabel: "zipfian theta",
		xs: []float64{0.5, 0.9, 0.99}, xfmt: num, vary: setTheta,
		base: base, series: servers(), baseline: "direct", perWorkload: true,
	}
}

// replicas is the replicas experiment's series: the clients straight to
// the backend (as many SDK clients as replicas), and three nemos in
// coherence shared or partitioned, the clients' requests spread over them
// in turn; YCSB's scrambled zipfian, the nemos warmed by the workload.
func replicas() []series {
	const n = 3
	return []series{
		{name: "direct", set: func(s *runSpec) { s.server, s.replicas, s.workload = serverDirect, n, ycsb.WorkloadScrambled }},
		{name: "shared", set: func(s *runSpec) {
			s.policy, s.mode, s.replicas, s.workload = cache.PolicyNemo, txn.Shared, n, ycsb.WorkloadScrambled
		}},
		{name: "partitioned", set: func(s *runSpec) {
			s.policy, s.mode, s.replicas, s.workload = cache.PolicyNemo, enum.Partitioned, n, ycsb.WorkloadScrambled
		}},
	}
}

// replicasFigure is one YCSB workload of the replicas experiment: point
// reads and upserts (updatePct of them) of zipfian 0.99 items.
func replicasFigure(name, what string, updatePct int) figure {
	return figure{
		name: "replicas-" + name, title: what + ": three nemos, partitioned vs shared vs the backend", xlabel: "zipfian theta",
		xs: []float64{0.99}, xfmt: num, vary: setTheta,
		base:   runSpec{op: opGet, buffer: 1, updatePct: updatePct},
		series: replicas(), baseline: "direct",
	}
}

// experiments is every experiment nemo-bench knows, in the order it runs
// them.
var experiments = []experiment{
	{
		name: "point", real: true,
		about: "point reads (zipfian 0.99) vs buffer size, policies none / record / nemo",
		paper: "point reads vs buffer size: nemo as good as a record cache, far fewer remote calls than none",
		figures: []figure{{
			name: "point", title: "Point reads vs buffer size (zipfian 0.99)", xlabel: "buffer (% of data)",
			xs: []float64{0.05, 0.10, 0.20, 0.30, 0.50}, xfmt: pct, vary: setBuffer,
			base:   runSpec{op: opGet, theta: 0.99},
			series: policies(cache.PolicyNone, cache.PolicyRecord, cache.PolicyNemo), baseline: string(cache.PolicyRecord),
			perWorkload: true,
		}},
	},
	{
		name:  "skew",
		about: "point reads at a 10% buffer vs zipfian theta 0.5 … 0.99, policies none / record / nemo",
		paper: "the gain over no cache grows with skew",
		figures: []figure{{
			name: "skew", title: "Point reads vs skew (buffer 10%)", xlabel: "zipfian theta",
			xs: []float64{0.5, 0.6, 0.7, 0.8, 0.9, 0.99}, xfmt: num, vary: setTheta,
			base:   runSpec{op: opGet, buffer: 0.10},
			series: policies(cache.PolicyNone, cache.PolicyRecord, cache.PolicyNemo), baseline: string(cache.PolicyRecord),
			perWorkload: true,
		}},
	},
	{
		name:  "negative",
		about: "point lookups and range reads of 8 vs the share asking for absent keys / empty ranges, buffer 30%, record vs nemo",
		paper: "50% negative lookups: 4.76x fewer remote calls than a record cache",
		figures: []figure{
			{
				name: "negative-lookups", title: "Negative point lookups (buffer 30%)", xlabel: "absent keys (% of lookups)",
				xs: []float64{0, 0.25, 0.5, 0.75, 1}, xfmt: pct, vary: setNegative,
				base:   runSpec{op: opGet, theta: 0.99, buffer: 0.30},
				series: policies(cache.PolicyRecord, cache.PolicyNemo), baseline: string(cache.PolicyRecord),
				perWorkload: true,
			},
			{
				name: "negative-ranges", title: "Empty range reads (scans of 8, buffer 30%)", xlabel: "empty ranges (% of scans)",
				xs: []float64{0, 0.25, 0.5, 0.75, 1}, xfmt: pct, vary: setNegative,
				base:   runSpec{op: opScan, theta: 0.99, buffer: 0.30, scanLen: 8},
				series: policies(cache.PolicyRecord, cache.PolicyNemo), baseline: string(cache.PolicyRecord),
				perWorkload: true,
			},
		},
	},
	{
		name: "range", real: true,
		about: "range reads of 1 … 64 records (zipfian 0.99 starts), buffer 30%, record vs nemo",
		paper: "scans of 8 at a 30% buffer: 4.70x fewer remote calls than a record cache",
		figures: []figure{{
			name: "range", title: "Range reads vs length (buffer 30%)", xlabel: "records per range read",
			xs: []float64{1, 2, 4, 8, 16, 32, 64}, xfmt: num, vary: setScanLen, logX: true,
			base:   runSpec{op: opScan, theta: 0.99, buffer: 0.30},
			series: policies(cache.PolicyRecord, cache.PolicyNemo), baseline: string(cache.PolicyRecord),
			perWorkload: true,
		}},
	},
	{
		name: "forward", realOnly: true,
		about: "a forwarded read and write of items in turn (none read twice within a pass): CPU per request of a bare reverse proxy, nemo with policy none, and nemo missing in coherence shared",
		paper: "not in the paper: nemo's CPU per forwarded request at most 2x a bare proxy's",
		figures: []figure{{
			name: "forward", title: "Forwarded requests (items in turn: every read a miss)", xlabel: "operation",
			xs: []float64{0, 1}, xfmt: opName, vary: setWrites,
			base: runSpec{op: opGet, pass: true, cold: true, buffer: 1},
			series: []series{
				{name: "proxy", set: func(s *runSpec) { s.server = serverProxy }},
				{name: "none", set: func(s *runSpec) { s.policy, s.mode = cache.PolicyNone, txn.Shared }},
				{name: "shared", set: func(s *runSpec) { s.policy, s.mode = cache.PolicyNemo, txn.Shared }},
			},
			baseline: "proxy",
		}},
	},
	{
		name: "servers", realOnly: true,
		about: "point reads, 50% negative lookups, range reads of 8 and YCSB-B (5% writes) vs skew: the backend alone, nemo exclusive and shared, with each server process's CPU per operation",
		paper: "not in the paper: what each server process spends per operation, nemo against the backend it fronts",
		figures: []figure{
			serversFigure("point", "Point reads", runSpec{op: opGet}),
			serversFigure("negative", "50% negative lookups", runSpec{op: opGet, negative: 0.5}),
			serversFigure("range", "Range reads of 8", runSpec{op: opScan, scanLen: 8}),
			serversFigure("ycsbb", "YCSB-B (95% reads, 5% writes)", runSpec{op: opGet, updatePct: 5}),
		},
	},
	{
		name: "replicas", realOnly: true,
		about: "YCSB-A (50% updates) and YCSB-B (5% updates), YCSB's scrambled zipfian 0.99, over three nemos in coherence shared and partitioned (the clients spread over them) against the backend alone",
		paper: "not in the paper (its section 8.1 proposes a partitioned writer): remote requests per operation summed over the three nemos, and what they cost",
		figures: []figure{
			replicasFigure("a", "YCSB-A (50% reads, 50% updates)", 50),
			replicasFigure("b", "YCSB-B (95% reads, 5% updates)", 5),
		},
	},
	{
		name: "replicas-bank", realOnly: true,
		about: fmt.Sprintf("the bank: %d accounts of %d, transfers of 1-%d between two accounts chosen uniformly (a conditional entity group batch in front of Azure, a read-write transaction in front of Datastore, retried on conflict) and %d%% audits reading every account, over three nemos in coherence shared and partitioned against the backend alone; the total checked in the backend after each series",
			bankAccounts, bankInitial, bankMaxAmount, bankAuditPct),
		paper: "not in the paper: transactions through replicas, with the money conserved",
		figures: []figure{{
			name: "replicas-bank", title: "Bank transfers: three nemos, partitioned vs shared vs the backend", xlabel: "accounts",
			xs: []float64{bankAccounts}, xfmt: num, vary: func(*runSpec, float64) {},
			base:   runSpec{op: opBank, buffer: 1},
			series: replicas(), baseline: "direct",
		}},
	},
	{
		name: "replicas-takeover", realOnly: true,
		about: "three nemos in coherence partitioned (lease TTL 5 s, commit log in the backend), upserts through all three; the table's owner killed with SIGKILL: the time until writes through the survivors are acknowledged again, their latency, the log entries replayed, and no acknowledged write lost",
		paper: "not in the paper: what a dead partitioned owner costs",
		figures: []figure{{
			name: "replicas-takeover", title: "Kill -9 of the partitioned owner: take-over", xlabel: "kill",
			xs: []float64{1, 2, 3}, xfmt: num, vary: func(*runSpec, float64) {}, firstIfShort: true,
			base:   runSpec{op: opTakeover, buffer: 1, policy: cache.PolicyNemo, mode: enum.Partitioned, replicas: 3},
			series: []series{{name: "partitioned", set: func(*runSpec) {}}}, baseline: "partitioned",
		}},
	},
	{
		name: "writeback", realOnly: true,
		about: fmt.Sprintf("the write-back soak: --records entities of about 1 KiB in up to %d partitions, clients through one nemo in coherence exclusive (max_dirty_bytes 16 MiB, max_dirty_age %v) making %d%% upserts, %d%% deletes, %d%% entity group batches of %d upserts and the rest point reads, each writing its own keys; over cache.write_back_parallelism: write-back records and calls per second, calls in flight, the oldest dirty record's age and the dirty bytes (sampled from /metrics every %v), and every key checked in the backend after nemo drained",
			wbPartitions, wbMaxDirty, wbUpsertPct, wbDeletePct, wbBatchPct, wbBatchSize, wbSample),
		paper: "not in the paper: whether write-back keeps max_dirty_age under a steady write load",
		figures: []figure{{
			name: "writeback", title: "Write-back under a steady write load, over its parallelism", xlabel: "write-back parallelism",
			xs: []float64{1, 8}, xfmt: num, vary: func(*runSpec, float64) {},
			base:   runSpec{op: opWriteback, buffer: 1, policy: cache.PolicyNemo},
			series: []series{{name: "nemo", set: func(*runSpec) {}}}, baseline: "nemo",
		}},
	},
	{
		name:  "locking",
		about: "YCSB-E (95% locking scans of 8, 5% inserts), next-key vs PCL over goroutines and key-domain size, dense and sparse, under NO_WAIT and waiting",
		paper: "next-key 1.55x PCL at 64 goroutines even under a dense key domain, flat across domain sizes (NO_WAIT 2PL)",
		figures: []figure{
			{
				name: "locking-threads", title: "YCSB-E: next-key vs PCL over goroutines (domain 2^32)", xlabel: "goroutines",
				xs: []float64{4, 8, 16, 32, 64}, xfmt: num, vary: setWorkers,
				base:   runSpec{op: opYCSBE, theta: 0.99, buffer: 0.30, scanLen: 8, insertPct: 5, domainBits: 32, policy: cache.PolicyNemo},
				series: phantoms(), baseline: string(txn.PCL),
			},
			{
				name: "locking-domain", title: "YCSB-E: next-key vs PCL over key-domain size (32 goroutines)", xlabel: "key domain",
				xs: []float64{16, 32, 64}, xfmt: pow2, vary: setDomain,
				base:   runSpec{op: opYCSBE, theta: 0.99, buffer: 0.30, scanLen: 8, insertPct: 5, workers: 32, policy: cache.PolicyNemo},
				series: phantoms(), baseline: string(txn.PCL),
			},
		},
	},
}

// points returns the x values a run measures: all of them, or with
// Scale.Short the first, middle and last.
func (f figure) points(sc Scale) []float64 {
	if sc.Short && f.firstIfShort {
		return f.xs[:1]
	}
	if !sc.Short || len(f.xs) <= 3 {
		return f.xs
	}
	return []float64{f.xs[0], f.xs[len(f.xs)/2], f.xs[len(f.xs)-1]}
}
