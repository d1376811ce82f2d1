package datastore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/datastore"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

// What misses and writes cost in remote calls (issue 14): a limited query
// fetches about what it returns, and a plain upsert reads nothing.

type remoteEntity struct {
	N   int64
	Mod int64
}

// seedCold writes n entities of kind R (ids 1..n, Mod = id % 10) through
// nemo, writes them back and evicts everything, so what follows misses;
// the store's counters start from zero. It writes 100 entities per
// commit: one of 500 could take the emulator longer than nemo's request
// deadline on a loaded machine (seen at load average 8).
func seedCold(t testing.TB, n *nemo, c *datastore.Client, count int) {
	t.Helper()
	ctx := context.Background()
	const per = 100
	for lo := 1; lo <= count; lo += per {
		var keys []*datastore.Key
		var vals []*remoteEntity
		for i := lo; i < lo+per && i <= count; i++ {
			keys = append(keys, datastore.IDKey("R", int64(i), nil))
			vals = append(vals, &remoteEntity{N: int64(i), Mod: int64(i % 10)})
		}
		if _, err := c.PutMulti(ctx, keys, vals); err != nil {
			t.Fatal(err)
		}
	}
	evictAll(t, n)
}

func evictAll(t testing.TB, n *nemo) {
	t.Helper()
	ctx := context.Background()
	if err := n.engine.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8 && n.engine.EvictUntil(ctx, 0) > 0; i++ {
	}
	n.store.Reset()
}

// rangeReads is the store's range reads since the last Reset and the
// records they returned.
func rangeReads(n *nemo) (reads, records uint64) {
	st := n.store.Stats()[adapters.OpGetRange]
	return st.Requests, st.Records
}

func TestLimitedQueryFetchesWhatItNeeds(t *testing.T) {
	// Remote requests are counted at the Store, above the adapter: the
	// contract changes none of them, so these run without it. The
	// staleness bound is a minute, not shared mode's default second, so
	// that the warm query still falls within it on a loaded machine.
	eachWith(t, plainBackends(t), cache.Options{MaxStaleness: time.Minute}, func(t *testing.T, n *nemo, c *datastore.Client) {
		ctx := context.Background()
		seedCold(t, n, c, 400)
		var got []remoteEntity
		q := datastore.NewQuery("R").FilterField("__key__", ">", datastore.IDKey("R", 200, nil)).Limit(8)
		if _, err := c.GetAll(ctx, q, &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != 8 || got[0].N != 201 || got[7].N != 208 {
			t.Fatalf("got %v", got)
		}
		reads, recs := rangeReads(n)
		t.Logf("limit 8, cold: %d range reads, %d records", reads, recs)
		if reads != 1 || recs > 16 {
			t.Errorf("limit 8, cold: %d range reads returning %d records, want 1 of about 9", reads, recs)
		}
		// A filter that keeps one entity in ten: the pages grow.
		evictAll(t, n)
		got = nil
		q = datastore.NewQuery("R").FilterField("Mod", "=", 3).Limit(8)
		if _, err := c.GetAll(ctx, q, &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != 8 || got[0].N != 3 || got[7].N != 73 {
			t.Fatalf("got %v", got)
		}
		reads, recs = rangeReads(n)
		t.Logf("limit 8, 1 in 10 match, cold: %d range reads, %d records", reads, recs)
		if reads > 6 || recs > 200 {
			t.Errorf("limit 8, 1 in 10 match, cold: %d range reads returning %d records, want at most 6 and 200", reads, recs)
		}
		// Warm: answered from the buffer.
		n.store.Reset()
		got = nil
		if _, err := c.GetAll(ctx, q, &got); err != nil || len(got) != 8 {
			t.Fatalf("warm: %v %v", got, err)
		}
		if reads, _ := rangeReads(n); reads != 0 {
			t.Errorf("warm: %d range reads", reads)
		}
	})
}

func TestPlainUpsertReadsNothing(t *testing.T) {
	// Remote requests are counted at the Store, above the adapter: the
	// contract changes none of them, so these run without it.
	eachOf(t, plainBackends(t), func(t *testing.T, n *nemo, c *datastore.Client) {
		ctx := context.Background()
		seedCold(t, n, c, 100)
		// 100 upserts of uncached keys, half of them over existing
		// entities, and 100 of keys nemo holds.
		for i := 51; i <= 150; i++ {
			if _, err := c.Put(ctx, datastore.IDKey("R", int64(i), nil), &remoteEntity{N: int64(-i)}); err != nil {
				t.Fatal(err)
			}
		}
		for i := 51; i <= 150; i++ {
			if _, err := c.Put(ctx, datastore.IDKey("R", int64(i), nil), &remoteEntity{N: int64(i)}); err != nil {
				t.Fatal(err)
			}
		}
		if gets := n.store.Stats()[adapters.OpGet].Requests; gets != 0 {
			t.Errorf("200 upserts made %d remote Gets, want 0", gets)
		}
		// A merge or an insert still reads (once). Checked before the
		// reads below: a read of a record whose knowledge is aging
		// (coherence shared, max_staleness) refreshes it in the
		// background, which would be counted here.
		n.store.Reset()
		if _, err := c.Mutate(ctx, datastore.NewInsert(datastore.IDKey("R", 1000, nil), &remoteEntity{N: 1000})); err != nil {
			t.Fatal(err)
		}
		if gets := n.store.Stats()[adapters.OpGet].Requests; gets != 1 {
			t.Errorf("an insert of an uncached key made %d remote Gets, want 1", gets)
		}
		var e remoteEntity
		for _, i := range []int64{1, 60, 150, 1000} {
			if err := c.Get(ctx, datastore.IDKey("R", i, nil), &e); err != nil || e.N != i {
				t.Fatalf("R %d: %v %v", i, e, err)
			}
		}
	})
}

// BenchmarkRemoteCalls reports, in front of the emulator, the store calls a
// cold limit-8 query (plain, and filtered to one entity in ten) and an
// upsert of an uncached key cost: range reads per query, records per range
// read, Gets per upsert.
func BenchmarkRemoteCalls(b *testing.B) {
	for _, name := range []string{"query-limit8", "query-limit8-1in10", "upsert-uncached"} {
		b.Run(name, func(b *testing.B) {
			project := dstest.Project(b)
			n := startNemo(b, emulatorBackend(), project, cache.Options{})
			c := client(b, n.addr, project)
			ctx := context.Background()
			seedCold(b, n, c, 400)
			var reads, recs, gets uint64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				evictAll(b, n)
				b.StartTimer()
				switch name {
				case "upsert-uncached":
					k := datastore.IDKey("R", int64(1+i%800), nil) // half exist
					if _, err := c.Put(ctx, k, &remoteEntity{N: int64(i)}); err != nil {
						b.Fatal(err)
					}
				default:
					q := datastore.NewQuery("R").FilterField("__key__", ">", datastore.IDKey("R", int64(1+(i*97)%300), nil)).Limit(8)
					if name == "query-limit8-1in10" {
						q = q.FilterField("Mod", "=", i%10)
					}
					var got []remoteEntity
					if _, err := c.GetAll(ctx, q, &got); err != nil || len(got) != 8 {
						b.Fatal(fmt.Sprint(len(got), err))
					}
				}
				r, rr := rangeReads(n)
				reads, recs = reads+r, recs+rr
				gets += n.store.Stats()[adapters.OpGet].Requests
			}
			b.ReportMetric(float64(reads)/float64(b.N), "range-reads/op")
			if reads > 0 {
				b.ReportMetric(float64(recs)/float64(reads), "records/range-read")
			}
			b.ReportMetric(float64(gets)/float64(b.N), "gets/op")
		})
	}
}
