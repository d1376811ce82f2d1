package bench

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/txn"
)

// usertable is the embedded target's keyspace.
const usertable = adapters.Keyspace("usertable")

// embeddedData is the cache experiments' items loaded once into an
// embedded store, behind the fault store's latency and the request
// counters; every run opens a fresh buffer and engine over it.
type embeddedData struct {
	dir     string
	store   *embedded.Store
	fault   *fault.Store
	counted *adapters.Counted
	latency fault.Config
	n       uint64
	vsz     int
	log     *slog.Logger
}

// latencyConfig is the fault store's configuration for the options.
func latencyConfig(o Options) fault.Config {
	return fault.Config{Seed: o.Seed, Default: fault.OpConfig{Latency: o.Latency, Jitter: o.Jitter}}
}

// openEmbedded opens an empty embedded store in a new temporary folder,
// which the caller removes after closing the store.
func openEmbedded(ctx context.Context, o Options) (*embedded.Store, string, error) {
	dir, err := os.MkdirTemp("", "nemo-bench-")
	if err != nil {
		return nil, "", err
	}
	st, err := embedded.Open(dir, embedded.Options{NoSync: true, Logger: o.Logger})
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	return st, dir, nil
}

// loadRecords writes recs to st in batches.
func loadRecords(ctx context.Context, st adapters.Store, ks adapters.Keyspace, n int, rec func(i int) adapters.Record) error {
	batch := make([]adapters.Record, 0, 1000)
	for i := range n {
		batch = append(batch, rec(i))
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := st.Upsert(ctx, ks, adapters.Puts(batch)); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	return nil
}

func newEmbeddedData(ctx context.Context, o Options) (*embeddedData, error) {
	st, dir, err := openEmbedded(ctx, o)
	if err != nil {
		return nil, err
	}
	sc := o.Scale
	d := &embeddedData{dir: dir, store: st, n: uint64(sc.Records), vsz: sc.ValueSize, latency: latencyConfig(o), log: o.Logger}
	err = loadRecords(ctx, st, usertable, sc.Records, func(i int) adapters.Record {
		k := itemKey(uint64(i))
		return adapters.Record{Key: k, Value: valueFor(k, sc.ValueSize)}
	})
	if err != nil {
		d.close()
		return nil, err
	}
	d.fault = fault.New(st, d.latency)
	d.counted = adapters.Count(d.fault)
	return d, nil
}

func (d *embeddedData) close() error {
	err := d.store.Close()
	return errors.Join(err, os.RemoveAll(d.dir))
}

func (d *embeddedData) items() uint64  { return d.n }
func (d *embeddedData) valueSize() int { return d.vsz }

func (d *embeddedData) real() bool { return false }

func (d *embeddedData) open(_ context.Context, spec stackSpec) (cacheStack, error) {
	if spec.server != serverNemo || spec.coherence() != txn.Exclusive {
		return nil, errors.New("bench: the embedded target runs nemo's engine in coherence mode exclusive only")
	}
	e, err := newEngine(d.counted, spec.policy, spec.maxBytes, txn.Options{}, d.log)
	if err != nil {
		return nil, err
	}
	return &engineStack{engineReader: engineReader{eng: e.eng, ks: usertable}, engine: e, fault: d.fault, latency: d.latency}, nil
}

// engine is one buffer and transactional engine over a store.
type engine struct {
	buf     *cache.Buffer
	eng     *txn.Engine
	counted *adapters.Counted // the store, counting the remote requests
	once    sync.Once
}

func newEngine(st *adapters.Counted, p cache.Policy, maxBytes int64, to txn.Options, log *slog.Logger) (*engine, error) {
	buf, err := cache.New(st, cache.Options{Policy: p, MaxBytes: maxBytes, Logger: log})
	if err != nil {
		return nil, err
	}
	to.Logger = log
	eng, err := txn.New(buf, to)
	if err != nil {
		buf.Close()
		return nil, err
	}
	return &engine{buf: buf, eng: eng, counted: st}, nil
}

// remote is how many requests the engine has made of its store so far.
func (e *engine) remote() uint64 { return e.counted.Stats().Total().Requests }

// buffer is the buffer's statistics.
func (e *engine) buffer() cache.Stats { return e.buf.Stats() }

// close closes the engine and the buffer (once; later calls do nothing).
func (e *engine) close() error {
	var err error
	e.once.Do(func() { err = errors.Join(e.eng.Close(), e.buf.Close()) })
	return err
}

// engineReader reads through txn.Engine as the frontends do outside a
// transaction (ReadLatest).
type engineReader struct {
	eng *txn.Engine
	ks  adapters.Keyspace
}

func (r engineReader) get(ctx context.Context, key []byte) (int, bool, error) {
	v, ok, err := r.eng.Get(ctx, r.ks, key, txn.ReadLatest)
	return len(v), ok, err
}

func (r engineReader) put(ctx context.Context, key, val []byte) error {
	return r.eng.Run(ctx, false, func(t *txn.Txn) error { return t.Upsert(ctx, r.ks, key, val) })
}

func (r engineReader) scan(ctx context.Context, start, end []byte, limit int) ([][]byte, error) {
	var keys [][]byte
	for {
		recs, next, err := r.eng.Scan(ctx, r.ks, start, end, limit-len(keys), txn.ReadLatest)
		if err != nil {
			return nil, err
		}
		for _, rec := range recs {
			keys = append(keys, rec.Key)
		}
		// A short page with a continuation key is followed, as a
		// client would.
		if len(keys) >= limit || next == nil {
			return keys, nil
		}
		start = next
	}
}

// engineStack is a cacheStack on the embedded target.
type engineStack struct {
	engineReader
	*engine
	fault   *fault.Store
	latency fault.Config
}

func (s *engineStack) warming(on bool) {
	if on {
		s.fault.SetConfig(fault.Config{})
	} else {
		s.fault.SetConfig(s.latency)
	}
}

// procs is empty: the engine runs in this process, with the clients.
func (s *engineStack) procs() []proc { return nil }

func (s *engineStack) close() error {
	s.fault.SetConfig(fault.Config{}) // closing flushes nothing here, but a buffer may
	defer s.fault.SetConfig(s.latency)
	return s.engine.close()
}
