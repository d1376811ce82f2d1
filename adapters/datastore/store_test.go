package datastore

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
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
	vals, err := adapters.Values(s.Get(ctx, ks, [][]byte{a.Key, absent, b.Key, a.Key}))
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
	if err := s.Delete(ctx, ks, adapters.Deletes([][]byte{b.Key, absent})); err != nil {
		t.Fatal(err)
	}
	vals, err = adapters.Values(s.Get(ctx, ks, [][]byte{a.Key, b.Key}))
	if err != nil {
		t.Fatal(err)
	}
	if propV(t, vals[0]) != 11 || vals[1] != nil {
		t.Fatalf("after overwrite and delete: %q", vals)
	}
	// Other partitions are separate.
	other := dscodec.Partition{Project: p.Project, Namespace: "other"}
	vals, err = adapters.Values(s.Get(ctx, other.Keyspace(), [][]byte{a.Key}))
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
	s := New(cc, Options{})
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
	vals, err := adapters.Values(s.Get(ctx, ks, keys))
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
	if err := s.Delete(ctx, ks, adapters.Deletes(keys[:501])); err != nil {
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
}

func (c *countingClient) Commit(ctx context.Context, in *datastorepb.CommitRequest, o ...grpc.CallOption) (*datastorepb.CommitResponse, error) {
	c.commits.Add(1)
	return c.DatastoreClient.Commit(ctx, in, o...)
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
	s := New(f, Options{RetryBase: time.Millisecond})
	vals, err := adapters.Values(s.Get(context.Background(), p.Keyspace(), [][]byte{a.Key, absent}))
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
	s = New(f, Options{RetryBase: time.Millisecond, Retries: 3})
	if _, err := s.Get(context.Background(), p.Keyspace(), [][]byte{a.Key}); !errors.Is(err, adapters.ErrUnavailable) {
		t.Errorf("persistent throttling: %v", err)
	}
	if f.calls != 4 {
		t.Errorf("%d calls, want 1 + 3 retries", f.calls)
	}
	f = &fakeClient{asked: map[string]bool{}, failures: 1, code: codes.PermissionDenied}
	s = New(f, Options{RetryBase: time.Millisecond})
	if _, err := s.Get(context.Background(), p.Keyspace(), [][]byte{a.Key}); err == nil || errors.Is(err, adapters.ErrUnavailable) || f.calls != 1 {
		t.Errorf("permission denied retried or mapped to unavailable: %v after %d calls", err, f.calls)
	}
	s.Close()
	if _, err := s.Get(context.Background(), p.Keyspace(), [][]byte{a.Key}); !errors.Is(err, adapters.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}
