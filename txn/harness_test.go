package txn

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/wal"
)

// ks is the keyspace every test uses.
const ks adapters.Keyspace = "t"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// seedShift moves the seeds of the randomized tests (bank, linear,
// phantom, serial, shared bank, PCL) to new ones: NEMO_TXN_SEED=n adds
// n<<32 to each generator's seed. Unset (what CI runs) it adds nothing.
func seedShift(t testing.TB) uint64 {
	v := os.Getenv("NEMO_TXN_SEED")
	if v == "" {
		return 0
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		t.Fatalf("NEMO_TXN_SEED=%q: want a number", v)
	}
	return n << 32
}

// env is an engine over a buffer over a gate over a fault store over an
// embedded store: the gate holds reads mid-flight (to look at sentinels
// before their fetch returns), the fault store injects outages.
type env struct {
	e     *Engine
	buf   *cache.Buffer
	st    *embedded.Store
	fault *fault.Store
	gate  *gateStore
}

// newEnv builds an env and registers the end-of-test invariant: no live
// transaction, and Buffer.Check passes (no lock, pin or sentinel is left,
// gap bits and budget accounting are sound).
func newEnv(t testing.TB, copts cache.Options, topts Options) *env {
	t.Helper()
	st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	g := &gateStore{Store: st}
	f := fault.New(g, fault.Config{})
	copts.Logger = quiet
	b, err := cache.New(f, copts)
	if err != nil {
		t.Fatal(err)
	}
	b.OpenKeyspace(ks)
	topts.Logger = quiet
	if topts.EarlyRelease && topts.WAL == nil && topts.Log == nil {
		// Early lock release needs a log that sequences before the
		// fsync: a real WAL, with real fsyncs.
		wo := wal.Options{Dir: filepath.Join(t.TempDir(), "wal")}
		wo.Logger = quiet
		topts.WAL = &wo
	}
	e, err := New(b, topts)
	if err != nil {
		t.Fatal(err)
	}
	v := &env{e: e, buf: b, st: st, fault: f, gate: g}
	t.Cleanup(func() {
		f.SetDown(false)
		g.open()
		if n := e.Stats().Live; n != 0 && !t.Failed() {
			t.Errorf("%d transactions still live at the end of the test", n)
		}
		e.Close()
		b.Close() // stops the workers, so Check sees a quiescent buffer
		if !t.Failed() {
			if err := b.Check(context.Background()); err != nil {
				t.Errorf("buffer check after the test: %v", err)
			}
		}
		st.Close()
	})
	return v
}

// lockCase is a phantom strategy, with or without early lock release
// (which gives the engine a WAL).
type lockCase struct {
	name  string
	ph    Phantom
	early bool
}

func lockCases() []lockCase {
	var out []lockCase
	for _, ph := range []Phantom{NextKey, PCL} {
		out = append(out, lockCase{string(ph), ph, false}, lockCase{string(ph) + "/early", ph, true})
	}
	return out
}

// k encodes i as an 8-byte big-endian key (byte order = numeric order).
func k(i int) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(i))
	return b[:]
}

// keyName renders a key written by k as its number (its successor as
// number+), anything else in hex.
func keyName(b []byte) string {
	switch {
	case len(b) == 8:
		return fmt.Sprint(binary.BigEndian.Uint64(b))
	case len(b) == 9 && b[8] == 0: // adapters.Successor of a key
		return fmt.Sprintf("%d+", binary.BigEndian.Uint64(b))
	}
	return fmt.Sprintf("0x%x", b)
}

func u64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// gateStore can hold every read (Get, GetRange) until it is opened again.
type gateStore struct {
	adapters.Store
	mu        sync.Mutex
	release   chan struct{} // non-nil while armed
	entered   chan struct{} // one token per read that reached the gate
	rangeOnly bool          // hold GetRange only, let point reads through
}

func (g *gateStore) arm(rangeOnly bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.release = make(chan struct{})
	g.entered = make(chan struct{}, 64)
	g.rangeOnly = rangeOnly
}

func (g *gateStore) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.release != nil {
		close(g.release)
		g.release = nil
	}
}

func (g *gateStore) wait(ctx context.Context, point bool) error {
	g.mu.Lock()
	rel, ent, rangeOnly := g.release, g.entered, g.rangeOnly
	g.mu.Unlock()
	if rel == nil || point && rangeOnly {
		return nil
	}
	ent <- struct{}{}
	select {
	case <-rel:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gateStore) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	if err := g.wait(ctx, true); err != nil {
		return nil, err
	}
	return g.Store.Get(ctx, ks, keys)
}

func (g *gateStore) GetRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	if err := g.wait(ctx, false); err != nil {
		return nil, false, err
	}
	return g.Store.GetRange(ctx, ks, start, end, limit)
}
