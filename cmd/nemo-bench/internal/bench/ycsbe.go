package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/internal/ycsb"
	"github.com/nemocache/nemo/txn"
)

// The locking experiment's keys are 8-byte big-endian integers: byte
// order is integer order, and PCL partitions a key by its first 8 bytes
// read as an integer.
func intKey(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// ycsbeData is the locking experiment's preloaded keys for one layout:
// records uniform over [0, 2^regionBits), sorted.
type ycsbeData struct {
	keys []uint64
	gen  ycsb.Ranked // scan start ranks
}

func newYCSBEData(sp runSpec, records int, seed uint64) (*ycsbeData, error) {
	if sp.regionBits == 0 || sp.regionBits > sp.domainBits || sp.domainBits > 64 || sp.domainBits < pclBudgetBits {
		return nil, fmt.Errorf("bench: domain 2^%d, region 2^%d", sp.domainBits, sp.regionBits)
	}
	if sp.regionBits < 63 && uint64(records) > (uint64(1)<<sp.regionBits)/2 {
		return nil, fmt.Errorf("bench: %d records do not fit sparsely in 2^%d keys", records, sp.regionBits)
	}
	rng := rand.New(rand.NewPCG(seed, 0xda7a))
	set := make(map[uint64]struct{}, records)
	for len(set) < records {
		set[drawKey(rng, sp.regionBits)] = struct{}{}
	}
	keys := make([]uint64, 0, records)
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// A scan runs from keys[i] to keys[i+scanLen], so i stops scanLen
	// short of the end.
	gen, err := sp.generator(uint64(len(keys) - sp.scanLen))
	if err != nil {
		return nil, err
	}
	return &ycsbeData{keys: keys, gen: gen}, nil
}

// drawKey returns a uniform key in [0, 2^bits).
func drawKey(rng *rand.Rand, bits uint) uint64 { return rng.Uint64() >> (64 - bits) }

// runYCSBE measures one locking run: a fresh store loaded with d's keys,
// a buffer of sp.buffer of the data, an engine with sp.phantom, and
// sp.workers clients running YCSB-E transactions for sc.Measure (or
// sc.MeasureOps of them) after a warm-up (the scan starts' top-K for the
// paper workload, a quarter of the measured time of the workload itself
// for the scrambled one).
func runYCSBE(ctx context.Context, o Options, d *ycsbeData, sp runSpec) (Result, error) {
	sc := o.Scale
	st, dir, err := openEmbedded(ctx, o)
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	defer st.Close()
	val := make([]byte, sc.ValueSize)
	err = loadRecords(ctx, st, usertable, len(d.keys), func(i int) adapters.Record {
		return adapters.Record{Key: intKey(d.keys[i]), Value: val}
	})
	if err != nil {
		return Result{}, err
	}
	lat := latencyConfig(o)
	f := fault.New(st, fault.Config{})
	counted := adapters.Count(f)
	recBytes := float64(8 + sc.ValueSize + 64) // 64: the buffer's default per-record overhead
	to := txn.Options{Phantom: sp.phantom, PCLPartitionSize: 1 << (sp.domainBits - pclBudgetBits)}
	if sp.noWait {
		to.LockWait = -1 // the engine's NO_WAIT
	}
	e, err := newEngine(counted, sp.policy, max(int64(sp.buffer*recBytes*float64(len(d.keys))), 8<<10), to, o.Logger)
	if err != nil {
		return Result{}, err
	}
	defer e.close()
	c := ycsbeClient{d: d, sp: sp, eng: e.eng, val: val}
	if sp.workload == ycsb.WorkloadPaper {
		// The hottest scan ranges, read once each.
		top := ycsb.TopK(d.gen, int(sp.buffer*float64(len(d.keys))/float64(sp.scanLen)))
		for _, i := range top {
			if _, _, err := e.eng.Scan(ctx, usertable, intKey(d.keys[i]), intKey(d.keys[i+uint64(sp.scanLen)]), sp.scanLen, txn.ReadLatest); err != nil {
				return Result{}, fmt.Errorf("warm-up: %w", err)
			}
		}
	}
	f.SetConfig(lat)
	if sp.workload != ycsb.WorkloadPaper {
		if _, err := drive(ctx, sp.workers, sc.Measure/4, 0, o.Seed, 1, c.do); err != nil {
			return Result{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	r0 := e.remote()
	b0 := e.buf.Stats()
	p, err := drive(ctx, sp.workers, sc.Measure, sc.MeasureOps, o.Seed, 2, c.do)
	if err != nil {
		return Result{}, err
	}
	b1 := e.buf.Stats()
	var res Result
	res.setPhase(p)
	res.Remote = e.remote() - r0
	res.Hits = b1.Hits + b1.NegativeHits + b1.RangeHits - b0.Hits - b0.NegativeHits - b0.RangeHits
	res.Lookups = res.Hits + b1.Misses + b1.RangeFetches - b0.Misses - b0.RangeFetches
	f.SetConfig(fault.Config{}) // closing writes the inserts back
	return res, e.close()
}

// ycsbeClient runs YCSB-E transactions: with probability insertPct an
// insert of a fresh uniform key, else a locking scan of scanLen records
// from a zipfian start, each retried after a conflict until it commits
// or the phase ends.
type ycsbeClient struct {
	d   *ycsbeData
	sp  runSpec
	eng *txn.Engine
	val []byte
}

func (c ycsbeClient) do(ctx context.Context, rng *rand.Rand, deadline time.Time) (int, error) {
	if rng.IntN(100) < c.sp.insertPct {
		return c.insert(ctx, rng, deadline)
	}
	i := c.d.gen.Next(rng)
	start, end := intKey(c.d.keys[i]), intKey(c.d.keys[i+uint64(c.sp.scanLen)])
	return retry(deadline, func() error {
		// A read-write transaction, so that the scan locks (a read-only
		// one would read a snapshot without locks).
		tx, err := c.eng.Begin(false)
		if err != nil {
			return err
		}
		got := 0
		from := start
		for got < c.sp.scanLen {
			recs, next, err := tx.Scan(ctx, usertable, from, end, c.sp.scanLen-got)
			if err != nil {
				tx.Abort()
				return err
			}
			got += len(recs)
			if next == nil {
				break
			}
			from = next
		}
		if got < c.sp.scanLen {
			tx.Abort()
			return fmt.Errorf("scan [%x, %x): %d records, want %d", start, end, got, c.sp.scanLen)
		}
		return tx.Commit(ctx)
	})
}

func (c ycsbeClient) insert(ctx context.Context, rng *rand.Rand, deadline time.Time) (int, error) {
	aborts := 0
	for time.Now().Before(deadline) {
		key := intKey(drawKey(rng, c.sp.regionBits))
		n, err := retry(deadline, func() error {
			tx, err := c.eng.Begin(false)
			if err != nil {
				return err
			}
			if err := tx.Insert(ctx, usertable, key, c.val); err != nil {
				tx.Abort()
				return err
			}
			return tx.Commit(ctx)
		})
		aborts += n
		if !errors.Is(err, txn.ErrExists) {
			return aborts, err
		}
		// Not fresh after all: draw another key.
	}
	return aborts, errCutOff
}

// retry runs attempt until it succeeds, fails otherwise than by a lock
// conflict, or the deadline passes (errCutOff), backing off after each
// conflict; it returns the conflicts.
func retry(deadline time.Time, attempt func() error) (int, error) {
	backoff := 50 * time.Microsecond
	for n := 0; ; n++ {
		err := attempt()
		if !errors.Is(err, txn.ErrConflict) {
			return n, err
		}
		if !time.Now().Before(deadline) {
			return n + 1, errCutOff
		}
		time.Sleep(backoff/2 + rand.N(backoff))
		backoff = min(2*backoff, 5*time.Millisecond)
	}
}
