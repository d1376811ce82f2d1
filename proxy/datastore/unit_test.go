package datastore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/genproto/googleapis/type/latlng"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/txn"
)

func randValue(r *rand.Rand) *datastorepb.Value {
	switch r.IntN(10) {
	case 0:
		return &datastorepb.Value{ValueType: &datastorepb.Value_NullValue{}}
	case 1:
		return ival(int64(r.IntN(7)) - 3)
	case 2:
		return &datastorepb.Value{ValueType: &datastorepb.Value_TimestampValue{TimestampValue: timestamppb.New(time.UnixMicro(int64(r.IntN(7)) - 3))}}
	case 3:
		return &datastorepb.Value{ValueType: &datastorepb.Value_BooleanValue{BooleanValue: r.IntN(2) == 0}}
	case 4:
		return sval([]string{"", "a", "ab", "b"}[r.IntN(4)])
	case 5:
		return &datastorepb.Value{ValueType: &datastorepb.Value_BlobValue{BlobValue: []byte([]string{"", "a", "ab", "b"}[r.IntN(4)])}}
	case 6:
		return &datastorepb.Value{ValueType: &datastorepb.Value_DoubleValue{DoubleValue: []float64{math.NaN(), math.Inf(-1), -1, 0, math.Copysign(0, -1), 2}[r.IntN(6)]}}
	case 7:
		return &datastorepb.Value{ValueType: &datastorepb.Value_GeoPointValue{GeoPointValue: &latlng.LatLng{Latitude: float64(r.IntN(3)), Longitude: float64(r.IntN(3))}}}
	default:
		return &datastorepb.Value{ValueType: &datastorepb.Value_KeyValue{KeyValue: pkey("K", 1+r.IntN(3))}}
	}
}

// TestCompareValuesIsATotalOrder checks antisymmetry and transitivity on
// random values of every type.
func TestCompareValuesIsATotalOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 20000; i++ {
		a, b, c := randValue(r), randValue(r), randValue(r)
		ab, ba := compareValues(a, b), compareValues(b, a)
		if ab != -ba {
			t.Fatalf("not antisymmetric: %v vs %v: %d %d", a, b, ab, ba)
		}
		if ab <= 0 && compareValues(b, c) <= 0 && compareValues(a, c) > 0 {
			t.Fatalf("not transitive: %v <= %v <= %v but a > c", a, b, c)
		}
		if compareValues(a, a) != 0 {
			t.Fatalf("%v != itself", a)
		}
	}
	if compareValues(ival(1), &datastorepb.Value{ValueType: &datastorepb.Value_TimestampValue{TimestampValue: timestamppb.New(time.UnixMicro(1))}}) != 0 {
		t.Error("an integer differs from the timestamp with as many microseconds")
	}
}

func TestIndexValues(t *testing.T) {
	e := &datastorepb.Entity{Key: pkey("K", 1), Properties: map[string]*datastorepb.Value{
		"a":     aval(ival(1), &datastorepb.Value{ValueType: &datastorepb.Value_IntegerValue{IntegerValue: 2}, ExcludeFromIndexes: true}, ival(3)),
		"empty": aval(),
		"x":     {ValueType: &datastorepb.Value_StringValue{StringValue: "hidden"}, ExcludeFromIndexes: true},
		"e": {ValueType: &datastorepb.Value_EntityValue{EntityValue: &datastorepb.Entity{Properties: map[string]*datastorepb.Value{
			"b": ival(5)}}}},
		"dot.name": ival(6),
	}}
	for name, want := range map[string]int{"a": 2, "empty": 0, "x": 0, "e": 0, "e.b": 1, "dot.name": 1, "missing": 0, "__key__": 1} {
		if got := indexValues(e, name); len(got) != want {
			t.Errorf("%s: %d values, want %d", name, len(got), want)
		}
	}
}

func TestToStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{fmt.Errorf("x: %w", txn.ErrConflict), codes.Aborted},
		{fmt.Errorf("%w: %w", txn.ErrAborted, txn.ErrConflict), codes.Aborted},
		{fmt.Errorf("%w: %w", txn.ErrAborted, txn.ErrIdleTimeout), codes.InvalidArgument},
		{txn.ErrDone, codes.InvalidArgument},
		{fmt.Errorf("%w: %w: %w", txn.ErrAborted, txn.ErrCommitLog, txn.ErrOneKeyspace), codes.InvalidArgument},
		{txn.ErrExists, codes.AlreadyExists},
		{txn.ErrNotFound, codes.NotFound},
		{txn.ErrReadOnly, codes.InvalidArgument},
		{fmt.Errorf("k: %w", cache.ErrKeyTooLarge), codes.InvalidArgument},
		{cache.ErrValueTooLarge, codes.InvalidArgument},
		{fmt.Errorf("%w: down", cache.ErrStore), codes.Unavailable},
		{txn.ErrClosed, codes.Unavailable},
		{fmt.Errorf("%w: held by b", txn.ErrNotLeaseHolder), codes.FailedPrecondition},
		{fmt.Errorf("%w: lapsed", txn.ErrLeaseUnavailable), codes.Unavailable},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{status.Error(codes.PermissionDenied, "x"), codes.PermissionDenied},
		{errors.New("surprise"), codes.Internal},
	} {
		if got := status.Code(toStatus(tc.err)); got != tc.code {
			t.Errorf("%v -> %v, want %v", tc.err, got, tc.code)
		}
	}
	if toStatus(nil) != nil {
		t.Error("nil error mapped")
	}
	// This node's own lease unconfirmed: the answer says when to retry
	// (the REST API's Retry-After, gRPC's trailers-only pushback); other
	// errors do not.
	if d, ok := retryDelay(toStatus(txn.ErrLeaseUnavailable)); !ok || d != time.Second {
		t.Errorf("lease unconfirmed: retry delay %v %v, want 1s", d, ok)
	}
	if _, ok := retryDelay(toStatus(fmt.Errorf("%w: held by b", txn.ErrNotLeaseHolder))); ok {
		t.Error("another node's lease says when to retry")
	}
}

func TestCursorRoundTrip(t *testing.T) {
	p := &position{sort: []*datastorepb.Value{ival(3), sval("x")}, key: []byte("k\x00\x01"), proj: []*datastorepb.Value{ival(9)}}
	got, err := decodeCursor(encodeCursor(p), 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.key, p.key) || len(got.sort) != 2 || !proto.Equal(got.sort[1], p.sort[1]) || !proto.Equal(got.proj[0], p.proj[0]) {
		t.Fatalf("round trip: %+v", got)
	}
	for _, shape := range [][2]int{{1, 1}, {2, 0}, {3, 1}} {
		if _, err := decodeCursor(encodeCursor(p), shape[0], shape[1]); status.Code(err) != codes.InvalidArgument {
			t.Errorf("shape %v accepted", shape)
		}
	}
}

func FuzzDecodeCursor(f *testing.F) {
	f.Add(encodeCursor(&position{key: []byte("k")}), uint8(0), uint8(0))
	f.Add(encodeCursor(&position{sort: []*datastorepb.Value{ival(1)}, key: []byte("k"), proj: []*datastorepb.Value{sval("a")}}), uint8(1), uint8(1))
	f.Add([]byte("nC1\x0a\x02\x10\x05"), uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, nSort, nProj uint8) {
		p, err := decodeCursor(b, int(nSort%4), int(nProj%4))
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("error %v is not INVALID_ARGUMENT", err)
			}
			return
		}
		if len(p.sort) != int(nSort%4) || len(p.proj) != int(nProj%4) {
			t.Fatalf("decoded the wrong shape")
		}
		again, err := decodeCursor(encodeCursor(p), len(p.sort), len(p.proj))
		if err != nil || !bytes.Equal(again.key, p.key) {
			t.Fatalf("re-encoded cursor does not decode: %v", err)
		}
	})
}

func TestLocalAllocatorPersists(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	open := func() (*LocalAllocator, func()) {
		s, err := embedded.Open(dir, embedded.Options{NoSync: true, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		buf, _ := cache.New(s, cache.Options{Logger: quiet, DisableWorkers: true})
		eng, _ := txn.New(buf, txn.Options{Logger: quiet})
		return NewLocalAllocator(eng), func() {
			if err := eng.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			eng.Close()
			if !t.Failed() {
				if err := buf.Check(ctx); err != nil {
					t.Errorf("buffer invariants: %v", err)
				}
			}
			buf.Close()
			s.Close()
		}
	}
	inc := &datastorepb.Key{Path: []*datastorepb.Key_PathElement{{Kind: "K"}}}
	seen := map[int64]bool{}
	for round := 0; round < 2; round++ {
		a, closeAll := open()
		if round == 1 {
			// A reserved id is skipped: reserve the next one the counter would give.
			next := scatter(allocBlock + 1)
			if err := a.ReserveIDs(ctx, "p", "", []*datastorepb.Key{{Path: []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: next}}}}}); err != nil {
				t.Fatal(err)
			}
			seen[next] = true
		}
		for i := 0; i < 50; i++ {
			keys, err := a.AllocateIDs(ctx, "p", "", []*datastorepb.Key{inc})
			if err != nil {
				t.Fatal(err)
			}
			id := keys[0].Path[0].GetId()
			if id <= 0 || id >= idSpace || seen[id] {
				t.Fatalf("round %d: id %d repeated or out of range", round, id)
			}
			seen[id] = true
		}
		closeAll()
	}
}

// TestStoredEntity: the entity a commit stores has the resolved key and
// its timestamps truncated to the microsecond, and the request's entity
// is left as it came.
func TestStoredEntity(t *testing.T) {
	key := &datastorepb.Key{Path: []*datastorepb.Key_PathElement{{Kind: "K", IdType: &datastorepb.Key_PathElement_Id{Id: 1}}}}
	ts := func(nanos int32) *datastorepb.Value {
		return &datastorepb.Value{ValueType: &datastorepb.Value_TimestampValue{TimestampValue: &timestamppb.Timestamp{Seconds: 5, Nanos: nanos}}}
	}
	nested := func(v *datastorepb.Value) *datastorepb.Value {
		return &datastorepb.Value{ValueType: &datastorepb.Value_EntityValue{EntityValue: &datastorepb.Entity{Properties: map[string]*datastorepb.Value{"t": aval(ival(1), v)}}}}
	}
	for _, tc := range []struct {
		name     string
		in, want *datastorepb.Value
	}{
		{"whole microseconds", ts(123456000), ts(123456000)},
		{"top level", ts(123456789), ts(123456000)},
		{"in an array", aval(ts(999)), aval(ts(0))},
		{"in an entity value's array", nested(ts(1001)), nested(ts(1000))},
		{"no timestamp", ival(3), ival(3)},
	} {
		e := &datastorepb.Entity{Properties: map[string]*datastorepb.Value{"p": tc.in, "q": ival(2)}}
		before := proto.Clone(e)
		got := storedEntity(e, key)
		want := &datastorepb.Entity{Key: key, Properties: map[string]*datastorepb.Value{"p": tc.want, "q": ival(2)}}
		if !proto.Equal(got, want) {
			t.Errorf("%s: stored %v, want %v", tc.name, got, want)
		}
		if !proto.Equal(e, before) {
			t.Errorf("%s: the request's entity changed to %v", tc.name, e)
		}
	}
}

// TestCallTimeout: with listen.request_timeout 0 (FollowClient) a call's
// deadline is its client's less what nemo keeps to answer in, at most
// RequestTimeout (the write timeout's cap); a call without a deadline, or
// a set request_timeout, gets RequestTimeout.
func TestCallTimeout(t *testing.T) {
	client := func(d time.Duration) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		t.Cleanup(cancel)
		return ctx
	}
	follow := &Frontend{opts: Options{RequestTimeout: 59 * time.Second, FollowClient: true}}
	fixed := &Frontend{opts: Options{RequestTimeout: 5 * time.Second}}
	for _, tc := range []struct {
		f           *Frontend
		ctx         context.Context
		least, most time.Duration
	}{
		{follow, client(60 * time.Second), 58900 * time.Millisecond, 59 * time.Second},
		{follow, client(10 * time.Second), 8900 * time.Millisecond, 9 * time.Second},
		{follow, client(500 * time.Millisecond), 350 * time.Millisecond, 400 * time.Millisecond},
		{follow, client(2 * time.Minute), 59 * time.Second, 59 * time.Second},
		{follow, context.Background(), 59 * time.Second, 59 * time.Second},
		{fixed, client(60 * time.Second), 5 * time.Second, 5 * time.Second},
	} {
		if got := tc.f.callTimeout(tc.ctx); got < tc.least || got > tc.most {
			dl, _ := tc.ctx.Deadline()
			t.Errorf("follow %v, client deadline in %v: %v, want between %v and %v", tc.f.opts.FollowClient, time.Until(dl).Round(time.Second), got, tc.least, tc.most)
		}
	}
}
