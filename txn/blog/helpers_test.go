package blog

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
)

// logKS is where RawCodec keeps the logs in the unit tests.
const logKS adapters.Keyspace = "nemo-log"

func embeddedStore(t testing.TB) *embedded.Store {
	t.Helper()
	s, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// quiet drops the Logs' messages.
var quiet = slog.New(slog.DiscardHandler)

func options(s adapters.Store, c Codec) Options {
	return Options{Store: s, Codec: c, Logger: quiet}
}

func mustOpen(t testing.TB, o Options, ks adapters.Keyspace, epoch uint64, holder string) (*Log, []Entry) {
	t.Helper()
	l, entries, err := Open(context.Background(), o, ks, epoch, holder)
	if err != nil {
		t.Fatalf("open %q at epoch %d: %v", ks, epoch, err)
	}
	return l, entries
}

func mustAppend(t testing.TB, l *Log, data string) uint64 {
	t.Helper()
	seq, err := l.Append(context.Background(), []byte(data))
	if err != nil {
		if len(data) > 40 {
			data = fmt.Sprintf("%q... (%d bytes)", data[:40], len(data))
		}
		t.Fatalf("append %s: %v", data, err)
	}
	return seq
}

// wantEntries checks that got holds exactly want (data by seq from
// first), in order.
func wantEntries(t testing.TB, got []Entry, first uint64, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read back %d entries %s, want %d %q", len(got), show(got), len(want), want)
	}
	for i, e := range got {
		if e.Seq != first+uint64(i) || string(e.Data) != want[i] {
			t.Fatalf("entry %d is seq %d %q, want seq %d %q (all: %s)", i, e.Seq, e.Data, first+uint64(i), want[i], show(got))
		}
	}
}

func show(es []Entry) string {
	var b bytes.Buffer
	for _, e := range es {
		d := e.Data
		if len(d) > 20 {
			d = d[:20]
		}
		fmt.Fprintf(&b, "[%d %q (%d bytes)]", e.Seq, d, len(e.Data))
	}
	return b.String()
}

// limited is a codec with other limits.
type limited struct {
	Codec
	lim Limits
}

func (c limited) Limits() Limits { return c.lim }

// watched is a store that checks every atomic call against the limits and
// counts calls, mutations and bytes (fakes only observe: the writes go to
// the store underneath).
type watched struct {
	adapters.Store
	t   testing.TB
	lim Limits

	mu    sync.Mutex
	calls []int // mutations per WriteAtomic call
}

func (w *watched) WriteAtomic(ctx context.Context, ks adapters.Keyspace, ms []adapters.Mutation) ([]adapters.Version, error) {
	n := 0
	for _, m := range ms {
		n += len(m.Key) + len(m.Value)
	}
	if len(ms) > w.lim.CallRecords || n > w.lim.CallBytes {
		w.t.Errorf("a call of %d mutations and %d bytes passes the limits %+v", len(ms), n, w.lim)
	}
	w.mu.Lock()
	w.calls = append(w.calls, len(ms))
	w.mu.Unlock()
	return w.Store.(adapters.AtomicWriter).WriteAtomic(ctx, ks, ms)
}

func (w *watched) callSizes() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.calls...)
}
