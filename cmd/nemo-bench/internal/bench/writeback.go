package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/cache"
)

// The write-back experiment (figure writeback): the soak of issue 40 in
// front of Azure Table storage. Scale.Records entities (the soak: 50,000)
// of about 1 KiB in up to wbPartitions partitions (fewer when a
// client would own fewer than wbBatchSize keys of each), loaded straight
// into the backend, and
// Scale.Workers clients through one nemo in coherence exclusive (a
// budget of 64 MiB, so max_dirty_bytes derives to 16 MiB; max_dirty_age
// 5 s): wbUpsertPct percent upserts, wbDeletePct deletes, wbBatchPct
// entity group batches of wbBatchSize upserts in one partition, the rest
// point reads, all through the aztables SDK. Each client writes only its
// own keys (a partition's rows in turn: wbLayout), so each key's last
// acknowledged write is known. The figure's x is
// cache.write_back_parallelism. Every wbSample nemo's /metrics is read:
// the write-back calls in flight, the oldest dirty record's age
// (nemo_cache_flush_lag_seconds) and the dirty bytes. After
// Scale.Measure the clients stop, nemo is drained (SIGTERM), and every
// key is read straight from the backend: one that differs from its last
// acknowledged write (or still exists after its acknowledged delete) is
// lost, and fails the run.
const (
	wbPartitions = 100
	wbUpsertPct  = 30
	wbDeletePct  = 5
	wbBatchPct   = 5
	wbBatchSize  = 4
	wbValueBytes = 1000
	wbSample     = 250 * time.Millisecond
	wbMaxDirty   = 5 * time.Second // NEMO_CACHE_MAX_DIRTY_AGE
)

// WritebackStats is what the write-back experiment measured.
type WritebackStats struct {
	Writes, Reads int64 // acknowledged client writes (a batch counts its upserts) and reads
	// Records and Calls: nemo's records written back and write-back store
	// calls over the measured phase.
	Records, Calls uint64
	// InFlightMean and InFlightMax: write-back calls in flight, sampled
	// (-1: the nemo does not report them).
	InFlightMean, InFlightMax float64
	// LagMax: the oldest dirty record's age, the largest sample;
	// LagOver: the share of samples above MaxDirtyAge.
	LagMax     time.Duration
	LagOver    float64
	MaxDirty   time.Duration
	DirtyMean  float64 // bytes
	DirtyMax   float64
	WriteP50   time.Duration
	WriteP99   time.Duration
	Keys, Lost int
}

// wbLayout is the experiment's keys: n keys, key i in partition
// i mod parts at row i / parts, rows dealt to the clients in turn (row j
// belongs to client j mod workers), so that every client owns per/workers
// rows of every partition.
type wbLayout struct {
	run, pad               string
	n, parts, per, workers int
}

func newWBLayout(run string, records, workers int) wbLayout {
	parts := max(1, min(wbPartitions, records/(workers*wbBatchSize)))
	per := max(records/parts/workers, wbBatchSize) * workers
	return wbLayout{run: run, pad: strings.Repeat("x", wbValueBytes), n: parts * per, parts: parts, per: per, workers: workers}
}

func (l wbLayout) pk(i int) string { return fmt.Sprintf("wb%s-%03d", l.run, i%l.parts) }
func (l wbLayout) rk(i int) string { return fmt.Sprintf("r%06d", i) }
func (l wbLayout) owner(i int) int { return i / l.parts % l.workers }

// key is a random key of client g in partition part.
func (l wbLayout) key(rng *rand.Rand, g, part int) int {
	return (rng.IntN(l.per/l.workers)*l.workers+g)*l.parts + part
}

// entity is key i's entity holding n.
func (l wbLayout) entity(i int, n int64) []byte {
	return fmt.Appendf(nil, `{"PartitionKey":%q,"RowKey":%q,"N":%d,"Pad":%q}`, l.pk(i), l.rk(i), n, l.pad)
}

// wbClient is one client of the write-back experiment: the last
// acknowledged write of each of its keys (-1: deleted), the write in
// flight when the run ended (which the backend may hold instead), its
// write latencies and counts.
type wbClient struct {
	acked, maybe  map[int]int64
	lat           []time.Duration
	writes, reads int64
	err           error
}

func (r *runner) runWriteback(ctx context.Context, x float64) (res Result, err error) {
	tg, _, err := r.target(ctx)
	if err != nil {
		return res, err
	}
	d, ok := tg.(*azureData)
	if !ok {
		return res, fmt.Errorf("the writeback experiment runs on the azurite target only, not %s", r.o.Target)
	}
	run := strconv.FormatInt(time.Now().UnixNano()&0xffffff, 36)
	sc := *r.o.Scale
	l := newWBLayout(run, sc.Records, sc.Workers)
	if err := d.wbLoad(ctx, l); err != nil {
		return res, fmt.Errorf("writeback: loading %d keys: %w", l.n, err)
	}
	st, err := d.open(ctx, stackSpec{server: serverNemo, policy: cache.PolicyNemo, maxBytes: 64 << 20,
		// The drain may write a backlog back: 55 s, within the minute
		// child.stop waits.
		env: []string{"NEMO_CACHE_MAX_DIRTY_AGE=" + wbMaxDirty.String(), "NEMO_CACHE_WRITE_BACK_PARALLELISM=" + strconv.Itoa(int(x)),
			"NEMO_LISTEN_SHUTDOWN_GRACE=55s"}})
	if err != nil {
		return res, err
	}
	ps := st.(*procStack)
	defer func() { err = errors.Join(err, ps.close()) }() // nil after the drain below
	clients := make([]*wbClient, sc.Workers)
	m0, err := ps.metrics()
	if err != nil {
		return res, err
	}
	c0, err := cpuSnapshot(ps.procs())
	if err != nil {
		return res, err
	}
	wctx, stop := context.WithTimeout(ctx, sc.Measure)
	defer stop()
	began := time.Now()
	var wg sync.WaitGroup
	for g := range clients {
		c := &wbClient{acked: map[int]int64{}, maybe: map[int]int64{}}
		clients[g] = c
		tc, err := d.tableClient(ps.frontends[0], 0)
		if err != nil {
			stop()
			wg.Wait()
			return res, err
		}
		wg.Go(func() { c.run(wctx, tc, rand.New(rand.NewPCG(r.o.Seed, uint64(g))), l, g) })
	}
	ws := sampleWriteback(wctx, ps)
	wg.Wait()
	res.Elapsed = time.Since(began)
	c1, err := cpuSnapshot(ps.procs())
	if err != nil {
		return res, err
	}
	for i, pr := range ps.procs() {
		res.CPU = append(res.CPU, ProcCPU{Role: pr.role, Time: c1[i] - c0[i]})
	}
	m1, err := ps.metrics()
	if err != nil {
		return res, err
	}
	s := <-ws
	s.MaxDirty = wbMaxDirty
	s.Records = uint64(m1["nemo_cache_writebacks_total"] - m0["nemo_cache_writebacks_total"])
	s.Calls = uint64(m1["nemo_cache_writeback_batch_seconds_count"] - m0["nemo_cache_writeback_batch_seconds_count"])
	var lat []time.Duration
	var errs []error
	for _, c := range clients {
		s.Writes, s.Reads = s.Writes+c.writes, s.Reads+c.reads
		lat = append(lat, c.lat...)
		errs = append(errs, c.err)
	}
	slices.Sort(lat)
	s.WriteP50, s.WriteP99 = quantile(lat, 0.5), quantile(lat, 0.99)
	res.Ops, res.P50, res.P99 = s.Writes+s.Reads, s.WriteP50, s.WriteP99
	res.Writeback = &s
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	// Drain nemo (it writes every dirty record back), then compare each
	// key in the backend with its last acknowledged write.
	if err := ps.close(); err != nil {
		return res, err
	}
	return res, d.wbCheck(ctx, l, clients, &s)
}

// run is one client's loop until ctx ends; the first error ends it.
func (c *wbClient) run(ctx context.Context, tc *aztables.Client, rng *rand.Rand, l wbLayout, g int) {
	seq := int64(0)
	mine := func() int { return l.key(rng, g, rng.IntN(l.parts)) }
	for ctx.Err() == nil {
		seq++
		t0 := time.Now()
		var err error
		var keys []int
		val := seq
		p := rng.IntN(100)
		switch {
		case p < wbUpsertPct:
			keys = []int{mine()}
			_, err = tc.UpsertEntity(ctx, l.entity(keys[0], seq), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
		case p < wbUpsertPct+wbDeletePct:
			keys, val = []int{mine()}, -1
			_, err = tc.DeleteEntity(ctx, l.pk(keys[0]), l.rk(keys[0]), nil)
		case p < wbUpsertPct+wbDeletePct+wbBatchPct:
			keys, err = batch(ctx, tc, rng, l, g, seq)
		default:
			i := rng.IntN(l.n)
			_, err = tc.GetEntity(ctx, l.pk(i), l.rk(i), nil)
		}
		if isStatus(err, http.StatusNotFound) {
			err = nil // a read or delete of an absent key
		}
		if err != nil {
			if ctx.Err() == nil {
				c.err = err
			}
			for _, i := range keys {
				c.maybe[i] = val // in flight at the end: applied or not
			}
			return
		}
		if keys == nil {
			c.reads++
			continue
		}
		c.lat = append(c.lat, time.Since(t0))
		for _, i := range keys {
			c.acked[i] = val
		}
		c.writes += int64(len(keys))
	}
}

// batch is an entity group batch of wbBatchSize upserts of client g's
// keys in one partition; it returns the keys written.
func batch(ctx context.Context, tc *aztables.Client, rng *rand.Rand, l wbLayout, g int, seq int64) ([]int, error) {
	part := rng.IntN(l.parts)
	var keys []int
	var acts []aztables.TransactionAction
	for len(keys) < wbBatchSize {
		if i := l.key(rng, g, part); !slices.Contains(keys, i) {
			keys = append(keys, i)
			acts = append(acts, aztables.TransactionAction{ActionType: aztables.TransactionTypeInsertReplace, Entity: l.entity(i, seq)})
		}
	}
	_, err := tc.SubmitTransaction(ctx, acts, nil)
	return keys, err
}

func isStatus(err error, code int) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == code
}

// sampleWriteback reads nemo's write-back gauges every wbSample until ctx
// ends, then sends what it saw.
func sampleWriteback(ctx context.Context, ps *procStack) <-chan WritebackStats {
	out := make(chan WritebackStats, 1)
	go func() {
		var s WritebackStats
		var n, over int
		var inFlight, dirty float64
		reported := false
		t := time.NewTicker(wbSample)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				if n > 0 {
					s.InFlightMean, s.DirtyMean, s.LagOver = inFlight/float64(n), dirty/float64(n), float64(over)/float64(n)
				}
				if !reported {
					s.InFlightMean, s.InFlightMax = -1, -1
				}
				out <- s
				return
			case <-t.C:
			}
			m, err := ps.metrics()
			if err != nil {
				continue
			}
			n++
			f, ok := m["nemo_cache_writeback_calls_in_flight"]
			reported = reported || ok
			inFlight, s.InFlightMax = inFlight+f, max(s.InFlightMax, f)
			dirty, s.DirtyMax = dirty+m["nemo_cache_dirty_bytes"], max(s.DirtyMax, m["nemo_cache_dirty_bytes"])
			lag := time.Duration(m["nemo_cache_flush_lag_seconds"] * float64(time.Second))
			s.LagMax = max(s.LagMax, lag)
			if lag > wbMaxDirty {
				over++
			}
		}
	}()
	return out
}

// wbLoad writes every key's entity (N 0) straight into the backend, a
// transaction per 100 keys of a partition, eight at a time.
func (d *azureData) wbLoad(ctx context.Context, l wbLayout) error {
	c := d.direct.NewClient(d.table)
	jobs := make(chan []aztables.TransactionAction)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for w := range errs {
		wg.Go(func() {
			for acts := range jobs {
				if _, err := c.SubmitTransaction(ctx, acts, nil); err != nil && errs[w] == nil {
					errs[w] = err
				}
			}
		})
	}
	for part := range l.parts {
		var acts []aztables.TransactionAction
		for j := range l.per {
			acts = append(acts, aztables.TransactionAction{ActionType: aztables.TransactionTypeInsertReplace, Entity: l.entity(j*l.parts+part, 0)})
			if len(acts) == 100 || j == l.per-1 {
				jobs <- acts
				acts = nil
			}
		}
	}
	close(jobs)
	wg.Wait()
	return errors.Join(errs...)
}

// wbCheck reads every key of run straight from the backend and counts
// the ones that differ from their last acknowledged write (untouched:
// 0) and from the write in flight at the end; any fails the run.
func (d *azureData) wbCheck(ctx context.Context, l wbLayout, clients []*wbClient, s *WritebackStats) error {
	c := d.direct.NewClient(d.table)
	filter := fmt.Sprintf("PartitionKey ge 'wb%s-' and PartitionKey lt 'wb%s.'", l.run, l.run)
	sel := "RowKey,N"
	pager := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter, Select: &sel})
	got := make(map[int]int64, l.n)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("writeback: reading the keys back: %w", err)
		}
		for _, raw := range page.Entities {
			var e struct {
				RowKey string
				N      int64
			}
			if err := json.Unmarshal(raw, &e); err != nil {
				return err
			}
			i, err := strconv.Atoi(strings.TrimPrefix(e.RowKey, "r"))
			if err != nil {
				return fmt.Errorf("writeback: row %q: %w", e.RowKey, err)
			}
			got[i] = e.N
		}
	}
	var lost []string
	for i := range l.n {
		c, want := clients[l.owner(i)], int64(0)
		if n, ok := c.acked[i]; ok {
			want = n
		}
		have, ok := got[i]
		if !ok {
			have = -1
		}
		if n, ok := c.maybe[i]; have != want && (!ok || have != n) {
			lost = append(lost, fmt.Sprintf("%s/%s: %d, acknowledged %d", l.pk(i), l.rk(i), have, want))
		}
	}
	s.Keys, s.Lost = l.n, len(lost)
	if len(lost) > 0 {
		return fmt.Errorf("writeback: ACKNOWLEDGED WRITES LOST: %d of %d keys differ in the backend from their last acknowledged write (%v)",
			len(lost), l.n, lost[:min(len(lost), 5)])
	}
	return nil
}
