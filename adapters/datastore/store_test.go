package datastore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/adapters/storetest"
	"github.com/nemocache/nemo/internal/dstest"
)

func openEmulator(t *testing.T) (*Store, dscodec.Partition) {
	t.Helper()
	host := dstest.Emulator(t)
	s, err := Open(context.Background(), Options{EmulatorHost: host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dscodec.Partition{Project: dstest.Project(t), Namespace: "ns1"}
}

func idEl(kind string, id int64) *datastorepb.Key_PathElement {
	return &datastorepb.Key_PathElement{Kind: kind, IdType: &datastorepb.Key_PathElement_Id{Id: id}}
}

func nameEl(kind, name string) *datastorepb.Key_PathElement {
	return &datastorepb.Key_PathElement{Kind: kind, IdType: &datastorepb.Key_PathElement_Name{Name: name}}
}

func record(t testing.TB, p dscodec.Partition, path []*datastorepb.Key_PathElement, v int64) adapters.Record {
	t.Helper()
	k, err := dscodec.EncodePath(path)
	if err != nil {
		t.Fatal(err)
	}
	val, err := dscodec.EncodeValue(&datastorepb.EntityResult{Entity: &datastorepb.Entity{
		Key:        keyOf(p, path),
		Properties: map[string]*datastorepb.Value{"v": {ValueType: &datastorepb.Value_IntegerValue{IntegerValue: v}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return adapters.Record{Key: k, Value: val}
}

func propV(t testing.TB, val []byte) int64 {
	t.Helper()
	r, err := dscodec.DecodeValue(val)
	if err != nil {
		t.Fatal(err)
	}
	return r.Entity.Properties["v"].GetIntegerValue()
}

// orderPaths are keys whose Datastore order the codec must reproduce: the
// reference list observed on the emulator plus zero bytes, control bytes,
// multibyte names, deep paths and large ids.
func orderPaths() [][]*datastorepb.Key_PathElement {
	return [][]*datastorepb.Key_PathElement{
		{idEl("J", 1)}, {idEl("K", 1)}, {idEl("K", 2)}, {idEl("K", 10)}, {idEl("K", 100)},
		{idEl("K", 9223372036854775807)}, {nameEl("K", "10")}, {nameEl("K", "Z")}, {nameEl("K", "a")},
		{nameEl("K", "aa")}, {nameEl("K", "b")}, {nameEl("K", "~")}, {nameEl("K", "é")}, {idEl("L", 1)},
		{idEl("P", 7)}, {idEl("P", 7), idEl("A", 1)}, {idEl("P", 7), idEl("K", 5)}, {idEl("P", 7), nameEl("K", "c")},
		{idEl("P", 7), nameEl("P", "x")}, {nameEl("P", "x")}, {nameEl("P", "x"), idEl("K", 3)},
		{nameEl("K", "a\x00")}, {nameEl("K", "a\x00b")}, {nameEl("K", "a\x01")}, {nameEl("K", "\x01")},
		{idEl("K", 1), idEl("K", 1)}, {idEl("K", 1), idEl("K", 1), nameEl("Z", "deep")},
		{idEl("Ka", 1)}, {idEl("K", 1<<40)}, {nameEl("K", "日本")}, {nameEl("K", "\u00ff")},
	}
}

func TestKeyOrderMatchesEmulator(t *testing.T) {
	s, p := openEmulator(t)
	ctx := context.Background()
	ks := p.Keyspace()
	var recs []adapters.Record
	for i, path := range orderPaths() {
		recs = append(recs, record(t, p, path, int64(i)))
	}
	rand.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	if _, err := s.Upsert(ctx, ks, adapters.Puts(recs)); err != nil {
		t.Fatal(err)
	}
	// The emulator's own __key__ order, straight from a kindless query.
	got, more, err := s.GetRange(ctx, ks, nil, nil, 0)
	if err != nil || more {
		t.Fatalf("GetRange: more=%v err=%v", more, err)
	}
	if len(got) != len(recs) {
		t.Fatalf("got %d records, want %d", len(got), len(recs))
	}
	for i := 1; i < len(got); i++ {
		if bytes.Compare(got[i-1].Key, got[i].Key) >= 0 {
			a, _ := dscodec.DecodePath(got[i-1].Key)
			b, _ := dscodec.DecodePath(got[i].Key)
			t.Errorf("emulator puts %v before %v; the codec disagrees", a, b)
		}
	}
	// And descending, through the service's own order.
	resp, err := s.client.RunQuery(routed(ctx, p), &datastorepb.RunQueryRequest{
		ProjectId: p.Project, PartitionId: partitionID(p),
		QueryType: &datastorepb.RunQueryRequest_Query{Query: &datastorepb.Query{
			Kind:  []*datastorepb.KindExpression{{Name: "K"}},
			Order: []*datastorepb.PropertyOrder{{Property: &datastorepb.PropertyReference{Name: "__key__"}, Direction: datastorepb.PropertyOrder_DESCENDING}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var prev []byte
	for _, r := range resp.Batch.EntityResults {
		k, _ := dscodec.EncodeKey(r.Entity.Key)
		if prev != nil && bytes.Compare(prev, k) <= 0 {
			t.Errorf("descending kind query: %v not below the previous key", r.Entity.Key.Path)
		}
		prev = k
	}
}

func TestGetUpsertDelete(t *testing.T) {
	s, p := openEmulator(t)
	ctx := context.Background()
	ks := p.Keyspace()
	a := record(t, p, []*datastorepb.Key_PathElement{idEl("K", 1)}, 10)
	b := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "b"), idEl("C", 2)}, 20)
	absent := record(t, p, []*datastorepb.Key_PathElement{idEl("K", 3)}, 0).Key
	if _, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{a, b})); err != nil {
		t.Fatal(err)
	}
	vals, err := storetest.Values(s.Get(ctx, ks, [][]byte{a.Key, absent, b.Key, a.Key}))
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) != 4 || vals[1] != nil || propV(t, vals[0]) != 10 || propV(t, vals[2]) != 20 || propV(t, vals[3]) != 10 {
		t.Fatalf("Get = %q", vals)
	}
	r, _ := dscodec.DecodeValue(vals[0])
	if r.Version == 0 { // the emulator sets no update_time
		t.Errorf("backend version missing")
	}
	// Overwrite, and delete with an absent key in the batch.
	a2 := record(t, p, []*datastorepb.Key_PathElement{idEl("K", 1)}, 11)
	if _, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{a2})); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, ks, storetest.Deletes([][]byte{b.Key, absent})); err != nil {
		t.Fatal(err)
	}
	vals, err = storetest.Values(s.Get(ctx, ks, [][]byte{a.Key, b.Key}))
	if err != nil {
		t.Fatal(err)
	}
	if propV(t, vals[0]) != 11 || vals[1] != nil {
		t.Fatalf("after overwrite and delete: %q", vals)
	}
	// Other partitions are separate.
	other := dscodec.Partition{Project: p.Project, Namespace: "other"}
	vals, err = storetest.Values(s.Get(ctx, other.Keyspace(), [][]byte{a.Key}))
	if err != nil || vals[0] != nil {
		t.Fatalf("other namespace sees the key: %q %v", vals, err)
	}
	if _, err := s.Get(ctx, "not-a-partition", [][]byte{a.Key}); !errors.Is(err, adapters.ErrInvalid) {
		t.Errorf("bad keyspace: %v", err)
	}
	if _, err := s.Get(ctx, ks, [][]byte{[]byte("junk")}); !errors.Is(err, adapters.ErrInvalid) {
		t.Errorf("bad key: %v", err)
	}
}

func TestGetRangeBounds(t *testing.T) {
	s, p := openEmulator(t)
	ctx := context.Background()
	ks := p.Keyspace()
	var recs []adapters.Record
	for i, path := range orderPaths() {
		recs = append(recs, record(t, p, path, int64(i)))
	}
	if _, err := s.Upsert(ctx, ks, adapters.Puts(recs)); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(recs, func(a, b adapters.Record) int { return bytes.Compare(a.Key, b.Key) })
	// Bounds: keys, their successors, subtree ends, cut-off encodings,
	// and keys that do not exist.
	bounds := [][]byte{nil}
	for _, r := range recs {
		bounds = append(bounds, r.Key, adapters.Successor(r.Key), dscodec.SubtreeEnd(r.Key), r.Key[:len(r.Key)-1])
	}
	for _, path := range [][]*datastorepb.Key_PathElement{{idEl("K", 5)}, {nameEl("K", "ab")}, {idEl("P", 7), idEl("B", 1)}, {idEl("A", 1)}, {idEl("Z", 1)}} {
		k, _ := dscodec.EncodePath(path)
		bounds = append(bounds, k)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 60; i++ {
		start, end := bounds[rng.IntN(len(bounds))], bounds[rng.IntN(len(bounds))]
		if rng.IntN(5) == 0 {
			end = nil
		}
		limit := rng.IntN(6)
		var want []adapters.Record
		for _, r := range recs {
			if bytes.Compare(r.Key, start) >= 0 && (end == nil || bytes.Compare(r.Key, end) < 0) {
				want = append(want, r)
			}
		}
		wantMore := false
		if limit > 0 && len(want) > limit {
			want, wantMore = want[:limit], true
		}
		got, more, err := s.GetRange(ctx, ks, start, end, limit)
		if err != nil {
			t.Fatalf("GetRange(%q, %q, %d): %v", start, end, limit, err)
		}
		if len(got) != len(want) {
			t.Fatalf("GetRange(%q, %q, %d): %d records, want %d", start, end, limit, len(got), len(want))
		}
		for j := range got {
			if !bytes.Equal(got[j].Key, want[j].Key) || propV(t, got[j].Value) != propV(t, want[j].Value) {
				t.Fatalf("GetRange(%q, %q, %d)[%d] = %q, want %q", start, end, limit, j, got[j].Key, want[j].Key)
			}
		}
		// more may be true when the range ended exactly at the limit.
		if wantMore && !more {
			t.Fatalf("GetRange(%q, %q, %d): more = false with records left", start, end, limit)
		}
	}
}

func TestBatchesAndPaging(t *testing.T) {
	host := dstest.Emulator(t)
	inner, err := Open(context.Background(), Options{EmulatorHost: host})
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	cc := &countingClient{DatastoreClient: inner.client}
	s := over(t, cc, Options{})
	p := dscodec.Partition{Project: dstest.Project(t)}
	ks := p.Keyspace()
	ctx := context.Background()
	// 501 records: two commits, two query pages; 1001 keys (500 absent):
	// two lookups. (The emulator commits slowly, so writes stay few.)
	var recs []adapters.Record
	var keys [][]byte
	for i := 1; i <= 1001; i++ {
		r := record(t, p, []*datastorepb.Key_PathElement{idEl("K", int64(i))}, int64(i))
		if i <= 501 {
			recs = append(recs, r)
		}
		keys = append(keys, r.Key)
	}
	if _, err := s.Upsert(ctx, ks, adapters.Puts(recs)); err != nil {
		t.Fatal(err)
	}
	if n := cc.commits.Load(); n != 2 {
		t.Errorf("501 upserts took %d commits, want 2", n)
	}
	vals, err := storetest.Values(s.Get(ctx, ks, keys))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if i < 501 && (v == nil || propV(t, v) != int64(i+1)) || i >= 501 && v != nil {
			t.Fatalf("key %d: %q", i+1, v)
		}
	}
	if n := cc.lookups.Load(); n != 2 {
		t.Errorf("1001 keys took %d lookups, want 2", n)
	}
	got, more, err := s.GetRange(ctx, ks, nil, nil, 0)
	if err != nil || more || len(got) != 501 {
		t.Fatalf("full scan: %d records, more %v, %v", len(got), more, err)
	}
	if n := cc.queries.Load(); n < 2 {
		t.Errorf("501 records in %d query pages; want paging by cursor", n)
	}
	if err := s.Delete(ctx, ks, storetest.Deletes(keys[:501])); err != nil {
		t.Fatal(err)
	}
	got, _, err = s.GetRange(ctx, ks, nil, nil, 0)
	if err != nil || len(got) != 0 {
		t.Fatalf("after delete: %d records, %v", len(got), err)
	}
}

func TestAllocateAndReserve(t *testing.T) {
	s, p := openEmulator(t)
	ctx := context.Background()
	inc := &datastorepb.Key{PartitionId: partitionID(p), Path: []*datastorepb.Key_PathElement{{Kind: "K"}}}
	keys, err := s.AllocateIDs(ctx, p.Project, p.Database, []*datastorepb.Key{inc, inc})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].Path[0].GetId() == 0 || keys[0].Path[0].GetId() == keys[1].Path[0].GetId() {
		t.Fatalf("allocated %v", keys)
	}
	full := &datastorepb.Key{PartitionId: partitionID(p), Path: []*datastorepb.Key_PathElement{idEl("K", 77)}}
	if err := s.ReserveIDs(ctx, p.Project, p.Database, []*datastorepb.Key{full}); err != nil {
		t.Fatal(err)
	}
}

// countingClient counts calls; fakeClient injects faults.
type countingClient struct {
	datastorepb.DatastoreClient
	commits, lookups, queries atomic.Int32
	txns                      atomic.Int32 // transactional commits
	wide                      atomic.Int32 // commits refused for too many entity groups
}

func (c *countingClient) Commit(ctx context.Context, in *datastorepb.CommitRequest, o ...grpc.CallOption) (*datastorepb.CommitResponse, error) {
	c.commits.Add(1)
	if in.Mode == datastorepb.CommitRequest_TRANSACTIONAL {
		c.txns.Add(1)
	}
	resp, err := c.DatastoreClient.Commit(ctx, in, o...)
	if status.Code(err) == codes.InvalidArgument && strings.Contains(status.Convert(err).Message(), "too many entity groups") {
		c.wide.Add(1)
	}
	return resp, err
}

func (c *countingClient) Lookup(ctx context.Context, in *datastorepb.LookupRequest, o ...grpc.CallOption) (*datastorepb.LookupResponse, error) {
	c.lookups.Add(1)
	return c.DatastoreClient.Lookup(ctx, in, o...)
}

func (c *countingClient) RunQuery(ctx context.Context, in *datastorepb.RunQueryRequest, o ...grpc.CallOption) (*datastorepb.RunQueryResponse, error) {
	c.queries.Add(1)
	return c.DatastoreClient.RunQuery(ctx, in, o...)
}

// fakeClient answers Lookup from a map, deferring every key the first time
// it is asked, and fails the first failures calls with code.
type fakeClient struct {
	datastorepb.DatastoreClient
	data     map[string]*datastorepb.Entity
	asked    map[string]bool
	failures int
	code     codes.Code
	calls    int
}

func (f *fakeClient) Lookup(_ context.Context, in *datastorepb.LookupRequest, _ ...grpc.CallOption) (*datastorepb.LookupResponse, error) {
	f.calls++
	if f.failures > 0 {
		f.failures--
		return nil, status.Error(f.code, "injected")
	}
	resp := &datastorepb.LookupResponse{}
	for _, k := range in.Keys {
		enc, _ := dscodec.EncodeKey(k)
		switch e, ok := f.data[string(enc)]; {
		case !f.asked[string(enc)]:
			f.asked[string(enc)] = true
			resp.Deferred = append(resp.Deferred, k)
		case ok:
			resp.Found = append(resp.Found, &datastorepb.EntityResult{Entity: e, Version: 5})
		default:
			resp.Missing = append(resp.Missing, &datastorepb.EntityResult{Entity: &datastorepb.Entity{Key: k}})
		}
	}
	return resp, nil
}

func TestLookupDeferredAndRetries(t *testing.T) {
	p := dscodec.Partition{Project: "p"}
	a := record(t, p, []*datastorepb.Key_PathElement{idEl("K", 1)}, 7)
	absent := record(t, p, []*datastorepb.Key_PathElement{idEl("K", 2)}, 0).Key
	ent, _ := dscodec.DecodeValue(a.Value)
	f := &fakeClient{data: map[string]*datastorepb.Entity{string(a.Key): ent.Entity}, asked: map[string]bool{}, failures: 2, code: codes.Unavailable}
	s := over(t, f, Options{RetryBase: time.Millisecond})
	vals, err := storetest.Values(s.Get(context.Background(), p.Keyspace(), [][]byte{a.Key, absent}))
	if err != nil {
		t.Fatal(err)
	}
	if vals[1] != nil || propV(t, vals[0]) != 7 {
		t.Fatalf("Get = %q", vals)
	}
	if f.calls != 4 { // two failures, one all-deferred answer, one real answer
		t.Errorf("%d lookups, want 4", f.calls)
	}

	f = &fakeClient{asked: map[string]bool{}, failures: 100, code: codes.ResourceExhausted}
	s = over(t, f, Options{RetryBase: time.Millisecond, Retries: 3})
	if _, err := s.Get(context.Background(), p.Keyspace(), [][]byte{a.Key}); !errors.Is(err, adapters.ErrUnavailable) {
		t.Errorf("persistent throttling: %v", err)
	}
	if f.calls != 4 {
		t.Errorf("%d calls, want 1 + 3 retries", f.calls)
	}
	f = &fakeClient{asked: map[string]bool{}, failures: 100, code: codes.Unavailable}
	s = over(t, f, Options{Retries: -1})
	if _, err := s.Get(context.Background(), p.Keyspace(), [][]byte{a.Key}); !errors.Is(err, adapters.ErrUnavailable) || f.calls != 1 {
		t.Errorf("retries -1: %v after %d calls, want ErrUnavailable after 1", err, f.calls)
	}
	f = &fakeClient{asked: map[string]bool{}, failures: 1, code: codes.PermissionDenied}
	s = over(t, f, Options{RetryBase: time.Millisecond})
	if _, err := s.Get(context.Background(), p.Keyspace(), [][]byte{a.Key}); !errors.Is(err, adapters.ErrAccessDenied) || errors.Is(err, adapters.ErrUnavailable) || f.calls != 1 {
		t.Errorf("permission denied retried or not mapped to ErrAccessDenied: %v after %d calls", err, f.calls)
	}
	s.Close()
	if _, err := s.Get(context.Background(), p.Keyspace(), [][]byte{a.Key}); !errors.Is(err, adapters.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// over is a Store over client: another Store's client wrapped to count
// calls or inject faults.
func over(t testing.TB, client datastorepb.DatastoreClient, opts Options) *Store {
	t.Helper()
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	return &Store{client: client, opts: opts}
}

func TestOptions(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	if o.Retries != 6 || o.RetryBase != 50*time.Millisecond || o.Logger == nil {
		t.Errorf("defaults: %+v", o)
	}
	again := o
	again.EnsureDefaults()
	if again.Retries != o.Retries || again.RetryBase != o.RetryBase || again.Logger != o.Logger {
		t.Errorf("EnsureDefaults is not idempotent: %+v, then %+v", o, again)
	}
	none := Options{Retries: -1}
	none.EnsureDefaults()
	if none.Retries != -1 || none.Validate() != nil {
		t.Errorf("retries -1 (none): %+v, %v", none, none.Validate())
	}
	err := Options{Retries: -2, RetryBase: -time.Second}.Validate()
	if err == nil || !strings.Contains(err.Error(), "retries -2") || !strings.Contains(err.Error(), "retry base -1s") {
		t.Errorf("Validate: %v", err)
	}
	if _, err := Open(context.Background(), Options{EmulatorHost: "127.0.0.1:1", Retries: -2}); err == nil {
		t.Error("Open took invalid options")
	}
}

// countingStore is a Store over the emulator whose calls are counted.
func countingStore(t *testing.T) (*Store, *countingClient, dscodec.Partition) {
	t.Helper()
	inner, _ := openEmulator(t)
	cc := &countingClient{DatastoreClient: inner.client}
	return over(t, cc, Options{}), cc, dscodec.Partition{Project: dstest.Project(t), Namespace: "ns1"}
}

func (c *countingClient) reset() {
	c.commits.Store(0)
	c.lookups.Store(0)
	c.queries.Store(0)
	c.txns.Store(0)
	c.wide.Store(0)
}

func TestVersions(t *testing.T) {
	s, p := openEmulator(t)
	ctx := context.Background()
	ks := p.Keyspace()
	a := record(t, p, []*datastorepb.Key_PathElement{idEl("K", 1)}, 1)
	b := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "b")}, 2)
	absent := record(t, p, []*datastorepb.Key_PathElement{idEl("K", 3)}, 0).Key
	vers, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{a, b}))
	if err != nil {
		t.Fatal(err)
	}
	if len(vers) != 2 || vers[0] == "" || vers[1] == "" {
		t.Fatalf("Upsert versions %q", vers)
	}
	recs, err := s.Get(ctx, ks, [][]byte{a.Key, absent, b.Key})
	if err != nil {
		t.Fatal(err)
	}
	if recs[0].Version != vers[0] || recs[2].Version != vers[1] || recs[1].Version != "" || recs[1].Value != nil {
		t.Fatalf("Get versions %q %q %q, Upsert returned %q", recs[0].Version, recs[1].Version, recs[2].Version, vers)
	}
	got, _, err := s.GetRange(ctx, ks, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Version != vers[0] || got[1].Version != vers[1] {
		t.Fatalf("GetRange = %v, want versions %q", got, vers)
	}
	// Every write that changes the entity gives it a new version.
	seen := map[adapters.Version]bool{vers[0]: true}
	prev := vers[0]
	for i := 0; i < 3; i++ {
		ai := record(t, p, []*datastorepb.Key_PathElement{idEl("K", 1)}, int64(10+i))
		v, err := s.Upsert(ctx, ks, []adapters.Write{{Key: a.Key, Value: ai.Value, Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: prev}}})
		if err != nil {
			t.Fatal(err)
		}
		if seen[v[0]] {
			t.Fatalf("write %d: version %q again", i, v[0])
		}
		seen[v[0]] = true
		recs, err := s.Get(ctx, ks, [][]byte{a.Key})
		if err != nil || recs[0].Version != v[0] {
			t.Fatalf("Get after write %d: %v %v, want version %q", i, recs, err, v[0])
		}
		prev = v[0]
	}
	// Writing the entity as it is changes nothing, not even the version
	// (Datastore documents this for MutationResult.version).
	same := record(t, p, []*datastorepb.Key_PathElement{idEl("K", 1)}, 12)
	v, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{same}))
	if err != nil || v[0] != prev {
		t.Fatalf("unchanged entity written again: version %q, want %q (%v)", v, prev, err)
	}
	if err := s.Delete(ctx, ks, storetest.Deletes([][]byte{a.Key})); err != nil {
		t.Fatal(err)
	}
	v, err = s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{a}))
	if err != nil || seen[v[0]] {
		t.Fatalf("re-created key: version %q (seen before: %v), %v", v, seen[v[0]], err)
	}
}

// keyState is the state a precondition case starts from.
type keyState int

const (
	stAbsent     keyState = iota // deleted: the expected version is its last one
	stAtVersion                  // present at the expected version
	stAtOther                    // present, written again after the expected version
	stNeverValid                 // present; the expected version is not a version at all
)

func (st keyState) String() string {
	return [...]string{"absent", "at-version", "at-other-version", "bad-version"}[st]
}

var kindNames = map[adapters.ExpectKind]string{adapters.ExpectAny: "any", adapters.ExpectAbsent: "absent", adapters.ExpectVersion: "version"}

// precondCase is one write against a key in one state.
type precondCase struct {
	del      bool
	kind     adapters.ExpectKind
	st       keyState
	key      []byte
	expected adapters.Version // the version the write names
	current  adapters.Version // the key's version before the write ("" absent)
	w        adapters.Write
}

func (c precondCase) holds() bool {
	switch c.kind {
	case adapters.ExpectAny:
		return true
	case adapters.ExpectAbsent:
		return c.st == stAbsent
	}
	return c.st == stAtVersion
}

func (c precondCase) String() string {
	op := "upsert"
	if c.del {
		op = "delete"
	}
	return fmt.Sprintf("%s/%s/%s", op, kindNames[c.kind], c.st)
}

// precondCases puts a fresh key per case, under prefix, into its state.
func precondCases(t *testing.T, s *Store, p dscodec.Partition, prefix string) []precondCase {
	t.Helper()
	ctx := context.Background()
	var cs []precondCase
	for _, del := range []bool{false, true} {
		for _, kind := range []adapters.ExpectKind{adapters.ExpectAny, adapters.ExpectAbsent, adapters.ExpectVersion} {
			for _, st := range []keyState{stAbsent, stAtVersion, stAtOther, stNeverValid} {
				if st == stNeverValid && kind != adapters.ExpectVersion {
					continue
				}
				c := precondCase{del: del, kind: kind, st: st}
				r := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", fmt.Sprintf("%s-%v", prefix, c))}, 1)
				c.key = r.Key
				v, err := s.Upsert(ctx, p.Keyspace(), adapters.Puts([]adapters.Record{r}))
				if err != nil {
					t.Fatal(err)
				}
				c.expected, c.current = v[0], v[0]
				switch st {
				case stAbsent:
					if err := s.Delete(ctx, p.Keyspace(), storetest.Deletes([][]byte{r.Key})); err != nil {
						t.Fatal(err)
					}
					c.current = ""
				case stAtOther:
					// A different value: an unchanged entity keeps its version.
					r2 := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", fmt.Sprintf("%s-%v", prefix, c))}, 5)
					v, err := s.Upsert(ctx, p.Keyspace(), adapters.Puts([]adapters.Record{r2}))
					if err != nil {
						t.Fatal(err)
					}
					c.current = v[0]
				case stNeverValid:
					c.expected = "v1"
				}
				c.w = adapters.Write{Key: r.Key, Expect: adapters.Expect{Kind: kind}}
				if kind == adapters.ExpectVersion {
					c.w.Expect.Version = c.expected
				}
				if !del {
					c.w.Value = record(t, p, []*datastorepb.Key_PathElement{nameEl("K", fmt.Sprintf("%s-%v", prefix, c))}, 2).Value
				}
				cs = append(cs, c)
			}
		}
	}
	return cs
}

// checkCase checks the key of c after its write: applied (with version
// got, for an upsert) if its precondition held, else untouched and in
// conflicts at index with the key's state.
func checkCase(t *testing.T, s *Store, p dscodec.Partition, c precondCase, index int, got adapters.Version, conflicts map[int]adapters.Conflict) {
	t.Helper()
	recs, err := s.Get(context.Background(), p.Keyspace(), [][]byte{c.key})
	if err != nil {
		t.Fatal(err)
	}
	r := recs[0]
	conf, refused := conflicts[index]
	switch {
	case c.holds() && refused:
		t.Errorf("%v: refused (%+v) though its precondition holds", c, conf)
	case c.holds() && c.del:
		if r.Value != nil {
			t.Errorf("%v: key still present after the delete", c)
		}
	case c.holds():
		if r.Value == nil || propV(t, r.Value) != 2 || got == "" || r.Version != got || got == c.current {
			t.Errorf("%v: after the upsert Get = version %q value %v; Upsert returned %q (before: %q)", c, r.Version, r.Value != nil, got, c.current)
		}
	case !refused:
		t.Errorf("%v: not refused", c)
	default:
		want := adapters.Conflict{Index: index, Key: c.key, Exists: c.st != stAbsent, Current: c.current}
		if conf.Index != want.Index || !bytes.Equal(conf.Key, want.Key) || conf.Exists != want.Exists || conf.Current != want.Current {
			t.Errorf("%v: conflict %+v, want %+v", c, conf, want)
		}
		if got != "" {
			t.Errorf("%v: refused write has version %q", c, got)
		}
		if r.Version != c.current {
			t.Errorf("%v: refused write changed the key: version %q, was %q", c, r.Version, c.current)
		}
	}
}

func conflictsOf(t *testing.T, err error) map[int]adapters.Conflict {
	t.Helper()
	m := map[int]adapters.Conflict{}
	if err == nil {
		return m
	}
	var ce *adapters.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, adapters.ErrConflict) {
		t.Fatalf("not a conflict: %v", err)
	}
	for i, c := range ce.Conflicts {
		if i > 0 && ce.Conflicts[i-1].Index >= c.Index {
			t.Errorf("conflicts out of order: %+v", ce.Conflicts)
		}
		m[c.Index] = c
	}
	return m
}

// run applies ws (all upserts or all deletes) and returns the versions.
func run(t *testing.T, s *Store, p dscodec.Partition, del bool, ws []adapters.Write) ([]adapters.Version, error) {
	t.Helper()
	if del {
		return make([]adapters.Version, len(ws)), s.Delete(context.Background(), p.Keyspace(), ws)
	}
	vers, err := s.Upsert(context.Background(), p.Keyspace(), ws)
	if len(vers) != len(ws) {
		t.Fatalf("Upsert of %d writes returned %d versions (%v)", len(ws), len(vers), err)
	}
	return vers, err
}

func TestPreconditionsAlone(t *testing.T) {
	s, cc, p := countingStore(t)
	for _, c := range precondCases(t, s, p, "alone") {
		cc.reset()
		vers, err := run(t, s, p, c.del, []adapters.Write{c.w})
		commits, lookups := cc.commits.Load(), cc.lookups.Load()
		conflicts := conflictsOf(t, err)
		checkCase(t, s, p, c, 0, vers[0], conflicts)
		// Remote calls: one Commit when the write is applied (none for
		// a delete of an absent key under ExpectAbsent, which is one
		// Lookup); a refusal adds the Lookup that reads the key's state,
		// and a refused insert is the failed commit alone.
		var wantC, wantL int32
		switch {
		case c.del && c.kind == adapters.ExpectAbsent:
			wantC, wantL = 0, 1
		case c.holds():
			wantC, wantL = 1, 0
		case c.st == stNeverValid:
			wantC, wantL = 0, 1
		default:
			wantC, wantL = 1, 1
		}
		if commits != wantC || lookups != wantL {
			t.Errorf("%v: %d commits and %d lookups, want %d and %d", c, commits, lookups, wantC, wantL)
		}
		// Only a batch with an insert is a transaction.
		wantTxn := int32(0)
		if !c.del && c.kind == adapters.ExpectAbsent {
			wantTxn = 1
		}
		if n := cc.txns.Load(); n != wantTxn {
			t.Errorf("%v: %d transactional commits, want %d", c, n, wantTxn)
		}
	}
}

func TestPreconditionsBatched(t *testing.T) {
	s, cc, p := countingStore(t)
	ctx := context.Background()
	for _, del := range []bool{false, true} {
		cases := slices.DeleteFunc(precondCases(t, s, p, "batch"), func(c precondCase) bool { return c.del != del })
		// Each case between unconditional writes of fresh keys, which
		// are applied whatever the cases' outcomes.
		var ws []adapters.Write
		at := map[int]precondCase{}
		var good [][]byte
		for i, c := range cases {
			r := record(t, p, []*datastorepb.Key_PathElement{nameEl("G", fmt.Sprintf("good-%v-%d", del, i))}, 3)
			if del {
				if _, err := s.Upsert(ctx, p.Keyspace(), adapters.Puts([]adapters.Record{r})); err != nil {
					t.Fatal(err)
				}
			}
			good = append(good, r.Key)
			ws = append(ws, adapters.Write{Key: r.Key, Value: r.Value})
			if del {
				ws[len(ws)-1].Value = nil
			}
			at[len(ws)] = c
			ws = append(ws, c.w)
		}
		cc.reset()
		vers, err := run(t, s, p, del, ws)
		commits, lookups := cc.commits.Load(), cc.lookups.Load()
		conflicts := conflictsOf(t, err)
		refusals := 0
		for i, c := range at {
			checkCase(t, s, p, c, i, vers[i], conflicts)
			if !c.holds() {
				refusals++
			}
		}
		if len(conflicts) != refusals {
			t.Errorf("del=%v: %d conflicts, want %d", del, len(conflicts), refusals)
		}
		recs, err := s.Get(ctx, p.Keyspace(), good)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range recs {
			if del && r.Value != nil || !del && (r.Value == nil || r.Version != vers[2*i]) {
				t.Errorf("del=%v: good write %d not applied: %+v (returned version %q)", del, 2*i, r, vers[2*i])
			}
		}
		// One commit for the batch and one Lookup for the refused
		// keys' state; upserts: the transaction failed by the existing
		// inserts, one Lookup of the inserts' keys, the commit again;
		// deletes: one Lookup for the ExpectAbsent deletes.
		if wantC, wantL := int32(1), int32(2); !del && (commits != wantC+1 || lookups != wantL) || del && (commits != wantC || lookups != wantL) {
			t.Errorf("del=%v: %d writes, %d conflicts: %d commits, %d lookups", del, len(ws), len(conflicts), commits, lookups)
		}
	}
}

// TestPreconditionsRepeatedKey: a call's later write of a key sees the
// outcome of its earlier ones.
func TestPreconditionsRepeatedKey(t *testing.T) {
	s, p := openEmulator(t)
	ctx := context.Background()
	ks := p.Keyspace()
	r := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "rep")}, 1)
	absent := adapters.Expect{Kind: adapters.ExpectAbsent}
	vers, err := s.Upsert(ctx, ks, []adapters.Write{{Key: r.Key, Value: r.Value, Expect: absent}, {Key: r.Key, Value: r.Value, Expect: absent}})
	conflicts := conflictsOf(t, err)
	if vers[0] == "" || vers[1] != "" || len(conflicts) != 1 || conflicts[1].Current != vers[0] || !conflicts[1].Exists {
		t.Fatalf("insert twice: versions %q, conflicts %+v", vers, conflicts)
	}
	err = s.Delete(ctx, ks, []adapters.Write{{Key: r.Key}, {Key: r.Key, Expect: absent}, {Key: r.Key, Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: vers[0]}}})
	conflicts = conflictsOf(t, err)
	if len(conflicts) != 1 || conflicts[2].Exists || conflicts[2].Current != "" {
		t.Fatalf("delete, then absent, then at the deleted version: conflicts %+v", conflicts)
	}
}

// TestUnconditionalCalls: unconditional writes are the plain
// non-transactional commits they always were, one per batch.
func TestUnconditionalCalls(t *testing.T) {
	s, cc, p := countingStore(t)
	ctx := context.Background()
	var recs []adapters.Record
	for i := 1; i <= 3; i++ {
		recs = append(recs, record(t, p, []*datastorepb.Key_PathElement{idEl("K", int64(i))}, int64(i)))
	}
	if _, err := s.Upsert(ctx, p.Keyspace(), adapters.Puts(recs)); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, p.Keyspace(), storetest.Deletes([][]byte{recs[0].Key})); err != nil {
		t.Fatal(err)
	}
	if c, l, x := cc.commits.Load(), cc.lookups.Load(), cc.txns.Load(); c != 2 || l != 0 || x != 0 {
		t.Errorf("an upsert and a delete: %d commits, %d lookups, %d transactional; want 2, 0, 0", c, l, x)
	}
	if _, err := s.Upsert(ctx, p.Keyspace(), []adapters.Write{{Key: recs[0].Key, Value: recs[0].Value, Expect: adapters.Expect{Kind: 9}}}); !errors.Is(err, adapters.ErrInvalid) {
		t.Errorf("unknown precondition: %v", err)
	}
}

// existsOnce answers the first transactional Commit with ALREADY_EXISTS
// without applying it, as when a key is inserted and deleted again by
// another writer between the commit and the adapter's Lookup.
type existsOnce struct {
	datastorepb.DatastoreClient
	failed bool
}

func (c *existsOnce) Commit(ctx context.Context, in *datastorepb.CommitRequest, o ...grpc.CallOption) (*datastorepb.CommitResponse, error) {
	if in.Mode == datastorepb.CommitRequest_TRANSACTIONAL && !c.failed {
		c.failed = true
		return nil, status.Error(codes.AlreadyExists, "entity already exists")
	}
	return c.DatastoreClient.Commit(ctx, in, o...)
}

func TestInsertRaceCommitsAgain(t *testing.T) {
	inner, p := openEmulator(t)
	s := over(t, &existsOnce{DatastoreClient: inner.client}, Options{})
	r := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "race")}, 1)
	vers, err := s.Upsert(context.Background(), p.Keyspace(), []adapters.Write{{Key: r.Key, Value: r.Value, Expect: adapters.Expect{Kind: adapters.ExpectAbsent}}})
	if err != nil || vers[0] == "" {
		t.Fatalf("insert after a spurious ALREADY_EXISTS: %q %v", vers, err)
	}
	recs, err := inner.Get(context.Background(), p.Keyspace(), [][]byte{r.Key})
	if err != nil || recs[0].Version != vers[0] {
		t.Fatalf("Get = %+v %v, want version %q", recs, err, vers[0])
	}
}

// TestStamped: the value Stamped makes from a written value and the version
// the write answered is what Get then returns: the same entity
// (dscodec.SameEntity) at the same version.
func TestStamped(t *testing.T) {
	s, p := openEmulator(t)
	p.Namespace = "stamped"
	ks := p.Keyspace()
	ctx := context.Background()
	rec := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "stamped")}, 42)
	vers, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{rec}))
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Stamped(rec.Value, vers[0])
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, ks, [][]byte{rec.Key})
	if err != nil {
		t.Fatal(err)
	}
	rs, rg := mustDecode(t, st), mustDecode(t, got[0].Value)
	if rs.Version != rg.Version || adapters.Version(fmt.Sprint(rs.Version)) != got[0].Version {
		t.Errorf("stamped version %d, Get's %d (record version %q)", rs.Version, rg.Version, got[0].Version)
	}
	if !dscodec.SameEntity(got[0].Value, st) {
		t.Errorf("stamped entity differs from Get's:\n%v\n%v", rs, rg)
	}
	if _, err := s.Stamped(rec.Value, "not-a-version"); !errors.Is(err, adapters.ErrInvalid) {
		t.Errorf("Stamped with a bad version: %v, want ErrInvalid", err)
	}
}

func mustDecode(t *testing.T, v []byte) *datastorepb.EntityResult {
	t.Helper()
	r, err := dscodec.DecodeValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
