package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	azstore "github.com/nemocache/nemo/adapters/aztable"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/aztest"
)

// unconditional is the baseline store: it drops every write's
// precondition, which is what write-back did before it was conditioned on
// the versions it saw.
type unconditional struct{ adapters.Store }

func strip(ws []adapters.Write) []adapters.Write {
	out := make([]adapters.Write, len(ws))
	for i, w := range ws {
		out[i] = adapters.Write{Key: w.Key, Value: w.Value}
	}
	return out
}

func (u unconditional) Upsert(ctx context.Context, ks adapters.Keyspace, ws []adapters.Write) ([]adapters.Version, error) {
	return u.Store.Upsert(ctx, ks, strip(ws))
}

func (u unconditional) Delete(ctx context.Context, ks adapters.Keyspace, ws []adapters.Write) error {
	return u.Store.Delete(ctx, ks, strip(ws))
}

// BenchmarkConditionalWriteBack measures what conditioning write-back on
// the versions the buffer saw costs in remote time, in front of Azurite,
// against the unconditional baseline in the same run. The workload is
// write-back's: a table the buffer knows (so every insert is conditioned
// on absence and every update on the ETag it fetched), inserts of 1,000
// entities in 10 partitions, then updates of all of them, then deletes,
// each phase flushed and timed. Reported: remote milliseconds per phase
// for both, their ratio (target <= 1.2), and remote calls per record.
func BenchmarkConditionalWriteBack(b *testing.B) {
	url := aztest.Azurite(b)
	quiet := slog.New(slog.DiscardHandler)
	st, err := azstore.New(azstore.Options{ConnectionString: aztest.ConnectionString(url, aztest.Key), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const n, parts = 1000, 10
	entity := func(i, gen int) adapters.Record {
		e := &tablecodec.Entity{PartitionKey: fmt.Sprintf("p%d", i%parts), RowKey: fmt.Sprintf("r%05d", i),
			Props: []tablecodec.Property{{Name: "N", Type: tablecodec.EdmInt32, Value: int32(gen)},
				{Name: "Pad", Type: tablecodec.EdmString, Value: fmt.Sprintf("%0200d", gen)}}}
		return adapters.Record{Key: tablecodec.EncodeKey(e.PartitionKey, e.RowKey), Value: tablecodec.EncodeEntity(e)}
	}
	run := func(conditional bool) (phases [3]time.Duration, calls float64) {
		table := aztest.TableName("wb")
		if err := st.CreateTable(ctx, table); err != nil {
			b.Fatal(err)
		}
		defer st.DeleteTable(ctx, table)
		var s adapters.Store = st
		if !conditional {
			s = unconditional{st}
		}
		counted := adapters.Count(s)
		buf, err := cache.New(counted, cache.Options{DisableWorkers: true, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		defer buf.Close()
		ks := adapters.Keyspace(table)
		buf.OpenKeyspace(ks)
		// The buffer learns the table is empty (one range read), so
		// inserts are known to be inserts.
		if _, _, err := buf.Scan(ctx, ks, nil, nil, 0); err != nil {
			b.Fatal(err)
		}
		counted.Reset()
		for phase := range 3 {
			var ws []cache.Write
			for i := range n {
				r := entity(i, phase)
				ws = append(ws, cache.Write{Key: r.Key, Value: r.Value, Delete: phase == 2})
			}
			if err := buf.Apply(ctx, ks, ws); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if err := flush(ctx, buf, ks); err != nil {
				b.Fatal(err)
			}
			phases[phase] = time.Since(start)
		}
		if c := buf.Stats().WritebackConflicts; c != 0 {
			b.Fatalf("%d conflicts with no other writer", c)
		}
		return phases, float64(counted.Stats().Total().Requests) / (3 * n)
	}
	var cond, base [3]time.Duration
	var condCalls, baseCalls float64
	for range b.N {
		c, cc := run(true)
		u, uc := run(false)
		for i := range 3 {
			cond[i] += c[i]
			base[i] += u[i]
		}
		condCalls, baseCalls = cc, uc
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	var ct, bt time.Duration
	for i, name := range []string{"insert", "update", "delete"} {
		b.ReportMetric(ms(cond[i]), name+"-cond-ms")
		b.ReportMetric(ms(base[i]), name+"-uncond-ms")
		ct += cond[i]
		bt += base[i]
	}
	b.ReportMetric(float64(ct)/float64(bt), "remote-time-ratio")
	b.ReportMetric(condCalls, "cond-calls/record")
	b.ReportMetric(baseCalls, "uncond-calls/record")
}

// flush writes back every dirty record of ks as the engine's Flush does
// (package txn drives write-back), without its lease, durable barrier and
// write-back log, which this benchmark has none of.
func flush(ctx context.Context, buf *cache.Buffer, ks adapters.Keyspace) error {
	for _, w := range buf.TakeDirty(ks, 10*buf.Options().WriteBatch) {
		if err := writeBack(ctx, w); err != nil {
			return err
		}
	}
	return nil
}

func writeBack(ctx context.Context, w *cache.WriteBack) error {
	defer w.Close()
	if err := w.Lock(ctx); err != nil {
		return err
	}
	var errs []error
	for w.Next() {
		_, err := w.Store(ctx)
		errs = append(errs, err)
		w.Settle()
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return w.Confirm(ctx)
}
