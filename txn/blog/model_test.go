package blog

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/fault"
)

// logModel is what the Appends were told: the data of each appended entry
// (all distinct) with its seq, and the data of those that surely were not
// appended.
type logModel struct {
	t        *testing.T
	acked    map[string]uint64
	failed   map[string]bool
	unknown  int
	mayBeCut uint64 // truncations asked below this may have deleted entries
	cut      uint64 // truncations done below this deleted every entry below it
}

// record notes one Append's outcome.
func (m *logModel) record(data string, seq uint64, err error) {
	switch {
	case err == nil:
		m.acked[data] = seq
	case errors.Is(err, adapters.ErrUnknownOutcome):
		m.unknown++
	default:
		m.failed[data] = true
	}
}

// check compares what an Open read back with the model: every entry an
// Append was told was appended is there at its seq (unless a truncation
// may have deleted it), nothing is there twice, nothing that surely failed
// is there, and nothing truncated is back.
func (m *logModel) check(entries []Entry) {
	m.t.Helper()
	seen := map[string]uint64{}
	for _, e := range entries {
		d := string(e.Data)
		if prev, dup := seen[d]; dup {
			m.t.Fatalf("%q appended at seq %d and %d", d, prev, e.Seq)
		}
		seen[d] = e.Seq
		if m.failed[d] {
			m.t.Fatalf("%q, whose Append failed, is in the log at seq %d", d, e.Seq)
		}
		if seq, ok := m.acked[d]; ok && seq != e.Seq {
			m.t.Fatalf("%q was appended at seq %d and read back at %d", d, seq, e.Seq)
		}
		if e.Seq < m.cut {
			m.t.Fatalf("entry %d is back after a truncation below %d", e.Seq, m.cut)
		}
	}
	for d, seq := range m.acked {
		if _, ok := seen[d]; !ok && seq >= m.mayBeCut {
			m.t.Fatalf("%q, appended at seq %d, is not read back (%d entries from %v)", d, seq, len(entries), firstSeq(entries))
		}
	}
}

func firstSeq(es []Entry) any {
	if len(es) == 0 {
		return "none"
	}
	return es[0].Seq
}

// TestRandomizedWithModel drives a log with random concurrent appends,
// truncations, new owners (a higher epoch) and restarts (the same epoch),
// over a store that loses a fifth of the atomic calls' answers (half of
// them applied) and some of the reads that settle them; each Open checks
// what it reads against the model.
func TestRandomizedWithModel(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := embeddedStore(t)
			f := fault.New(s, fault.Config{Seed: seed, Ops: map[adapters.Op]fault.OpConfig{
				adapters.OpWriteAtomic: {ErrorRate: 0.2, PartialRate: 0.5},
				adapters.OpGet:         {ErrorRate: 0.3},
			}})
			lim := Limits{CallRecords: 6, CallBytes: 700, RecordBytes: 16}
			o := Options{Store: f, Codec: limited{RawCodec(logKS), lim}, MaxBatch: 5, Logger: quiet}
			rng := rand.New(rand.NewPCG(seed, 99))
			m := &logModel{t: t, acked: map[string]uint64{}, failed: map[string]bool{}, mayBeCut: 1, cut: 1}
			epoch := uint64(1)
			// openAt opens the log as the owner at epoch, until it
			// succeeds, and returns what it read.
			openAt := func(epoch uint64) (*Log, []Entry) {
				for {
					l, entries, err := Open(context.Background(), o, "t", epoch, fmt.Sprintf("node-%d", epoch))
					if err == nil {
						return l, entries
					}
					if errors.Is(err, ErrFenced) || errors.Is(err, ErrCorrupt) {
						t.Fatalf("open at epoch %d: %v", epoch, err)
					}
				}
			}
			open := func() *Log {
				l, entries := openAt(epoch)
				m.check(entries)
				return l
			}
			l := open()
			n := 0
			// appends runs k concurrent appends to l, and then records
			// their outcomes.
			appends := func(l *Log, k int, wg *sync.WaitGroup) {
				var mu sync.Mutex
				outcomes := map[string]error{}
				seqs := map[string]uint64{}
				var mine sync.WaitGroup
				for range k {
					n++
					data := fmt.Sprintf("%d:%s", n, make([]byte, rng.IntN(60)))
					mine.Go(func() {
						seq, err := l.Append(context.Background(), []byte(data))
						mu.Lock()
						outcomes[data], seqs[data] = err, seq
						mu.Unlock()
					})
				}
				wg.Go(func() {
					mine.Wait()
					for d, err := range outcomes {
						m.record(d, seqs[d], err)
					}
				})
			}
			for range 60 {
				switch r := rng.IntN(24); {
				case r < 14:
					var wg sync.WaitGroup
					appends(l, 1+rng.IntN(8), &wg)
					wg.Wait()
				case r < 18:
					// A new owner opens while the old one appends: each
					// append lands before the fence moves (and is read)
					// or fails.
					var wg sync.WaitGroup
					appends(l, 1+rng.IntN(8), &wg)
					epoch++
					next, entries := openAt(epoch)
					wg.Wait()
					m.check(entries)
					l = next
				case r < 20:
					below := m.cut + uint64(rng.IntN(int(l.Last()+2-m.cut)))
					m.mayBeCut = max(m.mayBeCut, below)
					if err := l.Truncate(context.Background(), below); err == nil {
						m.cut = max(m.cut, below)
					}
				case r < 22:
					epoch++
					l = open()
				default:
					l = open() // a restart at the same epoch
				}
				if l.Err() != nil {
					l = open()
				}
			}
			f.SetConfig(fault.Config{})
			epoch++
			open()
			t.Logf("%d appends: %d acknowledged, %d failed, %d unknown; last epoch %d", n, len(m.acked), len(m.failed), m.unknown, epoch)
			if len(m.acked) == 0 {
				t.Fatal("nothing was acknowledged")
			}
		})
	}
}
