package datastore

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
	"github.com/nemocache/nemo/proxy/datastore/internal/gql"
)

// gqlCorpus reads testdata/gql/corpus.txt (its format is described there).
func gqlCorpus(t testing.TB) []*datastorepb.GqlQuery {
	f, err := os.Open("testdata/gql/corpus.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []*datastorepb.GqlQuery
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		g := &datastorepb.GqlQuery{AllowLiterals: true, QueryString: line}
		switch word, rest, _ := strings.Cut(line, " "); word {
		case "nolit":
			g.AllowLiterals, g.QueryString = false, rest
		case "quoted":
			if g.QueryString, err = strconv.Unquote(rest); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
		case "json":
			g = &datastorepb.GqlQuery{}
			if err := protojson.Unmarshal([]byte(rest), g); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
		}
		out = append(out, g)
	}
	return out
}

// mutate damages a query string at random: the parser's errors for
// almost-right queries are the ones clients see.
func mutate(r *rand.Rand, q string) string {
	frags := []string{"(", ")", ",", "'", "\"", "`", "@", "@1", "@x", " AND ", " OR ", "=", "<", ">=", "!=", "KEY(", " LIMIT ",
		" OFFSET ", " ", "\n", "-", ".", "1", "-2", "1e", "2.5", "\\", "ARRAY(", "DISTINCT ", "*", "FIRST(", " ON ", " HAS ",
		" NOT ", " IN ", " IS NULL", "+", "x", "__key__", " ORDER BY ", " WHERE ", " FROM ", "SELECT ", "NULL", "é", "#", ";"}
	u := []rune(q)
	for n := 1 + r.IntN(2); n > 0; n-- {
		i := r.IntN(len(u) + 1)
		switch r.IntN(4) {
		case 0:
			if len(u) > 0 {
				j := min(len(u), i+1+r.IntN(4))
				if i < j {
					u = append(u[:i:i], u[j:]...)
				}
			}
		case 1:
			if i < len(u) {
				j := min(len(u), i+1+r.IntN(6))
				u = append(u[:j:j], append(slicesClone(u[i:j]), u[j:]...)...)
			}
		default:
			f := []rune(frags[r.IntN(len(frags))])
			u = append(u[:i:i], append(f, u[i:]...)...)
		}
	}
	return string(u)
}

func slicesClone(r []rune) []rune { return append([]rune(nil), r...) }

// parserMessage matches the messages of the service's GQL parser (as
// opposed to its later validation of the parsed query).
var parserMessage = regexp.MustCompile(`^(Encountered |Lexical error|Absent |Unused positional|Invalid (integer|double|blob|datetime|binding|positional)|Disallowed literal|Unknown (function|partition|aggregator)|Unsupported function|Unexpected |The (limit|offset) |Binding site|Expected |A key may|A key's|GROUP BY|DISTINCT ON|Cloud Datastore only|Distinct projection|Unimplemented GQL|GQL query parameter|The GQL query parameter|A GQL query parameter|Expecting )`)

// TestGQLParserAsTheEmulator runs every GQL string of the corpus, and
// seeded random damage to each, through nemo's parser and the emulator's:
// where nemo's parser refuses a query the emulator must refuse it with the
// same message, and where it accepts one the emulator must either build
// the same structured query (it answers with the parsed query) or refuse
// it for a reason that is not its parser's. The seed is fixed;
// NEMO_GQL_SEED=random (or a number) with NEMO_GQL_MUTATIONS=n explores
// further (40 mutations a line over seeds 1 to 7 all passed).
func TestGQLParserAsTheEmulator(t *testing.T) {
	emu := pbClient(t, dstest.Emulator(t))
	project := dstest.Project(t)
	partition := &datastorepb.PartitionId{ProjectId: project, NamespaceId: "nsA"}
	seed, mutations := envSeed(t, "NEMO_GQL_SEED", 12), 8
	if env := os.Getenv("NEMO_GQL_MUTATIONS"); env != "" {
		var err error
		if mutations, err = strconv.Atoi(env); err != nil {
			t.Fatalf("NEMO_GQL_MUTATIONS=%q: %v", env, err)
		}
	}
	r := rand.New(rand.NewPCG(seed, 4))
	var queries []*datastorepb.GqlQuery
	for _, g := range gqlCorpus(t) {
		queries = append(queries, g)
		for i := 0; i < mutations; i++ {
			m := proto.Clone(g).(*datastorepb.GqlQuery)
			m.QueryString = mutate(r, g.QueryString)
			queries = append(queries, m)
		}
	}
	ctx := context.Background()
	var same, refusedLater, typeErrors int
	for _, g := range queries {
		ours, err := gql.Query(g, partition)
		resp, emuErr := emu.RunQuery(ctx, &datastorepb.RunQueryRequest{ProjectId: project, PartitionId: partition,
			QueryType: &datastorepb.RunQueryRequest_GqlQuery{GqlQuery: g}})
		switch {
		case err != nil:
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("%q: nemo's error %v is not INVALID_ARGUMENT", g.QueryString, err)
			}
			// The emulator fails without a message (UNKNOWN) on a query
			// sent to the wrong method and on a datetime outside the
			// range of timestamps; nemo's message is the service's for
			// the first, its own for the second.
			if msg := status.Convert(err).Message(); status.Code(emuErr) == codes.Unknown &&
				(strings.HasPrefix(msg, "Expecting ") || strings.HasPrefix(msg, "Invalid datetime text (out of range)")) {
				typeErrors++
				continue
			}
			if status.Code(emuErr) != codes.InvalidArgument || status.Convert(emuErr).Message() != status.Convert(err).Message() {
				t.Errorf("%s\nnemo:     %q\nemulator: %v %q", describe(g), status.Convert(err).Message(), status.Code(emuErr), status.Convert(emuErr).Message())
			}
		case emuErr != nil:
			if msg := status.Convert(emuErr).Message(); parserMessage.MatchString(msg) {
				t.Errorf("%s\nnemo parsed it, the emulator's parser refused it: %q\nnemo: %v", describe(g), msg, prototext.Format(ours))
			}
			refusedLater++
		default:
			if !proto.Equal(ours, resp.GetQuery()) {
				t.Errorf("%s\nnemo:     %v\nemulator: %v", describe(g), prototext.Format(ours), prototext.Format(resp.GetQuery()))
			}
			same++
		}
	}
	t.Logf("%d GQL strings: %d parsed alike, %d refused by both parsers alike, %d refused by the emulator after parsing, %d where it fails without a message",
		len(queries), same, len(queries)-same-refusedLater-typeErrors, refusedLater, typeErrors)
}

// envSeed is the seed named by env: unset, def; "random", the clock; else
// the number.
func envSeed(t *testing.T, env string, def uint64) uint64 {
	switch v := os.Getenv(env); v {
	case "":
		return def
	case "random":
		seed := uint64(time.Now().UnixNano())
		t.Logf("%s=%d", env, seed)
		return seed
	default:
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", env, v, err)
		}
		return n
	}
}

func describe(g *datastorepb.GqlQuery) string {
	if len(g.GetNamedBindings())+len(g.GetPositionalBindings()) > 0 || !g.GetAllowLiterals() {
		b, _ := protojson.Marshal(g)
		return string(b)
	}
	return fmt.Sprintf("%q", g.GetQueryString())
}

// TestGQLDifferentialAgainstEmulator writes the same random entities to
// the emulator and to nemo over the embedded store (as
// TestDifferentialAgainstEmulator does), then runs random GQL queries,
// with literals or named and positional bindings, on both: the parsed
// queries must be equal and so must the results (entities and order,
// followed across batches). For each query with results it then binds a
// result's cursor, each side its own, as a start cursor (OFFSET @c [+ n])
// and as an end cursor (LIMIT @c, LIMIT FIRST(@c, n)), and compares again.
// Seeds are fixed; NEMO_DIFF_SEED picks another and NEMO_DIFF_STEPS sets
// the rounds of 25 writes and 20 queries (default 10), as for the
// structured differential.
func TestGQLDifferentialAgainstEmulator(t *testing.T) {
	seeds := []uint64{1, 2}
	if os.Getenv("NEMO_DIFF_SEED") != "" {
		seeds = []uint64{envSeed(t, "NEMO_DIFF_SEED", 0)}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { gqlDifferential(t, seed) })
	}
}

func gqlDifferential(t *testing.T, seed uint64) {
	emuAddr := dstest.Emulator(t)
	project := dstest.Project(t)
	n := startNemo(t, embeddedBackend(t.TempDir()), project, cache.Options{})
	d := &differ{t: t, r: rand.New(rand.NewPCG(seed, 7)), project: project,
		clients: [2]datastorepb.DatastoreClient{pbClient(t, emuAddr), pbClient(t, n.addr)}}
	queries, compared, cursorRuns, skippedCursors := 0, 0, 0, 0
	for step, steps := 0, diffSteps(t, 10); step < steps; step++ {
		d.writeBatch(25)
		for i := 0; i < 20; i++ {
			queries++
			g := d.gql(d.query())
			ok, results := d.compareGQL(g.text(), g.bound())
			if !ok {
				continue
			}
			compared++
			if len(results[0]) == 0 {
				continue
			}
			if d.sortsOnArrays(parsedOf(d, g), results[0]) {
				// The emulator places the cursor of a result whose sort
				// property is an array at the first matching element in
				// array order, not at the value it was sorted by (a start
				// cursor after it can skip results that followed it);
				// nemo's cursor is the row's own place.
				skippedCursors++
				continue
			}
			// Cursors: each side binds its own cursor of the k-th result.
			k := d.r.IntN(len(results[0]))
			tails := []string{" OFFSET @c", " LIMIT @c", " LIMIT FIRST(@c, 2)", " LIMIT FIRST(1, @c)"}
			if g.offset == "" {
				tails = append(tails, " OFFSET @c + 1")
			}
			tail := tails[d.r.IntN(len(tails))]
			var per [2]*datastorepb.GqlQuery
			for side := range per {
				per[side] = proto.Clone(g.bound()).(*datastorepb.GqlQuery)
				per[side].QueryString = g.base + tail
				per[side].AllowLiterals = true
				if per[side].NamedBindings == nil {
					per[side].NamedBindings = map[string]*datastorepb.GqlQueryParameter{}
				}
				per[side].NamedBindings["c"] = bindCursor(results[side][k].Cursor)
			}
			if ok, _ := d.compareGQL(g.base+tail, per[0], per[1]); ok {
				cursorRuns++
			}
		}
	}
	if compared < queries*2/3 {
		t.Errorf("only %d of %d GQL queries ran on the emulator", compared, queries)
	}
	t.Logf("%d GQL queries compared (%d refused by the emulator), %d cursor-bound variants compared (%d not: sorted on an array)",
		compared, queries-compared, cursorRuns, skippedCursors)
}

// parsedOf is the structured query g stands for.
func parsedOf(d *differ, g *gqlText) *datastorepb.Query {
	q, err := gql.Query(g.bound(), &datastorepb.PartitionId{ProjectId: d.project})
	if err != nil {
		d.t.Fatal(err)
	}
	return q
}

// sortsOnArrays reports whether a result's entity (looked up: results may
// be keys or projections) has an array in a property the query sorts on
// (an order or an inequality).
func (d *differ) sortsOnArrays(q *datastorepb.Query, results []*datastorepb.EntityResult) bool {
	props := map[string]bool{}
	for _, o := range q.Order {
		props[o.Property.Name] = true
	}
	var walk func(f *datastorepb.Filter)
	walk = func(f *datastorepb.Filter) {
		if pf := f.GetPropertyFilter(); pf != nil && pf.Op != datastorepb.PropertyFilter_EQUAL {
			props[pf.Property.Name] = true
		}
		for _, sub := range f.GetCompositeFilter().GetFilters() {
			walk(sub)
		}
	}
	walk(q.GetFilter())
	var keys []*datastorepb.Key
	for _, r := range results {
		keys = append(keys, r.Entity.GetKey())
	}
	resp, err := d.clients[0].Lookup(context.Background(), &datastorepb.LookupRequest{ProjectId: d.project, Keys: keys})
	if err != nil {
		d.t.Fatal(err)
	}
	for _, found := range resp.Found {
		for name := range props {
			if found.Entity.GetProperties()[name].GetArrayValue() != nil {
				return true
			}
		}
	}
	return false
}

// gqlText is a GQL rendering of a structured query: its text before
// LIMIT / OFFSET, those clauses, and its bindings.
type gqlText struct {
	base, limit, offset string
	named               map[string]*datastorepb.GqlQueryParameter
	positional          []*datastorepb.GqlQueryParameter
	literals            bool
}

func (g *gqlText) text() string { return g.base + g.limit + g.offset }

func (g *gqlText) bound() *datastorepb.GqlQuery {
	return &datastorepb.GqlQuery{QueryString: g.text(), AllowLiterals: g.literals, NamedBindings: g.named, PositionalBindings: g.positional}
}

// gql renders q as GQL with random spelling: keyword case, backquotes,
// qualified names, conditions written value first, IS NULL, HAS
// DESCENDANT, literals or bindings.
func (d *differ) gql(q *datastorepb.Query) *gqlText {
	r := d.r
	g := &gqlText{named: map[string]*datastorepb.GqlQueryParameter{}}
	kw := func(s string) string {
		switch r.IntN(3) {
		case 0:
			return strings.ToLower(s)
		case 1:
			return s
		}
		return strings.ToUpper(s[:1]) + strings.ToLower(s[1:])
	}
	kind := ""
	if len(q.Kind) > 0 {
		kind = q.Kind[0].Name
	}
	name := func(s string) string {
		switch {
		case r.IntN(4) == 0:
			return "`" + s + "`"
		case kind != "" && r.IntN(5) == 0:
			return kind + "." + s
		}
		return s
	}
	value := func(v *datastorepb.Value) string {
		if r.IntN(2) == 0 {
			if r.IntN(2) == 0 {
				g.positional = append(g.positional, bindValue(v))
				return fmt.Sprint("@", len(g.positional))
			}
			id := fmt.Sprint("v", len(g.named))
			g.named[id] = bindValue(v)
			return "@" + id
		}
		g.literals = true
		return gqlLiteral(v)
	}
	var b strings.Builder
	b.WriteString(kw("SELECT") + " ")
	switch {
	case len(q.DistinctOn) > 0 && r.IntN(2) == 0:
		fmt.Fprintf(&b, "%s %s (%s) %s", kw("DISTINCT"), kw("ON"), name(q.DistinctOn[0].Name), name(q.Projection[0].Property.Name))
	case len(q.DistinctOn) > 0:
		b.WriteString(kw("DISTINCT") + " " + name(q.Projection[0].Property.Name))
	case len(q.Projection) > 0:
		b.WriteString(name(q.Projection[0].Property.Name))
	default:
		b.WriteString("*")
	}
	if kind != "" {
		k := kind
		if r.IntN(3) == 0 {
			k = "`" + k + "`"
		}
		b.WriteString(" " + kw("FROM") + " " + k)
	}
	if q.Filter != nil {
		filters := []*datastorepb.Filter{q.Filter}
		if cf := q.Filter.GetCompositeFilter(); cf != nil {
			filters = cf.Filters
		}
		b.WriteString(" " + kw("WHERE") + " ")
		for i, f := range filters {
			if i > 0 {
				b.WriteString(" " + kw("AND") + " ")
			}
			pf := f.GetPropertyFilter()
			prop := name(pf.Property.Name)
			var cond string
			switch op := pf.Op; {
			case op == datastorepb.PropertyFilter_HAS_ANCESTOR && r.IntN(2) == 0:
				cond = value(pf.Value) + " " + kw("HAS") + " " + kw("DESCENDANT") + " " + prop
			case op == datastorepb.PropertyFilter_HAS_ANCESTOR:
				cond = prop + " " + kw("HAS") + " " + kw("ANCESTOR") + " " + value(pf.Value)
			case op == datastorepb.PropertyFilter_EQUAL && isNull(pf.Value) && r.IntN(2) == 0:
				g.literals = true
				cond = prop + " " + kw("IS") + " " + kw("NULL")
			case r.IntN(2) == 0:
				cond = value(pf.Value) + " " + map[datastorepb.PropertyFilter_Operator]string{
					datastorepb.PropertyFilter_EQUAL: "=", datastorepb.PropertyFilter_LESS_THAN: ">", datastorepb.PropertyFilter_LESS_THAN_OR_EQUAL: ">=",
					datastorepb.PropertyFilter_GREATER_THAN: "<", datastorepb.PropertyFilter_GREATER_THAN_OR_EQUAL: "<="}[op] + " " + prop
			default:
				cond = prop + " " + map[datastorepb.PropertyFilter_Operator]string{
					datastorepb.PropertyFilter_EQUAL: "=", datastorepb.PropertyFilter_LESS_THAN: "<", datastorepb.PropertyFilter_LESS_THAN_OR_EQUAL: "<=",
					datastorepb.PropertyFilter_GREATER_THAN: ">", datastorepb.PropertyFilter_GREATER_THAN_OR_EQUAL: ">="}[op] + " " + value(pf.Value)
			}
			if r.IntN(5) == 0 {
				cond = "(" + cond + ")"
			}
			b.WriteString(cond)
		}
	}
	for i, o := range q.Order {
		if i == 0 {
			b.WriteString(" " + kw("ORDER") + " " + kw("BY") + " ")
		} else {
			b.WriteString(", ")
		}
		b.WriteString(name(o.Property.Name))
		switch {
		case o.Direction == datastorepb.PropertyOrder_DESCENDING:
			b.WriteString(" " + kw("DESC"))
		case r.IntN(2) == 0:
			b.WriteString(" " + kw("ASC"))
		}
	}
	g.base = b.String()
	if q.Limit != nil {
		g.limit = " " + kw("LIMIT") + " " + resultPosition(g, r, int64(q.Limit.Value))
	}
	if q.Offset > 0 {
		g.offset = " " + kw("OFFSET") + " " + resultPosition(g, r, int64(q.Offset))
	}
	if !g.literals && r.IntN(2) == 0 {
		g.literals = true
	}
	return g
}

func isNull(v *datastorepb.Value) bool {
	_, ok := v.ValueType.(*datastorepb.Value_NullValue)
	return ok
}

// resultPosition renders a LIMIT or OFFSET count as a literal or binding.
func resultPosition(g *gqlText, r *rand.Rand, n int64) string {
	if r.IntN(2) == 0 {
		id := fmt.Sprint("n", len(g.named))
		g.named[id] = bindValue(ival(n))
		return "@" + id
	}
	g.literals = true
	return fmt.Sprint(n)
}

// gqlLiteral writes a value as a GQL literal.
func gqlLiteral(v *datastorepb.Value) string {
	switch x := v.ValueType.(type) {
	case *datastorepb.Value_NullValue:
		return "NULL"
	case *datastorepb.Value_BooleanValue:
		return strings.ToUpper(strconv.FormatBool(x.BooleanValue))
	case *datastorepb.Value_IntegerValue:
		return strconv.FormatInt(x.IntegerValue, 10)
	case *datastorepb.Value_DoubleValue:
		s := strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
		if !strings.ContainsAny(s, ".e") {
			s += ".0"
		}
		return s
	case *datastorepb.Value_StringValue:
		return "'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(x.StringValue) + "'"
	case *datastorepb.Value_BlobValue:
		return "BLOB('" + base64.RawURLEncoding.EncodeToString(x.BlobValue) + "')"
	case *datastorepb.Value_TimestampValue:
		return "DATETIME('" + x.TimestampValue.AsTime().UTC().Format("2006-01-02T15:04:05.000000Z") + "')"
	case *datastorepb.Value_KeyValue:
		var parts []string
		for _, e := range x.KeyValue.Path {
			if e.GetName() != "" {
				parts = append(parts, e.Kind+", "+gqlLiteral(sval(e.GetName())))
			} else {
				parts = append(parts, fmt.Sprint(e.Kind, ", ", e.GetId()))
			}
		}
		return "KEY(" + strings.Join(parts, ", ") + ")"
	}
	panic(fmt.Sprintf("no GQL literal for %v", v))
}

// compareGQL runs a GQL query on the emulator (gs[0]) and nemo (gs[1],
// or gs[0] again), following the batches; false when the emulator
// refused it. It returns both sides' results.
func (d *differ) compareGQL(text string, gs ...*datastorepb.GqlQuery) (bool, [2][]*datastorepb.EntityResult) {
	var results [2][]*datastorepb.EntityResult
	var rendered [2][]string
	var parsed [2]*datastorepb.Query
	for side, c := range d.clients {
		g := gs[min(side, len(gs)-1)]
		var err error
		results[side], parsed[side], err = d.runGQL(c, g)
		if err != nil {
			if side == 0 {
				return false, results
			}
			d.t.Fatalf("nemo failed a GQL query the emulator ran: %v\nquery: %s", err, describe(g))
		}
		projected := len(parsed[side].GetProjection()) > 0 && parsed[side].Projection[0].Property.Name != "__key__"
		for _, r := range results[side] {
			rendered[side] = append(rendered[side], render(r.Entity, projected))
		}
	}
	// Cursors differ between the sides; the rest of the parsed query not.
	p0, p1 := proto.Clone(parsed[0]).(*datastorepb.Query), proto.Clone(parsed[1]).(*datastorepb.Query)
	p0.StartCursor, p0.EndCursor, p1.StartCursor, p1.EndCursor = nil, nil, nil, nil
	if !proto.Equal(p0, p1) {
		d.t.Fatalf("parsed queries differ for %s\nemulator: %v\nnemo:     %v", text, prototext.Format(parsed[0]), prototext.Format(parsed[1]))
	}
	if !slices.Equal(rendered[0], rendered[1]) {
		d.t.Fatalf("results differ\nquery: %s (%s)\nemulator: %q\nnemo:     %q", text, describe(gs[len(gs)-1]), rendered[0], rendered[1])
	}
	return true, results
}

// runGQL runs a GQL query and, like a client, continues it from its end
// cursor while the batch says NOT_FINISHED (with the parsed query).
func (d *differ) runGQL(c datastorepb.DatastoreClient, g *datastorepb.GqlQuery) ([]*datastorepb.EntityResult, *datastorepb.Query, error) {
	req := &datastorepb.RunQueryRequest{ProjectId: d.project, PartitionId: &datastorepb.PartitionId{ProjectId: d.project},
		QueryType: &datastorepb.RunQueryRequest_GqlQuery{GqlQuery: g}}
	resp, err := c.RunQuery(context.Background(), req)
	if err != nil {
		return nil, nil, err
	}
	parsed := resp.Query
	out := resp.Batch.EntityResults
	q := proto.Clone(parsed).(*datastorepb.Query)
	for pages := 0; resp.Batch.MoreResults == datastorepb.QueryResultBatch_NOT_FINISHED; pages++ {
		if pages == 50 {
			return nil, nil, fmt.Errorf("query did not finish in 50 batches")
		}
		q.Offset -= resp.Batch.SkippedResults
		if q.Limit != nil {
			q.Limit.Value -= int32(len(resp.Batch.EntityResults))
		}
		q.StartCursor = resp.Batch.EndCursor
		req.QueryType = &datastorepb.RunQueryRequest_Query{Query: q}
		if resp, err = c.RunQuery(context.Background(), req); err != nil {
			return nil, nil, err
		}
		out = append(out, resp.Batch.EntityResults...)
	}
	return out, parsed, nil
}
