package datastore

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

// queryFault is one reason the service refuses a query, as the parts it
// adds to an otherwise valid query of kind K. Each fault names its own
// properties, so two faults put together make a query with both.
type queryFault struct {
	name      string
	kind      string   // "" kind K; "none" kindless, "empty" the empty kind, "two" kinds K and J, "empty, two" kinds "" and J
	partition string   // "" the query's own; else "project", "database" or "namespace"
	filters   []string // Filter bodies; two or more are ANDed
	proj      []string // projected property names
	orders    []string // PropertyOrder bodies
	distinct  []string // distinct-on property names
	offset    int32
	limit     *int32
}

func neg() *int32 { v := int32(-1); return &v }

// queryFaults covers each check planQuery makes before it runs a query:
// the partition, then checkQuery's on the kind, the filter's form,
// operands, ancestors and key values, the projection, the orders, the
// distinct-on, the offset and the limit.
func queryFaults() []queryFault {
	pf := func(prop, op, value string) string {
		return `property_filter{property{name:"` + prop + `"} op:` + op + ` value{` + value + `}}`
	}
	and := func(parts ...string) string {
		return `composite_filter{op:AND filters{` + strings.Join(parts, `} filters{`) + `}}`
	}
	ints := func(n int) string {
		s := "array_value{"
		for i := range n {
			s += fmt.Sprintf("values{integer_value:%d} ", i)
		}
		return s + "}"
	}
	asc := func(prop string) string { return `property{name:"` + prop + `"}` }
	return []queryFault{
		{name: "query in another project", partition: "project"},
		{name: "query in an illegal namespace", partition: "namespace"},
		{name: "two kinds", kind: "two"},
		{name: "empty kind", kind: "empty"},
		{name: "two kinds, the first empty", kind: "empty, two"},
		{name: "empty filter property", filters: []string{pf("", "EQUAL", "integer_value:1")}},
		{name: "filter without value", filters: []string{`property_filter{property{name:"fv"} op:EQUAL}`}},
		{name: "array filter value", filters: []string{pf("fa", "EQUAL", ints(1))}},
		{name: "IN of 31", filters: []string{pf("fi", "IN", ints(31))}},
		{name: "filter without operator", filters: []string{`property_filter{property{name:"fo"} value{integer_value:1}}`}},
		{name: "entity filter value", filters: []string{pf("fe", "EQUAL", "entity_value{}")}},
		{name: "empty filter", filters: []string{""}},
		{name: "empty composite", filters: []string{`composite_filter{op:AND}`}},
		{name: "IN of nothing", filters: []string{pf("f0", "IN", ints(0))}},
		{name: "IN of a scalar", filters: []string{pf("fs", "IN", "integer_value:1")}},
		{name: "NOT_IN of 11", filters: []string{pf("fn", "NOT_IN", ints(11))}},
		{name: "__key__ = 1", filters: []string{pf("__key__", "EQUAL", "integer_value:1")}},
		{name: "ancestor not a key", filters: []string{pf("__key__", "HAS_ANCESTOR", `string_value:"a"`)}},
		{name: "ancestor on a property", filters: []string{pf("fp", "HAS_ANCESTOR", `key_value{path{kind:"K" name:"a"}}`)}},
		{name: "incomplete ancestor", filters: []string{pf("__key__", "HAS_ANCESTOR", `key_value{path{kind:"K"}}`)}},
		{name: "incomplete __key__", filters: []string{pf("__key__", "GREATER_THAN", `key_value{path{kind:"A" name:"a"} path{kind:"K"}}`)}},
		{name: "ancestor in another namespace", filters: []string{pf("__key__", "HAS_ANCESTOR", `key_value{partition_id{namespace_id:"other"} path{kind:"K" name:"a"}}`)}},
		{name: "two ancestors", filters: []string{and(pf("__key__", "HAS_ANCESTOR", `key_value{path{kind:"K" name:"a"}}`), pf("__key__", "HAS_ANCESTOR", `key_value{path{kind:"K" name:"b"}}`))}},
		{name: "__key__ in another project", filters: []string{pf("__key__", "GREATER_THAN", `key_value{partition_id{project_id:"zzz"} path{kind:"K" name:"a"}}`)}},
		{name: "__key__ in another namespace", filters: []string{pf("__key__", "GREATER_THAN", `key_value{partition_id{namespace_id:"other"} path{kind:"K" name:"a"}}`)}},
		{name: "100 disjuncts", filters: []string{and(pf("d1", "IN", ints(10)), pf("d2", "IN", ints(10)))}},
		{name: "35 disjuncts", filters: []string{and(pf("d3", "IN", ints(5)), pf("d4", "IN", ints(7)))}},
		{name: "two !=", filters: []string{and(pf("n1", "NOT_EQUAL", "integer_value:1"), pf("n2", "NOT_EQUAL", "integer_value:1"))}},
		{name: "NOT_IN and IN", filters: []string{and(pf("n3", "NOT_IN", ints(1)), pf("n4", "IN", ints(1)))}},
		{name: "NOT_IN and OR", filters: []string{`composite_filter{op:OR filters{` + pf("n5", "NOT_IN", ints(1)) + `} filters{` + pf("n6", "EQUAL", "integer_value:1") + `}}`}},
		{name: "kindless property filter", kind: "none", filters: []string{pf("kf", "EQUAL", "integer_value:1")}},
		{name: "empty projection", proj: []string{""}},
		{name: "projection of __x__", proj: []string{"__x__"}},
		{name: "projection twice", proj: []string{"pt", "pt"}},
		{name: "projection of an equality", proj: []string{"pe"}, filters: []string{pf("pe", "EQUAL", "integer_value:1")}},
		{name: "empty order", orders: []string{asc("")}},
		{name: "kindless order", kind: "none", orders: []string{asc("__key__") + ` direction:DESCENDING`}},
		{name: "order twice", orders: []string{asc("ot"), asc("ot")}},
		{name: "empty distinct-on", proj: []string{"de"}, distinct: []string{""}},
		{name: "group-by __key__", proj: []string{"dk"}, distinct: []string{"__key__"}},
		{name: "group-by twice", proj: []string{"dt"}, distinct: []string{"dt", "dt"}},
		{name: "group-by not ordered first", proj: []string{"g1", "g2"}, distinct: []string{"g2"}, orders: []string{asc("g1")}},
		{name: "negative offset", offset: -1},
		{name: "negative limit", limit: neg()},
	}
}

// combine returns the query with both faults (a's parts first in each
// list), or false when the two set the kind or the partition differently.
func combine(a, b queryFault) (queryFault, bool) {
	if a.kind != "" && b.kind != "" && a.kind != b.kind || a.partition != "" && b.partition != "" {
		return queryFault{}, false
	}
	c := queryFault{name: a.name + " + " + b.name, partition: a.partition + b.partition,
		filters: append(slices.Clone(a.filters), b.filters...), proj: append(slices.Clone(a.proj), b.proj...),
		orders: append(slices.Clone(a.orders), b.orders...), distinct: append(slices.Clone(a.distinct), b.distinct...),
		kind: cmp.Or(a.kind, b.kind), offset: min(a.offset, b.offset), limit: cmp.Or(a.limit, b.limit)}
	return c, true
}

// shared reports whether a and b add to one list (so each order of the two
// is a different query).
func shared(a, b queryFault) bool {
	return len(a.filters) > 0 && len(b.filters) > 0 || len(a.proj) > 0 && len(b.proj) > 0 ||
		len(a.orders) > 0 && len(b.orders) > 0 || len(a.distinct) > 0 && len(b.distinct) > 0
}

// request builds the RunQueryRequest of f.
func (f queryFault) request(t testing.TB, project string) *datastorepb.RunQueryRequest {
	var s strings.Builder
	switch f.kind {
	case "":
		s.WriteString(`kind{name:"K"} `)
	case "empty":
		s.WriteString(`kind{name:""} `)
	case "two":
		s.WriteString(`kind{name:"K"} kind{name:"J"} `)
	case "empty, two":
		s.WriteString(`kind{name:""} kind{name:"J"} `)
	}
	switch len(f.filters) {
	case 0:
	case 1:
		s.WriteString(`filter{` + f.filters[0] + `} `)
	default:
		s.WriteString(`filter{composite_filter{op:AND filters{` + strings.Join(f.filters, `} filters{`) + `}}} `)
	}
	for _, p := range f.proj {
		fmt.Fprintf(&s, `projection{property{name:%q}} `, p)
	}
	for _, o := range f.orders {
		s.WriteString(`order{` + o + `} `)
	}
	for _, d := range f.distinct {
		fmt.Fprintf(&s, `distinct_on{name:%q} `, d)
	}
	if f.offset != 0 {
		fmt.Fprintf(&s, "offset:%d ", f.offset)
	}
	if f.limit != nil {
		fmt.Fprintf(&s, "limit{value:%d}", *f.limit)
	}
	q := &datastorepb.Query{}
	if err := prototext.Unmarshal([]byte(s.String()), q); err != nil {
		t.Fatalf("%s: %v", s.String(), err)
	}
	pid := &datastorepb.PartitionId{ProjectId: project}
	switch f.partition {
	case "project":
		pid = &datastorepb.PartitionId{ProjectId: "zzz"}
	case "namespace":
		pid = &datastorepb.PartitionId{NamespaceId: "a b"}
	}
	return &datastorepb.RunQueryRequest{ProjectId: project, PartitionId: pid, QueryType: &datastorepb.RunQueryRequest_Query{Query: q}}
}

// faultPairs lists each of queryFaults alone, then every pair of them as
// one query, both ways round where the two add to one list, then a few
// triples.
func faultPairs() []queryFault {
	faults := queryFaults()
	out := slices.Clone(faults)
	fault := func(name string) queryFault {
		i := slices.IndexFunc(faults, func(f queryFault) bool { return f.name == name })
		return faults[i]
	}
	for i, a := range faults {
		for _, b := range faults[i+1:] {
			if c, ok := combine(a, b); ok {
				out = append(out, c)
			}
			if c, ok := combine(b, a); ok && shared(a, b) {
				out = append(out, c)
			}
		}
	}
	for _, names := range [][3]string{
		{"kindless property filter", "projection twice", "projection of an equality"},
		{"group-by not ordered first", "order twice", "negative limit"},
		{"order twice", "negative limit", "negative offset"},
		{"empty order", "projection of an equality", "kindless property filter"},
	} {
		ab, _ := combine(fault(names[0]), fault(names[1]))
		abc, _ := combine(ab, fault(names[2]))
		out = append(out, abc)
	}
	return out
}

const pairsFile = "testdata/querypairs.txt"

// pairAnswers are the recorded answers to the fault pairs: the Firestore
// emulator's message (nemo's expectation) and the legacy emulator's.
type pairAnswers struct{ firestore, legacy string }

func readPairAnswers(t *testing.T) map[string]pairAnswers {
	f, err := os.Open(pairsFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]pairAnswers{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, "\t")
		if len(parts) != 3 {
			t.Fatalf("%s: malformed line %q", pairsFile, line)
		}
		out[parts[0]] = pairAnswers{firestore: parts[1], legacy: parts[2]}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestQueryFaultPairsAsTheService: a query with two faults gets the error
// the service gives, so the order of nemo's checks is the service's. Every
// pair of queryFaults is one query; its answers from the Firestore
// emulator in Datastore mode (production's engine, nemo's expectation)
// and from the legacy Datastore emulator are recorded in
// testdata/querypairs.txt and checked against both emulators.
// NEMO_QUERYPAIRS_REWRITE=1 records them afresh from the two emulators.
func TestQueryFaultPairsAsTheService(t *testing.T) {
	emuAddr := dstest.Emulator(t)
	fs := pbClient(t, dstest.FirestoreEmulator(t))
	project := "querypairs"
	rewrite := os.Getenv("NEMO_QUERYPAIRS_REWRITE") != ""
	answer := func(c datastorepb.DatastoreClient, f queryFault) string {
		_, err := c.RunQuery(context.Background(), f.request(t, project))
		if err == nil {
			return "ok"
		}
		s := status.Convert(err)
		return s.Code().String() + ": " + strings.ReplaceAll(s.Message(), "\n", " ")
	}
	legacy, nemo := pbClient(t, emuAddr), pbClient(t, startNemo(t, embeddedBackend(t.TempDir()), project, cache.Options{}).addr)
	pairs := faultPairs()
	if rewrite {
		var b strings.Builder
		b.WriteString("# pair\tFirestore emulator (Datastore mode)\tlegacy Datastore emulator\n")
		for _, p := range pairs {
			fmt.Fprintf(&b, "%s\t%s\t%s\n", p.name, answer(fs, p), answer(legacy, p))
		}
		if err := os.WriteFile(filepath.FromSlash(pairsFile), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := readPairAnswers(t)
	if len(want) != len(pairs) {
		t.Errorf("%s has %d pairs, the faults make %d: rewrite it", pairsFile, len(want), len(pairs))
	}
	for _, p := range pairs {
		w, ok := want[p.name]
		if !ok {
			t.Errorf("%s: not recorded", p.name)
			continue
		}
		if got := answer(legacy, p); got != w.legacy {
			t.Errorf("%s: the legacy emulator answers %q, recorded %q", p.name, got, w.legacy)
		}
		if got := answer(fs, p); got != w.firestore {
			t.Errorf("%s: the Firestore emulator answers %q, recorded %q", p.name, got, w.firestore)
		}
		if got := answer(nemo, p); got != w.firestore {
			t.Errorf("%s: nemo %q, want (Firestore's) %q", p.name, got, w.firestore)
		}
	}
}
