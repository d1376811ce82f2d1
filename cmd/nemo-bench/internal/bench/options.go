package bench

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/nemocache/nemo/internal/enum"
	"github.com/nemocache/nemo/internal/ycsb"
)

// ErrInvalid is returned (wrapped, with every problem found) by
// Options.Validate.
var ErrInvalid = errors.New("bench: invalid options")

// Target kinds: where the experiments send their requests.
const (
	// TargetEmbedded: the engine over the embedded store behind injected
	// latency (the default; needs nothing else).
	TargetEmbedded = "embedded"
	// TargetAzurite: nemo's Azure Table frontend, in process, over
	// Azurite (the URL from NEMO_TEST_AZURITE unless a URL is given).
	TargetAzurite = "azurite"
	// TargetEmulator: nemo's Datastore frontend, in process, over the
	// Datastore emulator (host:port from NEMO_TEST_DATASTORE).
	TargetEmulator = "emulator"
)

// Workload choices beside ycsb's two: run both, each as its own series.
const WorkloadBoth = "both"

// WorkloadLongTail reads a long tail: YCSB's scrambled zipfian (warmed by
// running the workload, as scrambled is) over at least LongTailRecords
// records, so that a small scale cannot make the tail look hot.
const WorkloadLongTail ycsb.Workload = "longtail"

// LongTailRecords is the fewest records WorkloadLongTail reads over.
const LongTailRecords = 20000

// Options configures one Run. The zero value of a field means its default:
// call EnsureDefaults, then Validate (Run does both).
type Options struct {
	// Target is "embedded" (default), "azurite", "emulator", or the URL
	// of an Azure Table endpoint (path-style, ending in the account,
	// signed with Azurite's development key) to use in place of
	// Azurite's.
	Target string
	// AzuriteURL and EmulatorHost locate the real backends (from
	// NEMO_TEST_AZURITE and NEMO_TEST_DATASTORE, filled by the caller).
	AzuriteURL, EmulatorHost string
	// Experiments names the experiments to run, in this order; empty
	// means all that run on the target (see Experiments). A figure's name
	// runs that figure of its experiment alone.
	Experiments []string
	// Workload is "paper", "scrambled", "both" or "longtail". Default
	// paper.
	Workload string
	// Nemo is the nemo binary the real targets run (a process per run,
	// so that its CPU time is its own). Default: a "nemo" beside this
	// program, else one on $PATH.
	Nemo string
	// Quick runs every experiment at a small scale with fewer points: a
	// pass of about a minute in all.
	Quick bool
	// Out is the results folder. Default "bench-results".
	Out string
	// Seed seeds the data and the request streams. Default 1.
	Seed uint64
	// Latency and Jitter are injected on every remote call of the
	// embedded target: Latency plus a uniform delay in [0, Jitter).
	// Default 1 ms and 100 µs; negative means none.
	Latency, Jitter time.Duration
	// MaxStaleness is coherence.max_staleness of a real target's nemo in
	// coherence shared; 0 leaves nemo's default (1 s). Sliced runs then
	// warm each slice for at least this long, so that a series resumes
	// as fresh as one that never paused.
	MaxStaleness time.Duration
	// RTT and RTTJitter simulate a cloud round trip on the real targets:
	// every series reaches the backend through a TCP delay proxy in this
	// process (delayproxy.go), the direct clients included, which holds
	// each chunk RTT/2 plus a uniform jitter in [0, RTTJitter] each way.
	// 0 (the default) connects straight to the loopback backend.
	RTT, RTTJitter time.Duration
	// BackendNice, when not 0, sets every thread of the backend's
	// process (found by the port it listens on) to this nice value for
	// the session, and puts it back after (remote.go): with RTT, -10
	// stands for a store with CPU of its own instead of one that waits
	// for the cores the clients and nemo keep busy. Below the current
	// nice it needs CAP_SYS_NICE.
	BackendNice int
	// Scale overrides the scale Quick or the default chooses (tests use
	// tiny ones); nil means that scale.
	Scale *Scale
	// Args is the command line that started the run (nemo-bench's
	// arguments), which every table names with the commit and the date.
	Args []string
	// Progress receives one bar per experiment (Terminal) or plain
	// progress lines. Default io.Discard.
	Progress io.Writer
	Terminal bool
	Logger   *slog.Logger
}

// Scale is how big and how long each measured run is.
type Scale struct {
	Records   int           // records loaded (cache experiments)
	ValueSize int           // bytes per value
	Workers   int           // concurrent clients (cache experiments)
	Measure   time.Duration // measured phase of each run
	// MeasureOps, when positive, makes the measured phase of a cache
	// or locking run that many operations instead of Measure (a locking
	// run's are committed transactions): remote requests per
	// operation then describe the same work however fast the machine is
	// (in a short phase the first fetch of each range, and a full
	// buffer's second, weigh more the fewer operations a loaded machine
	// completes).
	MeasureOps int
	WarmOps    int // scrambled workload: operations run to warm the buffer
	// Settle, when positive, runs every warmed run's workload unmeasured
	// that long after its warm-up, so that the measured phase is the
	// steady state: the first read of each key the warm-up did not reach
	// (the paper workload's absent keys: its warm-up reads the top-K
	// items) falls before it.
	Settle time.Duration
	// Slices, when more than 1, measures the series of a real target's
	// point together: each warmed, then that many rounds in which every
	// series in turn runs a second unmeasured and Measure/Slices
	// measured, so that the machine's load falls on them alike.
	Slices int
	// TxnRecords is the locking experiment's preloaded record count.
	TxnRecords int
	// Short keeps only the first, middle and last point of each sweep.
	Short bool
}

// defaultScale is the full run; quickScale the one-minute pass.
var (
	defaultScale = Scale{Records: 20000, ValueSize: 1024, Workers: 16, Measure: 2 * time.Second, WarmOps: 100000, TxnRecords: 16384}
	quickScale   = Scale{Records: 2000, ValueSize: 512, Workers: 16, Measure: 300 * time.Millisecond, WarmOps: 8000, TxnRecords: 4096, Short: true}
)

// EnsureDefaults fills in every unset field.
func (o *Options) EnsureDefaults() {
	if o.Target == "" {
		o.Target = TargetEmbedded
	}
	if len(o.Experiments) == 0 {
		for _, e := range experiments {
			if e.runsOn(o.real()) {
				o.Experiments = append(o.Experiments, e.name)
			}
		}
	}
	if o.Workload == "" {
		o.Workload = string(ycsb.WorkloadPaper)
	}
	if o.Out == "" {
		o.Out = "bench-results"
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Latency == 0 {
		o.Latency = time.Millisecond
	}
	if o.Jitter == 0 {
		o.Jitter = 100 * time.Microsecond
	}
	o.Latency, o.Jitter = max(o.Latency, 0), max(o.Jitter, 0)
	if o.Scale == nil {
		sc := DefaultScale(o.Quick)
		if o.Workload == string(WorkloadLongTail) {
			sc.Records = max(sc.Records, LongTailRecords)
		}
		o.Scale = &sc
	}
	if o.real() {
		o.Nemo = findNemo(o.Nemo)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports every problem at once; it assumes EnsureDefaults ran.
func (o Options) Validate() error {
	var errs []error
	bad := func(f string, args ...any) { errs = append(errs, fmt.Errorf(f, args...)) }
	o.validateTarget(bad)
	o.validateExperiments(bad)
	o.validateRun(bad)
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// validateTarget is Validate's check of the target and its address.
func (o Options) validateTarget(bad func(string, ...any)) {
	switch o.Target {
	case TargetEmbedded:
	case TargetAzurite:
		if o.AzuriteURL == "" {
			bad("target azurite: no Azurite URL (set NEMO_TEST_AZURITE, or pass the URL as --target)")
		}
	case TargetEmulator:
		if o.EmulatorHost == "" {
			bad("target emulator: no emulator host (set NEMO_TEST_DATASTORE)")
		}
	default:
		if u, err := url.Parse(o.Target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("target %q: want embedded, azurite, emulator or an http(s) URL of an Azure Table endpoint", o.Target)
		}
	}
}

// validateExperiments is Validate's check of the experiments' names and
// targets.
func (o Options) validateExperiments(bad func(string, ...any)) {
	for _, name := range o.Experiments {
		e, ok := lookup(name)
		switch {
		case !ok:
			bad("experiment %q: want %s", name, enum.Or(names()))
		case o.real() && !e.runsOn(true):
			bad("experiment %q runs on the embedded target only (real targets run %s)", name, enum.Or(realNames()))
		case !o.real() && !e.runsOn(false):
			bad("experiment %q runs on the real targets only (azurite, emulator or a URL)", name)
		}
	}
}

// validateRun is Validate's check of the workload, the nemo binary, the
// results folder and the scale.
func (o Options) validateRun(bad func(string, ...any)) {
	if w := ycsb.Workload(o.Workload); !w.Valid() && o.Workload != WorkloadBoth && w != WorkloadLongTail {
		bad("workload %q: want %s", o.Workload, enum.Or(append(ycsb.Workloads(), WorkloadBoth, WorkloadLongTail)))
	}
	if o.Workload == string(WorkloadLongTail) && o.Scale != nil && o.Scale.Records < LongTailRecords {
		bad("workload longtail: %d records, want at least %d", o.Scale.Records, LongTailRecords)
	}
	if o.real() && o.Nemo == "" {
		bad("target %s runs nemo as a process of its own: build it (go build ./cmd/nemo) and pass its path as --nemo, or put it beside nemo-bench or on $PATH", o.Target)
	}
	if o.Out == "" {
		bad("no results folder")
	}
	if o.RTT < 0 || o.RTTJitter < 0 {
		bad("rtt %v, rtt jitter %v: want 0 or more", o.RTT, o.RTTJitter)
	}
	if o.BackendNice < -20 || o.BackendNice > 19 {
		bad("backend nice %d: want -20 to 19", o.BackendNice)
	}
	if !o.real() && o.BackendNice != 0 {
		bad("backend nice: the real targets only (the embedded target has no backend process)")
	}
	if !o.real() && (o.RTT > 0 || o.RTTJitter > 0) {
		bad("rtt: the real targets only (the embedded target injects --latency)")
	}
	if o.MaxStaleness < 0 {
		bad("max staleness %v: want 0 (nemo's default) or more", o.MaxStaleness)
	}
	if o.Scale != nil {
		o.Scale.validate(bad)
	}
}

func (sc *Scale) validate(bad func(string, ...any)) {
	if sc.Records < 64 || sc.TxnRecords < 64 {
		bad("scale: %d records, %d locking records: want at least 64 each", sc.Records, sc.TxnRecords)
	}
	if sc.ValueSize < 1 || sc.Workers < 1 || sc.Measure <= 0 || sc.WarmOps < 0 || sc.MeasureOps < 0 || sc.Slices < 0 || sc.Settle < 0 {
		bad("scale: value size %d, workers %d, measure %v, warm-up ops %d, settle %v: want positive sizes and durations", sc.ValueSize, sc.Workers, sc.Measure, sc.WarmOps, sc.Settle)
	}
}

// workloads lists the workloads the options ask for.
func (o Options) workloads() []ycsb.Workload {
	if o.Workload == WorkloadBoth {
		return ycsb.Workloads()
	}
	return []ycsb.Workload{ycsb.Workload(o.Workload)}
}

// real reports a real target (Azurite, the emulator, a URL).
func (o Options) real() bool { return o.Target != TargetEmbedded }

// azureURL is the Azure Table endpoint of an azurite or URL target.
func (o Options) azureURL() string {
	if o.Target == TargetAzurite {
		return strings.TrimRight(o.AzuriteURL, "/")
	}
	return strings.TrimRight(o.Target, "/")
}

func names() []string {
	var out []string
	for _, e := range experiments {
		out = append(out, e.name)
	}
	return out
}

func realNames() []string {
	var out []string
	for _, e := range experiments {
		if e.runsOn(true) {
			out = append(out, e.name)
		}
	}
	return out
}

// lookup finds an experiment by name, or by the name of one of its
// figures: then the experiment with that figure alone.
func lookup(name string) (experiment, bool) {
	for _, e := range experiments {
		if e.name == name {
			return e, true
		}
		for _, f := range e.figures {
			if f.name == name && len(e.figures) > 1 {
				e.figures = []figure{f}
				return e, true
			}
		}
	}
	return experiment{}, false
}

// DefaultScale is the scale a run uses unless Options.Scale is set: the
// full one, or with quick the one-minute pass's.
func DefaultScale(quick bool) Scale {
	if quick {
		return quickScale
	}
	return defaultScale
}

// Listing describes one experiment for a listing.
type Listing struct {
	Name, About string
	Figures     string // the figures' names, comma-separated
	Real        bool   // also runs on the azurite, URL and emulator targets
	RealOnly    bool   // runs on those only
}

// Experiments lists every experiment, in the order a run takes them.
func Experiments() []Listing {
	out := make([]Listing, len(experiments))
	for i, e := range experiments {
		var figs []string
		for _, f := range e.figures {
			figs = append(figs, f.name)
		}
		out[i] = Listing{Name: e.name, About: e.about, Figures: strings.Join(figs, ","), Real: e.real, RealOnly: e.realOnly}
	}
	return out
}
