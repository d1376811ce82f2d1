package datastore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/genproto/googleapis/type/latlng"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
)

// TestInvalidEntitiesAsTheEmulator: entities the service refuses are
// refused by nemo at commit, over the embedded store and in front of the
// emulator, with the service's own code and message, so nemo never
// acknowledges a write the backend will not take (the write-back wedge of
// issue 12). Where the two emulators agree nemo is compared with the
// Datastore emulator; where they disagree nemo follows the Firestore
// emulator in Datastore mode (production's engine), whose recorded answer
// is the expectation, checked against the Firestore emulator itself
// (NEMO_TEST_FIRESTORE).
func TestInvalidEntitiesAsTheEmulator(t *testing.T) {
	emuAddr := dstest.Emulator(t)
	fsAddr := dstest.FirestoreEmulator(t)
	long := strings.Repeat("a", 1501)
	el := func(kind, name string) *datastorepb.Key_PathElement {
		return &datastorepb.Key_PathElement{Kind: kind, IdType: &datastorepb.Key_PathElement_Name{Name: name}}
	}
	prop := func(v *datastorepb.Value) map[string]*datastorepb.Value { return map[string]*datastorepb.Value{"p": v} }
	meaning := func(m int32, v *datastorepb.Value) *datastorepb.Value { v.Meaning = m; return v }
	unindexed := func(v *datastorepb.Value) *datastorepb.Value { v.ExcludeFromIndexes = true; return v }
	str := func(s string) *datastorepb.Value {
		return &datastorepb.Value{ValueType: &datastorepb.Value_StringValue{StringValue: s}}
	}
	blob := func(s string) *datastorepb.Value {
		return &datastorepb.Value{ValueType: &datastorepb.Value_BlobValue{BlobValue: []byte(s)}}
	}
	dbl := func(d float64) *datastorepb.Value {
		return &datastorepb.Value{ValueType: &datastorepb.Value_DoubleValue{DoubleValue: d}}
	}
	embedded := func(props map[string]*datastorepb.Value) *datastorepb.Value {
		return &datastorepb.Value{ValueType: &datastorepb.Value_EntityValue{EntityValue: &datastorepb.Entity{Properties: props}}}
	}
	ints := func(n int) []*datastorepb.Value {
		var out []*datastorepb.Value
		for i := range n {
			out = append(out, ival(int64(i)))
		}
		return out
	}
	doubles := func(n int) []*datastorepb.Value {
		var out []*datastorepb.Value
		for i := range n {
			out = append(out, dbl(float64(i)))
		}
		return out
	}
	manyProps := func(n int) map[string]*datastorepb.Value {
		out := map[string]*datastorepb.Value{}
		for i := range n {
			out[fmt.Sprint("f", i)] = ival(1)
		}
		return out
	}
	user := func(props map[string]*datastorepb.Value) *datastorepb.Value { return meaning(20, embedded(props)) }
	type entity struct {
		ns    string
		path  []*datastorepb.Key_PathElement
		props map[string]*datastorepb.Value
		// firestore is the Firestore emulator's message where the legacy
		// emulator answers otherwise (it takes these entities, or spells
		// the refusal differently). Empty: the two agree.
		firestore string
	}
	ok := []*datastorepb.Key_PathElement{el("K", "a")}
	cases := map[string]entity{
		"value with no type":           {"", ok, prop(&datastorepb.Value{}), ""},
		"1501-byte property":           {"", ok, map[string]*datastorepb.Value{long: {ValueType: &datastorepb.Value_IntegerValue{IntegerValue: 1}}}, ""},
		"empty property name":          {"", ok, map[string]*datastorepb.Value{"": ival(1)}, ""},
		"reserved property name":       {"", ok, map[string]*datastorepb.Value{"__x__": ival(1)}, ""},
		"reserved embedded name":       {"", ok, prop(embedded(map[string]*datastorepb.Value{"__x__": ival(1)})), ""},
		"timestamp year 10000":         {"", ok, prop(&datastorepb.Value{ValueType: &datastorepb.Value_TimestampValue{TimestampValue: &timestamppb.Timestamp{Seconds: 253402300800}}}), ""},
		"timestamp nanos -1":           {"", ok, prop(&datastorepb.Value{ValueType: &datastorepb.Value_TimestampValue{TimestampValue: &timestamppb.Timestamp{Seconds: 5, Nanos: -1}}}), ""},
		"timestamp nanos 1e9 in array": {"", ok, prop(aval(&datastorepb.Value{ValueType: &datastorepb.Value_TimestampValue{TimestampValue: &timestamppb.Timestamp{Nanos: 1e9}}})), ""},
		"timestamp nanos 1.5e9 nested": {"", ok, prop(embedded(map[string]*datastorepb.Value{"t": {ValueType: &datastorepb.Value_TimestampValue{TimestampValue: &timestamppb.Timestamp{Nanos: 1.5e9}}}})), ""},
		"latitude NaN":                 {"", ok, prop(&datastorepb.Value{ValueType: &datastorepb.Value_GeoPointValue{GeoPointValue: &latlng.LatLng{Latitude: math.NaN()}}}), ""},
		"longitude NaN":                {"", ok, prop(&datastorepb.Value{ValueType: &datastorepb.Value_GeoPointValue{GeoPointValue: &latlng.LatLng{Longitude: math.NaN()}}}), ""},
		"latitude 91":                  {"", ok, prop(&datastorepb.Value{ValueType: &datastorepb.Value_GeoPointValue{GeoPointValue: &latlng.LatLng{Latitude: 91}}}), ""},
		"longitude 181":                {"", ok, prop(&datastorepb.Value{ValueType: &datastorepb.Value_GeoPointValue{GeoPointValue: &latlng.LatLng{Longitude: 181}}}), ""},
		"namespace __x__":              {"__x__", ok, nil, ""},
		"namespace a b":                {"a b", ok, nil, ""},
		"101-char namespace":           {strings.Repeat("n", 101), ok, nil, ""},
		"empty key path value":         {"", ok, prop(&datastorepb.Value{ValueType: &datastorepb.Value_KeyValue{KeyValue: &datastorepb.Key{}}}), ""},
		"key value with id 0":          {"", ok, prop(&datastorepb.Value{ValueType: &datastorepb.Value_KeyValue{KeyValue: &datastorepb.Key{Path: []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{}}}}}}), ""},
		"parent with id 0":             {"", []*datastorepb.Key_PathElement{{Kind: "P", IdType: &datastorepb.Key_PathElement_Id{}}, el("K", "a")}, nil, ""},
		"incomplete key value":         {"", ok, prop(&datastorepb.Value{ValueType: &datastorepb.Value_KeyValue{KeyValue: &datastorepb.Key{Path: []*datastorepb.Key_PathElement{{Kind: "K"}}}}}), ""},
		"1501-byte name":               {"", []*datastorepb.Key_PathElement{el("K", long)}, nil, ""},
		"1501-byte kind":               {"", []*datastorepb.Key_PathElement{el(long, "a")}, nil, ""},
		"1501-byte indexed string":     {"", ok, prop(str(long)), ""},
		"1501-byte string in an array": {"", ok, prop(aval(str(long))), ""},
		"array in an array":            {"", ok, prop(aval(aval(ival(1)))), ""},
		"unindexed array":              {"", ok, prop(unindexed(aval(ival(1)))), ""},
		// Meanings: each goes with one value type.
		"unknown meaning":               {"", ok, prop(meaning(12345, ival(1))), ""},
		"meaning 16 on a string":        {"", ok, prop(meaning(16, str("s"))), ""},
		"meaning 1 on an integer":       {"", ok, prop(meaning(1, ival(1))), ""},
		"meaning 1 in an array":         {"", ok, prop(aval(meaning(1, ival(1)))), ""},
		"meaning 1 in an embedded":      {"", ok, prop(embedded(map[string]*datastorepb.Value{"x": meaning(1, ival(1))})), ""},
		"meaning 7 on a recent integer": {"", ok, prop(meaning(7, ival(1700000000000000))), ""},
		"meaning 15 indexed":            {"", ok, prop(meaning(15, str("s"))), ""},
		"meaning 22 indexed":            {"", ok, prop(meaning(22, blob("b"))), ""},
		"meaning 19 on a blob":          {"", ok, prop(unindexed(meaning(19, blob("b")))), ""},
		"meaning 18":                    {"", ok, prop(meaning(18, ival(1))), ""},
		"meaning 18 on a timestamp":     {"", ok, prop(meaning(18, &datastorepb.Value{ValueType: &datastorepb.Value_TimestampValue{TimestampValue: &timestamppb.Timestamp{}}})), ""},
		"meaning on an array":           {"", ok, prop(meaning(1, aval(str("s")))), ""},
		"meaning 20 on a string":        {"", ok, prop(meaning(20, str("s"))), ""},
		"user without auth_domain":      {"", ok, prop(user(map[string]*datastorepb.Value{"email": unindexed(str("a@b"))})), ""},
		"user with an indexed email":    {"", ok, prop(user(map[string]*datastorepb.Value{"email": str("a@b"), "auth_domain": unindexed(str("g"))})), ""},
		"user with another property":    {"", ok, prop(user(map[string]*datastorepb.Value{"email": unindexed(str("a@b")), "auth_domain": unindexed(str("g")), "x": unindexed(str("x"))})), ""},
		"user with an integer user_id":  {"", ok, prop(user(map[string]*datastorepb.Value{"email": unindexed(str("a@b")), "auth_domain": unindexed(str("g")), "user_id": unindexed(ival(1))})), ""},
		"retired meaning 9":             {"", ok, prop(meaning(9, ival(1))), "Unexpected value meaning 9."},
		"meaning 31 on a string":        {"", ok, prop(meaning(31, str("s"))), `Value "p" has a meaning 31 which does not match vector field.`},
		"meaning 23 on a geo point":     {"", ok, prop(meaning(23, &datastorepb.Value{ValueType: &datastorepb.Value_GeoPointValue{GeoPointValue: &latlng.LatLng{}}})), "OnestoreEntity.PropertyValue meaning does not match value fields."},
		"indexed vector":                {"", ok, prop(meaning(31, aval(dbl(1)))), "Vector's must be excluded from indexes."},
		"empty vector":                  {"", ok, prop(unindexed(meaning(31, aval()))), "Cannot have a zero length vector."},
		"vector of integers":            {"", ok, prop(unindexed(meaning(31, aval(ival(1))))), "Vector must only contain values of type 'double'."},
		"2049-dimension vector":         {"", ok, prop(unindexed(meaning(31, aval(doubles(2049)...)))), "Vectors must be at most 2048 dimensions."},
		// Sizes and index entries.
		"unindexed string over 1 MiB": {"", ok, prop(unindexed(str(strings.Repeat("s", 1048488)))), `The value of property "p" is longer than 1048487 bytes.`},
		"entity over 1 MiB": {"", ok, map[string]*datastorepb.Value{"p": unindexed(str(strings.Repeat("s", 600000))), "q": unindexed(blob(strings.Repeat("b", 500000)))},
			"maximum entity size is 1048576 bytes"},
		"5001 indexed values":            {"", ok, map[string]*datastorepb.Value{"p": aval(ints(4000)...), "q": aval(ints(1001)...)}, "Too many indexed properties"},
		"5001 properties of an embedded": {"", ok, prop(embedded(manyProps(5001))), "Too many indexed properties"},
	}
	commit := func(addr, project string, e entity) error {
		ent := &datastorepb.Entity{Key: &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: project, NamespaceId: e.ns}, Path: e.path}, Properties: e.props}
		_, err := pbClient(t, addr).Commit(context.Background(), &datastorepb.CommitRequest{ProjectId: project, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL,
			Mutations: []*datastorepb.Mutation{{Operation: &datastorepb.Mutation_Upsert{Upsert: ent}}}})
		return err
	}
	same := func(a, b *status.Status) bool { return a.Code() == b.Code() && a.Message() == b.Message() }
	project := dstest.Project(t)
	want := map[string]*status.Status{}
	for name, e := range cases {
		legacy := status.Convert(commit(emuAddr, project, e))
		if e.firestore == "" {
			if legacy.Code() == codes.OK {
				t.Errorf("%s: the emulator took it", name)
			}
			want[name] = legacy
		} else {
			want[name] = status.New(codes.InvalidArgument, e.firestore)
			if same(legacy, want[name]) {
				t.Errorf("%s: the emulators agree now (%q): drop the recorded answer", name, e.firestore)
			}
		}
		if fs := status.Convert(commit(fsAddr, project, e)); !same(fs, want[name]) {
			t.Errorf("%s: the Firestore emulator answers %s %q, expected %s %q", name, fs.Code(), fs.Message(), want[name].Code(), want[name].Message())
		}
	}
	for _, b := range []backend{embeddedBackend(t.TempDir()), emulatorBackend()} {
		t.Run(b.name, func(t *testing.T) {
			n := startNemo(t, b, project, cache.Options{})
			for name, e := range cases {
				if got := status.Convert(commit(n.addr, project, e)); !same(got, want[name]) {
					t.Errorf("%s: nemo %s %q, want %s %q", name, got.Code(), got.Message(), want[name].Code(), want[name].Message())
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

// TestBadRequestFieldsAsTheEmulators: a read time or a mutation's update
// time that is no valid timestamp, a read time before the epoch, a key
// whose path has an id set to 0 (rather than left unset), a negative base
// version, are refused with the service's code and message. Where the emulators
// disagree (the legacy one takes a read-only transaction's read time
// whatever it is) nemo follows the Firestore emulator, whose recorded
// answer is checked against it.
func TestBadRequestFieldsAsTheEmulators(t *testing.T) {
	emuAddr := dstest.Emulator(t)
	fsAddr := dstest.FirestoreEmulator(t)
	project := dstest.Project(t)
	ctx := context.Background()
	const badTimestamp = "invalid timestamp, please check https://developers.google.com/protocol-buffers/docs/reference/java/com/google/protobuf/util/Timestamps.html#isValid-long-int- for the timestamp format."
	nanos := &timestamppb.Timestamp{Seconds: 5, Nanos: 1_500_000_000}
	far := &timestamppb.Timestamp{Seconds: 253402300800}
	early := &timestamppb.Timestamp{Seconds: -5}
	key := &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: project}, Path: []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Name{Name: "a"}}}}
	// idZero is a key of kind Z with its id set to 0, under path.
	idZero := func(path ...string) *datastorepb.Key {
		k := &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: project}}
		for i := 0; i < len(path); i += 2 {
			k.Path = append(k.Path, &datastorepb.Key_PathElement{Kind: path[i], IdType: &datastorepb.Key_PathElement_Name{Name: path[i+1]}})
		}
		k.Path = append(k.Path, &datastorepb.Key_PathElement{Kind: "Z", IdType: &datastorepb.Key_PathElement_Id{}})
		return k
	}
	at := func(ts *timestamppb.Timestamp) *datastorepb.ReadOptions {
		return &datastorepb.ReadOptions{ConsistencyType: &datastorepb.ReadOptions_ReadTime{ReadTime: ts}}
	}
	readOnly := func(ts *timestamppb.Timestamp) *datastorepb.TransactionOptions {
		return &datastorepb.TransactionOptions{Mode: &datastorepb.TransactionOptions_ReadOnly_{ReadOnly: &datastorepb.TransactionOptions_ReadOnly{ReadTime: ts}}}
	}
	lookup := func(ro *datastorepb.ReadOptions) func(datastorepb.DatastoreClient) error {
		return func(c datastorepb.DatastoreClient) error {
			_, err := c.Lookup(ctx, &datastorepb.LookupRequest{ProjectId: project, Keys: []*datastorepb.Key{key}, ReadOptions: ro})
			return err
		}
	}
	cases := []struct {
		name string
		call func(datastorepb.DatastoreClient) error
		// firestore is the Firestore emulator's message where the legacy
		// emulator takes the request. Empty: the two agree.
		firestore string
	}{
		{"lookup at nanos 1.5e9", lookup(at(nanos)), ""},
		{"lookup at year 10000", lookup(at(far)), ""},
		{"lookup before the epoch", lookup(at(early)), ""},
		{"query at nanos 1.5e9", func(c datastorepb.DatastoreClient) error {
			_, err := c.RunQuery(ctx, &datastorepb.RunQueryRequest{ProjectId: project, ReadOptions: at(nanos),
				QueryType: &datastorepb.RunQueryRequest_Query{Query: &datastorepb.Query{Kind: []*datastorepb.KindExpression{{Name: "K"}}}}})
			return err
		}, ""},
		{"update time nanos 1.5e9", func(c datastorepb.DatastoreClient) error {
			_, err := c.Commit(ctx, &datastorepb.CommitRequest{ProjectId: project, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL,
				Mutations: []*datastorepb.Mutation{{Operation: &datastorepb.Mutation_Upsert{Upsert: &datastorepb.Entity{Key: key}},
					ConflictDetectionStrategy: &datastorepb.Mutation_UpdateTime{UpdateTime: nanos}}}})
			return err
		}, ""},
		{"read-only transaction at nanos 1.5e9", func(c datastorepb.DatastoreClient) error {
			_, err := c.BeginTransaction(ctx, &datastorepb.BeginTransactionRequest{ProjectId: project, TransactionOptions: readOnly(nanos)})
			return err
		}, badTimestamp},
		{"read-only transaction before the epoch", func(c datastorepb.DatastoreClient) error {
			_, err := c.BeginTransaction(ctx, &datastorepb.BeginTransactionRequest{ProjectId: project, TransactionOptions: readOnly(early)})
			return err
		}, "Only timestamps past epoch are supported."},
		{"lookup of a parent with id 0", func(c datastorepb.DatastoreClient) error {
			_, err := c.Lookup(ctx, &datastorepb.LookupRequest{ProjectId: project, Keys: []*datastorepb.Key{idZero("K", "a")}})
			return err
		}, ""},
		{"upsert of id 0", func(c datastorepb.DatastoreClient) error {
			_, err := c.Commit(ctx, &datastorepb.CommitRequest{ProjectId: project, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL,
				Mutations: []*datastorepb.Mutation{upsert(&datastorepb.Entity{Key: idZero()})}})
			return err
		}, ""},
		{"allocate id 0", func(c datastorepb.DatastoreClient) error {
			_, err := c.AllocateIds(ctx, &datastorepb.AllocateIdsRequest{ProjectId: project, Keys: []*datastorepb.Key{idZero()}})
			return err
		}, ""},
		{"reserve id 0", func(c datastorepb.DatastoreClient) error {
			_, err := c.ReserveIds(ctx, &datastorepb.ReserveIdsRequest{ProjectId: project, Keys: []*datastorepb.Key{idZero()}})
			return err
		}, ""},
		{"base version -3", func(c datastorepb.DatastoreClient) error {
			_, err := c.Commit(ctx, &datastorepb.CommitRequest{ProjectId: project, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL,
				Mutations: []*datastorepb.Mutation{{Operation: &datastorepb.Mutation_Update{Update: &datastorepb.Entity{Key: key}},
					ConflictDetectionStrategy: &datastorepb.Mutation_BaseVersion{BaseVersion: -3}}}})
			return err
		}, ""},
		{"new read-only transaction at year 10000", lookup(&datastorepb.ReadOptions{ConsistencyType: &datastorepb.ReadOptions_NewTransaction{NewTransaction: readOnly(far)}}), badTimestamp},
	}
	same := func(a, b *status.Status) bool { return a.Code() == b.Code() && a.Message() == b.Message() }
	n := startNemo(t, embeddedBackend(t.TempDir()), project, cache.Options{})
	for _, c := range cases {
		want := status.Convert(c.call(pbClient(t, emuAddr)))
		if c.firestore != "" {
			if want.Code() != codes.OK {
				t.Errorf("%s: the legacy emulator refuses it now (%v): drop the recorded answer", c.name, want.Err())
			}
			want = status.New(codes.InvalidArgument, c.firestore)
		} else if want.Code() == codes.OK {
			t.Errorf("%s: the emulator took it", c.name)
		}
		if fs := status.Convert(c.call(pbClient(t, fsAddr))); !same(fs, want) {
			t.Errorf("%s: the Firestore emulator answers %s %q, expected %s %q", c.name, fs.Code(), fs.Message(), want.Code(), want.Message())
		}
		if got := status.Convert(c.call(pbClient(t, n.addr))); !same(got, want) {
			t.Errorf("%s: nemo %s %q, want %s %q", c.name, got.Code(), got.Message(), want.Code(), want.Message())
		}
	}
}

// TestUnknownFieldsDroppedAsTheEmulators: fields of a gRPC request that
// nemo does not know (in the entity, a value, a key's path) are dropped as
// the service drops them, and a null value with another enum number than
// NULL_VALUE is stored as NULL_VALUE: what a Lookup finds after the commit
// is what the emulators find, by gRPC and by REST alike.
func TestUnknownFieldsDroppedAsTheEmulators(t *testing.T) {
	addrs := []string{dstest.Emulator(t), dstest.FirestoreEmulator(t)}
	project := dstest.Project(t)
	n := startNemo(t, embeddedBackend(t.TempDir()), project, cache.Options{})
	addrs = append(addrs, n.addr)
	ctx := context.Background()
	unknown := protowire.AppendString(protowire.AppendTag(nil, 99, protowire.BytesType), "zz")
	key := func() *datastorepb.Key {
		return &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: project}, Path: []*datastorepb.Key_PathElement{{Kind: "U", IdType: &datastorepb.Key_PathElement_Name{Name: "a"}}}}
	}
	var want *datastorepb.Entity
	for i, addr := range addrs {
		c := pbClient(t, addr)
		k := key()
		k.Path[0].ProtoReflect().SetUnknown(unknown)
		v := sval("s")
		v.ProtoReflect().SetUnknown(unknown)
		e := &datastorepb.Entity{Key: k, Properties: map[string]*datastorepb.Value{
			"v": v, "n": {ValueType: &datastorepb.Value_NullValue{NullValue: 6152}}, "a": aval(&datastorepb.Value{ValueType: &datastorepb.Value_NullValue{NullValue: 7}})}}
		e.ProtoReflect().SetUnknown(unknown)
		if _, err := c.Commit(ctx, &datastorepb.CommitRequest{ProjectId: project, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL, Mutations: []*datastorepb.Mutation{upsert(e)}}); err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		r, err := c.Lookup(ctx, &datastorepb.LookupRequest{ProjectId: project, Keys: []*datastorepb.Key{key()}})
		if err != nil || len(r.Found) != 1 {
			t.Fatalf("%s: %v %v", addr, r, err)
		}
		got := r.Found[0].Entity
		if i == 0 {
			want = got
			continue
		}
		if !proto.Equal(got, want) {
			t.Errorf("%s finds %v; the legacy emulator %v", addr, got, want)
		}
	}
	if got := restLookup(t, n.addr, project, key()); !proto.Equal(got, want) {
		t.Errorf("nemo's REST API finds %v, its gRPC %v", got, want)
	}
}

// restLookup is the entity a REST Lookup of k finds at addr.
func restLookup(t *testing.T, addr, project string, k *datastorepb.Key) *datastorepb.Entity {
	t.Helper()
	body, err := protojson.Marshal(&datastorepb.LookupRequest{Keys: []*datastorepb.Key{k}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := restHTTP.Post(restURL(addr)+"/v1/projects/"+project+":lookup", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	var r datastorepb.LookupResponse
	if err := protojson.Unmarshal(out, &r); err != nil || len(r.Found) != 1 {
		t.Fatalf("REST lookup: %d %s: %v", resp.StatusCode, out, err)
	}
	return r.Found[0].Entity
}

// TestInvalidQueriesAsTheEmulators: queries the service refuses are
// refused by nemo with its code and message. Where the two emulators agree
// nemo is compared with the Datastore emulator; where they disagree (or
// only the Firestore emulator implements the feature) nemo follows the
// Firestore emulator in Datastore mode, which runs production's query
// engine: its recorded answer is the expectation, checked against the
// Firestore emulator itself (NEMO_TEST_FIRESTORE).
func TestInvalidQueriesAsTheEmulators(t *testing.T) {
	emuAddr := dstest.Emulator(t)
	fsAddr := dstest.FirestoreEmulator(t)
	project := dstest.Project(t)
	in := func(prop string, n int) string {
		s := `filters{property_filter{property{name:"` + prop + `"} op:IN value{array_value{`
		for i := range n {
			s += fmt.Sprintf("values{integer_value:%d} ", i)
		}
		return s + `}}}} `
	}
	type queryCase struct {
		q string // the query, in protobuf text
		// firestore is the Firestore emulator's message where the legacy
		// emulator answers otherwise; "ok" when Firestore runs the query
		// (and the legacy emulator refuses it). Empty: the two agree.
		firestore string
	}
	const (
		eqK   = `filter{property_filter{property{name:"a"} op:EQUAL value{integer_value:1}}}`
		gtA   = `filters{property_filter{property{name:"a"} op:GREATER_THAN value{integer_value:0}}} `
		gtB   = `filters{property_filter{property{name:"b"} op:GREATER_THAN value{integer_value:0}}} `
		neqA  = `filters{property_filter{property{name:"a"} op:NOT_EQUAL value{integer_value:1}}} `
		neqB  = `filters{property_filter{property{name:"b"} op:NOT_EQUAL value{integer_value:1}}} `
		ninA  = `filters{property_filter{property{name:"a"} op:NOT_IN value{array_value{values{integer_value:1}}}}} `
		eqA   = `filters{property_filter{property{name:"a"} op:EQUAL value{integer_value:1}}} `
		eqB   = `filters{property_filter{property{name:"b"} op:EQUAL value{integer_value:1}}} `
		projA = `projection{property{name:"a"}} `
		projB = `projection{property{name:"b"}} `
		ancA  = `filters{property_filter{property{name:"__key__"} op:HAS_ANCESTOR value{key_value{path{kind:"K" name:"a"}}}}} `
		ancB  = `filters{property_filter{property{name:"__key__"} op:HAS_ANCESTOR value{key_value{path{kind:"K" name:"b"}}}}} `
	)
	cases := map[string]queryCase{
		// Both emulators agree.
		"two kinds":               {q: `kind{name:"K"} kind{name:"J"}`},
		"empty kind":              {q: `kind{name:""}`},
		"negative offset":         {q: `kind{name:"K"} offset:-1`},
		"negative limit":          {q: `kind{name:"K"} limit{value:-1}`},
		"empty projection":        {q: `kind{name:"K"} projection{property{name:""}}`},
		"empty order":             {q: `kind{name:"K"} order{property{name:""}}`},
		"empty distinct-on":       {q: `kind{name:"K"} ` + projA + `distinct_on{name:""}`},
		"array filter value":      {q: `kind{name:"K"} filter{property_filter{property{name:"a"} op:EQUAL value{array_value{values{integer_value:1}}}}}`},
		"entity filter value":     {q: `kind{name:"K"} filter{property_filter{property{name:"a"} op:EQUAL value{entity_value{}}}}`},
		"filter without value":    {q: `kind{name:"K"} filter{property_filter{property{name:"a"} op:EQUAL}}`},
		"filter without operator": {q: `kind{name:"K"} filter{property_filter{property{name:"a"} value{integer_value:1}}}`},
		"empty composite":         {q: `kind{name:"K"} filter{composite_filter{op:AND}}`},
		"composite without op":    {q: `kind{name:"K"} filter{composite_filter{` + eqA + `}}`},
		"empty filter":            {q: `kind{name:"K"} filter{}`},
		"two !=":                  {q: `kind{name:"K"} filter{composite_filter{op:AND ` + neqA + neqB + `}}`},
		"NOT_IN and !=":           {q: `kind{name:"K"} filter{composite_filter{op:AND ` + ninA + neqB + `}}`},
		"timestamp year 10000":    {q: `kind{name:"K"} filter{property_filter{property{name:"a"} op:EQUAL value{timestamp_value{seconds:253402300800}}}}`},
		"timestamp nanos 1e9":     {q: `kind{name:"K"} filter{property_filter{property{name:"a"} op:LESS_THAN value{timestamp_value{nanos:1000000000}}}}`},
		"timestamp nanos -1 IN":   {q: `kind{name:"K"} filter{property_filter{property{name:"a"} op:IN value{array_value{values{integer_value:1} values{timestamp_value{nanos:-1}}}}}}`},
		"NaN latitude":            {q: `kind{name:"K"} filter{property_filter{property{name:"a"} op:EQUAL value{geo_point_value{latitude:nan}}}}`},
		"NaN longitude NOT_IN":    {q: `kind{name:"K"} filter{property_filter{property{name:"a"} op:NOT_IN value{array_value{values{geo_point_value{longitude:nan}}}}}}`},
		"__key__ = 1":             {q: `kind{name:"K"} filter{property_filter{property{name:"__key__"} op:EQUAL value{integer_value:1}}}`},
		"__key__ > null":          {q: `kind{name:"K"} filter{property_filter{property{name:"__key__"} op:GREATER_THAN value{null_value:NULL_VALUE}}}`},
		"__key__ IN [1]":          {q: `kind{name:"K"} filter{property_filter{property{name:"__key__"} op:IN value{array_value{values{integer_value:1}}}}}`},
		"__key__ with id 0":       {q: `kind{name:"K"} filter{property_filter{property{name:"__key__"} op:GREATER_THAN value{key_value{path{kind:"K" id:0}}}}}`},
		"incomplete __key__":      {q: `kind{name:"K"} filter{property_filter{property{name:"__key__"} op:GREATER_THAN value{key_value{path{kind:"A" name:"a"} path{kind:"K"}}}}}`},
		"empty __key__ path":      {q: `kind{name:"K"} filter{property_filter{property{name:"__key__"} op:GREATER_THAN value{key_value{}}}}`},
		"incomplete ancestor":     {q: `kind{name:"K"} filter{property_filter{property{name:"__key__"} op:HAS_ANCESTOR value{key_value{path{kind:"K"}}}}}`},
		"ancestor not a key":      {q: `kind{name:"K"} filter{property_filter{property{name:"__key__"} op:HAS_ANCESTOR value{string_value:"a"}}}`},
		"ancestor on a property":  {q: `kind{name:"K"} filter{property_filter{property{name:"a"} op:HAS_ANCESTOR value{key_value{path{kind:"K" name:"a"}}}}}`},
		"kindless order":          {q: `order{property{name:"__key__"} direction:DESCENDING}`},
		"two ancestors":           {q: `kind{name:"K"} filter{composite_filter{op:AND ` + ancA + ancB + `}}`},
		"ancestor only in OR":     {q: `kind{name:"K"} filter{composite_filter{op:OR ` + ancA + eqB + `}}`},
		"ancestor ORed, ANDed":    {q: `kind{name:"K"} filter{composite_filter{op:AND filters{composite_filter{op:OR ` + ancA + eqB + `}} ` + ancA + `}}`},
		// The emulators disagree, or only Firestore implements it.
		"projection of an equality":    {q: `kind{name:"K"} ` + projA + eqK, firestore: "Cannot use projection on a property with an equality filter."},
		"projection of an IN":          {q: `kind{name:"K"} ` + projA + `filter{composite_filter{op:AND ` + in("a", 2) + `}}`, firestore: "Cannot use projection on a property with an equality filter."},
		"projection of an OR equality": {q: `kind{name:"K"} ` + projA + `filter{composite_filter{op:OR ` + eqA + eqB + `}}`, firestore: "Cannot use projection on a property with an equality filter."},
		"projection twice":             {q: `kind{name:"K"} ` + projA + projA, firestore: "Cannot project a property multiple times."},
		"projection of __x__":          {q: `kind{name:"K"} projection{property{name:"__x__"}}`, firestore: "projections are not supported for the property: __x__"},
		"group-by not ordered first":   {q: `kind{name:"K"} ` + projA + projB + `distinct_on{name:"b"} order{property{name:"a"}}`, firestore: "All group by properties must be ordered before any non group by properties."},
		"group-by behind an equality":  {q: `kind{name:"K"} ` + projB + eqK + ` order{property{name:"a"}} distinct_on{name:"b"}`, firestore: "All group by properties must be ordered before any non group by properties."},
		"group-by twice":               {q: `kind{name:"K"} ` + projA + `distinct_on{name:"a"} distinct_on{name:"a"}`, firestore: "Cannot group by a property multiple times."},
		"group-by __key__":             {q: `kind{name:"K"} ` + projA + `distinct_on{name:"__key__"}`, firestore: "Group by is not supported for the property: __key__"},
		"order twice":                  {q: `kind{name:"K"} order{property{name:"a"}} order{property{name:"a"} direction:DESCENDING}`, firestore: "order by clause cannot contain duplicate fields a"},
		"__key__ in another namespace": {q: `kind{name:"K"} filter{property_filter{property{name:"__key__"} op:GREATER_THAN value{key_value{partition_id{namespace_id:"other"} path{kind:"K" name:"a"}}}}}`, firestore: "The query namespace is '' but __key__ filter namespace is 'other'."},
		"ancestor in another namespace": {q: `kind{name:"K"} filter{property_filter{property{name:"__key__"} op:HAS_ANCESTOR value{key_value{partition_id{namespace_id:"other"} path{kind:"K" name:"a"}}}}}`,
			firestore: "The query namespace is '' but ancestor namespace is 'other'."},
		"__key__ in another project": {q: `kind{name:"K"} filter{property_filter{property{name:"__key__"} op:GREATER_THAN value{key_value{partition_id{project_id:"zzz"} path{kind:"K" name:"a"}}}}}`,
			firestore: "The request was for database 'projects/" + project + "/databases/(default)' but was attempting to access database 'projects/zzz/databases/(default)'"},
		"kindless property filter": {q: eqK, firestore: "kind is required for filter: a"},
		"IN of nothing":            {q: `kind{name:"K"} filter{property_filter{property{name:"a"} op:IN value{array_value{}}}}`, firestore: "IN requires an non-empty ArrayValue."},
		"IN of a scalar":           {q: `kind{name:"K"} filter{property_filter{property{name:"a"} op:IN value{integer_value:1}}}`, firestore: "IN requires an ArrayValue."},
		"IN of 31":                 {q: `kind{name:"K"} filter{composite_filter{op:AND ` + in("a", 31) + `}}`, firestore: "IN supports up to 30 values. There are 31 values in the IN filter in your query."},
		"NOT_IN of nothing":        {q: `kind{name:"K"} filter{property_filter{property{name:"a"} op:NOT_IN value{array_value{}}}}`, firestore: "NOT_IN requires an non-empty ArrayValue."},
		"NOT_IN of 11": {q: `kind{name:"K"} filter{property_filter{property{name:"a"} op:NOT_IN value{array_value{` + strings.Repeat("values{integer_value:1} ", 11) + `}}}}`,
			firestore: "NOT_IN supports up to 10 values."},
		"NOT_IN and IN":                {q: `kind{name:"K"} filter{composite_filter{op:AND ` + ninA + in("b", 1) + `}}`, firestore: "'NOT_IN' cannot be used in the same query with 'IN' or 'OR'."},
		"NOT_IN and OR":                {q: `kind{name:"K"} filter{composite_filter{op:OR ` + ninA + eqB + `}}`, firestore: "'NOT_IN' cannot be used in the same query with 'IN' or 'OR'."},
		"35 disjuncts":                 {q: `kind{name:"K"} filter{composite_filter{op:AND ` + in("a", 5) + in("b", 7) + `}}`, firestore: "Too many disjunctions after normalization. Result had 35 disjunctions which is more than the maximum of 30"},
		"100 disjuncts":                {q: `kind{name:"K"} filter{composite_filter{op:AND ` + in("a", 10) + in("b", 10) + `}}`, firestore: "Too many disjunctions after normalization, the maximum is 30"},
		"two inequality properties":    {q: `kind{name:"K"} filter{composite_filter{op:AND ` + gtA + gtB + `}}`, firestore: "ok"},
		"inequality not ordered first": {q: `kind{name:"K"} filter{composite_filter{op:AND ` + gtA + `}} order{property{name:"b"}}`, firestore: "ok"},
		"kindless projection":          {q: projA, firestore: "ok"},
		"kindless group-by":            {q: `distinct_on{name:"a"}`, firestore: "ok"},
		"two INs":                      {q: `kind{name:"K"} filter{composite_filter{op:AND ` + in("a", 2) + in("b", 3) + `}}`, firestore: "ok"},
		"OR":                           {q: `kind{name:"K"} filter{composite_filter{op:OR ` + gtA + eqB + `}}`, firestore: "ok"},
		"same ancestor per OR": {q: `kind{name:"K"} filter{composite_filter{op:OR filters{composite_filter{op:AND ` + ancA + eqB + `}} filters{composite_filter{op:AND ` + ancA + eqA + `}}}}`,
			firestore: "ok"},

		// Several faults: the answer is the first in the service's order.
		"group-by twice, order twice": {q: `kind{name:"K"} ` + projA + `distinct_on{name:"a"} distinct_on{name:"a"} order{property{name:"b"}} order{property{name:"b"}}`,
			firestore: "Cannot group by a property multiple times."},
		"two !=, projection twice": {q: `kind{name:"K"} filter{composite_filter{op:AND ` + neqA + neqB + `}} ` + projA + projA},
	}
	partitions := map[string]*datastorepb.PartitionId{
		"query in another project":      {ProjectId: "zzz"},
		"query in another database":     {ProjectId: project, DatabaseId: "db2"},
		"query in an illegal namespace": {NamespaceId: "a b"},
	}
	for name := range partitions {
		cases[name] = queryCase{q: "# PARTITION " + name + "\n" + `kind{name:"K"}`} // the comment picks the partition
	}
	run := func(addr string, text string) error {
		q := &datastorepb.Query{}
		if err := prototext.Unmarshal([]byte(text), q); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		pid := &datastorepb.PartitionId{ProjectId: project}
		for name, p := range partitions {
			if strings.Contains(text, "PARTITION "+name) {
				pid = p
			}
		}
		_, err := pbClient(t, addr).RunQuery(context.Background(), &datastorepb.RunQueryRequest{ProjectId: project,
			PartitionId: pid, QueryType: &datastorepb.RunQueryRequest_Query{Query: q}})
		return err
	}
	same := func(a, b *status.Status) bool { return a.Code() == b.Code() && a.Message() == b.Message() }
	n := startNemo(t, embeddedBackend(t.TempDir()), project, cache.Options{})
	for name, c := range cases {
		var want *status.Status
		legacy := status.Convert(run(emuAddr, c.q))
		switch c.firestore {
		case "":
			if legacy.Code() == codes.OK {
				t.Errorf("%s: the emulator ran it", name)
				continue
			}
			want = legacy
		case "ok":
			want = status.New(codes.OK, "")
		default:
			want = status.New(codes.InvalidArgument, c.firestore)
			if same(legacy, want) {
				t.Errorf("%s: the emulators agree now (%q): drop the recorded answer", name, c.firestore)
			}
		}
		if fs := status.Convert(run(fsAddr, c.q)); !same(fs, want) {
			t.Errorf("%s: the Firestore emulator answers %s %q, expected %s %q", name, fs.Code(), fs.Message(), want.Code(), want.Message())
		}
		if got := status.Convert(run(n.addr, c.q)); !same(got, want) {
			t.Errorf("%s: nemo %s %q, want %s %q", name, got.Code(), got.Message(), want.Code(), want.Message())
		}
	}
}

// TestTimestampsTruncatedAsTheEmulator: a timestamp is stored to the
// microsecond, as both emulators store it, so nemo's buffer and its store
// agree.
func TestTimestampsTruncatedAsTheEmulator(t *testing.T) {
	emuAddr := dstest.Emulator(t)
	project := dstest.Project(t)
	ctx := context.Background()
	k := &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: project}, Path: []*datastorepb.Key_PathElement{{Kind: "T", IdType: &datastorepb.Key_PathElement_Name{Name: "t"}}}}
	ts := &datastorepb.Value{ValueType: &datastorepb.Value_TimestampValue{TimestampValue: &timestamppb.Timestamp{Seconds: 5, Nanos: 123456789}}}
	e := &datastorepb.Entity{Key: k, Properties: map[string]*datastorepb.Value{"t": ts, "a": aval(ts), "e": {ValueType: &datastorepb.Value_EntityValue{EntityValue: &datastorepb.Entity{Properties: map[string]*datastorepb.Value{"t": ts}}}}}}
	stored := func(addr string) *datastorepb.Entity {
		c := pbClient(t, addr)
		if _, err := c.Commit(ctx, &datastorepb.CommitRequest{ProjectId: project, Mode: datastorepb.CommitRequest_NON_TRANSACTIONAL, Mutations: []*datastorepb.Mutation{upsert(e)}}); err != nil {
			t.Fatal(err)
		}
		r, err := c.Lookup(ctx, &datastorepb.LookupRequest{ProjectId: project, Keys: []*datastorepb.Key{k}})
		if err != nil || len(r.Found) != 1 {
			t.Fatalf("lookup: %v %v", r, err)
		}
		return r.Found[0].Entity
	}
	want := stored(emuAddr)
	if got := want.Properties["t"].GetTimestampValue().GetNanos(); got != 123456000 {
		t.Fatalf("the emulator stored %d ns", got)
	}
	n := startNemo(t, embeddedBackend(t.TempDir()), project, cache.Options{})
	if got := stored(n.addr); !proto.Equal(got.Properties["t"], want.Properties["t"]) || !proto.Equal(got.Properties["a"], want.Properties["a"]) || !proto.Equal(got.Properties["e"], want.Properties["e"]) {
		t.Errorf("nemo stored %v, the emulator %v", got.Properties, want.Properties)
	}
}
