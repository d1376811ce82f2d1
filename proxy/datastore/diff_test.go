package datastore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

// TestDifferentialAgainstEmulator replays one random sequence of writes and
// queries against Google's emulator directly and against nemo (over the
// embedded store), and requires identical query results. The queries use
// what the emulator implements (it lacks IN, NOT_IN, != and OR, which the
// tests above cover against expectations instead).
//
// The seeds are fixed so CI is repeatable; NEMO_DIFF_SEED=random (or a
// number) explores others, and any seed that ever failed belongs in the
// list once fixed (seed 3 caught the order of an array property that also
// has an equality filter).
func TestDifferentialAgainstEmulator(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	switch env := os.Getenv("NEMO_DIFF_SEED"); env {
	case "":
	case "random":
		seeds = []uint64{uint64(time.Now().UnixNano())}
	default:
		n, err := strconv.ParseUint(env, 10, 64)
		if err != nil {
			t.Fatalf("NEMO_DIFF_SEED=%q: %v", env, err)
		}
		seeds = []uint64{n}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { differential(t, seed) })
	}
}

func differential(t *testing.T, seed uint64) {
	emuAddr := dstest.Emulator(t)
	project := dstest.Project(t)
	n := startNemo(t, embeddedBackend(t.TempDir()), project, cache.Options{})
	clients := [2]datastorepb.DatastoreClient{pbClient(t, emuAddr), pbClient(t, n.addr)}
	r := rand.New(rand.NewPCG(seed, 1))
	d := &differ{t: t, r: r, project: project, clients: clients}
	queries, compared := 0, 0
	for step := 0; step < 12; step++ {
		d.writeBatch(25)
		for i := 0; i < 25; i++ {
			queries++
			if d.compareQuery() {
				compared++
			}
		}
	}
	if compared < queries/2 {
		t.Errorf("only %d of %d queries ran on the emulator", compared, queries)
	}
	t.Logf("%d queries compared (%d refused by the emulator)", compared, queries-compared)
}

type differ struct {
	t       *testing.T
	r       *rand.Rand
	project string
	clients [2]datastorepb.DatastoreClient
}

func (d *differ) key() *datastorepb.Key {
	k := &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: d.project}}
	if d.r.IntN(4) == 0 {
		k.Path = append(k.Path, &datastorepb.Key_PathElement{Kind: "P", IdType: &datastorepb.Key_PathElement_Name{Name: []string{"p1", "p2"}[d.r.IntN(2)]}})
	}
	e := &datastorepb.Key_PathElement{Kind: []string{"A", "B"}[d.r.IntN(2)]}
	if d.r.IntN(2) == 0 {
		e.IdType = &datastorepb.Key_PathElement_Id{Id: int64(1 + d.r.IntN(30))}
	} else {
		e.IdType = &datastorepb.Key_PathElement_Name{Name: []string{"a", "b", "c", "ab", "é", "Z", "10"}[d.r.IntN(7)]}
	}
	k.Path = append(k.Path, e)
	return k
}

func (d *differ) scalar() *datastorepb.Value {
	switch d.r.IntN(8) {
	case 0:
		return &datastorepb.Value{ValueType: &datastorepb.Value_NullValue{}}
	case 1, 2:
		return ival(int64(d.r.IntN(7) - 3))
	case 3:
		return sval([]string{"a", "b", "ab", "B"}[d.r.IntN(4)])
	case 4:
		return &datastorepb.Value{ValueType: &datastorepb.Value_BooleanValue{BooleanValue: d.r.IntN(2) == 0}}
	case 5:
		return &datastorepb.Value{ValueType: &datastorepb.Value_DoubleValue{DoubleValue: []float64{-1, 0.5, 2}[d.r.IntN(3)]}}
	case 6:
		return &datastorepb.Value{ValueType: &datastorepb.Value_TimestampValue{TimestampValue: timestamppb.New(time.UnixMicro(int64(d.r.IntN(5))))}}
	default:
		return &datastorepb.Value{ValueType: &datastorepb.Value_BlobValue{BlobValue: []byte([]string{"a", "b"}[d.r.IntN(2)])}}
	}
}

func (d *differ) value() *datastorepb.Value {
	if d.r.IntN(4) == 0 {
		var vs []*datastorepb.Value
		for i := d.r.IntN(4); i > 0; i-- {
			vs = append(vs, d.scalar())
		}
		return aval(vs...)
	}
	return d.scalar()
}

func (d *differ) writeBatch(n int) {
	var muts []*datastorepb.Mutation
	seen := map[string]bool{}
	for len(muts) < n {
		k := d.key()
		id := prototext.Format(k)
		if seen[id] {
			continue
		}
		seen[id] = true
		if d.r.IntN(6) == 0 {
			muts = append(muts, &datastorepb.Mutation{Operation: &datastorepb.Mutation_Delete{Delete: k}})
			continue
		}
		props := map[string]*datastorepb.Value{}
		if d.r.IntN(5) != 0 {
			props["v"] = d.value()
		}
		if d.r.IntN(4) != 0 {
			props["w"] = ival(int64(d.r.IntN(4)))
		}
		if d.r.IntN(3) == 0 {
			props["u"] = &datastorepb.Value{ValueType: &datastorepb.Value_IntegerValue{IntegerValue: 1}, ExcludeFromIndexes: true}
		}
		muts = append(muts, upsert(&datastorepb.Entity{Key: k, Properties: props}))
	}
	for _, c := range d.clients {
		if _, err := c.Commit(context.Background(), &datastorepb.CommitRequest{ProjectId: d.project, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL, Mutations: muts}); err != nil {
			d.t.Fatal(err)
		}
	}
}

func (d *differ) query() *datastorepb.Query {
	q := &datastorepb.Query{}
	kindless := d.r.IntN(8) == 0
	if !kindless {
		q.Kind = []*datastorepb.KindExpression{{Name: []string{"A", "B"}[d.r.IntN(2)]}}
	}
	var filters []*datastorepb.Filter
	ineqProp := ""
	if d.r.IntN(4) == 0 {
		anc := &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: d.project}, Path: []*datastorepb.Key_PathElement{{Kind: "P", IdType: &datastorepb.Key_PathElement_Name{Name: "p1"}}}}
		filters = append(filters, propFilter("__key__", datastorepb.PropertyFilter_HAS_ANCESTOR, &datastorepb.Value{ValueType: &datastorepb.Value_KeyValue{KeyValue: anc}}))
	}
	ops := []datastorepb.PropertyFilter_Operator{datastorepb.PropertyFilter_EQUAL, datastorepb.PropertyFilter_LESS_THAN,
		datastorepb.PropertyFilter_LESS_THAN_OR_EQUAL, datastorepb.PropertyFilter_GREATER_THAN, datastorepb.PropertyFilter_GREATER_THAN_OR_EQUAL}
	if !kindless {
		for i := d.r.IntN(3); i > 0; i-- {
			prop := []string{"v", "w", "u"}[d.r.IntN(3)]
			op := ops[d.r.IntN(len(ops))]
			if op != datastorepb.PropertyFilter_EQUAL {
				if ineqProp != "" && ineqProp != prop {
					continue // one inequality property per query
				}
				ineqProp = prop
			}
			filters = append(filters, propFilter(prop, op, d.scalar()))
		}
	} else if d.r.IntN(2) == 0 {
		k := d.key()
		filters = append(filters, propFilter("__key__", ops[1+d.r.IntN(4)], &datastorepb.Value{ValueType: &datastorepb.Value_KeyValue{KeyValue: k}}))
		ineqProp = "__key__"
	}
	switch len(filters) {
	case 0:
	case 1:
		q.Filter = filters[0]
	default:
		q.Filter = and(filters...)
	}
	if ineqProp != "" && d.r.IntN(2) == 0 {
		q.Order = orderBy(ineqProp, d.r.IntN(2) == 0)
	} else if ineqProp == "" && !kindless && d.r.IntN(2) == 0 {
		q.Order = orderBy([]string{"v", "w", "__key__"}[d.r.IntN(3)], d.r.IntN(2) == 0)
		if d.r.IntN(3) == 0 {
			q.Order = append(q.Order, orderBy("__key__", true)...)
		}
	} else if kindless && d.r.IntN(3) == 0 {
		q.Order = orderBy("__key__", d.r.IntN(2) == 0)
	}
	if !kindless {
		switch d.r.IntN(5) {
		case 0:
			q.Projection = []*datastorepb.Projection{{Property: &datastorepb.PropertyReference{Name: "__key__"}}}
		case 1:
			q.Projection = []*datastorepb.Projection{{Property: &datastorepb.PropertyReference{Name: "v"}}}
			if d.r.IntN(2) == 0 {
				q.DistinctOn = []*datastorepb.PropertyReference{{Name: "v"}}
			}
		}
	}
	if d.r.IntN(3) == 0 {
		q.Limit = wrapperspb.Int32(int32(d.r.IntN(6)))
	}
	if d.r.IntN(4) == 0 {
		q.Offset = int32(d.r.IntN(4))
	}
	return q
}

// runAll follows the query's batches to the end, as the client iterator
// does, and renders each result as one line.
func (d *differ) runAll(c datastorepb.DatastoreClient, q *datastorepb.Query) ([]string, error) {
	var out []string
	limit := int32(-1)
	if q.Limit != nil {
		limit = q.Limit.Value
	}
	offset := q.Offset
	for pages := 0; pages < 50; pages++ {
		resp, err := c.RunQuery(context.Background(), &datastorepb.RunQueryRequest{ProjectId: d.project, PartitionId: &datastorepb.PartitionId{ProjectId: d.project}, QueryType: &datastorepb.RunQueryRequest_Query{Query: q}})
		if err != nil {
			return nil, err
		}
		b := resp.Batch
		for _, r := range b.EntityResults {
			out = append(out, render(r.Entity, len(q.Projection) > 0 && q.Projection[0].Property.Name != "__key__"))
		}
		offset -= b.SkippedResults
		if limit >= 0 {
			limit -= int32(len(b.EntityResults))
		}
		if b.MoreResults != datastorepb.QueryResultBatch_NOT_FINISHED || limit == 0 {
			return out, nil
		}
		q.StartCursor, q.Offset = b.EndCursor, offset
		if limit >= 0 {
			q.Limit = wrapperspb.Int32(limit)
		}
	}
	return nil, fmt.Errorf("query did not finish in 50 batches")
}

func render(e *datastorepb.Entity, projected bool) string {
	var parts []string
	for _, el := range e.GetKey().GetPath() {
		if el.GetName() != "" {
			parts = append(parts, fmt.Sprintf("%s:%q", el.GetKind(), el.GetName()))
		} else {
			parts = append(parts, fmt.Sprintf("%s:%d", el.GetKind(), el.GetId()))
		}
	}
	s := strings.Join(parts, "/")
	if projected {
		v := e.GetProperties()["v"]
		s += " v=" + string(canonical(v))
	}
	return s
}

// compareQuery runs one random query on both; false when the emulator
// refused it.
func (d *differ) compareQuery() bool {
	q := d.query()
	want, err := d.runAll(d.clients[0], cloneQuery(q))
	if err != nil {
		return false
	}
	got, err := d.runAll(d.clients[1], cloneQuery(q))
	if err != nil {
		d.t.Fatalf("nemo failed a query the emulator ran: %v\nquery: %v", err, prototext.Format(q))
	}
	if !slices.Equal(got, want) {
		d.t.Fatalf("results differ\nquery: %v\nemulator: %q\nnemo:     %q", prototext.Format(q), want, got)
	}
	return true
}

func cloneQuery(q *datastorepb.Query) *datastorepb.Query {
	b, _ := prototext.Marshal(q)
	out := &datastorepb.Query{}
	_ = prototext.Unmarshal(b, out)
	return out
}
