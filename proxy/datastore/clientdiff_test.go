package datastore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"cloud.google.com/go/datastore"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

// TestClientDifferentialFirestore plays one seeded sequence of Go client
// operations (point reads and writes, mutations with preconditions,
// read-write transactions that read, query, aggregate and write,
// read-only transactions, queries and aggregations) against the Firestore
// emulator in Datastore mode directly, and against nemo in front of the
// same emulator (in another project), in coherence modes exclusive and
// shared. Every operation's outcome must be the same, except the
// differences clientDiffKnown lists, each with its reason; the final
// contents, read straight from the emulator and through nemo, must be the
// same; and in mode shared no commit may fail where Firestore's succeeded
// (the transcripts say so) and every remote error nemo met is one the
// backend answered for a reason the transcript shows.
//
// The seeds are fixed (NEMO_CLIENTDIFF_SEED=random or a number explores
// others); NEMO_CLIENTDIFF_STEPS sets the operations per seed (default
// 200).
func TestClientDifferentialFirestore(t *testing.T) {
	fs := dstest.FirestoreEmulator(t)
	seeds := []uint64{1, 2}
	if os.Getenv("NEMO_CLIENTDIFF_SEED") != "" {
		seeds = []uint64{envSeed(t, "NEMO_CLIENTDIFF_SEED", 0)}
	}
	steps := 200
	if s := os.Getenv("NEMO_CLIENTDIFF_STEPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("NEMO_CLIENTDIFF_STEPS=%q", s)
		}
		steps = n
	}
	for _, shared := range []bool{false, true} {
		mode := "exclusive"
		if shared {
			mode = "shared"
		}
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", mode, seed), func(t *testing.T) {
				clientDifferential(t, fs, shared, seed, steps)
			})
		}
	}
}

// clientDiffKnown lists the ways an outcome may differ between Firestore
// and nemo in front of it, each with its reason: two transcript lines that
// are equal once a rule has rewritten both are a known difference.
var clientDiffKnown = []struct {
	reason  string
	rewrite func(line string) string
}{
	{"the Firestore emulator refuses to commit a read-only transaction (INVALID_ARGUMENT \"Cannot modify entities in a read-only transaction.\", with no writes); nemo commits it, as Datastore and the legacy emulator do",
		func(l string) string {
			l, _ = strings.CutPrefix(l, "rotxn-commit ")
			l, _ = strings.CutSuffix(l, ": InvalidArgument: Cannot modify entities in a read-only transaction.")
			return l
		}},
	{"a refused insert or update names the entity in the emulator's own debug format (Firestore: EntityRef{...} and a key proto in text); nemo names it as Kind:\"name\"; the code and the text before the key are the same",
		func(l string) string { return cdKeyInMessage.ReplaceAllString(l, "$1 <key>") }},
}

// cdKeyInMessage matches the key a precondition message names, in either
// spelling, to the end of the line.
var cdKeyInMessage = regexp.MustCompile(`(?s)(AlreadyExists: entity already exists|NotFound: no entity to update): .*$`)

func clientDifferential(t *testing.T, fsAddr string, shared bool, seed uint64, steps int) {
	ctx := context.Background()
	refProject, nemoProject := dstest.Project(t), dstest.Project(t)
	b := firestoreBackend(fsAddr, shared)
	n := startNemo(t, b, nemoProject, cache.Options{})
	clients := [2]*datastore.Client{client(t, fsAddr, refProject), client(t, n.addr, nemoProject)}
	r := rand.New(rand.NewPCG(seed, 26))
	g := &cdGen{r: r}
	var differ, known int
	for step := 0; step < steps; step++ {
		op := g.op()
		var out [2]string
		for i, c := range clients {
			out[i] = op.run(ctx, c)
		}
		out[0] = strings.ReplaceAll(out[0], refProject, "<project>")
		out[1] = strings.ReplaceAll(out[1], nemoProject, "<project>")
		if os.Getenv("NEMO_CLIENTDIFF_CONTENTS") != "" && !shared {
			// Debugging: find the step after which the contents part.
			_ = n.engine.Flush(ctx)
			if a, b := cdContents(ctx, t, clients[0]), cdContents(ctx, t, client(t, fsAddr, nemoProject)); !slices.Equal(a, b) {
				t.Fatalf("after step %d (%s) the contents differ:\n  %s\nnemo's backend:\n  %s", step, out[0], strings.Join(a, "\n  "), strings.Join(b, "\n  "))
			}
		}
		if out[0] == out[1] {
			continue
		}
		if reason := knownDiff(out[0], out[1]); reason != "" {
			known++
			t.Logf("step %d: known difference (%s):\n  firestore: %s\n  nemo:      %s", step, reason, out[0], out[1])
			continue
		}
		differ++
		t.Errorf("step %d differs:\n  firestore: %s\n  nemo:      %s", step, out[0], out[1])
		if differ >= 10 {
			t.Fatalf("stopping after %d differences", differ)
		}
	}
	if !shared {
		if err := n.engine.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The final contents: the reference's, the store's behind nemo, and
	// what nemo serves.
	direct := client(t, fsAddr, nemoProject)
	want := cdContents(ctx, t, clients[0])
	if got := cdContents(ctx, t, direct); !slices.Equal(got, want) {
		t.Errorf("final contents differ: firestore directly has\n  %s\nnemo's backend has\n  %s", strings.Join(want, "\n  "), strings.Join(got, "\n  "))
	}
	if got := cdContents(ctx, t, clients[1]); !slices.Equal(got, want) {
		t.Errorf("final contents differ: firestore directly has\n  %s\nnemo serves\n  %s", strings.Join(want, "\n  "), strings.Join(got, "\n  "))
	}
	st := n.store.Stats()
	var errs []string
	for op := adapters.OpGet; op <= adapters.OpWriteAtomic; op++ {
		if e := st[op].Errors; e > 0 {
			errs = append(errs, fmt.Sprintf("%s=%d", op, e))
		}
	}
	t.Logf("%d operations, %d known differences; %d entities at the end; remote requests %d, remote errors %v; engine %+v",
		steps, known, len(want), st.Total().Requests, errs, n.engine.Stats())
}

// knownDiff returns the reasons of the known differences that make ref and
// got equal once applied in turn, or "" if they stay different.
func knownDiff(ref, got string) string {
	var reasons []string
	for _, k := range clientDiffKnown {
		r, g := k.rewrite(ref), k.rewrite(got)
		if r != ref || g != got {
			reasons = append(reasons, k.reason)
			ref, got = r, g
		}
		if ref == got {
			return strings.Join(reasons, "; ")
		}
	}
	return ""
}

// cdContents lists every entity of the default namespace, rendered.
func cdContents(ctx context.Context, t *testing.T, c *datastore.Client) []string {
	t.Helper()
	out, err := cdRows(ctx, c, datastore.NewQuery(""))
	if err != nil {
		t.Fatalf("reading the final contents: %v", err)
	}
	sort.Strings(out)
	return out
}

// cdRows runs q and renders each entity it returns.
func cdRows(ctx context.Context, c *datastore.Client, q *datastore.Query) ([]string, error) {
	var out []string
	it := c.Run(ctx, q)
	for {
		var pl datastore.PropertyList
		k, err := it.Next(&pl)
		if errors.Is(err, iterator.Done) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, cdKey(k)+cdProps(pl))
	}
}

// cdOp is one generated operation: run plays it on a client and renders
// its outcome as one line.
type cdOp struct {
	run func(ctx context.Context, c *datastore.Client) string
}

type cdGen struct{ r *rand.Rand }

func (g *cdGen) key() *datastore.Key {
	var parent *datastore.Key
	if g.r.IntN(4) == 0 {
		parent = datastore.NameKey("P", []string{"p1", "p2"}[g.r.IntN(2)], nil)
	}
	kind := []string{"A", "B"}[g.r.IntN(2)]
	if g.r.IntN(2) == 0 {
		return datastore.IDKey(kind, int64(1+g.r.IntN(8)), parent)
	}
	return datastore.NameKey(kind, []string{"a", "b", "c", "d", "e"}[g.r.IntN(5)], parent)
}

func (g *cdGen) keys(n int) []*datastore.Key {
	var out []*datastore.Key
	seen := map[string]bool{}
	for len(out) < n {
		k := g.key()
		if !seen[k.String()] {
			seen[k.String()] = true
			out = append(out, k)
		}
	}
	return out
}

func (g *cdGen) entity() datastore.PropertyList {
	pl := datastore.PropertyList{{Name: "N", Value: int64(g.r.IntN(10))}}
	if g.r.IntN(3) != 0 {
		pl = append(pl, datastore.Property{Name: "S", Value: []string{"x", "y", "z"}[g.r.IntN(3)]})
	}
	if g.r.IntN(4) == 0 {
		var tags []any
		for i := 1 + g.r.IntN(3); i > 0; i-- {
			tags = append(tags, []string{"t1", "t2", "t3"}[g.r.IntN(3)])
		}
		pl = append(pl, datastore.Property{Name: "T", Value: tags})
	}
	if g.r.IntN(4) == 0 {
		pl = append(pl, datastore.Property{Name: "U", Value: "unindexed", NoIndex: true})
	}
	return pl
}

func (g *cdGen) query(kind string) (*datastore.Query, string) {
	return g.queryLimited(kind, true)
}

// queryLimited is query, with a limit sometimes when limited is set. (A
// sum or average over a query with a limit is not generated: Firestore
// takes the first entities in the order of the aggregated property, nemo
// in key order; see NOTES.)
func (g *cdGen) queryLimited(kind string, limited bool) (*datastore.Query, string) {
	q := datastore.NewQuery(kind)
	desc := "kind=" + kind
	if g.r.IntN(4) == 0 {
		anc := datastore.NameKey("P", []string{"p1", "p2"}[g.r.IntN(2)], nil)
		q, desc = q.Ancestor(anc), desc+" ancestor="+anc.Name
	}
	switch g.r.IntN(5) {
	case 0:
		v := int64(g.r.IntN(10))
		op := []string{"=", "<", ">=", "!="}[g.r.IntN(4)]
		q, desc = q.FilterField("N", op, v), desc+fmt.Sprintf(" N%s%d", op, v)
	case 1:
		v := []string{"x", "y", "z"}[g.r.IntN(3)]
		q, desc = q.FilterField("S", "=", v), desc+" S="+v
	case 2:
		v := []string{"t1", "t2", "t3"}[g.r.IntN(3)]
		q, desc = q.FilterField("T", "=", v), desc+" T="+v
	}
	if limited && g.r.IntN(3) == 0 {
		q, desc = q.Limit(1+g.r.IntN(4)), desc+" limited"
	}
	return q, desc
}

func (g *cdGen) op() cdOp {
	switch x := g.r.IntN(100); {
	case x < 12:
		k, e := g.key(), g.entity()
		return cdOp{func(ctx context.Context, c *datastore.Client) string {
			_, err := c.Put(ctx, k, &e)
			return "put " + cdKey(k) + ": " + cdErr(err)
		}}
	case x < 18:
		ks := g.keys(2 + g.r.IntN(3))
		es := make([]datastore.PropertyList, len(ks))
		for i := range es {
			es[i] = g.entity()
		}
		return cdOp{func(ctx context.Context, c *datastore.Client) string {
			_, err := c.PutMulti(ctx, ks, es)
			return "putmulti " + cdKeys(ks) + ": " + cdErr(err)
		}}
	case x < 28:
		k := g.key()
		return cdOp{func(ctx context.Context, c *datastore.Client) string {
			var pl datastore.PropertyList
			err := c.Get(ctx, k, &pl)
			return "get " + cdKey(k) + ": " + cdResult(pl, err)
		}}
	case x < 33:
		ks := g.keys(2 + g.r.IntN(3))
		return cdOp{func(ctx context.Context, c *datastore.Client) string {
			pls := make([]datastore.PropertyList, len(ks))
			err := c.GetMulti(ctx, ks, pls)
			return "getmulti " + cdKeys(ks) + ": " + cdMulti(pls, err)
		}}
	case x < 38:
		ks := g.keys(1 + g.r.IntN(2))
		return cdOp{func(ctx context.Context, c *datastore.Client) string {
			return "delete " + cdKeys(ks) + ": " + cdErr(c.DeleteMulti(ctx, ks))
		}}
	case x < 48:
		muts, desc := g.mutations()
		return cdOp{func(ctx context.Context, c *datastore.Client) string {
			_, err := c.Mutate(ctx, muts()...)
			return "mutate " + desc + ": " + cdErr(err)
		}}
	case x < 68:
		return g.txn()
	case x < 75:
		return g.roTxn()
	case x < 90:
		q, desc := g.query([]string{"A", "B"}[g.r.IntN(2)])
		return cdOp{func(ctx context.Context, c *datastore.Client) string {
			return "query " + desc + ": " + cdRun(ctx, c, q)
		}}
	default:
		kind := g.r.IntN(3)
		q, desc := g.queryLimited([]string{"A", "B"}[g.r.IntN(2)], kind == 0)
		agg, adesc := aggregationOf(q, kind)
		return cdOp{func(ctx context.Context, c *datastore.Client) string {
			res, err := c.RunAggregationQuery(ctx, agg)
			return "aggregate " + adesc + " " + desc + ": " + cdAgg(res, err)
		}}
	}
}

// aggregationOf is one aggregation over q: a count (kind 0), sum or
// average.
func aggregationOf(q *datastore.Query, kind int) (*datastore.AggregationQuery, string) {
	switch kind {
	case 0:
		return q.NewAggregationQuery().WithCount("v"), "count"
	case 1:
		return q.NewAggregationQuery().WithSum("N", "v"), "sum(N)"
	}
	return q.NewAggregationQuery().WithAvg("N", "v"), "avg(N)"
}

// mutations returns 1 to 3 mutations of distinct keys, made afresh for
// each client (a mutation is not reusable across calls).
func (g *cdGen) mutations() (func() []*datastore.Mutation, string) {
	ks := g.keys(1 + g.r.IntN(3))
	kinds := make([]int, len(ks))
	es := make([]datastore.PropertyList, len(ks))
	var desc []string
	for i, k := range ks {
		kinds[i], es[i] = g.r.IntN(4), g.entity()
		desc = append(desc, []string{"insert", "update", "upsert", "delete"}[kinds[i]]+" "+cdKey(k))
	}
	return func() []*datastore.Mutation {
		var out []*datastore.Mutation
		for i, k := range ks {
			e := es[i]
			switch kinds[i] {
			case 0:
				out = append(out, datastore.NewInsert(k, &e))
			case 1:
				out = append(out, datastore.NewUpdate(k, &e))
			case 2:
				out = append(out, datastore.NewUpsert(k, &e))
			default:
				out = append(out, datastore.NewDelete(k))
			}
		}
		return out
	}, strings.Join(desc, ", ")
}

// errRollback makes a generated transaction roll back.
var errRollback = errors.New("rolled back on purpose")

// txn is a read-write transaction: it reads some keys, maybe runs a query
// and an aggregation in the transaction, then writes (puts derived from
// what it read, deletes, an insert or an update that may fail) and
// commits, or rolls back.
func (g *cdGen) txn() cdOp {
	reads := g.keys(1 + g.r.IntN(3))
	var q *datastore.Query
	qdesc := ""
	aggregate, aggKind := g.r.IntN(5) == 0, g.r.IntN(3)
	if g.r.IntN(3) == 0 {
		q, qdesc = g.queryLimited([]string{"A", "B"}[g.r.IntN(2)], !aggregate || aggKind == 0)
	}
	bump := g.r.IntN(2) == 0 // write back each read entity with N+1
	muts, mdesc := g.mutations()
	rollback := g.r.IntN(8) == 0
	return cdOp{func(ctx context.Context, c *datastore.Client) string {
		var lines []string
		_, err := c.RunInTransaction(ctx, func(tx *datastore.Transaction) error {
			lines = lines[:0]
			for _, k := range reads {
				var pl datastore.PropertyList
				err := tx.Get(k, &pl)
				lines = append(lines, "get "+cdKey(k)+" "+cdResult(pl, err))
				if err != nil && !errors.Is(err, datastore.ErrNoSuchEntity) {
					return err
				}
				if bump && err == nil {
					for i := range pl {
						if pl[i].Name == "N" {
							pl[i].Value = pl[i].Value.(int64) + 1
						}
					}
					if _, err := tx.Put(k, &pl); err != nil {
						return err
					}
				}
			}
			if q != nil {
				lines = append(lines, "query "+qdesc+" "+cdRun(ctx, c, q.Transaction(tx)))
				if aggregate {
					agg, adesc := aggregationOf(q.Transaction(tx), aggKind)
					res, err := c.RunAggregationQuery(ctx, agg)
					lines = append(lines, "aggregate "+adesc+" "+cdAgg(res, err))
				}
			}
			if _, err := tx.Mutate(muts()...); err != nil {
				return err
			}
			if rollback {
				return errRollback
			}
			return nil
		})
		return fmt.Sprintf("txn [%s] then %s: %s", strings.Join(lines, "; "), mdesc, cdErr(err))
	}}
}

// roTxn is a read-only transaction: point reads and a query, then commit.
func (g *cdGen) roTxn() cdOp {
	reads := g.keys(1 + g.r.IntN(3))
	q, qdesc := g.query([]string{"A", "B"}[g.r.IntN(2)])
	return cdOp{func(ctx context.Context, c *datastore.Client) string {
		tx, err := c.NewTransaction(ctx, datastore.ReadOnly)
		if err != nil {
			return "rotxn-begin: " + cdErr(err)
		}
		var lines []string
		for _, k := range reads {
			var pl datastore.PropertyList
			err := tx.Get(k, &pl)
			lines = append(lines, "get "+cdKey(k)+" "+cdResult(pl, err))
		}
		lines = append(lines, "query "+qdesc+" "+cdRun(ctx, c, q.Transaction(tx)))
		out := "rotxn [" + strings.Join(lines, "; ") + "]"
		if _, err := tx.Commit(); err != nil {
			// The Firestore emulator refuses the commit: roll back,
			// and say so on a line of its own (clientDiffKnown).
			_ = tx.Rollback()
			return "rotxn-commit " + out + ": " + cdErr(err)
		}
		return out
	}}
}

func cdKey(k *datastore.Key) string {
	var parts []string
	for ; k != nil; k = k.Parent {
		if k.Name != "" {
			parts = append(parts, k.Kind+":"+k.Name)
		} else {
			parts = append(parts, fmt.Sprintf("%s:%d", k.Kind, k.ID))
		}
	}
	slices.Reverse(parts)
	return strings.Join(parts, "/")
}

func cdKeys(ks []*datastore.Key) string {
	var s []string
	for _, k := range ks {
		s = append(s, cdKey(k))
	}
	return strings.Join(s, ",")
}

func cdProps(pl datastore.PropertyList) string {
	var s []string
	for _, p := range pl {
		s = append(s, fmt.Sprintf("%s=%v", p.Name, p.Value))
	}
	sort.Strings(s)
	return "{" + strings.Join(s, " ") + "}"
}

// cdErr renders an error: its gRPC code and message, or the client's
// sentinel.
func cdErr(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, errRollback):
		return "rolled back"
	case errors.Is(err, datastore.ErrNoSuchEntity):
		return "no such entity"
	case errors.Is(err, datastore.ErrConcurrentTransaction):
		return "concurrent transaction (ABORTED)"
	}
	var me datastore.MultiError
	if errors.As(err, &me) {
		var s []string
		for _, e := range me {
			s = append(s, cdErr(e))
		}
		return "[" + strings.Join(s, ", ") + "]"
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if st, ok := status.FromError(e); ok {
			return st.Code().String() + ": " + st.Message()
		}
	}
	return "error: " + err.Error()
}

func cdResult(pl datastore.PropertyList, err error) string {
	if err != nil {
		return cdErr(err)
	}
	return cdProps(pl)
}

func cdMulti(pls []datastore.PropertyList, err error) string {
	var me datastore.MultiError
	if err != nil && !errors.As(err, &me) {
		return cdErr(err)
	}
	var s []string
	for i, pl := range pls {
		var e error
		if me != nil {
			e = me[i]
		}
		s = append(s, cdResult(pl, e))
	}
	return strings.Join(s, ", ")
}

func cdRun(ctx context.Context, c *datastore.Client, q *datastore.Query) string {
	rows, err := cdRows(ctx, c, q)
	if err != nil {
		return cdErr(err)
	}
	return "[" + strings.Join(rows, " ") + "]"
}

func cdAgg(res datastore.AggregationResult, err error) string {
	if err != nil {
		return cdErr(err)
	}
	v := res["v"]
	if pv, ok := v.(interface{ GetIntegerValue() int64 }); ok {
		if d, ok := v.(interface{ GetDoubleValue() float64 }); ok && d.GetDoubleValue() != 0 {
			return fmt.Sprintf("%.6g", d.GetDoubleValue())
		}
		if n, ok := v.(interface{ GetNullValue() any }); ok && n.GetNullValue() != nil {
			return "null"
		}
		return fmt.Sprint(pv.GetIntegerValue())
	}
	return fmt.Sprintf("%v", v)
}
