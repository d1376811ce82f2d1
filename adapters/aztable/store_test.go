package aztable

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/internal/aztest"
)

func newAzurite(t *testing.T) *Store {
	t.Helper()
	url := aztest.Azurite(t)
	s, err := New(Options{ConnectionString: aztest.ConnectionString(url, aztest.Key), MaxRetries: 2, RetryDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newTable(t *testing.T, s *Store, prefix string) adapters.Keyspace {
	t.Helper()
	name := aztest.TableName(prefix)
	ctx := context.Background()
	if err := s.CreateTable(ctx, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.DeleteTable(context.Background(), name) })
	return adapters.Keyspace(name)
}

func entity(pk, rk string, props ...tablecodec.Property) adapters.Record {
	e := &tablecodec.Entity{PartitionKey: pk, RowKey: rk, Props: props}
	return adapters.Record{Key: tablecodec.EncodeKey(pk, rk), Value: tablecodec.EncodeEntity(e)}
}

func decode(t *testing.T, v []byte) *tablecodec.Entity {
	t.Helper()
	e, err := tablecodec.DecodeEntity(v)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestTypedRoundTrip(t *testing.T) {
	s := newAzurite(t)
	ks := newTable(t, s, "typed")
	ctx := context.Background()
	when := time.Date(2024, 5, 6, 7, 8, 9, 123456700, time.UTC)
	g, _ := tablecodec.ParseGUID("0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0")
	props := []tablecodec.Property{
		{Name: "Bin", Type: tablecodec.EdmBinary, Value: []byte{0, 1, 2, 0xfa}},
		{Name: "Bool", Type: tablecodec.EdmBoolean, Value: true},
		{Name: "Dbl", Type: tablecodec.EdmDouble, Value: 3.25},
		{Name: "Whole", Type: tablecodec.EdmDouble, Value: 2.0}, // must stay a Double
		{Name: "Big", Type: tablecodec.EdmDouble, Value: 1e300},
		{Name: "Guid", Type: tablecodec.EdmGuid, Value: g},
		{Name: "I32", Type: tablecodec.EdmInt32, Value: int32(-42)},
		{Name: "I64", Type: tablecodec.EdmInt64, Value: int64(math.MaxInt64)},
		{Name: "Str", Type: tablecodec.EdmString, Value: "hé \"quoted\" 'single'"},
		{Name: "When", Type: tablecodec.EdmDateTime, Value: when},
	}
	one := entity("p", "typed", props...)
	two := entity("p", "two", tablecodec.Property{Name: "I64", Type: tablecodec.EdmInt64, Value: int64(-1)})
	if _, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{one, two})); err != nil {
		t.Fatal(err)
	}
	vals, err := adapters.Values(s.Get(ctx, ks, [][]byte{one.Key, tablecodec.EncodeKey("p", "absent"), two.Key}))
	if err != nil {
		t.Fatal(err)
	}
	if vals[1] != nil {
		t.Fatalf("absent key returned %x", vals[1])
	}
	got := decode(t, vals[0])
	if got.ETag == "" || got.Timestamp.IsZero() {
		t.Fatalf("service metadata missing: etag %q timestamp %v", got.ETag, got.Timestamp)
	}
	byName := func(ps []tablecodec.Property) map[string]tablecodec.Property {
		m := map[string]tablecodec.Property{}
		for _, p := range ps {
			m[p.Name] = p
		}
		return m
	}
	if want, have := byName(props), byName(got.Props); !reflect.DeepEqual(want, have) {
		t.Fatalf("round trip changed properties:\nwant %v\nhave %v", want, have)
	}
	if p, _ := decode(t, vals[2]).Get("I64"); p.Value != int64(-1) {
		t.Fatalf("second entity: %v", p)
	}

	// Replace semantics: an upsert drops properties it does not carry.
	if _, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{entity("p", "typed", tablecodec.Property{Name: "Only", Type: tablecodec.EdmInt32, Value: int32(1)})})); err != nil {
		t.Fatal(err)
	}
	vals, err = adapters.Values(s.Get(ctx, ks, [][]byte{one.Key}))
	if err != nil {
		t.Fatal(err)
	}
	if e := decode(t, vals[0]); len(e.Props) != 1 || e.Props[0].Name != "Only" {
		t.Fatalf("upsert merged instead of replacing: %v", e.Props)
	}
}

func keysOf(recs []adapters.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		pk, rk, _ := tablecodec.DecodeKey(r.Key)
		out[i] = pk + "/" + rk
	}
	return out
}

// TestGetRangeBounds stores a grid of keys (prefix-related partition keys,
// empty row keys) and compares GetRange over many kinds of bounds with the
// byte-order answer.
func TestGetRangeBounds(t *testing.T) {
	s := newAzurite(t)
	ks := newTable(t, s, "bounds")
	ctx := context.Background()
	pks := []string{"a", "ab", "abc", "b", "b b", "z"}
	rks := []string{"", "0", "1", "10", "2", "x"}
	var all []adapters.Record
	for _, pk := range pks {
		for _, rk := range rks {
			all = append(all, entity(pk, rk, tablecodec.Property{Name: "V", Type: tablecodec.EdmString, Value: pk + rk}))
		}
	}
	if _, err := s.Upsert(ctx, ks, adapters.Puts(all)); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(all, func(a, b adapters.Record) int { return bytes.Compare(a.Key, b.Key) })

	var cands [][]byte
	cands = append(cands, nil, []byte{}, []byte("a"), []byte("ab"), []byte{'a', 0}, []byte{'a', 0, 0})
	for _, pk := range append(pks, "aa", "c") {
		cands = append(cands, tablecodec.PartitionPrefix(pk), tablecodec.PartitionEnd(pk))
		for _, rk := range append(rks, "05", "zz") {
			k := tablecodec.EncodeKey(pk, rk)
			cands = append(cands, k, adapters.Successor(k))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 60; i++ {
		start := cands[rng.IntN(len(cands))]
		end := cands[rng.IntN(len(cands))]
		if rng.IntN(4) == 0 {
			end = nil
		}
		limit := 0
		if rng.IntN(3) == 0 {
			limit = 1 + rng.IntN(5)
		}
		var want []adapters.Record
		for _, r := range all {
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
			t.Fatalf("GetRange(%q, %q): %v", start, end, err)
		}
		if !slices.Equal(keysOf(got), keysOf(want)) || more != wantMore {
			f, _ := RangeFilter(start, end)
			t.Fatalf("GetRange(%q, %q, %d) filter %q:\n got %v more=%v\nwant %v more=%v", start, end, limit, f, keysOf(got), more, keysOf(want), wantMore)
		}
		for j := range got {
			if e := decode(t, got[j].Value); e.PartitionKey+"/"+e.RowKey != keysOf(got)[j] {
				t.Fatalf("value of %s holds %s/%s", keysOf(got)[j], e.PartitionKey, e.RowKey)
			}
		}
	}
}

func TestRangeFilterShapes(t *testing.T) {
	for _, tc := range []struct {
		start, end []byte
		want       string
		empty      bool
	}{
		{nil, nil, "", false},
		{tablecodec.PartitionPrefix("p"), tablecodec.PartitionEnd("p"), "PartitionKey eq 'p'", false},
		{tablecodec.EncodeKey("p", "a"), tablecodec.EncodeKey("p", "c"), "PartitionKey eq 'p' and RowKey ge 'a' and RowKey lt 'c'", false},
		{adapters.Successor(tablecodec.EncodeKey("p", "a")), adapters.Successor(tablecodec.EncodeKey("p", "c")), "PartitionKey eq 'p' and RowKey gt 'a' and RowKey le 'c'", false},
		{tablecodec.PartitionEnd("o'k"), nil, "PartitionKey gt 'o''k'", false},
		{nil, tablecodec.PartitionPrefix("q"), "PartitionKey lt 'q'", false},
		{tablecodec.EncodeKey("p", "a"), tablecodec.PartitionEnd("q"), "(PartitionKey gt 'p' or (PartitionKey eq 'p' and RowKey ge 'a')) and PartitionKey le 'q'", false},
		{tablecodec.EncodeKey("q", ""), tablecodec.EncodeKey("p", ""), "", true},
		{nil, []byte{}, "", true},
	} {
		got, empty := RangeFilter(tc.start, tc.end)
		if got != tc.want || empty != tc.empty {
			t.Errorf("RangeFilter(%q, %q) = %q, %v; want %q, %v", tc.start, tc.end, got, empty, tc.want, tc.empty)
		}
	}
}

// TestBatchSplitting writes more than one transaction's worth: 250 rows in
// one partition (three transactions), 40 large rows (over 4 MiB together),
// and rows in several partitions in one call, then reads them all back by
// range, paging past the service's 1000-row page.
func TestBatchSplitting(t *testing.T) {
	s := newAzurite(t)
	ks := newTable(t, s, "split")
	ctx := context.Background()
	var recs []adapters.Record
	for i := 0; i < 1050; i++ {
		recs = append(recs, entity(fmt.Sprintf("p%d", i%3), fmt.Sprintf("r%04d", i), tablecodec.Property{Name: "N", Type: tablecodec.EdmInt32, Value: int32(i)}))
	}
	big := strings.Repeat("é", 30000) // 60 KB as UTF-8 and UTF-16, under the 64 KiB property limit
	for i := 0; i < 80; i++ {
		recs = append(recs, entity("big", fmt.Sprintf("b%02d", i), tablecodec.Property{Name: "S", Type: tablecodec.EdmString, Value: big}))
	}
	if got := len(chunks(mustOps(t, recs))); got < 3*4+2 {
		t.Fatalf("only %d chunks for 1050 small rows in 3 partitions and 80 large ones", got)
	}
	if _, err := s.Upsert(ctx, ks, adapters.Puts(recs)); err != nil {
		t.Fatal(err)
	}
	got, more, err := s.GetRange(ctx, ks, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs) || more {
		t.Fatalf("read back %d rows (more=%v), wrote %d", len(got), more, len(recs))
	}
	if !slices.IsSortedFunc(got, func(a, b adapters.Record) int { return bytes.Compare(a.Key, b.Key) }) {
		t.Fatal("GetRange returned keys out of order")
	}
	got, more, err = s.GetRange(ctx, ks, nil, nil, 1001)
	if err != nil || len(got) != 1001 || !more {
		t.Fatalf("limit 1001: %d rows, more=%v, err %v", len(got), more, err)
	}

	// Delete everything (and some absent keys, which a transaction would
	// refuse) in one call.
	keys := [][]byte{tablecodec.EncodeKey("p0", "nope"), tablecodec.EncodeKey("nopart", "x")}
	for _, r := range recs {
		keys = append(keys, r.Key)
	}
	if err := s.Delete(ctx, ks, adapters.Deletes(keys)); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.GetRange(ctx, ks, nil, nil, 0); err != nil || len(got) != 0 {
		t.Fatalf("after delete: %d rows, err %v", len(got), err)
	}
}

func mustOps(t *testing.T, recs []adapters.Record) []op {
	var ops []op
	for _, r := range recs {
		e, body, err := entityJSON(r.Key, r.Value)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, op{pk: e.PartitionKey, rk: e.RowKey, body: body})
	}
	return ops
}

func TestChunksLimits(t *testing.T) {
	var ops []op
	for i := 0; i < 205; i++ {
		ops = append(ops, op{pk: "a", rk: fmt.Sprint(i), body: []byte("{}")})
	}
	ops = append(ops, op{pk: "b", rk: "1", body: []byte("{}")}, op{pk: "a", rk: "0", body: []byte(`{"later":1}`)})
	cs := chunks(ops)
	if len(cs) != 4 || len(cs[0]) != 100 || len(cs[1]) != 100 || len(cs[2]) != 5 || len(cs[3]) != 1 {
		t.Fatalf("chunk sizes: %v", lens(cs))
	}
	if string(cs[0][0].body) != `{"later":1}` {
		t.Fatalf("a later op on the same key did not replace the earlier one: %s", cs[0][0].body)
	}
	big := make([]byte, 1<<20)
	var bigOps []op
	for i := 0; i < 9; i++ {
		bigOps = append(bigOps, op{pk: "a", rk: fmt.Sprint(i), body: big})
	}
	for _, c := range chunks(bigOps) {
		size := 0
		for _, o := range c {
			size += len(o.body) + batchOpOverhead
		}
		if size > MaxBatchBytes {
			t.Fatalf("chunk of %d bytes exceeds the batch limit", size)
		}
	}
}

func lens(cs [][]op) []int {
	out := make([]int, len(cs))
	for i, c := range cs {
		out[i] = len(c)
	}
	return out
}

// TestTablesKeyspace: the catalog keyspace reads the account's table
// list; its writes change nothing (tables are created and dropped only
// through KeyspaceAdmin, which the engine orders), and are validated.
func TestTablesKeyspace(t *testing.T) {
	s := newAzurite(t)
	ctx := context.Background()
	name := aztest.TableName("MixedCase")
	key := tablecodec.TableKey(name)
	t.Cleanup(func() { _ = s.DeleteTable(context.Background(), name) })
	if _, err := s.Upsert(ctx, tablecodec.TablesKeyspace, adapters.Puts([]adapters.Record{{Key: key, Value: []byte(name)}})); err != nil {
		t.Fatal(err)
	}
	if vals, err := adapters.Values(s.Get(ctx, tablecodec.TablesKeyspace, [][]byte{key})); err != nil || vals[0] != nil {
		t.Fatalf("a catalog write created the table: %q, %v", vals[0], err)
	}
	if _, err := s.Upsert(ctx, tablecodec.TablesKeyspace, adapters.Puts([]adapters.Record{{Key: key, Value: []byte("other")}})); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("catalog record naming another table: %v, want ErrInvalid", err)
	}
	if err := s.CreateKeyspace(ctx, adapters.Keyspace(name)); err != nil {
		t.Fatal(err)
	}
	vals, err := adapters.Values(s.Get(ctx, tablecodec.TablesKeyspace, [][]byte{key, tablecodec.TableKey("nosuchtable1")}))
	if err != nil {
		t.Fatal(err)
	}
	if string(vals[0]) != name || vals[1] != nil {
		t.Fatalf("tables Get = %q, %q", vals[0], vals[1])
	}
	recs, _, err := s.GetRange(ctx, tablecodec.TablesKeyspace, key, adapters.Successor(key), 0)
	if err != nil || len(recs) != 1 || string(recs[0].Value) != name {
		t.Fatalf("tables GetRange = %v, %v", recs, err)
	}
	// Creating again is idempotent (replay may repeat it).
	if err := s.CreateKeyspace(ctx, adapters.Keyspace(name)); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, tablecodec.TablesKeyspace, adapters.Deletes([][]byte{key})); err != nil {
		t.Fatal(err)
	}
	if vals, err := adapters.Values(s.Get(ctx, tablecodec.TablesKeyspace, [][]byte{key})); err != nil || string(vals[0]) != name {
		t.Fatalf("a catalog delete dropped the table: %q, %v", vals[0], err)
	}
	if err := s.DropKeyspace(ctx, adapters.Keyspace(name)); err != nil {
		t.Fatal(err)
	}
	if vals, err := adapters.Values(s.Get(ctx, tablecodec.TablesKeyspace, [][]byte{key})); err != nil || vals[0] != nil {
		t.Fatalf("after drop: %q, %v", vals[0], err)
	}
	if err := s.DropKeyspace(ctx, adapters.Keyspace(name)); err != nil {
		t.Fatalf("dropping an absent table: %v", err)
	}
	for _, f := range []func(context.Context, adapters.Keyspace) error{s.CreateKeyspace, s.DropKeyspace} {
		if err := f(ctx, tablecodec.TablesKeyspace); !errors.Is(err, adapters.ErrInvalid) {
			t.Fatalf("admin call on the catalog itself: %v, want ErrInvalid", err)
		}
	}
}

func TestWrongKeyIsNotUnavailable(t *testing.T) {
	url := aztest.Azurite(t)
	s, err := New(Options{ServiceURL: url, Account: aztest.Account, Key: "AAAA" + aztest.Key[4:], MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(context.Background(), "anytable", [][]byte{tablecodec.EncodeKey("p", "r")})
	if err == nil || errors.Is(err, adapters.ErrUnavailable) {
		t.Fatalf("wrong key: %v (want an authentication error, not unavailability)", err)
	}
	if st, _ := errorCode(err); st != http.StatusForbidden {
		t.Fatalf("wrong key: status %d", st)
	}
}

// throttler answers the first fail requests with 503 ServerBusy (forever
// when fail < 0), then 204.
func throttler(fail int) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if i := n.Add(1); fail < 0 || int(i) <= fail {
			w.Header().Set("x-ms-error-code", "ServerBusy")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"odata.error":{"code":"ServerBusy","message":{"lang":"en-US","value":"busy"}}}`)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	return srv, &n
}

func TestThrottlingRetried(t *testing.T) {
	srv, n := throttler(2)
	defer srv.Close()
	s, err := New(Options{ServiceURL: srv.URL + "/acct", Account: "acct", Key: aztest.Key, MaxRetries: 3, RetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(context.Background(), "t", adapters.Deletes([][]byte{tablecodec.EncodeKey("p", "r")})); err != nil {
		t.Fatalf("delete after two 503s: %v", err)
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("%d requests, want 3 (two throttled, one accepted)", got)
	}
}

func TestThrottlingPersists(t *testing.T) {
	srv, n := throttler(-1)
	defer srv.Close()
	s, err := New(Options{ServiceURL: srv.URL + "/acct", Account: "acct", Key: aztest.Key, MaxRetries: 2, RetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Upsert(context.Background(), "t", adapters.Puts([]adapters.Record{entity("p", "r")}))
	var te *ThrottleError
	if !errors.As(err, &te) || te.StatusCode != http.StatusServiceUnavailable || te.ErrorCode != "ServerBusy" {
		t.Fatalf("persistent 503: %v (want a *ThrottleError)", err)
	}
	if !errors.Is(err, adapters.ErrUnavailable) {
		t.Fatal("a ThrottleError is not adapters.ErrUnavailable")
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("%d requests, want 3 (one try and two retries)", got)
	}
}

func TestNewOptions(t *testing.T) {
	if _, err := New(Options{}); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("no credentials: %v", err)
	}
	if _, err := New(Options{Key: aztest.Key}); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("key without account: %v", err)
	}
	if _, err := New(Options{ConnectionString: "nonsense"}); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("bad connection string: %v", err)
	}
	if _, err := New(Options{Account: "a", Key: "not base64!"}); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("bad key: %v", err)
	}
	// The credential chain is built lazily: constructing it needs no
	// environment, only the endpoint.
	if _, err := New(Options{Account: "acct"}); err != nil {
		t.Fatalf("default credential: %v", err)
	}
}
