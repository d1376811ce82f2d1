package cache

import (
	"slices"
	"testing"

	"github.com/nemocache/nemo/adapters"
)

// TestBases: what a commit logs for each key is the base Apply would
// write it back against.
func TestBases(t *testing.T) {
	e := newConflictEnv(t, ConflictStoreWins)
	v0 := e.other("a", "x0")
	if _, ok := e.get("a"); !ok {
		t.Fatal("a not found")
	}
	e.get("b") // absent: a tombstone based on absence
	ver := adapters.Expect{Kind: adapters.ExpectVersion, Version: v0}
	absent := adapters.Expect{Kind: adapters.ExpectAbsent}
	got, priors := e.b.Bases(testKS, [][]byte{[]byte("a"), []byte("b"), []byte("c")})
	if want := []adapters.Expect{ver, absent, {}}; !slices.Equal(got, want) || !slices.Equal(priors, []uint64{0, 0, 0}) {
		t.Fatalf("Bases = %+v %v, want %+v and no priors (nothing dirty)", got, priors, want)
	}
	e.apply("a", "x1", false) // a dirty record keeps its base until written back
	if got, priors := e.b.Bases(testKS, [][]byte{[]byte("a")}); got[0] != ver || priors[0] != e.b.attemptHash([]byte("x1"), false) {
		t.Fatalf("dirty a: base %+v prior %x, want %+v and the hash of x1", got[0], priors[0], ver)
	}
	if got, _ := e.b.Bases("not-open", [][]byte{[]byte("a")}); got[0] != (adapters.Expect{}) {
		t.Fatalf("keyspace not open: %+v", got)
	}
}

// TestApplyReplayed: a record replay creates takes the logged base, an
// existing one keeps its own; every replayed value is remembered as an
// attempt; the byte accounting holds.
func TestApplyReplayed(t *testing.T) {
	e := newConflictEnv(t, ConflictStoreWins)
	v7 := adapters.Expect{Kind: adapters.ExpectVersion, Version: "7"}
	v9 := adapters.Expect{Kind: adapters.ExpectVersion, Version: "9"}
	absent := adapters.Expect{Kind: adapters.ExpectAbsent}
	replay := func(ws ...Write) {
		t.Helper()
		if err := e.b.ApplyReplayed(e.ctx, testKS, ws); err != nil {
			t.Fatal(err)
		}
		if err := e.b.Check(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	replay(Write{Key: []byte("k1"), Value: []byte("one"), Expect: v7},
		Write{Key: []byte("k2"), Value: []byte("two")},
		Write{Key: []byte("k3"), Delete: true, Expect: absent})
	replay(Write{Key: []byte("k1"), Value: []byte("uno"), Expect: v9},
		Write{Key: []byte("k2"), Value: []byte("dos"), Expect: v9})
	got, _ := e.b.Bases(testKS, [][]byte{[]byte("k1"), []byte("k2"), []byte("k3")})
	if want := []adapters.Expect{v7, {}, absent}; !slices.Equal(got, want) {
		t.Fatalf("bases after replay %+v, want %+v (created: the logged base; existing: its first)", got, want)
	}
	s, _ := e.b.space(testKS)
	s.wbMu.lock()
	k1, k3 := s.attempts["k1"], s.attempts["k3"]
	s.wbMu.Unlock()
	if !slices.Equal(k1, []uint64{e.b.attemptHash([]byte("one"), false), e.b.attemptHash([]byte("uno"), false)}) ||
		!slices.Equal(k3, []uint64{e.b.attemptHash(nil, true)}) {
		t.Fatalf("attempts k1 %v k3 %v", k1, k3)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, k := range []string{"k1", "k2", "k3"} {
		if r := s.floor([]byte(k)); string(r.key()) != k || !r.dirty() {
			t.Fatalf("%s not buffered dirty after replay", k)
		}
	}
}
