package aztable

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/adapters/contract"
	"github.com/nemocache/nemo/internal/aztest"
)

// underContract is the adapter over Azurite with c under its pipeline.
func underContract(t *testing.T, c *contract.Contract) *Store {
	t.Helper()
	s, err := New(Options{ConnectionString: aztest.ConnectionString(aztest.Azurite(t), aztest.Key), MaxRetries: 8,
		RetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond, Transport: c.Transport(nil)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestReadsUnderContract: range reads (bounds, limits, the table list)
// and point reads answer through the contract (pages cut short, empty
// pages with continuation, transient failures before and after the
// service) exactly what they answer directly, and a range read reports
// itself complete only where a page came without continuation.
func TestReadsUnderContract(t *testing.T) {
	direct := newAzurite(t)
	ks := newTable(t, direct, "rc")
	ctx := context.Background()
	var recs []adapters.Record
	var keys [][]byte
	for pk := 0; pk < 4; pk++ {
		for rk := 0; rk < 12; rk++ {
			r := val(fmt.Sprintf("p%d", pk), fmt.Sprintf("r%02d", rk), int32(rk))
			keys = append(keys, r.Key)
			if rk%4 != 3 {
				recs = append(recs, r)
			}
		}
	}
	if _, err := direct.Upsert(ctx, ks, adapters.Puts(recs)); err != nil {
		t.Fatal(err)
	}
	type read struct {
		name       string
		ks         adapters.Keyspace
		start, end []byte
		limit      int
	}
	reads := []read{{"all", ks, nil, nil, 0}, {"limit 5", ks, nil, nil, 5}, {"p1..p3", ks, tablecodec.EncodeKey("p1", ""), tablecodec.EncodeKey("p3", ""), 0},
		{"from p2/r05 limit 9", ks, keys[29], nil, 9}, {"nothing", ks, tablecodec.EncodeKey("q", ""), nil, 0},
		{"tables", tablecodec.TablesKeyspace, tablecodec.TableKey(string(ks)), adapters.Successor(tablecodec.TableKey(string(ks))), 0}}
	want := map[string]string{}
	for _, r := range reads {
		got, more, err := direct.GetRange(ctx, r.ks, r.start, r.end, r.limit)
		if err != nil {
			t.Fatal(err)
		}
		want[r.name] = fmt.Sprint(keysOf(got), more)
	}
	wantGet, err := direct.Get(ctx, ks, keys)
	if err != nil {
		t.Fatal(err)
	}
	var total contract.Stats
	for seed := uint64(1); seed <= 3; seed++ {
		c := contract.New(contract.Config{Seed: seed, ShortRate: 0.7, EmptyRate: 0.4, ErrorRate: 0.1, LostRate: 0.1})
		s := underContract(t, c)
		for _, r := range reads {
			rctx, report := adapters.WithRangeReport(ctx)
			got, more, err := s.GetRange(rctx, r.ks, r.start, r.end, r.limit)
			if err != nil {
				t.Fatalf("seed %d: %s: %v", seed, r.name, err)
			}
			if g := fmt.Sprint(keysOf(got), more); g != want[r.name] {
				t.Errorf("seed %d: %s:\n direct: %s\n under:  %s", seed, r.name, want[r.name], g)
			}
			if r.ks == tablecodec.TablesKeyspace {
				continue // one listing, complete by construction
			}
			hi := r.end
			if more {
				hi = adapters.Successor(got[len(got)-1].Key)
			}
			if covers, ok := report.Covers(hi); !ok || !covers {
				t.Errorf("seed %d: %s: the answer is complete up to %q, the pages reported say not (reported %v)", seed, r.name, hi, ok)
			}
		}
		got, err := s.Get(ctx, ks, keys)
		if err != nil {
			t.Fatalf("seed %d: get: %v", seed, err)
		}
		for i := range got {
			if (got[i].Value == nil) != (wantGet[i].Value == nil) || got[i].Version != wantGet[i].Version {
				t.Errorf("seed %d: get %q: %q, want %q", seed, keys[i], got[i].Version, wantGet[i].Version)
			}
		}
		st := c.Stats()
		total.Cut, total.Empty, total.Failed, total.Lost = total.Cut+st.Cut, total.Empty+st.Empty, total.Failed+st.Failed, total.Lost+st.Lost
	}
	if total.Cut == 0 || total.Empty == 0 || total.Failed == 0 || total.Lost == 0 {
		t.Errorf("the contract injected too little: %+v", total)
	}
}

// TestUnknownOutcomes: a write whose reply is lost (500
// OperationTimedOut) after the service applied it is retried by the
// pipeline. An insert-or-replace, or a delete of any version, then
// succeeds; an insert, an If-Match write or a transaction holding one is
// refused by its own first application, and that refusal is reported as
// adapters.ErrUnknownOutcome, not as a conflict; and it was applied.
func TestUnknownOutcomes(t *testing.T) {
	c := contract.New(contract.Config{})
	s := underContract(t, c)
	ks := newTable(t, s, "uo")
	ctx := context.Background()
	n := 0
	next := func(v int32) adapters.Record {
		n++
		return val("p", fmt.Sprintf("r%03d", n), v)
	}
	current := func(k []byte) adapters.Record {
		recs, err := s.Get(ctx, ks, [][]byte{k})
		if err != nil {
			t.Fatal(err)
		}
		return recs[0]
	}
	holds := func(k []byte, v int32) bool {
		r := current(k)
		return r.Value != nil && nOf(t, r.Value) == v
	}
	unknown := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, adapters.ErrUnknownOutcome) || errors.Is(err, adapters.ErrConflict) {
			t.Errorf("%s with its reply lost: %v, want only an unknown outcome", what, err)
		}
	}
	lose := func() { c.LoseNext(1) }

	r := next(1)
	lose()
	if _, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{r})); err != nil || !holds(r.Key, 1) {
		t.Errorf("an insert-or-replace with its reply lost: %v, want it sent again", err)
	}
	r = next(2)
	lose()
	_, err := s.Upsert(ctx, ks, []adapters.Write{{Key: r.Key, Value: r.Value, Expect: adapters.Expect{Kind: adapters.ExpectAbsent}}})
	unknown("an insert", err)
	if !holds(r.Key, 2) {
		t.Error("the insert was not applied")
	}
	r2 := val("p", fmt.Sprintf("r%03d", n), 3)
	lose()
	_, err = s.Upsert(ctx, ks, []adapters.Write{{Key: r2.Key, Value: r2.Value, Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: current(r.Key).Version}}})
	unknown("an If-Match replace", err)
	if !holds(r.Key, 3) {
		t.Error("the replace was not applied")
	}
	lose()
	err = s.Delete(ctx, ks, []adapters.Write{{Key: r.Key, Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: current(r.Key).Version}}})
	unknown("an If-Match delete", err)
	if current(r.Key).Value != nil {
		t.Error("the delete was not applied")
	}
	r = next(4)
	put(t, s, ks, r)
	lose()
	if err := s.Delete(ctx, ks, adapters.Deletes([][]byte{r.Key})); err != nil || current(r.Key).Value != nil {
		t.Errorf("a delete of any version with its reply lost: %v, want it sent again", err)
	}
	a, b := next(5), next(6)
	lose()
	_, err = s.WriteAtomic(ctx, ks, []adapters.Mutation{{Write: adapters.Write{Key: a.Key, Value: a.Value, Expect: adapters.Expect{Kind: adapters.ExpectAbsent}}},
		{Write: adapters.Write{Key: b.Key, Value: b.Value}}})
	unknown("a transaction", err)
	if !holds(a.Key, 5) || !holds(b.Key, 6) {
		t.Error("the transaction was not applied")
	}
	a, b = next(7), next(8)
	lose()
	_, err = s.Upsert(ctx, ks, []adapters.Write{{Key: a.Key, Value: a.Value, Expect: adapters.Expect{Kind: adapters.ExpectAbsent}},
		{Key: b.Key, Value: b.Value, Expect: adapters.Expect{Kind: adapters.ExpectAbsent}}})
	unknown("a batch of inserts", err)
	if !holds(a.Key, 7) || !holds(b.Key, 8) {
		t.Error("the batch was not applied")
	}
	if st := c.Stats(); st.Lost != 7 {
		t.Errorf("%d replies lost, want 7", st.Lost)
	}
}
