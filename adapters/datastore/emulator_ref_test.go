package datastore

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/status"
)

var updateRef = flag.Bool("update-ref", false, "rewrite testdata/datastore-versions-emulator.txt from the emulator")

// refFile records, in the form of shared/reference, what the emulator
// does with versions, base_version and inserts; the adapter's write path
// (write.go) relies on the rows marked there. Versions are named v1, v2,
// ... in the order they first appear.
const refFile = "testdata/datastore-versions-emulator.txt"

// TestEmulatorVersionsReference replays refFile's steps on the emulator
// with the raw client and compares what it answers.
func TestEmulatorVersionsReference(t *testing.T) {
	s, p := openEmulator(t)
	ctx := routed(context.Background(), p)
	var out strings.Builder
	labels := map[int64]string{0: "0"}
	label := func(v int64) string {
		if l, ok := labels[v]; ok {
			return l
		}
		labels[v] = fmt.Sprintf("v%d", len(labels))
		return labels[v]
	}
	key := func(id int64) *datastorepb.Key { return keyOf(p, []*datastorepb.Key_PathElement{idEl("K", id)}) }
	ent := func(id, v int64) *datastorepb.Entity {
		return &datastorepb.Entity{Key: key(id), Properties: map[string]*datastorepb.Value{"v": {ValueType: &datastorepb.Value_IntegerValue{IntegerValue: v}}}}
	}
	up := func(e *datastorepb.Entity) *datastorepb.Mutation {
		return &datastorepb.Mutation{Operation: &datastorepb.Mutation_Upsert{Upsert: e}}
	}
	ins := func(e *datastorepb.Entity) *datastorepb.Mutation {
		return &datastorepb.Mutation{Operation: &datastorepb.Mutation_Insert{Insert: e}}
	}
	upd := func(e *datastorepb.Entity) *datastorepb.Mutation {
		return &datastorepb.Mutation{Operation: &datastorepb.Mutation_Update{Update: e}}
	}
	del := func(id int64) *datastorepb.Mutation {
		return &datastorepb.Mutation{Operation: &datastorepb.Mutation_Delete{Delete: key(id)}}
	}
	versions := map[int64]int64{} // K:id -> its version, to name base versions
	bv := func(m *datastorepb.Mutation, v int64) *datastorepb.Mutation {
		m.ConflictDetectionStrategy = &datastorepb.Mutation_BaseVersion{BaseVersion: v}
		return m
	}
	commit := func(title string, txn bool, ms ...*datastorepb.Mutation) {
		fmt.Fprintf(&out, "== %s\n", title)
		req := &datastorepb.CommitRequest{ProjectId: p.Project, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL, Mutations: ms}
		if txn {
			req.Mode = datastorepb.CommitRequest_TRANSACTIONAL
			req.TransactionSelector = &datastorepb.CommitRequest_SingleUseTransaction{SingleUseTransaction: &datastorepb.TransactionOptions{}}
		}
		resp, err := s.client.Commit(ctx, req)
		if err != nil {
			st := status.Convert(err)
			fmt.Fprintf(&out, "    commit fails: %v %q, %d details\n", st.Code(), st.Message(), len(st.Details()))
			return
		}
		for i, r := range resp.MutationResults {
			fmt.Fprintf(&out, "    [%d] version %s conflict_detected %v\n", i, label(r.Version), r.ConflictDetected)
		}
	}
	lookup := func(ids ...int64) {
		var ks []*datastorepb.Key
		for _, id := range ids {
			ks = append(ks, key(id))
		}
		resp, err := s.client.Lookup(ctx, &datastorepb.LookupRequest{ProjectId: p.Project, Keys: ks})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.Found {
			id := r.Entity.Key.Path[0].GetId()
			versions[id] = r.Version
			fmt.Fprintf(&out, "    lookup K:%d found, version %s, v=%d\n", id, label(r.Version), r.Entity.Properties["v"].GetIntegerValue())
		}
		for _, r := range resp.Missing {
			fmt.Fprintf(&out, "    lookup K:%d missing, version set: %v\n", r.Entity.Key.Path[0].GetId(), r.Version != 0)
		}
	}

	commit("upsert K:1, K:2", false, up(ent(1, 1)), up(ent(2, 2)))
	lookup(1, 2, 3)
	q, err := s.client.RunQuery(ctx, &datastorepb.RunQueryRequest{ProjectId: p.Project, PartitionId: partitionID(p), QueryType: &datastorepb.RunQueryRequest_Query{Query: &datastorepb.Query{}}})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&out, "== kindless query\n")
	for _, r := range q.Batch.EntityResults {
		fmt.Fprintf(&out, "    K:%d %v version %s\n", r.Entity.Key.Path[0].GetId(), q.Batch.EntityResultType, label(r.Version))
	}
	commit("upsert K:1 unchanged: no new version", false, up(ent(1, 1)))
	commit("upsert K:1 changed, base_version = its version", false, bv(up(ent(1, 10)), versions[1]))
	commit("upsert K:1, base_version = its previous version", false, bv(up(ent(1, 11)), versions[1]))
	commit("update K:1, base_version = its previous version", false, bv(upd(ent(1, 11)), versions[1]))
	commit("delete K:2, base_version = K:1's first version", false, bv(del(2), versions[1]))
	lookup(1, 2)
	commit("upsert missing K:9, base_version = K:2's version", false, bv(up(ent(9, 9)), versions[2]))
	commit("delete missing K:9, base_version = K:2's version", false, bv(del(9), versions[2]))
	commit("update missing K:9, base_version = K:2's version", false, bv(upd(ent(9, 9)), versions[2]))
	commit("update missing K:9", false, upd(ent(9, 9)))
	commit("insert existing K:1", false, ins(ent(1, 1)))
	commit("non-transactional: upsert K:5, insert existing K:1, upsert K:6", false, up(ent(5, 5)), ins(ent(1, 1)), up(ent(6, 6)))
	lookup(5, 6)
	commit("single-use transaction: upsert K:7, insert existing K:1", true, up(ent(7, 7)), ins(ent(1, 1)))
	lookup(7)
	commit("single-use transaction: upsert K:7, insert K:8, upsert K:1 at a stale base_version", true, up(ent(7, 7)), ins(ent(8, 8)), bv(up(ent(1, 12)), versions[2]))
	lookup(1, 7, 8)
	commit("upsert missing K:4, base_version 0 (not relied on)", false, bv(up(ent(4, 4)), 0))
	commit("upsert existing K:1, base_version 0 (not relied on)", false, bv(up(ent(1, 13)), 0))

	if *updateRef {
		if err := os.WriteFile(refFile, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(refFile)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Errorf("the emulator no longer answers as %s records; got:\n%s", refFile, out.String())
	}
}
