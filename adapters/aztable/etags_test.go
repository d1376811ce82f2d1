package aztable

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/adapters/storetest"
	"github.com/nemocache/nemo/internal/aztest"
)

// len is the number of entries.
func (m *stampMemo) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.idx)
}

// stamped is val with the stamps the frontend gives a write: a Timestamp
// and the ETag derived from it.
func stamped(pk, rk string, n int32, ts time.Time) adapters.Record {
	ts = tablecodec.TruncateTicks(ts)
	e := &tablecodec.Entity{PartitionKey: pk, RowKey: rk, Timestamp: ts, ETag: datetimeETag(tablecodec.Ticks(ts)),
		Props: []tablecodec.Property{{Name: "N", Type: tablecodec.EdmInt32, Value: n}}}
	return adapters.Record{Key: tablecodec.EncodeKey(pk, rk), Value: tablecodec.EncodeEntity(e)}
}

func newAzuriteMemo(t *testing.T, max int) *Store {
	t.Helper()
	s, err := New(Options{ConnectionString: aztest.ConnectionString(aztest.Azurite(t), aztest.Key), MaxRetries: 2,
		RetryDelay: 10 * time.Millisecond, ETagMemory: max})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// wantStamps fails unless rec holds want's Timestamp and ETag (nemo's)
// and its Version is the service's ETag ver.
func wantStamps(t *testing.T, how string, rec, want adapters.Record, ver adapters.Version) {
	t.Helper()
	got, w := decode(t, rec.Value), decode(t, want.Value)
	if !got.Timestamp.Equal(w.Timestamp) || got.ETag != w.ETag {
		t.Fatalf("%s: stamps %v %q, nemo wrote %v %q", how, got.Timestamp, got.ETag, w.Timestamp, w.ETag)
	}
	if rec.Version != ver {
		t.Fatalf("%s: version %q, the service's is %q", how, rec.Version, ver)
	}
	if !tablecodec.SameEntity(rec.Value, want.Value) {
		t.Fatalf("%s: value differs from what was written", how)
	}
}

// wantService fails unless rec holds the service's stamps: its ETag is
// its Version, and its Timestamp is not the one nemo wrote.
func wantService(t *testing.T, how string, rec, written adapters.Record) {
	t.Helper()
	got, w := decode(t, rec.Value), decode(t, written.Value)
	if got.ETag != string(rec.Version) || got.Timestamp.Equal(w.Timestamp) {
		t.Fatalf("%s: stamps %v %q (version %q), want the service's (nemo wrote %v)", how, got.Timestamp, got.ETag, rec.Version, w.Timestamp)
	}
}

// TestStampsRestored: an entity the Store wrote reads back (Get, GetRange,
// singly and batched writes) with nemo's Timestamp and ETag while the
// service's ETag is the one its write produced; Version stays the
// service's ETag.
func TestStampsRestored(t *testing.T) {
	s := newAzuriteMemo(t, 0)
	ks := newTable(t, s, "stamps")
	ctx := context.Background()
	old := time.Date(2001, 2, 3, 4, 5, 6, 7800, time.UTC) // far from the service's clock
	a, b, c := stamped("p", "a", 1, old), stamped("p", "b", 2, old.Add(time.Second)), stamped("q", "c", 3, old.Add(2*time.Second))
	vers := put(t, s, ks, a, b, c) // a transaction for p, a single upsert for q
	recs, err := s.Get(ctx, ks, [][]byte{a.Key, b.Key, c.Key})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range []adapters.Record{a, b, c} {
		wantStamps(t, fmt.Sprintf("Get %q", w.Key), recs[i], w, vers[i])
	}
	all, _, err := s.GetRange(ctx, ks, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range []adapters.Record{a, b, c} {
		wantStamps(t, fmt.Sprintf("GetRange %q", w.Key), all[i], w, vers[i])
	}
	// A conditional replace on the service's version is remembered too.
	a2 := stamped("p", "a", 10, old.Add(3*time.Second))
	v2, err := s.Upsert(ctx, ks, []adapters.Write{{Key: a2.Key, Value: a2.Value, Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: vers[0]}}})
	if err != nil {
		t.Fatal(err)
	}
	wantStamps(t, "Get after a conditional replace", getOne(t, s, ks, a.Key), a2, v2[0])
	// An unstamped value (not from the frontend) reads with the service's.
	d := val("p", "d", 4)
	put(t, s, ks, d)
	if e := decode(t, getOne(t, s, ks, d.Key).Value); e.ETag == "" || e.Timestamp.IsZero() {
		t.Fatalf("unstamped write reads back without stamps: %+v", e)
	}
}

// TestStampsChangedElsewhere: once the entity changes behind the Store's
// back, reads give the service's stamps (a new ETag) and the memo forgets
// it; a delete forgets it too.
func TestStampsChangedElsewhere(t *testing.T) {
	s := newAzuriteMemo(t, 0)
	other := newAzuriteMemo(t, -1) // another writer
	ks := newTable(t, s, "stampsoob")
	ctx := context.Background()
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	a, b := stamped("p", "a", 1, old), stamped("p", "b", 2, old)
	va := put(t, s, ks, a, b)
	wantStamps(t, "before", getOne(t, s, ks, a.Key), a, va[0])
	// The same content, rewritten elsewhere: a new service ETag.
	put(t, other, ks, stamped("p", "a", 1, old))
	got := getOne(t, s, ks, a.Key)
	wantService(t, "after an out-of-band write", got, a)
	if got.Version == va[0] {
		t.Fatal("the out-of-band write kept the version")
	}
	if n := s.memo.len(); n != 1 {
		t.Fatalf("memo holds %d entries, want 1 (b)", n)
	}
	// Deleted and recreated elsewhere with a stamped write of the same
	// content: still the service's stamps.
	if err := s.Delete(ctx, ks, storetest.Deletes([][]byte{b.Key})); err != nil {
		t.Fatal(err)
	}
	if n := s.memo.len(); n != 0 {
		t.Fatalf("memo holds %d entries after the delete, want 0", n)
	}
	put(t, other, ks, b)
	wantService(t, "recreated elsewhere", getOne(t, s, ks, b.Key), b)
}

// TestStampsBound: the memo holds at most ETagMemory entries; an entity
// it no longer remembers reads with the service's stamps (the documented
// degradation: its ETag changes once), the others keep nemo's.
func TestStampsBound(t *testing.T) {
	s := newAzuriteMemo(t, 2)
	ks := newTable(t, s, "stampsbound")
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	recs := []adapters.Record{stamped("p", "a", 1, old), stamped("p", "b", 2, old), stamped("p", "c", 3, old)}
	var vers []adapters.Version
	for _, r := range recs { // one call each: put order is eviction order
		vers = append(vers, put(t, s, ks, r)[0])
	}
	if n := s.memo.len(); n != 2 {
		t.Fatalf("memo holds %d entries, want 2", n)
	}
	wantService(t, "evicted from the memo", getOne(t, s, ks, recs[0].Key), recs[0])
	for i := 1; i < 3; i++ {
		wantStamps(t, fmt.Sprintf("remembered %q", recs[i].Key), getOne(t, s, ks, recs[i].Key), recs[i], vers[i])
	}
}

// TestStampMemo checks the memo without a service: CLOCK replacement,
// drop on a differing version, a read older than the put keeps the entry.
func TestStampMemo(t *testing.T) {
	m := newStampMemo(3)
	ks := adapters.Keyspace("t")
	ver := func(i int) adapters.Version { return adapters.Version(datetimeETag(int64(1e15 + i))) }
	rec := func(k string, v adapters.Version) adapters.Record {
		return adapters.Record{Key: []byte(k), Version: v, Value: stamped("p", k, 1, time.Unix(1e9, 0)).Value}
	}
	for i, k := range []string{"a", "b", "c"} {
		m.put(ks, []byte(k), ver(i), int64(i), datetimeETag(int64(i)))
	}
	// All referenced: the sweep clears them and replaces the first.
	m.put(ks, []byte("d"), ver(3), 3, datetimeETag(3))
	if _, ok := m.idx[memoKey(ks, []byte("a"))]; ok || m.len() != 3 {
		t.Fatalf("after overflow: %v", m.idx)
	}
	// b is referenced by a read; the next overflow spares it and takes c.
	if r := m.restore(ks, rec("b", ver(1)), m.mark()); decode(t, r.Value).ETag != datetimeETag(1) || r.Version != ver(1) {
		t.Fatalf("restore: %+v", decode(t, r.Value))
	}
	m.put(ks, []byte("e"), ver(4), 4, datetimeETag(4))
	if _, ok := m.idx[memoKey(ks, []byte("c"))]; ok {
		t.Fatalf("c survived, b should have: %v", m.idx)
	}
	if _, ok := m.idx[memoKey(ks, []byte("b"))]; !ok {
		t.Fatalf("b was replaced: %v", m.idx)
	}
	// A read that began before the put and saw another version keeps it.
	mark := m.mark()
	m.put(ks, []byte("b"), ver(5), 5, datetimeETag(5))
	if r := m.restore(ks, rec("b", ver(1)), mark); decode(t, r.Value).ETag == datetimeETag(5) {
		t.Fatal("restored stamps for a different version")
	}
	if _, ok := m.idx[memoKey(ks, []byte("b"))]; !ok {
		t.Fatal("an older read dropped a newer entry")
	}
	// A later read that sees another version drops it.
	m.restore(ks, rec("b", ver(6)), m.mark())
	if _, ok := m.idx[memoKey(ks, []byte("b"))]; ok {
		t.Fatal("a differing version kept the entry")
	}
	// Other spellings of an ETag survive as text.
	for _, e := range []string{`"0x8D9"`, `W/"datetime'2024-01-01T00%3A00%3A00Z'"`, datetimeETag(123456789)} {
		m := newStampMemo(1)
		m.put(ks, []byte("x"), adapters.Version(e), 7, e)
		if r := m.restore(ks, rec("x", adapters.Version(e+"x")), m.mark()); decode(t, r.Value).ETag == e {
			t.Fatalf("%q matched another ETag", e)
		}
		m.put(ks, []byte("x"), adapters.Version(e), 7, e)
		if r := m.restore(ks, rec("x", adapters.Version(e)), m.mark()); decode(t, r.Value).ETag != e || r.Version != adapters.Version(e) {
			t.Fatalf("%q: restored %q", e, decode(t, r.Value).ETag)
		}
	}
	if newStampMemo(-1) != nil {
		t.Fatal("a negative bound should disable the memo")
	}
}

// TestStampMemoFootprint measures the heap an entry costs, for the
// figure in stampMemo's comment (60-byte keys, datetime ETags).
func TestStampMemoFootprint(t *testing.T) {
	const n = 50_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := newStampMemo(n)
	ks := adapters.Keyspace("sometable")
	for i := range n {
		key := fmt.Appendf(nil, "%050d", i) // with ks and separator: 60 bytes
		m.put(ks, key, adapters.Version(datetimeETag(int64(1e15+i))), int64(1e15+i), datetimeETag(int64(1e15+i)))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f bytes per entry with a 60-byte key", per)
	if per > 250 {
		t.Fatalf("%.0f bytes per entry", per)
	}
	runtime.KeepAlive(m)
}
