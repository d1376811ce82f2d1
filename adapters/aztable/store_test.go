package aztable

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/adapters/storetest"
	"github.com/nemocache/nemo/internal/aztest"
)

func newAzurite(t testing.TB) *Store {
	t.Helper()
	url := aztest.Azurite(t)
	s, err := New(Options{ConnectionString: aztest.ConnectionString(url, aztest.Key), MaxRetries: 2, RetryDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newTable(t testing.TB, s *Store, prefix string) adapters.Keyspace {
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
	vals, err := storetest.Values(s.Get(ctx, ks, [][]byte{one.Key, tablecodec.EncodeKey("p", "absent"), two.Key}))
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
	vals, err = storetest.Values(s.Get(ctx, ks, [][]byte{one.Key}))
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
	if err := s.Delete(ctx, ks, storetest.Deletes(keys)); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.GetRange(ctx, ks, nil, nil, 0); err != nil || len(got) != 0 {
		t.Fatalf("after delete: %d rows, err %v", len(got), err)
	}
}

func mustOps(t *testing.T, recs []adapters.Record) []op {
	var ops []op
	for _, r := range recs {
		e, body, _, err := entityJSON(r.Key, r.Value)
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
	if vals, err := storetest.Values(s.Get(ctx, tablecodec.TablesKeyspace, [][]byte{key})); err != nil || vals[0] != nil {
		t.Fatalf("a catalog write created the table: %q, %v", vals[0], err)
	}
	if _, err := s.Upsert(ctx, tablecodec.TablesKeyspace, adapters.Puts([]adapters.Record{{Key: key, Value: []byte("other")}})); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("catalog record naming another table: %v, want ErrInvalid", err)
	}
	if err := s.CreateKeyspace(ctx, adapters.Keyspace(name)); err != nil {
		t.Fatal(err)
	}
	vals, err := storetest.Values(s.Get(ctx, tablecodec.TablesKeyspace, [][]byte{key, tablecodec.TableKey("nosuchtable1")}))
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
	if err := s.Delete(ctx, tablecodec.TablesKeyspace, storetest.Deletes([][]byte{key})); err != nil {
		t.Fatal(err)
	}
	if vals, err := storetest.Values(s.Get(ctx, tablecodec.TablesKeyspace, [][]byte{key})); err != nil || string(vals[0]) != name {
		t.Fatalf("a catalog delete dropped the table: %q, %v", vals[0], err)
	}
	if err := s.DropKeyspace(ctx, adapters.Keyspace(name)); err != nil {
		t.Fatal(err)
	}
	if vals, err := storetest.Values(s.Get(ctx, tablecodec.TablesKeyspace, [][]byte{key})); err != nil || vals[0] != nil {
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
	if err == nil || errors.Is(err, adapters.ErrUnavailable) || !errors.Is(err, adapters.ErrAccessDenied) {
		t.Fatalf("wrong key: %v (want adapters.ErrAccessDenied, not unavailability)", err)
	}
	if st, _ := errorCode(err); st != http.StatusForbidden {
		t.Fatalf("wrong key: status %d", st)
	}
	if err := s.Ping(context.Background()); !errors.Is(err, adapters.ErrAccessDenied) {
		t.Fatalf("ping with a wrong key: %v, want adapters.ErrAccessDenied", err)
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

// TestThrottlingRetried: 503 is retried, through the SDK and on the
// direct requests of the partition "" alike, unless the write's context
// asks for a single attempt (adapters.WithSingleAttempt, the lease
// renewer's): then it fails as throttled after one request.
func TestThrottlingRetried(t *testing.T) {
	for _, single := range []bool{false, true} {
		for _, pk := range []string{"p", ""} {
			srv, n := throttler(2)
			defer srv.Close()
			s, err := New(Options{ServiceURL: srv.URL + "/acct", Account: "acct", Key: aztest.Key, MaxRetries: 3, RetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, want := context.Background(), int32(3)
			if single {
				ctx, want = adapters.WithSingleAttempt(ctx), 1
			}
			err = s.Delete(ctx, "t", storetest.Deletes([][]byte{tablecodec.EncodeKey(pk, "r")}))
			var te *ThrottleError
			if single != errors.As(err, &te) {
				t.Fatalf("partition %q, single attempt %v: delete after two 503s: %v", pk, single, err)
			}
			if got := n.Load(); got != want {
				t.Fatalf("partition %q, single attempt %v: %d requests, want %d", pk, single, got, want)
			}
		}
	}
}

// TestThrottlingPersists: 503 through every retry is a *ThrottleError,
// through the SDK and on the direct requests (single and transaction).
func TestThrottlingPersists(t *testing.T) {
	for _, tc := range []struct {
		pk   string
		recs []adapters.Record
	}{{"p", []adapters.Record{entity("p", "r")}}, {"", []adapters.Record{entity("", "r")}}, {"", []adapters.Record{entity("", "r"), entity("", "s")}}} {
		srv, n := throttler(-1)
		defer srv.Close()
		s, err := New(Options{ServiceURL: srv.URL + "/acct", Account: "acct", Key: aztest.Key, MaxRetries: 2, RetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Upsert(context.Background(), "t", adapters.Puts(tc.recs))
		var te *ThrottleError
		if !errors.As(err, &te) || te.StatusCode != http.StatusServiceUnavailable || te.ErrorCode != "ServerBusy" {
			t.Fatalf("partition %q, %d writes: persistent 503: %v (want a *ThrottleError)", tc.pk, len(tc.recs), err)
		}
		if !errors.Is(err, adapters.ErrUnavailable) {
			t.Fatal("a ThrottleError is not adapters.ErrUnavailable")
		}
		if got := n.Load(); got != 3 {
			t.Fatalf("partition %q, %d writes: %d requests, want 3 (one try and two retries)", tc.pk, len(tc.recs), got)
		}
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

// countingTransport passes requests to Azurite and records each one's
// method and path.
type countingTransport struct {
	mu   sync.Mutex
	reqs []string
}

func (c *countingTransport) Do(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, req.Method+" "+req.URL.Path)
	c.mu.Unlock()
	return http.DefaultClient.Do(req)
}

// take returns the requests recorded since the last take: how many in
// all, and how many of them were transactions ($batch).
func (c *countingTransport) take() (all, batches int, reqs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	reqs, c.reqs = c.reqs, nil
	for _, r := range reqs {
		if strings.HasSuffix(r, "/$batch") {
			batches++
		}
	}
	return len(reqs), batches, reqs
}

func newCounting(t *testing.T) (*Store, *countingTransport) {
	t.Helper()
	url := aztest.Azurite(t)
	ct := &countingTransport{}
	s, err := New(Options{ConnectionString: aztest.ConnectionString(url, aztest.Key), MaxRetries: 2, RetryDelay: 10 * time.Millisecond, Transport: ct})
	if err != nil {
		t.Fatal(err)
	}
	return s, ct
}

func val(pk, rk string, n int32) adapters.Record {
	return entity(pk, rk, tablecodec.Property{Name: "N", Type: tablecodec.EdmInt32, Value: n})
}

func nOf(t *testing.T, v []byte) int32 {
	t.Helper()
	p, ok := decode(t, v).Get("N")
	if !ok {
		t.Fatalf("no N in %x", v)
	}
	return p.Value.(int32)
}

// put writes recs unconditionally and returns their versions.
func put(t *testing.T, s *Store, ks adapters.Keyspace, recs ...adapters.Record) []adapters.Version {
	t.Helper()
	vers, err := s.Upsert(context.Background(), ks, adapters.Puts(recs))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vers {
		if v == "" {
			t.Fatalf("upsert of %q returned no version", recs[i].Key)
		}
	}
	return vers
}

func getOne(t *testing.T, s *Store, ks adapters.Keyspace, key []byte) adapters.Record {
	t.Helper()
	recs, err := s.Get(context.Background(), ks, [][]byte{key})
	if err != nil {
		t.Fatal(err)
	}
	return recs[0]
}

// TestVersions: Get and GetRange report each entity's ETag exactly as the
// service returns it, equal to what the write that made it returned, and
// every write changes it.
func TestVersions(t *testing.T) {
	s := newAzurite(t)
	ks := newTable(t, s, "vers")
	ctx := context.Background()
	a, b, c := val("p", "a", 1), val("p", "b", 2), val("q", "c", 3)
	v1 := put(t, s, ks, a, b, c) // a transaction for p, a single upsert for q
	recs, err := s.Get(ctx, ks, [][]byte{a.Key, b.Key, c.Key, tablecodec.EncodeKey("p", "none")})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if recs[i].Version != v1[i] {
			t.Fatalf("Get reports version %q for %q, the upsert returned %q", recs[i].Version, recs[i].Key, v1[i])
		}
		if !strings.HasPrefix(string(recs[i].Version), `W/"datetime'`) {
			t.Fatalf("version %q is not the service's ETag", recs[i].Version)
		}
		if e := decode(t, recs[i].Value); e.ETag != string(recs[i].Version) {
			t.Fatalf("value's ETag %q, version %q", e.ETag, recs[i].Version)
		}
	}
	if recs[3].Value != nil || recs[3].Version != "" {
		t.Fatalf("absent key: %+v", recs[3])
	}
	rng, _, err := s.GetRange(ctx, ks, nil, nil, 0)
	if err != nil || len(rng) != 3 {
		t.Fatalf("GetRange: %d records, %v", len(rng), err)
	}
	for i := range rng {
		if rng[i].Version != v1[i] {
			t.Fatalf("GetRange reports version %q for %q, want %q", rng[i].Version, rng[i].Key, v1[i])
		}
	}
	// Rewriting the same values still gives new versions, batched or not.
	v2 := put(t, s, ks, a, b, c)
	for i := range 3 {
		if v2[i] == v1[i] {
			t.Fatalf("rewrite of %q kept version %q", keysOf([]adapters.Record{a, b, c})[i], v1[i])
		}
		if got := getOne(t, s, ks, []adapters.Record{a, b, c}[i].Key); got.Version != v2[i] {
			t.Fatalf("after rewrite: Get %q, upsert returned %q", got.Version, v2[i])
		}
	}
	v3 := put(t, s, ks, val("p", "a", 9))
	if v3[0] == v2[0] || getOne(t, s, ks, a.Key).Version != v3[0] {
		t.Fatal("single upsert: version unchanged or not what Get reports")
	}
}

// precondition cases: what a write expects × the key's state before it.
type state int

const (
	stAbsent state = iota // the key does not exist
	stAt                  // exists at the version the write expects
	stOther               // exists at a newer version than the write expects
)

func (st state) String() string { return [...]string{"absent", "at", "other"}[st] }

type pcase struct {
	del   bool
	kind  adapters.ExpectKind
	st    state
	pk    string
	rk    string
	write adapters.Write
	// cur is the key's version before the call ("" if absent).
	cur adapters.Version
}

func (c pcase) String() string {
	op := "upsert"
	if c.del {
		op = "delete"
	}
	return fmt.Sprintf("%s/%s/%s", op, [...]string{"any", "absent", "version"}[c.kind], c.st)
}

// holds says whether the case's precondition holds.
func (c pcase) holds() bool {
	switch c.kind {
	case adapters.ExpectAbsent:
		return c.st == stAbsent
	case adapters.ExpectVersion:
		return c.st == stAt
	}
	return true
}

// setupCases creates every (operation, kind, state) case for the
// partitions pks (round-robin) and prepares the keys' states. stale is
// a version no key has any more.
func setupCases(t *testing.T, s *Store, ks adapters.Keyspace, pks []string, tag string) (ups, dels []pcase) {
	t.Helper()
	stale := put(t, s, ks, val("stale", "x", 0))[0]
	put(t, s, ks, val("stale", "x", 1))
	n := 0
	for _, del := range []bool{false, true} {
		for _, kind := range []adapters.ExpectKind{adapters.ExpectAny, adapters.ExpectAbsent, adapters.ExpectVersion} {
			for _, st := range []state{stAbsent, stAt, stOther} {
				c := pcase{del: del, kind: kind, st: st, pk: pks[n%len(pks)]}
				n++
				c.rk = fmt.Sprintf("%s-%s", tag, c)
				c.rk = strings.ReplaceAll(c.rk, "/", "-")
				key := tablecodec.EncodeKey(c.pk, c.rk)
				expect := adapters.Expect{Kind: kind}
				switch st {
				case stAbsent:
					expect.Version = stale
				case stAt:
					c.cur = put(t, s, ks, val(c.pk, c.rk, 1))[0]
					expect.Version = c.cur
				case stOther:
					expect.Version = put(t, s, ks, val(c.pk, c.rk, 1))[0]
					c.cur = put(t, s, ks, val(c.pk, c.rk, 2))[0]
				}
				if kind != adapters.ExpectVersion {
					expect.Version = ""
				}
				c.write = adapters.Write{Key: key, Expect: expect}
				if !del {
					c.write.Value = val(c.pk, c.rk, 7).Value
					ups = append(ups, c)
				} else {
					dels = append(dels, c)
				}
			}
		}
	}
	return ups, dels
}

// checkCases checks a call's outcome for cases (in call order) and the
// keys' state afterwards. vers is nil for deletes.
func checkCases(t *testing.T, s *Store, ks adapters.Keyspace, cases []pcase, vers []adapters.Version, err error) {
	t.Helper()
	var conflicts []adapters.Conflict
	if err != nil {
		var ce *adapters.ConflictError
		if !errors.As(err, &ce) || !errors.Is(err, adapters.ErrConflict) {
			t.Fatalf("error %v is not a conflict", err)
		}
		conflicts = ce.Conflicts
	}
	if !cases[0].del && len(vers) != len(cases) {
		t.Fatalf("%d versions for %d writes", len(vers), len(cases))
	}
	want := 0
	for i, c := range cases {
		j := slices.IndexFunc(conflicts, func(k adapters.Conflict) bool { return k.Index == i })
		after := getOne(t, s, ks, c.write.Key)
		if c.holds() {
			want++
			if j >= 0 {
				t.Errorf("%v: refused (%+v), its precondition holds", c, conflicts[j])
				continue
			}
			switch {
			case c.del && after.Value != nil:
				t.Errorf("%v: applied, but the key is still there", c)
			case !c.del && (after.Value == nil || nOf(t, after.Value) != 7):
				t.Errorf("%v: applied, but the key holds %x", c, after.Value)
			case !c.del && (vers[i] == "" || vers[i] != after.Version):
				t.Errorf("%v: returned version %q, Get reports %q", c, vers[i], after.Version)
			case !c.del && vers[i] == c.cur:
				t.Errorf("%v: version unchanged", c)
			}
			continue
		}
		if j < 0 {
			t.Errorf("%v: not refused, its precondition fails", c)
			continue
		}
		k := conflicts[j]
		if !bytes.Equal(k.Key, c.write.Key) || k.Exists != (c.st != stAbsent) || k.Current != c.cur {
			t.Errorf("%v: conflict %+v, want key %q exists=%v current %q", c, k, c.write.Key, c.st != stAbsent, c.cur)
		}
		if !c.del && vers[i] != "" {
			t.Errorf("%v: refused write got version %q", c, vers[i])
		}
		if after.Version != c.cur {
			t.Errorf("%v: refused, but the key changed from %q to %q", c, c.cur, after.Version)
		}
	}
	if got := len(cases) - len(conflicts); got != want {
		t.Errorf("%d conflicts for %d writes, want %d", len(conflicts), len(cases), len(cases)-want)
	}
	if !slices.IsSortedFunc(conflicts, func(a, b adapters.Conflict) int { return a.Index - b.Index }) {
		t.Errorf("conflicts out of order: %+v", conflicts)
	}
}

func writesOf(cases []pcase) []adapters.Write {
	ws := make([]adapters.Write, len(cases))
	for i, c := range cases {
		ws[i] = c.write
	}
	return ws
}

// TestPreconditionsSingly: every condition × state, one write per call
// (no transaction), in a partition and in the partition "" (direct
// requests, as with an account key), and in a partition through the SDK
// (as with a token credential): the same refusals.
func TestPreconditionsSingly(t *testing.T) {
	for _, tc := range []struct {
		pk  string
		sdk bool
	}{{"p", false}, {"", false}, {"p", true}} {
		pk := tc.pk
		t.Run(fmt.Sprintf("partition %q, SDK %v", pk, tc.sdk), func(t *testing.T) {
			s := newAzurite(t)
			if tc.sdk {
				s.direct = nil
			}
			ks := newTable(t, s, "single")
			ctx := context.Background()
			ups, dels := setupCases(t, s, ks, []string{pk}, "one")
			for _, c := range ups {
				vers, err := s.Upsert(ctx, ks, []adapters.Write{c.write})
				checkCases(t, s, ks, []pcase{c}, vers, err)
			}
			for _, c := range dels {
				err := s.Delete(ctx, ks, []adapters.Write{c.write})
				checkCases(t, s, ks, []pcase{c}, nil, err)
			}
		})
	}
}

// TestPreconditionsBatched: every condition × state in one call, good
// writes and conflicts mixed in one partition's transaction, and across
// partitions (several cases per partition), as direct transactions, and
// through the SDK (as with a token credential; the partition "" stays
// direct).
func TestPreconditionsBatched(t *testing.T) {
	for _, tc := range []struct {
		name string
		pks  []string
		sdk  bool
	}{{"one partition", []string{"p"}, false}, {"three partitions", []string{"p", "q", "r"}, false},
		{"partition empty", []string{""}, false}, {"empty among others", []string{"p", "", "r"}, false},
		{"three partitions through the SDK", []string{"p", "q", "r"}, true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newAzurite(t)
			if tc.sdk {
				s.direct = nil
			}
			ks := newTable(t, s, "batched")
			ctx := context.Background()
			ups, dels := setupCases(t, s, ks, tc.pks, "b")
			vers, err := s.Upsert(ctx, ks, writesOf(ups))
			checkCases(t, s, ks, ups, vers, err)
			err = s.Delete(ctx, ks, writesOf(dels))
			checkCases(t, s, ks, dels, nil, err)
		})
	}
}

// TestRemoteCalls counts requests: with no conflict a partition's chunk is
// one transaction whatever the conditions; each conflict costs one more
// transaction (up to maxBatchAttempts), plus one read of the refused keys
// whose versions the service did not say (a query per partition and 14
// keys, see TestGetManyKeys).
func TestRemoteCalls(t *testing.T) {
	for _, pk := range []string{"p", ""} {
		t.Run(fmt.Sprintf("partition %q", pk), func(t *testing.T) { remoteCalls(t, pk) })
	}
}

// remoteCalls is TestRemoteCalls in partition pk.
func remoteCalls(t *testing.T, pk string) {
	s, ct := newCounting(t)
	ks := newTable(t, s, "calls")
	ctx := context.Background()
	var ws []adapters.Write
	var vs []adapters.Version
	for i := range 40 {
		r := val(pk, fmt.Sprintf("k%02d", i), 1)
		vs = append(vs, put(t, s, ks, r)[0])
		ws = append(ws, adapters.Write{Key: r.Key, Value: val(pk, fmt.Sprintf("k%02d", i), 2).Value, Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: vs[i]}})
	}
	for i := range 20 {
		r := val(pk, fmt.Sprintf("n%02d", i), 2)
		ws = append(ws, adapters.Write{Key: r.Key, Value: r.Value, Expect: adapters.Expect{Kind: adapters.ExpectAbsent}})
	}
	for i := range 10 {
		r := val(pk, fmt.Sprintf("u%02d", i), 2)
		ws = append(ws, adapters.Write{Key: r.Key, Value: r.Value})
	}
	ct.take()
	vers, err := s.Upsert(ctx, ks, ws)
	if err != nil {
		t.Fatal(err)
	}
	if n, b, reqs := ct.take(); n != 1 || b != 1 {
		t.Fatalf("no-conflict call of %d conditional writes: %d requests (%d transactions): %v", len(ws), n, b, reqs)
	}

	// Conflicts: a stale version (412), an existing key inserted (409),
	// an absent key updated (404); the other writes are applied.
	for i := range ws {
		ws[i].Expect = adapters.Expect{Kind: adapters.ExpectVersion, Version: vers[i]}
	}
	ws[3].Expect.Version = vs[3]                                 // stale: 412
	ws[50].Expect = adapters.Expect{Kind: adapters.ExpectAbsent} // exists: 409
	gone := val(pk, "gone", 1)
	ws = append(ws, adapters.Write{Key: gone.Key, Value: gone.Value, Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: vs[0]}}) // absent: 404
	vers2, err := s.Upsert(ctx, ks, ws)
	var ce *adapters.ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 3 {
		t.Fatalf("want 3 conflicts, got %v", err)
	}
	n, b, reqs := ct.take()
	if b != 4 || n != 4+1 {
		t.Fatalf("3 conflicts: %d requests (%d transactions), want 4 transactions and one read of the 2 refused keys' versions: %v", n, b, reqs)
	}
	for i, w := range ws {
		refused := i == 3 || i == 50 || i == len(ws)-1
		if refused != (vers2[i] == "") {
			t.Fatalf("write %d: version %q (refused: %v)", i, vers2[i], refused)
		}
		if !refused && getOne(t, s, ks, w.Key).Version != vers2[i] {
			t.Fatalf("write %d: returned %q, Get reports another version", i, vers2[i])
		}
	}
	for _, c := range ce.Conflicts {
		if want := getOne(t, s, ks, c.Key); c.Current != want.Version || c.Exists != (want.Value != nil) {
			t.Fatalf("conflict %+v; the key is at %q", c, want.Version)
		}
	}
	ct.take()

	// More conflicts than transaction attempts: the rest goes singly, and
	// the result is the same.
	for i := range ws {
		ws[i].Expect = adapters.Expect{Kind: adapters.ExpectAbsent}
	}
	_, err = s.Upsert(ctx, ks, ws[:10])
	if !errors.As(err, &ce) || len(ce.Conflicts) != 10 {
		t.Fatalf("want 10 conflicts, got %v", err)
	}
	if n, b, _ := ct.take(); b != maxBatchAttempts || n != maxBatchAttempts+(10-maxBatchAttempts)+1 {
		// 4 transactions refuse 4 writes, the other 6 go singly, and one
		// query of the 10 keys fills Current.
		t.Fatalf("10 conflicts: %d requests, %d transactions", n, b)
	}

	// Conditional deletes in one transaction: a good one, a stale version
	// (412), an absent key (404), ExpectAbsent of a present and of an
	// absent key (read in one query before the transaction).
	cur := make([]adapters.Version, 4)
	for i := range cur {
		cur[i] = getOne(t, s, ks, ws[10+i].Key).Version
	}
	ct.take()
	dws := []adapters.Write{
		{Key: ws[10].Key, Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: cur[0]}},
		{Key: ws[11].Key, Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: vs[11]}},
		{Key: tablecodec.EncodeKey(pk, "none0"), Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: vs[11]}},
		{Key: ws[12].Key, Expect: adapters.Expect{Kind: adapters.ExpectAbsent}},
		{Key: tablecodec.EncodeKey(pk, "none3"), Expect: adapters.Expect{Kind: adapters.ExpectAbsent}},
		{Key: ws[13].Key, Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: cur[3]}},
	}
	err = s.Delete(ctx, ks, dws)
	if !errors.As(err, &ce) || len(ce.Conflicts) != 3 {
		t.Fatalf("deletes: want 3 conflicts, got %v", err)
	}
	wantC := []adapters.Conflict{{Index: 1, Key: ws[11].Key, Exists: true, Current: cur[1]}, {Index: 2, Key: dws[2].Key}, {Index: 3, Key: ws[12].Key, Exists: true, Current: cur[2]}}
	for i, c := range ce.Conflicts {
		if !bytes.Equal(c.Key, wantC[i].Key) || c.Index != wantC[i].Index || c.Exists != wantC[i].Exists || c.Current != wantC[i].Current {
			t.Fatalf("delete conflict %+v, want %+v", c, wantC[i])
		}
	}
	if n, b, reqs := ct.take(); n != 1+3+1 || b != 3 {
		t.Fatalf("conditional deletes: %d requests (%d transactions), want a read of the 2 ExpectAbsent keys, 3 transactions and 1 point read: %v", n, b, reqs)
	}
	for _, i := range []int{10, 13} {
		if getOne(t, s, ks, ws[i].Key).Value != nil {
			t.Fatalf("write %d's key was not deleted", i)
		}
	}

	// Unconditional deletes of absent keys: one refused transaction, then
	// one by one, as before preconditions existed.
	ct.take()
	del := storetest.Deletes([][]byte{tablecodec.EncodeKey(pk, "k00"), tablecodec.EncodeKey(pk, "none1"), tablecodec.EncodeKey(pk, "none2")})
	if err := s.Delete(ctx, ks, del); err != nil {
		t.Fatal(err)
	}
	if n, b, reqs := ct.take(); n != 4 || b != 1 {
		t.Fatalf("deleting absent keys: %v", reqs)
	}
}

// TestRepeatedKeys: writes of one key in one call take effect in order:
// later unconditional writes replace earlier ones (one operation), and a
// conditional one sees what the call's earlier writes left.
func TestRepeatedKeys(t *testing.T) {
	s := newAzurite(t)
	ks := newTable(t, s, "repeat")
	ctx := context.Background()
	a1, a2, b := val("p", "a", 1), val("p", "a", 2), val("p", "b", 1)
	vers, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{a1, b, a2}))
	if err != nil {
		t.Fatal(err)
	}
	got := getOne(t, s, ks, a1.Key)
	if nOf(t, got.Value) != 2 || vers[0] != got.Version || vers[2] != got.Version {
		t.Fatalf("repeated unconditional upserts: %v, Get %q", vers, got.Version)
	}
	c1, c2 := val("p", "c", 1), val("p", "c", 2)
	absent := adapters.Expect{Kind: adapters.ExpectAbsent}
	vers, err = s.Upsert(ctx, ks, []adapters.Write{{Key: c1.Key, Value: c1.Value, Expect: absent}, {Key: b.Key, Value: b.Value}, {Key: c2.Key, Value: c2.Value, Expect: absent}})
	var ce *adapters.ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0].Index != 2 || !ce.Conflicts[0].Exists || ce.Conflicts[0].Current != vers[0] {
		t.Fatalf("insert, insert of one key: %v %+v", err, ce)
	}
	if got := getOne(t, s, ks, c1.Key); nOf(t, got.Value) != 1 || got.Version != vers[0] {
		t.Fatal("the first insert was not kept")
	}
	// Delete then expect absent: holds.
	if err := s.Delete(ctx, ks, []adapters.Write{{Key: c1.Key}, {Key: c1.Key, Expect: absent}}); err != nil {
		t.Fatal(err)
	}
}

// TestCatalogPreconditions: catalog writes change nothing, so their
// preconditions are accepted unchecked and report no versions.
func TestCatalogPreconditions(t *testing.T) {
	s := newAzurite(t)
	ctx := context.Background()
	key := tablecodec.TableKey("nosuchtable2")
	w := adapters.Write{Key: key, Value: []byte("nosuchtable2"), Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: "v"}}
	vers, err := s.Upsert(ctx, tablecodec.TablesKeyspace, []adapters.Write{w})
	if err != nil || len(vers) != 1 || vers[0] != "" {
		t.Fatalf("catalog upsert: %v %v", vers, err)
	}
	if err := s.Delete(ctx, tablecodec.TablesKeyspace, []adapters.Write{w}); err != nil {
		t.Fatal(err)
	}
}

func TestMalformedPreconditions(t *testing.T) {
	s := newAzurite(t)
	ctx := context.Background()
	r := val("p", "a", 1)
	for _, e := range []adapters.Expect{{Kind: adapters.ExpectVersion}, {Kind: 9}} {
		if _, err := s.Upsert(ctx, "anytable", []adapters.Write{{Key: r.Key, Value: r.Value, Expect: e}}); !errors.Is(err, adapters.ErrInvalid) {
			t.Fatalf("upsert with %+v: %v", e, err)
		}
		if err := s.Delete(ctx, "anytable", []adapters.Write{{Key: r.Key, Expect: e}}); !errors.Is(err, adapters.ErrInvalid) {
			t.Fatalf("delete with %+v: %v", e, err)
		}
	}
}

// TestBatchAnswers parses $batch answers captured from Azurite: a
// success with one ETag per insert or update, and refusals naming the
// failed operation by the index in their message.
func TestBatchAnswers(t *testing.T) {
	read := func(name string) *http.Response {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		boundary := firstBoundary(b)
		return &http.Response{StatusCode: http.StatusAccepted, Header: http.Header{"Content-Type": {"multipart/mixed; boundary=" + boundary}}, Body: io.NopCloser(bytes.NewReader(b))}
	}
	subs, err := batchResponses(read("azurite-batch-ok.bin"))
	if err != nil || len(subs) != 6 {
		t.Fatalf("success: %d responses, %v", len(subs), err)
	}
	for i, sr := range subs {
		if sr.status != http.StatusNoContent || (i < 5) != (sr.header.Get("ETag") != "") {
			t.Fatalf("response %d: %d etag %q", i, sr.status, sr.header.Get("ETag"))
		}
	}
	if got := subs[0].header.Get("ETag"); got != `W/"datetime'2026-12-02T08%3A09%3A46.5113421Z'"` {
		t.Fatalf("etag %q", got)
	}
	for name, want := range map[string]subFailure{
		"azurite-batch-409.bin": {index: 1, status: http.StatusConflict, code: "EntityAlreadyExists"},
		"azurite-batch-412.bin": {index: 0, status: http.StatusPreconditionFailed, code: "UpdateConditionNotSatisfied"},
	} {
		f := batchFailure(read(name))
		if f == nil || *f != want {
			t.Fatalf("%s: %+v, want %+v", name, f, want)
		}
	}
	for msg, want := range map[string]int{"12:x": 12, "x": -1, ":x": -1, "-1:x": -1, "The specified: x": -1} {
		if got := failedIndex(msg); got != want {
			t.Fatalf("failedIndex(%q) = %d", msg, got)
		}
	}
}

// TestGetManyKeys: a Get of many keys reads each partition's keys with
// queries of up to maxKeysPerQuery row keys (a key alone in its
// partition with a point read) and answers exactly what point reads
// answer: values, versions, absent keys, a key named twice, and keys
// that need quoting, in partition "" too.
func TestGetManyKeys(t *testing.T) {
	s, ct := newCounting(t)
	ks := newTable(t, s, "many")
	ctx := context.Background()
	var keys [][]byte
	for _, pk := range []string{"p", "", "it's"} {
		for i := range 20 {
			r := val(pk, fmt.Sprintf("k'%02d", i), int32(i))
			if i%3 != 0 {
				put(t, s, ks, r)
			}
			keys = append(keys, r.Key)
		}
	}
	lone := val("lone", "x", 7)
	put(t, s, ks, lone)
	keys = append(keys, lone.Key, keys[4]) // keys[4] twice
	ct.take()
	got, err := s.Get(ctx, ks, keys)
	if err != nil {
		t.Fatal(err)
	}
	// Per partition of 20 keys two queries (14 + 6); "lone" a point read;
	// the repeated key joins its partition's second query.
	if n, _, reqs := ct.take(); n != 3*2+1 {
		t.Fatalf("Get of %d keys: %d requests, want 7: %v", len(keys), n, reqs)
	}
	for i, k := range keys {
		want := getOne(t, s, ks, k)
		if !bytes.Equal(got[i].Key, k) || !bytes.Equal(got[i].Value, want.Value) || got[i].Version != want.Version {
			t.Fatalf("key %d %q: Get %+v, a point read %+v", i, k, got[i], want)
		}
	}
	// A missing table: every key absent, as with point reads.
	got, err = s.Get(ctx, adapters.Keyspace(aztest.TableName("nosuch")), keys[:15])
	if err != nil || len(got) != 15 || got[0].Value != nil || got[14].Value != nil {
		t.Fatalf("Get from a missing table: %v %v", got, err)
	}
}
