package bench

import (
	"context"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/ycsb"
)

// duringRange is a Store that runs hook once, while a GetRange is in
// flight (after the store answered, before the buffer sees the answer).
type duringRange struct {
	adapters.Store
	hook func()
}

func (d *duringRange) GetRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	recs, more, err := d.Store.GetRange(ctx, ks, start, end, limit)
	if h := d.hook; h != nil {
		d.hook = nil
		h()
	}
	return recs, more, err
}

// TestScanAfterBoundEvicted is the deterministic form of the wrong scan
// answers TestWorkloads/scan finds under concurrency: a scan plans a hole
// that ends at a buffered record, the clock evicts that record while the
// fetch is in flight, and the records the scan admits must not end up with a
// sealed gap over the evicted key.
func TestScanAfterBoundEvicted(t *testing.T) {
	ctx := t.Context()
	st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var recs []adapters.Record
	for _, i := range []uint64{1, 5, 8, 9} {
		recs = append(recs, adapters.Record{Key: ycsb.Key(i), Value: []byte{byte(i)}})
	}
	if _, err := st.Upsert(ctx, ks, adapters.Puts(recs)); err != nil {
		t.Fatal(err)
	}
	d := &duringRange{Store: st}
	buf, err := cache.New(d, cache.Options{Policy: cache.PolicyNemo, DisableWorkers: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Close()
	buf.OpenKeyspace(ks)
	for _, i := range []uint64{5, 9} {
		if _, ok, err := buf.Get(ctx, ks, ycsb.Key(i)); err != nil || !ok {
			t.Fatalf("Get(%d): found=%v err=%v", i, ok, err)
		}
	}
	// Scan(1, nil, 2) plans holes [1,5) and (5,9) bounded by buffered 5
	// and 9, and fetches [1, 9). Meanwhile the clock empties the buffer.
	d.hook = func() {
		ev := buf.Evict(0)
		for w, ok := ev.Next(); ok; w, ok = ev.Next() {
			if w != nil {
				t.Error("a clean buffer chose records to write back")
				w.Close()
			}
		}
	}
	got, _, err := buf.Scan(ctx, ks, ycsb.Key(1), nil, 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("Scan(1, nil, 2): %d records, err %v; want 2", len(got), err)
	}
	if err := buf.Check(ctx); err != nil {
		t.Error(err)
	}
	if _, ok, err := buf.Get(ctx, ks, ycsb.Key(9)); err != nil || !ok {
		t.Errorf("Get(9) after the scan: found=%v err=%v; the store has it", ok, err)
	}
	if got, _, err := buf.Scan(ctx, ks, ycsb.Key(8), nil, 5); err != nil || len(got) != 2 {
		t.Errorf("Scan(8, nil, 5): %d records, err %v; the store has 2", len(got), err)
	}
}
