package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/storetest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func open(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func bs(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func recs(kv ...string) []adapters.Record {
	var out []adapters.Record
	for i := 0; i < len(kv); i += 2 {
		out = append(out, adapters.Record{Key: []byte(kv[i]), Value: []byte(kv[i+1])})
	}
	return out
}

const ks adapters.Keyspace = "tbl"

func TestGet(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	if _, err := s.Upsert(ctx, ks, adapters.Puts(recs("a", "1", "b", "", "c", "3"))); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		ks   adapters.Keyspace
		keys [][]byte
		want [][]byte
		err  error
	}{
		{"present", ks, bs("a", "c"), bs("1", "3"), nil},
		{"empty value is non-nil", ks, bs("b"), [][]byte{{}}, nil},
		{"absent is nil", ks, bs("zz", "a0"), [][]byte{nil, nil}, nil},
		{"order of request kept", ks, bs("c", "x", "a"), [][]byte{[]byte("3"), nil, []byte("1")}, nil},
		{"duplicate keys", ks, bs("a", "a"), bs("1", "1"), nil},
		{"no keys", ks, nil, [][]byte{}, nil},
		{"absent keyspace", "other", bs("a"), [][]byte{nil}, nil},
		{"empty key", ks, bs("a", ""), nil, adapters.ErrInvalid},
		{"empty keyspace", "", bs("a"), nil, adapters.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := storetest.Values(s.Get(ctx, tc.ks, tc.keys))
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if tc.err != nil {
				return
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d values, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if (got[i] == nil) != (tc.want[i] == nil) || !bytes.Equal(got[i], tc.want[i]) {
					t.Errorf("value %d = %q (nil %v), want %q (nil %v)", i, got[i], got[i] == nil, tc.want[i], tc.want[i] == nil)
				}
			}
		})
	}
}

func TestGetRange(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	if _, err := s.Upsert(ctx, ks, adapters.Puts(recs("a", "1", "b", "2", "c", "3", "d", ""))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Upsert(ctx, "neighbour", adapters.Puts(recs("a", "x", "bb", "y"))); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		start, end []byte
		limit      int
		keys       string // concatenated one-byte keys expected
		more       bool
	}{
		{"everything", nil, nil, 0, "abcd", false},
		{"empty start", []byte{}, nil, 0, "abcd", false},
		{"start inclusive end exclusive", []byte("b"), []byte("d"), 0, "bc", false},
		{"bounds between keys", []byte("a0"), []byte("c0"), 0, "bc", false},
		{"limit stops with more", nil, nil, 2, "ab", true},
		{"limit equal to count has no more", nil, nil, 4, "abcd", false},
		{"limit equal to bounded count", []byte("b"), []byte("d"), 2, "bc", false},
		{"limit inside bounds", []byte("b"), []byte("d"), 1, "b", true},
		{"negative limit is unlimited", nil, nil, -1, "abcd", false},
		{"start past last", []byte("e"), nil, 0, "", false},
		{"start equals end", []byte("b"), []byte("b"), 0, "", false},
		{"start after end", []byte("c"), []byte("a"), 0, "", false},
		{"end before first", nil, []byte("a"), 0, "", false},
		{"successor makes end inclusive", []byte("b"), adapters.Successor([]byte("c")), 0, "bc", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, more, err := s.GetRange(ctx, ks, tc.start, tc.end, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			var keys string
			for _, r := range got {
				keys += string(r.Key)
				if r.Value == nil {
					t.Errorf("record %q has a nil value", r.Key)
				}
			}
			if keys != tc.keys || more != tc.more {
				t.Fatalf("got keys %q more %v, want %q more %v", keys, more, tc.keys, tc.more)
			}
		})
	}
	if got, _, err := s.GetRange(ctx, "absent", nil, nil, 0); err != nil || len(got) != 0 {
		t.Fatalf("absent keyspace: %v %v", got, err)
	}
	if _, _, err := s.GetRange(ctx, "", nil, nil, 0); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("empty keyspace: %v", err)
	}
}

func TestUpsertDelete(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	// Within one batch the last write of a key wins; nil values store empty.
	if _, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{{Key: []byte("k"), Value: []byte("old")}, {Key: []byte("k"), Value: []byte("new")}, {Key: []byte("n")}})); err != nil {
		t.Fatal(err)
	}
	if got, _ := storetest.Values(s.Get(ctx, ks, bs("k", "n"))); string(got[0]) != "new" || got[1] == nil || len(got[1]) != 0 {
		t.Fatalf("got %q", got)
	}
	if _, err := s.Upsert(ctx, ks, adapters.Puts(recs("k", "newer"))); err != nil {
		t.Fatal(err)
	}
	if got, _ := storetest.Values(s.Get(ctx, ks, bs("k"))); string(got[0]) != "newer" {
		t.Fatalf("replace: got %q", got)
	}
	if _, err := s.Upsert(ctx, ks, nil); err != nil {
		t.Fatalf("empty upsert: %v", err)
	}
	// A batch with one bad key writes nothing.
	if _, err := s.Upsert(ctx, ks, adapters.Puts(recs("ok", "1", "", "2"))); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("empty key: %v", err)
	}
	if got, _ := storetest.Values(s.Get(ctx, ks, bs("ok"))); got[0] != nil {
		t.Fatal("invalid batch was partly applied")
	}
	if _, err := s.Upsert(ctx, ks, adapters.Puts(recs(string(make([]byte, 40000)), "v"))); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("huge key: %v", err)
	}

	if err := s.Delete(ctx, ks, storetest.Deletes(bs("k", "absent"))); err != nil {
		t.Fatalf("delete with an absent key: %v", err)
	}
	if got, _ := storetest.Values(s.Get(ctx, ks, bs("k", "n"))); got[0] != nil || got[1] == nil {
		t.Fatalf("after delete: %q", got)
	}
	if err := s.Delete(ctx, "nokeyspace", storetest.Deletes(bs("k"))); err != nil {
		t.Fatalf("delete in absent keyspace: %v", err)
	}
	if err := s.Delete(ctx, ks, storetest.Deletes(bs(""))); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("delete empty key: %v", err)
	}
}

func TestReturnedBytesAreCopies(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	fill := func(i int) string { return fmt.Sprintf("k%05d", i) }
	val := []byte("value")
	if _, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{{Key: []byte("k"), Value: val}})); err != nil {
		t.Fatal(err)
	}
	val[0] = 'X'         // the store must not alias the caller's buffer
	for i := range 100 { // enough data that "k" sits on a page of the memory map
		if _, err := s.Upsert(ctx, ks, adapters.Puts(recs(fill(i), string(make([]byte, 100))))); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := storetest.Values(s.Get(ctx, ks, bs("k")))
	r, _, _ := s.GetRange(ctx, ks, nil, nil, 1)
	// Overwriting the key while the file grows makes bbolt reuse freed
	// pages and remap the file; copies must be unaffected.
	for i := range 2000 {
		if _, err := s.Upsert(ctx, ks, adapters.Puts(recs("k", "XXXXX", fill(100+i), string(make([]byte, 100))))); err != nil {
			t.Fatal(err)
		}
	}
	if string(got[0]) != "value" || string(r[0].Key) != "k" || string(r[0].Value) != "value" {
		t.Fatalf("returned bytes changed: %q %q=%q", got[0], r[0].Key, r[0].Value)
	}
}

func TestClosedAndCancelled(t *testing.T) {
	s := open(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Get(ctx, ks, bs("a")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get: %v", err)
	}
	if _, _, err := s.GetRange(ctx, ks, nil, nil, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("GetRange: %v", err)
	}
	if _, err := s.Upsert(ctx, ks, adapters.Puts(recs("a", "1"))); !errors.Is(err, context.Canceled) {
		t.Fatalf("Upsert: %v", err)
	}
	if err := s.Delete(ctx, ks, storetest.Deletes(bs("a"))); !errors.Is(err, context.Canceled) {
		t.Fatalf("Delete: %v", err)
	}
	if got, _ := storetest.Values(s.Get(context.Background(), ks, bs("a"))); got[0] != nil {
		t.Fatal("cancelled Upsert wrote")
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	bg := context.Background()
	checks := map[string]error{}
	_, checks["Get"] = s.Get(bg, ks, bs("a"))
	_, _, checks["GetRange"] = s.GetRange(bg, ks, nil, nil, 0)
	_, checks["Upsert"] = s.Upsert(bg, ks, adapters.Puts(recs("a", "1")))
	checks["Delete"] = s.Delete(bg, ks, storetest.Deletes(bs("a")))
	_, checks["Keyspaces"] = s.Keyspaces()
	checks["DropKeyspace"] = s.DropKeyspace(ctx, ks)
	checks["CreateKeyspace"] = s.CreateKeyspace(ctx, ks)
	for name, err := range checks {
		if !errors.Is(err, adapters.ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
}

func TestKeyspaces(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	if got, err := s.Keyspaces(); err != nil || len(got) != 0 {
		t.Fatalf("fresh store: %v %v", got, err)
	}
	for _, k := range []adapters.Keyspace{"zeta", "alpha", "mid\x00dle"} {
		if _, err := s.Upsert(ctx, k, adapters.Puts(recs("k", string(k)))); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Keyspaces()
	if err != nil || !slices.Equal(got, []adapters.Keyspace{"alpha", "mid\x00dle", "zeta"}) {
		t.Fatalf("Keyspaces = %q, %v", got, err)
	}
	if err := s.DropKeyspace(ctx, "alpha"); err != nil {
		t.Fatal(err)
	}
	if err := s.DropKeyspace(ctx, "never"); err != nil {
		t.Fatalf("drop absent: %v", err)
	}
	if err := s.DropKeyspace(ctx, ""); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("drop empty name: %v", err)
	}
	if got, _ := s.Keyspaces(); !slices.Equal(got, []adapters.Keyspace{"mid\x00dle", "zeta"}) {
		t.Fatalf("after drop: %q", got)
	}
	if v, _ := storetest.Values(s.Get(ctx, "alpha", bs("k"))); v[0] != nil {
		t.Fatal("dropped keyspace still has data")
	}
	if v, _ := storetest.Values(s.Get(ctx, "zeta", bs("k"))); string(v[0]) != "zeta" {
		t.Fatalf("other keyspace damaged: %q", v[0])
	}
}

func TestCreateKeyspace(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	var _ adapters.KeyspaceAdmin = s

	// A created empty keyspace is listed and reads empty.
	if err := s.CreateKeyspace(ctx, "empty"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Keyspaces(); err != nil || !slices.Equal(got, []adapters.Keyspace{"empty"}) {
		t.Fatalf("Keyspaces after creating one = %q, %v", got, err)
	}
	if got, more, err := s.GetRange(ctx, "empty", nil, nil, 0); err != nil || more || len(got) != 0 {
		t.Fatalf("created keyspace GetRange = %q %v %v, want empty", got, more, err)
	}

	// Creating an existing keyspace keeps its records.
	if _, err := s.Upsert(ctx, ks, adapters.Puts(recs("a", "1", "b", ""))); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.CreateKeyspace(ctx, ks); err != nil {
			t.Fatalf("create existing: %v", err)
		}
	}
	if got, _, err := s.GetRange(ctx, ks, nil, nil, 0); err != nil || len(got) != 2 ||
		string(got[0].Key) != "a" || string(got[0].Value) != "1" || string(got[1].Key) != "b" || got[1].Value == nil || len(got[1].Value) != 0 {
		t.Fatalf("records after creating an existing keyspace: %q, %v", got, err)
	}
	if got, _ := s.Keyspaces(); !slices.Equal(got, []adapters.Keyspace{"empty", ks}) {
		t.Fatalf("Keyspaces = %q", got)
	}

	// DropKeyspace then CreateKeyspace leaves it empty (and listed).
	if err := s.DropKeyspace(ctx, ks); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateKeyspace(ctx, ks); err != nil {
		t.Fatal(err)
	}
	if got, more, err := s.GetRange(ctx, ks, nil, nil, 0); err != nil || more || len(got) != 0 {
		t.Fatalf("dropped and recreated keyspace GetRange = %q %v %v, want empty", got, more, err)
	}
	if v, err := storetest.Values(s.Get(ctx, ks, bs("a", "b"))); err != nil || v[0] != nil || v[1] != nil {
		t.Fatalf("dropped and recreated keyspace Get = %q, %v", v, err)
	}
	if got, _ := s.Keyspaces(); !slices.Equal(got, []adapters.Keyspace{"empty", ks}) {
		t.Fatalf("Keyspaces after drop and create = %q", got)
	}

	// The empty name is refused, as by every other call.
	if err := s.CreateKeyspace(ctx, ""); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("create empty name: %v", err)
	}
}

func TestDurableAcrossReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, Options{Logger: quiet}) // durable mode
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Upsert(ctx, ks, adapters.Puts(recs("a", "1", "b", "2", "c", ""))); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, ks, storetest.Deletes(bs("b"))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Upsert(ctx, "gone", adapters.Puts(recs("x", "y"))); err != nil {
		t.Fatal(err)
	}
	if err := s.DropKeyspace(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir)
	got, more, err := s.GetRange(ctx, ks, nil, nil, 0)
	if err != nil || more {
		t.Fatal(err, more)
	}
	if len(got) != 2 || string(got[0].Key) != "a" || string(got[0].Value) != "1" || string(got[1].Key) != "c" || got[1].Value == nil || len(got[1].Value) != 0 {
		t.Fatalf("after reopen: %q", got)
	}
	if kss, _ := s.Keyspaces(); !slices.Equal(kss, []adapters.Keyspace{ks}) {
		t.Fatalf("keyspaces after reopen: %q", kss)
	}
}

func TestSecondOpenOfSameDirFails(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the lock timeout")
	}
	dir := t.TempDir()
	open(t, dir)
	if s, err := Open(dir, Options{Logger: quiet}); err == nil {
		s.Close()
		t.Fatal("second Open of a locked data dir succeeded")
	}
}

// model is the reference: a plain map, sorted on every range read.
type model map[string]string

func (m model) rangeOf(start, end []byte, limit int) ([]string, bool) {
	var keys []string
	for k := range m {
		if k >= string(start) && (end == nil || k < string(end)) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	if limit > 0 && len(keys) > limit {
		return keys[:limit], true
	}
	return keys, false
}

// TestAgainstModel runs random operations over a small key alphabet (so
// keys collide and ranges are dense) and checks every answer.
func TestAgainstModel(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte{0x00, 'a', 'b', 'c', 0xff}
	randKey := func() []byte {
		k := make([]byte, 1+rng.IntN(3))
		for i := range k {
			k[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return k
	}
	randKeys := func() [][]byte {
		keys := make([][]byte, rng.IntN(6))
		for i := range keys {
			keys[i] = randKey()
		}
		return keys
	}
	spaces := []adapters.Keyspace{"one", "two"}
	models := map[adapters.Keyspace]model{"one": {}, "two": {}}

	for step := range 3000 {
		ksp := spaces[rng.IntN(len(spaces))]
		m := models[ksp]
		switch op := rng.IntN(4); op {
		case 0:
			var batch []adapters.Record
			for _, k := range randKeys() {
				v := make([]byte, rng.IntN(4))
				for i := range v {
					v[i] = byte(rng.UintN(256))
				}
				batch = append(batch, adapters.Record{Key: k, Value: v})
			}
			if _, err := s.Upsert(ctx, ksp, adapters.Puts(batch)); err != nil {
				t.Fatalf("step %d: Upsert: %v", step, err)
			}
			for _, r := range batch {
				m[string(r.Key)] = string(r.Value)
			}
		case 1:
			keys := randKeys()
			if err := s.Delete(ctx, ksp, storetest.Deletes(keys)); err != nil {
				t.Fatalf("step %d: Delete: %v", step, err)
			}
			for _, k := range keys {
				delete(m, string(k))
			}
		case 2:
			keys := randKeys()
			got, err := storetest.Values(s.Get(ctx, ksp, keys))
			if err != nil {
				t.Fatalf("step %d: Get: %v", step, err)
			}
			for i, k := range keys {
				want, ok := m[string(k)]
				if (got[i] != nil) != ok || string(got[i]) != want {
					t.Fatalf("step %d: Get(%q) = %q, want %q (present %v)", step, k, got[i], want, ok)
				}
			}
		case 3:
			var start, end []byte
			if rng.IntN(4) > 0 {
				start = randKey()
			}
			if rng.IntN(4) > 0 {
				end = randKey()
			}
			limit := rng.IntN(8) - 1
			got, more, err := s.GetRange(ctx, ksp, start, end, limit)
			if err != nil {
				t.Fatalf("step %d: GetRange: %v", step, err)
			}
			wantKeys, wantMore := m.rangeOf(start, end, limit)
			if more != wantMore || len(got) != len(wantKeys) {
				t.Fatalf("step %d: GetRange(%q, %q, %d) = %d recs more %v, want %q more %v", step, start, end, limit, len(got), more, wantKeys, wantMore)
			}
			for i, r := range got {
				if string(r.Key) != wantKeys[i] || string(r.Value) != m[wantKeys[i]] {
					t.Fatalf("step %d: record %d = %q=%q, want %q=%q", step, i, r.Key, r.Value, wantKeys[i], m[wantKeys[i]])
				}
			}
		}
	}
}

// TestConcurrent mixes writers and readers on shared keys; run with -race.
// Each writer owns a key prefix, so its final state is known exactly.
func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	const writers, rounds = 4, 100
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range rounds {
				k := fmt.Sprintf("w%d/%03d", w, i)
				if _, err := s.Upsert(ctx, ks, adapters.Puts(recs(k, k))); err != nil {
					t.Error(err)
					return
				}
				if i%2 == 1 {
					if err := s.Delete(ctx, ks, storetest.Deletes(bs(k))); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
		wg.Go(func() {
			for range rounds {
				rs, _, err := s.GetRange(ctx, ks, nil, nil, 50)
				if err != nil {
					t.Error(err)
					return
				}
				for _, r := range rs {
					if !bytes.Equal(r.Key, r.Value) {
						t.Errorf("torn record %q=%q", r.Key, r.Value)
					}
				}
			}
		})
	}
	wg.Wait()
	got, _, err := s.GetRange(ctx, ks, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != writers*rounds/2 {
		t.Fatalf("got %d records, want %d", len(got), writers*rounds/2)
	}
}

func BenchmarkUpsertGet(b *testing.B) {
	ctx := context.Background()
	s := open(b, b.TempDir())
	val := make([]byte, 256)
	b.Run("upsert10", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			batch := make([]adapters.Record, 10)
			for j := range batch {
				batch[j] = adapters.Record{Key: fmt.Appendf(nil, "k%09d", i*10+j), Value: val}
			}
			if _, err := s.Upsert(ctx, ks, adapters.Puts(batch)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("get", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := s.Get(ctx, ks, [][]byte{fmt.Appendf(nil, "k%09d", i%1000)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("range100", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := s.GetRange(ctx, ks, nil, nil, 100); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestVersionsAndPreconditions: every write gives its key a new version,
// reads report it, and each precondition holds or conflicts exactly as the
// adapters.Store contract says; conflicting writes do not stop the others.
func TestVersionsAndPreconditions(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	k := func(s string) []byte { return []byte(s) }
	vers, err := s.Upsert(ctx, ks, adapters.Puts(recs("a", "1", "b", "2")))
	if err != nil || len(vers) != 2 || vers[0] == "" || vers[0] == vers[1] {
		t.Fatalf("upsert versions %q, %v", vers, err)
	}
	got, err := s.Get(ctx, ks, [][]byte{k("a"), k("b"), k("c")})
	if err != nil || got[0].Version != vers[0] || got[1].Version != vers[1] || got[2].Value != nil || got[2].Version != "" {
		t.Fatalf("get %+v, %v; want versions %q", got, err, vers)
	}
	rng, _, err := s.GetRange(ctx, ks, nil, nil, 0)
	if err != nil || len(rng) != 2 || rng[0].Version != vers[0] || rng[1].Version != vers[1] {
		t.Fatalf("range %+v, %v", rng, err)
	}
	va, vb := vers[0], vers[1]
	// One call: good writes of every kind mixed with conflicts.
	writes := []adapters.Write{
		{Key: k("a"), Value: k("1'"), Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: va}},   // ok
		{Key: k("b"), Value: k("x"), Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: "999"}}, // stale
		{Key: k("c"), Value: k("3"), Expect: adapters.Expect{Kind: adapters.ExpectAbsent}},                  // ok
		{Key: k("b"), Value: k("x"), Expect: adapters.Expect{Kind: adapters.ExpectAbsent}},                  // exists
		{Key: k("d"), Value: k("x"), Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: va}},    // absent
	}
	vers, err = s.Upsert(ctx, ks, writes)
	var ce *adapters.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, adapters.ErrConflict) {
		t.Fatalf("mixed upsert: %v, want a ConflictError", err)
	}
	want := []adapters.Conflict{
		{Index: 1, Key: k("b"), Exists: true, Current: vb},
		{Index: 3, Key: k("b"), Exists: true, Current: vb},
		{Index: 4, Key: k("d"), Exists: false},
	}
	if fmt.Sprint(ce.Conflicts) != fmt.Sprint(want) {
		t.Fatalf("conflicts %+v, want %+v", ce.Conflicts, want)
	}
	if vers[0] == "" || vers[0] == va || vers[2] == "" || vers[1] != "" || vers[3] != "" || vers[4] != "" {
		t.Fatalf("versions %q: applied writes get new ones, refused ones none", vers)
	}
	got, _ = s.Get(ctx, ks, [][]byte{k("a"), k("b"), k("c"), k("d")})
	if string(got[0].Value) != "1'" || got[0].Version != vers[0] || string(got[1].Value) != "2" || string(got[2].Value) != "3" || got[3].Value != nil {
		t.Fatalf("after mixed upsert: %+v", got)
	}
	va, vc := vers[0], vers[2]
	// Deletes: stale version, absent expected but present, and good ones.
	err = s.Delete(ctx, ks, []adapters.Write{
		{Key: k("a"), Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: vb}}, // stale
		{Key: k("c"), Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: vc}}, // ok
		{Key: k("b"), Expect: adapters.Expect{Kind: adapters.ExpectAbsent}},               // present
		{Key: k("z"), Expect: adapters.Expect{Kind: adapters.ExpectAbsent}},               // ok (nothing to do)
		{Key: k("y")}, // ok: absent is fine
	})
	if !errors.As(err, &ce) || fmt.Sprint(ce.Conflicts) != fmt.Sprint([]adapters.Conflict{
		{Index: 0, Key: k("a"), Exists: true, Current: va},
		{Index: 2, Key: k("b"), Exists: true, Current: vb},
	}) {
		t.Fatalf("mixed delete: %v", err)
	}
	got, _ = s.Get(ctx, ks, [][]byte{k("a"), k("b"), k("c")})
	if got[0].Value == nil || got[1].Value == nil || got[2].Value != nil {
		t.Fatalf("after mixed delete: %+v", got)
	}
	// A key re-created after a delete gets a version it never had.
	vers, err = s.Upsert(ctx, ks, []adapters.Write{{Key: k("c"), Value: k("again"), Expect: adapters.Expect{Kind: adapters.ExpectAbsent}}})
	if err != nil || vers[0] == vc {
		t.Fatalf("re-created key: version %q (was %q), %v", vers, vc, err)
	}
	// Versions survive a reopen; the version buckets are not keyspaces.
	dir := t.TempDir()
	s2 := open(t, dir)
	if _, err := s2.Upsert(ctx, ks, adapters.Puts(recs("p", "q"))); err != nil {
		t.Fatal(err)
	}
	before, _ := s2.Get(ctx, ks, [][]byte{k("p")})
	s2.Close()
	s2 = open(t, dir)
	after, _ := s2.Get(ctx, ks, [][]byte{k("p")})
	if after[0].Version != before[0].Version {
		t.Fatalf("version after reopen %q, before %q", after[0].Version, before[0].Version)
	}
	if kss, _ := s2.Keyspaces(); fmt.Sprint(kss) != "[tbl]" {
		t.Fatalf("keyspaces %v", kss)
	}
	if err := s2.DropKeyspace(ctx, ks); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Upsert(ctx, ks, adapters.Puts(recs("p", "q"))); err != nil {
		t.Fatal(err)
	}
	if again, _ := s2.Get(ctx, ks, [][]byte{k("p")}); again[0].Version == "" || again[0].Version == after[0].Version {
		t.Fatalf("version after drop and rewrite %q, before the drop %q: must be new", again[0].Version, after[0].Version)
	}
}

// TestInMemory: an in-memory store creates no file (Open's directory is not
// even made), answers as the on-disk one does, Reset empties it while
// keeping versions increasing, and Close frees it.
func TestInMemory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "never")
	s, err := Open(dir, Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.InMemory() {
		t.Error("InMemory() = false")
	}
	ctx := context.Background()
	v1, err := s.Upsert(ctx, "t", []adapters.Write{{Key: []byte("k"), Value: []byte("v")}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "t", [][]byte{[]byte("k")}); err != nil || string(got[0].Value) != "v" {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if err := s.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if kss, err := s.Keyspaces(); err != nil || len(kss) != 0 {
		t.Errorf("Keyspaces after Reset = %v, %v; want none", kss, err)
	}
	if got, err := s.Get(ctx, "t", [][]byte{[]byte("k")}); err != nil || got[0].Value != nil {
		t.Errorf("Get after Reset = %+v, %v; want absent", got, err)
	}
	v2, err := s.Upsert(ctx, "t", []adapters.Write{{Key: []byte("k"), Value: []byte("w")}})
	if err != nil {
		t.Fatal(err)
	}
	n1, _ := strconv.ParseUint(string(v1[0]), 10, 64)
	n2, _ := strconv.ParseUint(string(v2[0]), 10, 64)
	if n2 <= n1 {
		t.Errorf("version after Reset %s, before %s: a version came back", v2[0], v1[0])
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat %s: %v; an in-memory store created its directory", dir, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(ctx); !errors.Is(err, adapters.ErrClosed) {
		t.Errorf("Reset after Close = %v, want ErrClosed", err)
	}
}
