package datastore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

// TestPropertyMasksAsFirestore: property masks with nested paths, quoted
// names, arrays, missing properties, empty masks and malformed paths, on
// writes (Commit) and reads (Lookup, RunQuery), give through nemo what
// the Firestore emulator gives itself: the same entities and the same
// refusals. Before, nemo took only a path's first name, so a masked write
// of "a.b" replaced all of a (its other properties lost, or replaced by
// the request's), a masked upsert of a new entity wrote all of it, a read
// of "a.b" returned all of a, and an empty read mask everything.
func TestPropertyMasksAsFirestore(t *testing.T) {
	fs := dstest.FirestoreEmulator(t)
	want := maskTranscript(t, pbClient(t, fs), dstest.Project(t))
	for _, b := range append(plainBackends(t), firestoreBackend(fs, false), firestoreBackend(fs, true)) {
		t.Run(b.name, func(t *testing.T) {
			project := dstest.Project(t)
			n := startNemo(t, b, project, cache.Options{})
			got := maskTranscript(t, pbClient(t, n.addr), project)
			if len(got) != len(want) {
				t.Fatalf("%d steps, the emulator %d", len(got), len(want))
			}
			for i := range want {
				if !proto.Equal(got[i].entity, want[i].entity) || got[i].err != want[i].err {
					t.Errorf("%s:\nnemo     %s %s\nemulator %s %s", want[i].what, prototext.Format(got[i].entity), got[i].err,
						prototext.Format(want[i].entity), want[i].err)
				}
			}
		})
	}
}

type maskStep struct {
	what   string
	entity *datastorepb.Entity // the properties read (keyless), or nil
	err    string
}

// maskTranscript runs the mask scenario through c in project.
func maskTranscript(t *testing.T, c datastorepb.DatastoreClient, project string) []maskStep {
	ctx := context.Background()
	key := func(name string) *datastorepb.Key {
		return &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: project},
			Path: []*datastorepb.Key_PathElement{{Kind: "Mask", IdType: &datastorepb.Key_PathElement_Name{Name: name}}}}
	}
	ent := func(props map[string]*datastorepb.Value) *datastorepb.Value {
		return &datastorepb.Value{ValueType: &datastorepb.Value_EntityValue{EntityValue: &datastorepb.Entity{Properties: props}}}
	}
	stored := map[string]*datastorepb.Value{
		"a":       ent(map[string]*datastorepb.Value{"b": ival(1), "c": ival(2), "d": ent(map[string]*datastorepb.Value{"x": ival(5), "y": ival(6)})}),
		"z":       ival(9),
		"dot.ted": ival(3),
		"s":       ival(4),
		"arr":     aval(ent(map[string]*datastorepb.Value{"p": ival(7), "q": ival(8)})),
	}
	written := map[string]*datastorepb.Value{
		"a":       ent(map[string]*datastorepb.Value{"b": ival(10), "c": ival(20), "n": ival(30), "d": ent(map[string]*datastorepb.Value{"x": ival(50)})}),
		"z":       ival(90),
		"x":       ent(map[string]*datastorepb.Value{"y": ival(77)}),
		"dot.ted": ival(33),
		"s":       ent(map[string]*datastorepb.Value{"t": ival(7)}),
	}
	var steps []maskStep
	write := func(name string, m *datastorepb.Mutation) error {
		_, err := c.Commit(ctx, &datastorepb.CommitRequest{ProjectId: project, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL, Mutations: []*datastorepb.Mutation{m}})
		return err
	}
	upsert := func(name string, props map[string]*datastorepb.Value) *datastorepb.Mutation {
		return &datastorepb.Mutation{Operation: &datastorepb.Mutation_Upsert{Upsert: &datastorepb.Entity{Key: key(name), Properties: props}}}
	}
	lookup := func(what, name string, pm *datastorepb.PropertyMask) {
		r, err := c.Lookup(ctx, &datastorepb.LookupRequest{ProjectId: project, Keys: []*datastorepb.Key{key(name)}, PropertyMask: pm})
		step := maskStep{what: what}
		if err != nil {
			step.err = status.Convert(err).Code().String() + " " + status.Convert(err).Message()
		} else if len(r.GetFound()) == 1 {
			step.entity = &datastorepb.Entity{Properties: r.GetFound()[0].GetEntity().GetProperties()}
		}
		steps = append(steps, step)
	}
	masks := [][]string{{"a.b"}, {"a.d.x", "z"}, {"a.n"}, {"a.b.deep"}, {"x.y"}, {"`dot.ted`"}, {"dot.ted"}, {"a"}, {"s.t"}, {}, {"`a`.b"}, {"a.b", "a"}}
	for i, paths := range masks {
		name := fmt.Sprintf("w%d", i)
		if err := write(name, upsert(name, stored)); err != nil {
			t.Fatal(err)
		}
		m := upsert(name, written)
		m.PropertyMask = &datastorepb.PropertyMask{Paths: paths}
		if err := write(name, m); err != nil {
			t.Fatalf("masked write %q: %v", paths, err)
		}
		lookup(fmt.Sprintf("write masked %q, read", paths), name, nil)
	}
	// A masked upsert, and a masked insert, of an entity that does not exist.
	for _, op := range []string{"upsert", "insert"} {
		m := upsert("new"+op, written)
		if op == "insert" {
			m.Operation = &datastorepb.Mutation_Insert{Insert: m.GetUpsert()}
		}
		m.PropertyMask = &datastorepb.PropertyMask{Paths: []string{"a.b", "z"}}
		if err := write("new"+op, m); err != nil {
			t.Fatalf("masked %s of a new entity: %v", op, err)
		}
		lookup("masked "+op+" of a new entity, read", "new"+op, nil)
	}
	if err := write("r", upsert("r", stored)); err != nil {
		t.Fatal(err)
	}
	for _, paths := range [][]string{{"a.b"}, {"a.d.x", "z"}, {"a"}, {"arr.p"}, {"nope"}, {"a.nope"}, {"a", "a.b"}, {"a.b", "a"}, {}, {"`dot.ted`"}, {"a.d", "a.d.x"}} {
		lookup(fmt.Sprintf("read masked %q", paths), "r", &datastorepb.PropertyMask{Paths: paths})
	}
	for _, p := range []string{"", "a..b", "1a", "a.", "a-b", "é", "`open", "``", "`a`b", ".a"} {
		lookup(fmt.Sprintf("read masked %q", p), "r", &datastorepb.PropertyMask{Paths: []string{p}})
		m := upsert("r", written)
		m.PropertyMask = &datastorepb.PropertyMask{Paths: []string{p}}
		step := maskStep{what: fmt.Sprintf("write masked %q", p)}
		if err := write("r", m); err != nil {
			step.err = status.Convert(err).Code().String() + " " + status.Convert(err).Message()
		}
		steps = append(steps, step)
	}
	for _, proj := range []string{"z", "__key__"} {
		_, err := c.RunQuery(ctx, &datastorepb.RunQueryRequest{ProjectId: project, QueryType: &datastorepb.RunQueryRequest_Query{Query: &datastorepb.Query{
			Kind: []*datastorepb.KindExpression{{Name: "Mask"}}, Projection: []*datastorepb.Projection{{Property: &datastorepb.PropertyReference{Name: proj}}}}},
			PropertyMask: &datastorepb.PropertyMask{Paths: []string{"a"}}})
		steps = append(steps, maskStep{what: "query projecting " + proj + ", masked a", err: status.Code(err).String() + " " + status.Convert(err).Message()})
	}
	r, err := c.RunQuery(ctx, &datastorepb.RunQueryRequest{ProjectId: project, QueryType: &datastorepb.RunQueryRequest_Query{Query: &datastorepb.Query{
		Kind: []*datastorepb.KindExpression{{Name: "Mask"}}, Filter: &datastorepb.Filter{FilterType: &datastorepb.Filter_PropertyFilter{PropertyFilter: &datastorepb.PropertyFilter{
			Property: &datastorepb.PropertyReference{Name: "__key__"}, Op: datastorepb.PropertyFilter_EQUAL, Value: &datastorepb.Value{ValueType: &datastorepb.Value_KeyValue{KeyValue: key("r")}}}}}}},
		PropertyMask: &datastorepb.PropertyMask{Paths: []string{"a.b", "`dot.ted`"}}})
	step := maskStep{what: "query masked a.b, `dot.ted`"}
	if err != nil {
		step.err = err.Error()
	} else if len(r.GetBatch().GetEntityResults()) == 1 {
		step.entity = &datastorepb.Entity{Properties: r.GetBatch().GetEntityResults()[0].GetEntity().GetProperties()}
	}
	return append(steps, step)
}

// FuzzMaskPath: a property path parses, or is refused with the service's
// INVALID_ARGUMENT, and never panics; what parses names non-empty
// properties, and the same names written back (each backquoted, '`' and
// '\' escaped) parse to the same names.
func FuzzMaskPath(f *testing.F) {
	for _, p := range []string{"a", "a.b", "`dot.ted`", "`we\\`ird`.x", "a..b", "``", "`open", "_1.`a-b`.c", "é", ".a", "a.", "`\\\\`"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		names, err := maskPath(p)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%q: %v, want INVALID_ARGUMENT", p, err)
			}
			return
		}
		quoted := make([]string, len(names))
		for i, n := range names {
			if n == "" {
				t.Fatalf("%q: an empty name in %q", p, names)
			}
			quoted[i] = "`" + strings.NewReplacer("\\", "\\\\", "`", "\\`").Replace(n) + "`"
		}
		again, err := maskPath(strings.Join(quoted, "."))
		if err != nil || !slices.Equal(again, names) {
			t.Fatalf("%q: %q, written back as %q: %q %v", p, names, strings.Join(quoted, "."), again, err)
		}
	})
}
