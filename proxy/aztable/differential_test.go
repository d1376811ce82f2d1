package aztable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/contract"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/aztest"
	"github.com/nemocache/nemo/internal/contracttest"
)

// side is one of the two systems the differential test drives.
type side struct {
	name   string
	svc    *aztables.ServiceClient
	prefix string // physical table name = prefix + logical name
}

// outcome is what one operation observably did: status and error code,
// and the entities or table names it returned (pages in order).
type outcome struct {
	Status int
	Code   string
	Pages  [][]map[string]any `json:",omitempty"`
	Tables [][]string         `json:",omitempty"`
}

// normalize drops what legitimately differs between the two systems: ETag
// and Timestamp values, and odata.* members built from the host and
// physical table name. A null is dropped too: for a $select-ed property
// an entity lacks, Azure answers null and Azurite omits it, which clients
// read the same way.
func normalize(raw []byte) map[string]any {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return map[string]any{"unparsable": string(raw)}
	}
	for k, v := range m {
		if strings.HasPrefix(k, "odata.") || k == "Timestamp" || k == "Timestamp@odata.type" || v == nil {
			delete(m, k)
		}
	}
	return m
}

var codeInBody = regexp.MustCompile(`"code":"([A-Za-z]+)","message":\{"lang":"en-US","value":"(\d+):`)

// errOutcome records a failure; for a failed transaction (202 with an
// inner error) it also records the inner code and failing index.
func errOutcome(err error) outcome {
	st, code := aztest.Status(err)
	if st == 202 {
		if m := codeInBody.FindStringSubmatch(err.Error()); m != nil {
			code = m[1] + "@" + m[2]
		}
	}
	return outcome{Status: st, Code: code}
}

var (
	pkPool = []string{"p1", "p2", "p3", "o'q"}
	rkPool = []string{"r0", "r1", "r2", "r3", "r4", "r5", "r10", "x y"}
	sPool  = []string{"a", "b", "c", "d", "o'brien"}
)

// randEntity builds an entity with a random subset of typed properties;
// each property name always has one type, so no filter compares across
// types (Azurite's known bug 4).
func randEntity(r *rand.Rand, pk, rk string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"PartitionKey":%q,"RowKey":%q`, pk, rk)
	add := func(format string, args ...any) {
		if r.IntN(3) > 0 {
			b.WriteString(",")
			fmt.Fprintf(&b, format, args...)
		}
	}
	add(`"N":%d`, r.IntN(10))
	add(`"S":%s`, mustString(sPool[r.IntN(len(sPool))]))
	add(`"B":%v`, r.IntN(2) == 0)
	add(`"D":%v`, float64(r.IntN(20))/4+0.5)
	add(`"L":"%d","L@odata.type":"Edm.Int64"`, int64(r.IntN(10))*1_000_000_000_000)
	add(`"T":"2024-01-%02dT00:00:00Z","T@odata.type":"Edm.DateTime"`, 1+r.IntN(9))
	add(`"G":"0000000%d-1111-2222-3333-444444444444","G@odata.type":"Edm.Guid"`, r.IntN(4))
	add(`"Bin":%q,"Bin@odata.type":"Edm.Binary"`, []string{"AQ==", "Ag==", "AQI="}[r.IntN(3)])
	b.WriteString("}")
	return []byte(b.String())
}

func mustString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// filters avoid every construct on Azurite's known-bug list.
var filters = []string{
	"",
	"PartitionKey eq 'p1'",
	"PartitionKey ne 'p1'",
	"PartitionKey ge 'p1' and PartitionKey lt 'p3'",
	"PartitionKey eq 'p2' and RowKey gt 'r1'",
	"PartitionKey eq 'p2' and RowKey ge 'r1' and RowKey le 'r4'",
	"PartitionKey eq 'o''q'",
	"RowKey le 'r2'",
	"RowKey eq 'x y'",
	"N gt 5",
	"N eq 3 or S eq 'b'",
	"not (B eq true)",
	"B",
	"L ge 5000000000000L",
	"D lt 2.5",
	"T ge datetime'2024-01-05T00:00:00Z'",
	"G eq guid'00000002-1111-2222-3333-444444444444'",
	"Bin eq X'01'",
	"S ge 'b' and S lt 'd'",
	"S eq 'o''brien'",
	"Missing eq 'x'",
	"(PartitionKey eq 'p1' or PartitionKey eq 'p2') and N lt 5",
	"PartitionKey eq 'p3' and not (N lt 5)",
}

const staleETag = `W/"datetime'2020-01-01T00%3A00%3A00.0000000Z'"`

// TestDifferentialAzurite replays one random sequence of table, entity,
// query and transaction operations against Azurite directly and against
// nemo in front of Azurite, and requires identical outcomes. Afterwards it
// flushes nemo and requires that the tables nemo wrote back to Azurite hold
// exactly what the directly written tables hold.
func TestDifferentialAzurite(t *testing.T) {
	// A buffer far smaller than the data keeps evicting (and writing back
	// dirty records) under the sequence, so answers mix buffered, evicted
	// and refetched records.
	differentialAzurite(t, startNemo(t, azuriteStore(t), smallBuffer()), nil)
}

// smallBuffer is the differential's buffer: far smaller than its data.
func smallBuffer() cache.Options {
	return cache.Options{MaxBytes: 3 << 10, MaxKeyBytes: 2 << 10, EvictBatch: 8}
}

// TestDifferentialAzuriteUnderContract is the differential over nemo in
// front of Azurite under the contract (adapters/contract: query pages cut
// short and empty with continuation, 503 ServerBusy and 500
// OperationTimedOut before the service and after it, writes included), in
// both coherence modes, for each contract seed (NEMO_CONTRACT_SEEDS,
// internal/contracttest), with the operations of TestDifferentialAzurite:
// the answers must be Azurite's, as they are without the contract. In mode
// shared a write reaches the store before nemo answers, and one whose
// outcome the contract left unknown is answered as the service answers
// it, 500 OperationTimedOut; such a step is accepted (and counted) only
// when the contract did leave a write's outcome unknown during it, and
// the steps after it must agree again (nemo forgot what it knew of the
// keys, and the store holds what Azurite holds).
func TestDifferentialAzuriteUnderContract(t *testing.T) {
	for _, shared := range []bool{false, true} {
		for _, seed := range contracttest.Seeds(t) {
			name := fmt.Sprintf("exclusive/seed=%d", seed)
			start := startNemo
			if shared {
				name, start = fmt.Sprintf("shared/seed=%d", seed), startShared
			}
			t.Run(name, func(t *testing.T) {
				c := contract.New(contract.Standard(seed))
				differentialAzurite(t, start(t, contractStore(t, c, shared), smallBuffer()), c)
				t.Logf("contract: %+v", c.Stats())
			})
		}
	}
}

// differentialAzurite replays the differential's sequence against Azurite
// and against n (over Azurite, under contract c if not nil).
func differentialAzurite(t *testing.T, n *nemo, c *contract.Contract) {
	url := aztest.Azurite(t)
	run := aztest.TableName("")
	sides := []*side{
		{name: "azurite", svc: service(t, url, aztest.Key), prefix: "da" + run},
		{name: "nemo", svc: service(t, n.URL, aztest.Key), prefix: "dn" + run},
	}
	logical := []string{"ta", "tb"}
	// The account's table list is nemo's table catalog, and everything
	// in it but nemo's side's tables has writers nemo does not see: the
	// Azurite side's tables are created and deleted directly, and other
	// tests share the account. A nemo in coherence exclusive sees no
	// table created or deleted elsewhere (docs/coherence.md), so what it
	// listed of those may be stale by the end: the check compares only
	// nemo's own tables' catalog entries with the store.
	n.OthersWriteKey = othersTables(sides[1].prefix)
	ctx := ctxT(t)
	t.Cleanup(func() {
		for _, s := range sides {
			for _, l := range logical {
				_, _ = s.svc.DeleteTable(context.Background(), s.prefix+l, nil)
			}
		}
	})
	// NEMO_DIFF_AZ_SEED and NEMO_DIFF_AZ_STEPS vary the sequence (CI runs
	// the default, seed 42 of 1200 steps) to hunt with new ones.
	seed := envInt(t, "NEMO_DIFF_AZ_SEED", 42)
	r := rand.New(rand.NewPCG(uint64(seed), 7))
	steps := 1200
	if testing.Short() {
		steps = 100
	}
	steps = envInt(t, "NEMO_DIFF_AZ_STEPS", steps)
	// Start with both tables so most operations hit a live one.
	for _, s := range sides {
		for _, l := range logical {
			if _, err := s.svc.CreateTable(ctx, s.prefix+l, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	unknown := 0 // steps nemo answered with the service's ambiguity
	for step := 0; step < steps; step++ {
		table := logical[r.IntN(len(logical))]
		pk, rk := pkPool[r.IntN(len(pkPool))], rkPool[r.IntN(len(rkPool))]
		ent := randEntity(r, pk, rk)
		kind := r.IntN(100)
		etagChoice := r.IntN(3)
		filter := filters[r.IntN(len(filters))]
		sel := []string{"", "RowKey,N,S", "N,Missing"}[r.IntN(3)]
		top := []int32{0, 1, 3, 10}[r.IntN(4)]
		batch := randBatch(r)
		var desc string
		outs := make([]outcome, len(sides))
		var before uint64
		if c != nil {
			before = c.Stats().Ambiguous
		}
		for i, s := range sides {
			tc := s.svc.NewClient(s.prefix + table)
			ifMatch := func() *azcore.ETag {
				switch etagChoice {
				case 0:
					return to.Ptr(azcore.ETagAny)
				case 1:
					return to.Ptr(azcore.ETag(staleETag))
				}
				if g, err := tc.GetEntity(ctx, pk, rk, nil); err == nil {
					return &g.ETag
				}
				return to.Ptr(azcore.ETag(staleETag))
			}
			var err error
			var out outcome
			switch {
			case kind < 2:
				desc = "delete table " + table
				_, err = s.svc.DeleteTable(ctx, s.prefix+table, nil)
			case kind < 6:
				desc = "create table " + table
				_, err = s.svc.CreateTable(ctx, s.prefix+table, nil)
			case kind < 18:
				desc = "add " + string(ent)
				_, err = tc.AddEntity(ctx, ent, nil)
			case kind < 28:
				desc = "upsert merge " + string(ent)
				_, err = tc.UpsertEntity(ctx, ent, nil)
			case kind < 36:
				desc = "upsert replace " + string(ent)
				_, err = tc.UpsertEntity(ctx, ent, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
			case kind < 46:
				mode := []aztables.UpdateMode{aztables.UpdateModeMerge, aztables.UpdateModeReplace}[etagChoice%2]
				desc = fmt.Sprintf("update %s etag#%d %s", mode, etagChoice, ent)
				_, err = tc.UpdateEntity(ctx, ent, &aztables.UpdateEntityOptions{IfMatch: ifMatch(), UpdateMode: mode})
			case kind < 54:
				desc = fmt.Sprintf("delete %s/%s etag#%d", pk, rk, etagChoice)
				_, err = tc.DeleteEntity(ctx, pk, rk, &aztables.DeleteEntityOptions{IfMatch: ifMatch()})
			case kind < 64:
				desc = "get " + pk + "/" + rk
				var g aztables.GetEntityResponse
				if g, err = tc.GetEntity(ctx, pk, rk, nil); err == nil {
					out.Pages = [][]map[string]any{{normalize(g.Value)}}
				}
			case kind < 90:
				desc = fmt.Sprintf("query %q select %q top %d", filter, sel, top)
				out.Pages, err = queryAll(ctx, tc, filter, sel, top)
			case kind < 96:
				desc = fmt.Sprintf("transaction %v", batch)
				_, err = tc.SubmitTransaction(ctx, batch.actions(), nil)
			default:
				desc = "list tables"
				out.Tables, err = listTables(ctx, s)
			}
			if err != nil {
				out = errOutcome(err)
			}
			outs[i] = out
		}
		if !reflect.DeepEqual(outs[0], outs[1]) {
			if c != nil && c.Stats().Ambiguous > before && outs[1].Status == http.StatusInternalServerError && outs[1].Code == "OperationTimedOut" {
				unknown++ // the service's own ambiguity, where the contract made one
				continue
			}
			a, _ := json.Marshal(outs[0])
			b, _ := json.Marshal(outs[1])
			t.Fatalf("step %d: %s\n azurite: %s\n nemo:    %s", step, desc, a, b)
		}
	}

	if st := n.Buf.Stats(); st.Evictions == 0 || st.Writebacks == 0 && !n.Eng.WritesThrough() || st.RangeHits == 0 {
		t.Fatalf("the run did not exercise the buffer: %+v", st)
	} else {
		t.Logf("buffer: %d hits, %d misses, %d range hits, %d range fetches, %d evictions, %d write-backs; %d steps answered with the service's ambiguity",
			st.Hits, st.Misses, st.RangeHits, st.RangeFetches, st.Evictions, st.Writebacks, unknown)
	}
	// Write-back: what nemo answered must now be in Azurite. Under the
	// contract the flush's own write-backs may lose their replies: such a
	// record stays dirty, and the next flush sends it again and
	// recognises its own earlier attempt (docs/coherence.md, unknown
	// outcomes). So the flush is repeated while the store is what fails.
	err := n.Eng.Flush(ctx)
	for tries := 1; err != nil && c != nil && errors.Is(err, adapters.ErrUnavailable) && tries < flushTries; tries++ {
		t.Logf("flush %d under the contract: %v", tries, err)
		err = n.Eng.Flush(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range logical {
		direct, err1 := queryAll(ctx, sides[0].svc.NewClient(sides[0].prefix+l), "", "", 0)
		backed, err2 := queryAll(ctx, sides[0].svc.NewClient(sides[1].prefix+l), "", "", 0)
		if !reflect.DeepEqual(errOutcome(err1), errOutcome(err2)) || !reflect.DeepEqual(direct, backed) {
			t.Fatalf("table %s after flush: written directly %v (%v), written back by nemo %v (%v)", l, direct, err1, backed, err2)
		}
	}
}

// flushTries bounds the flushes the differential makes under the
// contract, which fails or loses about one call in 25: ten failed flushes
// in a row mean that write-back does not settle an unknown outcome.
const flushTries = 10

// randBatch is a changeset of 1 to 5 operations in one partition (Azurite
// wrongly accepts more partitions, known bug 5), distinct rows.
type batchSpec struct {
	pk  string
	ops []batchOp
}

type batchOp struct {
	kind aztables.TransactionType
	body []byte
}

func randBatch(r *rand.Rand) batchSpec {
	b := batchSpec{pk: pkPool[r.IntN(len(pkPool))]}
	rows := append([]string(nil), rkPool...)
	r.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
	kinds := []aztables.TransactionType{aztables.TransactionTypeAdd, aztables.TransactionTypeInsertMerge, aztables.TransactionTypeInsertReplace,
		aztables.TransactionTypeUpdateMerge, aztables.TransactionTypeUpdateReplace, aztables.TransactionTypeDelete}
	for i := 0; i < 1+r.IntN(5); i++ {
		b.ops = append(b.ops, batchOp{kind: kinds[r.IntN(len(kinds))], body: randEntity(r, b.pk, rows[i])})
	}
	return b
}

func (b batchSpec) actions() []aztables.TransactionAction {
	out := make([]aztables.TransactionAction, len(b.ops))
	for i, o := range b.ops {
		out[i] = aztables.TransactionAction{ActionType: o.kind, Entity: o.body}
	}
	return out
}

func (b batchSpec) String() string {
	var s []string
	for _, o := range b.ops {
		s = append(s, string(o.kind)+" "+string(o.body))
	}
	return strings.Join(s, "; ")
}

func queryAll(ctx context.Context, tc *aztables.Client, filter, sel string, top int32) ([][]map[string]any, error) {
	opts := &aztables.ListEntitiesOptions{}
	if filter != "" {
		opts.Filter = &filter
	}
	if sel != "" {
		opts.Select = &sel
	}
	if top > 0 {
		opts.Top = &top
	}
	var pages [][]map[string]any
	p := tc.NewListEntitiesPager(opts)
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		var out []map[string]any
		for _, e := range page.Entities {
			out = append(out, normalize(e))
		}
		pages = append(pages, out)
	}
	return pages, nil
}

// listTables lists the side's tables by prefix, one per page, with the
// prefix stripped.
func listTables(ctx context.Context, s *side) ([][]string, error) {
	filter := fmt.Sprintf("TableName ge '%s' and TableName lt '%s~'", s.prefix, s.prefix)
	p := s.svc.NewListTablesPager(&aztables.ListTablesOptions{Filter: &filter, Top: to.Ptr[int32](1)})
	var pages [][]string
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		var names []string
		for _, tp := range page.Tables {
			names = append(names, strings.TrimPrefix(*tp.Name, s.prefix))
		}
		sort.Strings(names)
		pages = append(pages, names)
	}
	return pages, nil
}
