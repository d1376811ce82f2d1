package datastore

import (
	"context"
	"strings"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/genproto/googleapis/type/latlng"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

// TestInvalidEntitiesAsTheEmulator: entities the Datastore emulator refuses
// are refused by nemo at commit, over the embedded store and in front of
// the emulator, with the emulator's own code and message, so nemo never
// acknowledges a write the backend will not take (the write-back wedge of
// issue 12).
func TestInvalidEntitiesAsTheEmulator(t *testing.T) {
	emuAddr := dstest.Emulator(t)
	long := strings.Repeat("a", 1501)
	el := func(kind, name string) *datastorepb.Key_PathElement {
		return &datastorepb.Key_PathElement{Kind: kind, IdType: &datastorepb.Key_PathElement_Name{Name: name}}
	}
	prop := func(v *datastorepb.Value) map[string]*datastorepb.Value { return map[string]*datastorepb.Value{"p": v} }
	type entity struct {
		ns    string
		path  []*datastorepb.Key_PathElement
		props map[string]*datastorepb.Value
	}
	ok := []*datastorepb.Key_PathElement{el("K", "a")}
	cases := map[string]entity{
		"value with no type":   {"", ok, prop(&datastorepb.Value{})},
		"1501-byte property":   {"", ok, map[string]*datastorepb.Value{long: {ValueType: &datastorepb.Value_IntegerValue{IntegerValue: 1}}}},
		"timestamp year 10000": {"", ok, prop(&datastorepb.Value{ValueType: &datastorepb.Value_TimestampValue{TimestampValue: &timestamppb.Timestamp{Seconds: 253402300800}}})},
		"latitude 91":          {"", ok, prop(&datastorepb.Value{ValueType: &datastorepb.Value_GeoPointValue{GeoPointValue: &latlng.LatLng{Latitude: 91}}})},
		"longitude 181":        {"", ok, prop(&datastorepb.Value{ValueType: &datastorepb.Value_GeoPointValue{GeoPointValue: &latlng.LatLng{Longitude: 181}}})},
		"namespace __x__":      {"__x__", ok, nil},
		"namespace a b":        {"a b", ok, nil},
		"101-char namespace":   {strings.Repeat("n", 101), ok, nil},
		"empty key path value": {"", ok, prop(&datastorepb.Value{ValueType: &datastorepb.Value_KeyValue{KeyValue: &datastorepb.Key{}}})},
		"unknown meaning":      {"", ok, prop(&datastorepb.Value{Meaning: 12345, ValueType: &datastorepb.Value_IntegerValue{IntegerValue: 1}})},
		"1501-byte name":       {"", []*datastorepb.Key_PathElement{el("K", long)}, nil},
		"1501-byte kind":       {"", []*datastorepb.Key_PathElement{el(long, "a")}, nil},
	}
	commit := func(addr, project string, e entity) error {
		ent := &datastorepb.Entity{Key: &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: project, NamespaceId: e.ns}, Path: e.path}, Properties: e.props}
		_, err := pbClient(t, addr).Commit(context.Background(), &datastorepb.CommitRequest{ProjectId: project, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL,
			Mutations: []*datastorepb.Mutation{{Operation: &datastorepb.Mutation_Upsert{Upsert: ent}}}})
		return err
	}
	project := dstest.Project(t)
	for _, b := range []backend{embeddedBackend(t.TempDir()), emulatorBackend()} {
		t.Run(b.name, func(t *testing.T) {
			n := startNemo(t, b, project, cache.Options{})
			for name, e := range cases {
				want := status.Convert(commit(emuAddr, project, e))
				got := status.Convert(commit(n.addr, project, e))
				if want.Code() == 0 {
					t.Errorf("%s: the emulator took it", name)
					continue
				}
				if got.Code() != want.Code() || got.Message() != want.Message() {
					t.Errorf("%s: nemo %s %q, the emulator %s %q", name, got.Code(), got.Message(), want.Code(), want.Message())
				}
			}
		})
	}
}

// TestTransactionMisuseAsTheEmulator: a transactional commit that names no
// transaction, and a rollback after the commit, are refused with
// INVALID_ARGUMENT, as the emulator refuses them.
func TestTransactionMisuseAsTheEmulator(t *testing.T) {
	emuAddr := dstest.Emulator(t)
	project := dstest.Project(t)
	ctx := context.Background()
	ent := &datastorepb.Entity{Key: &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: project},
		Path: []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Name{Name: "t"}}}}}
	misuse := func(addr string) (noTxn, rollback error) {
		c := pbClient(t, addr)
		_, noTxn = c.Commit(ctx, &datastorepb.CommitRequest{ProjectId: project, Mode: datastorepb.CommitRequest_TRANSACTIONAL,
			Mutations: []*datastorepb.Mutation{{Operation: &datastorepb.Mutation_Upsert{Upsert: ent}}}})
		b, err := c.BeginTransaction(ctx, &datastorepb.BeginTransactionRequest{ProjectId: project})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Commit(ctx, &datastorepb.CommitRequest{ProjectId: project, Mode: datastorepb.CommitRequest_TRANSACTIONAL,
			TransactionSelector: &datastorepb.CommitRequest_Transaction{Transaction: b.Transaction}}); err != nil {
			t.Fatal(err)
		}
		_, rollback = c.Rollback(ctx, &datastorepb.RollbackRequest{ProjectId: project, Transaction: b.Transaction})
		return noTxn, rollback
	}
	wantNoTxn, wantRollback := misuse(emuAddr)
	if wantNoTxn == nil || wantRollback == nil {
		t.Fatalf("the emulator took the misuse: %v, %v", wantNoTxn, wantRollback)
	}
	for _, b := range []backend{embeddedBackend(t.TempDir()), emulatorBackend()} {
		t.Run(b.name, func(t *testing.T) {
			n := startNemo(t, b, project, cache.Options{})
			noTxn, rollback := misuse(n.addr)
			if status.Code(noTxn) != status.Code(wantNoTxn) || status.Convert(noTxn).Message() != status.Convert(wantNoTxn).Message() {
				t.Errorf("transactional commit without a transaction: nemo %v, the emulator %v", noTxn, wantNoTxn)
			}
			if status.Code(rollback) != status.Code(wantRollback) {
				t.Errorf("rollback after commit: nemo %v, the emulator %v", rollback, wantRollback)
			}
		})
	}
}
