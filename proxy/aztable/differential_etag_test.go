package aztable

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/aztest"
)

// envInt reads an integer knob of the held-ETag differential test.
func envInt(t *testing.T, name string, dflt int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return dflt
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return n
}

// TestDifferentialHeldETags replays random conditional writes through the
// SDK against Azurite directly and against nemo (64 KiB buffer, far
// smaller than the data) in front of Azurite, where a client keeps the
// ETag of every entity from the last answer that carried one (insert,
// upsert, update, point read, query) and later updates and deletes with
// it, as well-behaved optimistic clients do. Every status must agree: an
// ETag nemo gave stays valid until the entity really changes, although
// the entity was evicted and refetched in between.
//
// Knobs (environment): NEMO_DIFF_SEEDS (default 1 seed), NEMO_DIFF_STEPS
// (operations per seed, default 2000; 300 with -short), NEMO_DIFF_BUFFER
// (buffer bytes, default 65536; 8192 with -short), NEMO_DIFF_ETAG_MEMORY (the adapter's ETagMemory; -1
// measures nemo without it) and NEMO_DIFF_COUNT=1, which counts the
// disagreeing operations instead of failing at the first, realigning
// nemo with Azurite after each (for before/after measurements).
func TestDifferentialHeldETags(t *testing.T) {
	aztest.Azurite(t)
	seeds := envInt(t, "NEMO_DIFF_SEEDS", 1)
	steps, buffer := 2000, 64<<10
	if testing.Short() { // fewer steps, less data: a smaller buffer evicts
		steps, buffer = 300, 8<<10
	}
	steps = envInt(t, "NEMO_DIFF_STEPS", steps)
	buffer = envInt(t, "NEMO_DIFF_BUFFER", buffer)
	memory := envInt(t, "NEMO_DIFF_ETAG_MEMORY", 0)
	count := os.Getenv("NEMO_DIFF_COUNT") == "1"
	total := 0
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			bad := heldETagRun(t, uint64(seed), steps, int64(buffer), memory, count, false)
			total += bad
			t.Logf("seed %d: %d of %d operations disagree (buffer %d bytes, ETagMemory %d)", seed, bad, steps, buffer, memory)
		})
	}
	if count {
		t.Logf("total: %d disagreeing operations in %d seeds of %d", total, seeds, steps)
	}
}

// heldSide is one system of the held-ETag run, with the client's ETags.
type heldSide struct {
	name string
	tc   *aztables.Client
	held map[[2]string]azcore.ETag
}

func (s *heldSide) etag(pk, rk string) *azcore.ETag {
	if e, ok := s.held[[2]string{pk, rk}]; ok {
		return &e
	}
	return to.Ptr(azcore.ETag(staleETag))
}

func (s *heldSide) keep(pk, rk string, e azcore.ETag) {
	if e != "" {
		s.held[[2]string{pk, rk}] = e
	}
}

// TestSharedHeldETags is TestDifferentialHeldETags with nemo in coherence
// mode shared: writes go to Azurite conditioned on the client's own
// conditions and clients see Azurite's own ETags (no ETag memory), so
// every status must agree with Azurite's, through eviction and refetch.
func TestSharedHeldETags(t *testing.T) {
	aztest.Azurite(t)
	steps, buffer := 1000, 64<<10
	if testing.Short() {
		steps, buffer = 300, 8<<10
	}
	if bad := heldETagRun(t, 7, steps, int64(buffer), -1, false, true); bad != 0 {
		t.Fatalf("%d of %d operations disagree", bad, steps)
	}
}

func heldETagRun(t *testing.T, seed uint64, steps int, buffer int64, memory int, count, shared bool) int {
	url := aztest.Azurite(t)
	direct := service(t, url, aztest.Key)
	run := aztest.TableName("")
	names := []string{"ha" + run, "hn" + run}
	t.Cleanup(func() {
		for _, nm := range names {
			_, _ = direct.DeleteTable(context.Background(), nm, nil)
		}
	})
	start := startNemo
	if shared {
		start = startShared
	}
	n := start(t, azuriteStoreMemo(t, memory), cache.Options{MaxBytes: buffer, MaxKeyBytes: 2 << 10, EvictBatch: 8})
	ctx := ctxT(t)
	svcs := []*aztables.ServiceClient{direct, service(t, n.URL, aztest.Key)}
	sides := make([]*heldSide, 2)
	for i, nm := range names {
		if _, err := svcs[i].CreateTable(ctx, nm, nil); err != nil {
			t.Fatal(err)
		}
		sides[i] = &heldSide{name: []string{"azurite", "nemo"}[i], tc: svcs[i].NewClient(nm), held: map[[2]string]azcore.ETag{}}
	}
	r := rand.New(rand.NewPCG(seed, 11))
	pad := strings.Repeat("x", 200)
	body := func(pk, rk string, v int) []byte {
		return []byte(fmt.Sprintf(`{"PartitionKey":%q,"RowKey":%q,"V":%d,"Pad":%q}`, pk, rk, v, pad))
	}
	bad := 0
	for step := 0; step < steps; step++ {
		pk, rk := fmt.Sprintf("p%d", r.IntN(8)), fmt.Sprintf("r%03d", r.IntN(64))
		v := r.IntN(1000)
		kind := r.IntN(100)
		mode := []aztables.UpdateMode{aztables.UpdateModeReplace, aztables.UpdateModeMerge}[r.IntN(2)]
		var desc string
		outs := make([]outcome, 2)
		conditional := false
		for i, s := range sides {
			var out outcome
			var err error
			switch {
			case kind < 12:
				desc = "add " + pk + "/" + rk
				var resp aztables.AddEntityResponse
				if resp, err = s.tc.AddEntity(ctx, body(pk, rk, v), nil); err == nil {
					s.keep(pk, rk, resp.ETag)
				}
			case kind < 24:
				desc = fmt.Sprintf("upsert %s %s/%s", mode, pk, rk)
				var resp aztables.UpsertEntityResponse
				if resp, err = s.tc.UpsertEntity(ctx, body(pk, rk, v), &aztables.UpsertEntityOptions{UpdateMode: mode}); err == nil {
					s.keep(pk, rk, resp.ETag)
				}
			case kind < 54:
				conditional = true
				desc = fmt.Sprintf("update %s %s/%s with the held ETag", mode, pk, rk)
				var resp aztables.UpdateEntityResponse
				if resp, err = s.tc.UpdateEntity(ctx, body(pk, rk, v), &aztables.UpdateEntityOptions{IfMatch: s.etag(pk, rk), UpdateMode: mode}); err == nil {
					s.keep(pk, rk, resp.ETag)
				}
			case kind < 70:
				conditional = true
				desc = fmt.Sprintf("delete %s/%s with the held ETag", pk, rk)
				if _, err = s.tc.DeleteEntity(ctx, pk, rk, &aztables.DeleteEntityOptions{IfMatch: s.etag(pk, rk)}); err == nil {
					delete(s.held, [2]string{pk, rk})
				}
			case kind < 85:
				desc = "get " + pk + "/" + rk
				var g aztables.GetEntityResponse
				if g, err = s.tc.GetEntity(ctx, pk, rk, nil); err == nil {
					s.keep(pk, rk, g.ETag)
					out.Pages = [][]map[string]any{{normalize(g.Value)}}
				}
			default:
				filter := fmt.Sprintf("PartitionKey eq '%s'", pk)
				desc = "query " + filter
				out.Pages, err = s.queryKeep(ctx, filter)
			}
			if err != nil {
				out = errOutcome(err)
			}
			outs[i] = out
		}
		if reflect.DeepEqual(outs[0], outs[1]) {
			continue
		}
		a, _ := json.Marshal(outs[0])
		b, _ := json.Marshal(outs[1])
		if !count || !conditional {
			t.Fatalf("step %d: %s\n azurite: %s\n nemo:    %s", step, desc, a, b)
		}
		bad++
		// Realign: Azurite applied the write, nemo refused it (or the
		// reverse); apply it unconditionally where it was refused.
		if err := realign(ctx, sides, outs, kind, pk, rk, body(pk, rk, v), mode); err != nil {
			t.Fatalf("step %d: %s: realigning after azurite %s, nemo %s: %v", step, desc, a, b, err)
		}
	}
	if st := n.Buf.Stats(); st.Evictions == 0 {
		t.Fatalf("the run did not evict: %+v", st)
	} else {
		t.Logf("buffer: %d hits, %d misses, %d evictions, %d write-backs", st.Hits, st.Misses, st.Evictions, st.Writebacks)
	}
	if err := n.Eng.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want, err1 := queryAll(ctx, sides[0].tc, "", "", 0)
	got, err2 := queryAll(ctx, direct.NewClient(names[1]), "", "", 0)
	if err1 != nil || err2 != nil || !reflect.DeepEqual(want, got) {
		t.Fatalf("after flush: written directly %d pages (%v), written back by nemo %d pages (%v)", len(want), err1, len(got), err2)
	}
	return bad
}

// realign applies the write of a disagreeing step unconditionally on the
// side that refused it, so that both sides hold the same data again.
func realign(ctx context.Context, sides []*heldSide, outs []outcome, kind int, pk, rk string, body []byte, mode aztables.UpdateMode) error {
	for i, s := range sides {
		if outs[i].Status < 300 {
			continue
		}
		if outs[1-i].Status >= 300 {
			return fmt.Errorf("both sides refused, differently")
		}
		if kind < 54 {
			resp, err := s.tc.UpdateEntity(ctx, body, &aztables.UpdateEntityOptions{IfMatch: to.Ptr(azcore.ETagAny), UpdateMode: mode})
			if err != nil {
				return err
			}
			s.keep(pk, rk, resp.ETag)
			continue
		}
		if _, err := s.tc.DeleteEntity(ctx, pk, rk, &aztables.DeleteEntityOptions{IfMatch: to.Ptr(azcore.ETagAny)}); err != nil {
			return err
		}
		delete(s.held, [2]string{pk, rk})
	}
	return nil
}

// queryKeep runs a query, keeps the ETag of every entity it returns, and
// returns the normalized pages.
func (s *heldSide) queryKeep(ctx context.Context, filter string) ([][]map[string]any, error) {
	p := s.tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter})
	var pages [][]map[string]any
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		var out []map[string]any
		for _, raw := range page.Entities {
			var m struct {
				PK   string `json:"PartitionKey"`
				RK   string `json:"RowKey"`
				ETag string `json:"odata.etag"`
			}
			if err := json.Unmarshal(raw, &m); err != nil {
				return nil, err
			}
			s.keep(m.PK, m.RK, azcore.ETag(m.ETag))
			out = append(out, normalize(raw))
		}
		pages = append(pages, out)
	}
	return pages, nil
}
