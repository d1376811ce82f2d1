package aztable

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/adapters/contract"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/contracttest"
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
// itself complete only where a page came without continuation. Point
// reads go both ways: the direct signed GET (direct.go) and the SDK's
// GetEntity, which Stores without an account key use.
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
	reads := []contracttest.Read{{Name: "all", KS: ks}, {Name: "limit 5", KS: ks, Limit: 5},
		{Name: "p1..p3", KS: ks, Start: tablecodec.EncodeKey("p1", ""), End: tablecodec.EncodeKey("p3", "")},
		{Name: "from p2/r05 limit 9", KS: ks, Start: keys[29], Limit: 9}, {Name: "nothing", KS: ks, Start: tablecodec.EncodeKey("q", "")},
		{Name: "tables", KS: tablecodec.TablesKeyspace, Start: tablecodec.TableKey(string(ks)), End: adapters.Successor(tablecodec.TableKey(string(ks)))}}
	wantGet, err := direct.Get(ctx, ks, keys)
	if err != nil {
		t.Fatal(err)
	}
	var total contract.Stats
	for seed := uint64(1); seed <= 6; seed++ {
		c := contract.New(contract.Config{Seed: seed, ShortRate: 0.7, EmptyRate: 0.4, ErrorRate: 0.1, LostRate: 0.1})
		s := underContract(t, c)
		viaSDK := seed%2 == 0
		if viaSDK {
			s.direct = nil
		} else if s.direct == nil {
			t.Fatal("a Store with an account key reads without the direct reader")
		}
		contracttest.SameRanges(t, ctx, direct, s, reads)
		got, err := s.Get(ctx, ks, keys)
		if err != nil {
			t.Fatalf("seed %d (SDK %v): get: %v", seed, viaSDK, err)
		}
		for i := range got {
			if (got[i].Value == nil) != (wantGet[i].Value == nil) || got[i].Version != wantGet[i].Version ||
				!bytes.Equal(got[i].Value, wantGet[i].Value) {
				t.Errorf("seed %d (SDK %v): get %q: %q, want %q", seed, viaSDK, keys[i], got[i].Version, wantGet[i].Version)
			}
		}
		st := c.Stats()
		total.Cut, total.Empty, total.Failed, total.Lost = total.Cut+st.Cut, total.Empty+st.Empty, total.Failed+st.Failed, total.Lost+st.Lost
	}
	if total.Cut == 0 || total.Empty == 0 || total.Failed == 0 || total.Lost == 0 {
		t.Errorf("the contract injected too little: %+v", total)
	}
}

// TestUnknownOutcomes: writes whose replies the contract lost after the
// service applied them (contracttest.UnknownOutcomes); the pipeline's own
// retry of such a write meets its first application (409, 412, 404, a
// refused transaction), which must not read as a refusal. The partition
// "" takes the direct requests (directwrite.go), which retry and mark
// unknown outcomes as the pipeline does.
func TestUnknownOutcomes(t *testing.T) {
	for _, pk := range []string{"p", ""} {
		t.Run(fmt.Sprintf("partition %q", pk), func(t *testing.T) {
			c := contract.New(contract.Config{})
			s := underContract(t, c)
			ks := newTable(t, s, "uo")
			rec := func(i, n int) adapters.Record { return val(pk, fmt.Sprintf("r%03d", i), int32(n)) }
			number := func(v []byte) int { return int(nOf(t, v)) }
			contracttest.UnknownOutcomes(t, context.Background(), s, c, ks, rec, number)
		})
	}
}
