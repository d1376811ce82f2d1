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
	if got, priors := e.b.Bases(testKS, [][]byte{[]byte("a")}); got[0] != ver || priors[0] != e.b.digest([]byte("x1"), false) {
		t.Fatalf("dirty a: base %+v prior %x, want %+v and the hash of x1", got[0], priors[0], ver)
	}
	if got, _ := e.b.Bases("not-open", [][]byte{[]byte("a")}); got[0] != (adapters.Expect{}) {
		t.Fatalf("keyspace not open: %+v", got)
	}
}

// TestApplyReplayed: a replayed record takes the newest logged base (a
// write logged with none leaves it as it was); each write's value and
// prior are remembered as ones the store may hold; the byte accounting
// holds.
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
	replay(Write{Key: []byte("k1"), Value: []byte("uno"), Expect: v9, Prior: e.b.digest([]byte("eins"), false)},
		Write{Key: []byte("k2"), Value: []byte("dos"), Expect: v9})
	got, _ := e.b.Bases(testKS, [][]byte{[]byte("k1"), []byte("k2"), []byte("k3")})
	if want := []adapters.Expect{v9, v9, absent}; !slices.Equal(got, want) {
		t.Fatalf("bases after replay %+v, want %+v (the newest logged base)", got, want)
	}
	s, _ := e.b.space(testKS)
	s.wbMu.lock()
	k1, k3 := s.sent["k1"], s.sent["k3"]
	s.wbMu.Unlock()
	d := func(v string) uint64 { return e.b.digest([]byte(v), false) }
	if !slices.Equal(k1, []uint64{d("one"), d("uno"), d("eins")}) || !slices.Equal(k3, []uint64{deleteDigest}) {
		t.Fatalf("noted as possibly in the store: k1 %v k3 %v, want k1's values and prior, k3's delete", k1, k3)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, k := range []string{"k1", "k2", "k3"} {
		if r := s.floor([]byte(k)); string(r.key()) != k || !r.dirty() {
			t.Fatalf("%s not buffered dirty after replay", k)
		}
	}
}

// TestReplayWritten: a logged write-back gives a buffered record the
// version the store returned as its base, and its value is noted as the
// buffer's own; one of a key not buffered leaves nothing behind.
func TestReplayWritten(t *testing.T) {
	e := newConflictEnv(t, ConflictStoreWins)
	v3 := adapters.Expect{Kind: adapters.ExpectVersion, Version: "3"}
	v5 := adapters.Expect{Kind: adapters.ExpectVersion, Version: "5"}
	if err := e.b.ApplyReplayed(e.ctx, testKS, []Write{{Key: []byte("k1"), Value: []byte("one"), Expect: v3}}); err != nil {
		t.Fatal(err)
	}
	d1, d2 := e.b.digest([]byte("one"), false), e.b.digest([]byte("two"), false)
	if err := e.b.ReplayWritten(e.ctx, testKS, []WrittenBack{{Key: []byte("k1"), Base: v5, Digest: d1}, {Key: []byte("k2"), Base: v5, Digest: d2}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.b.Bases(testKS, [][]byte{[]byte("k1")}); got[0] != v5 {
		t.Fatalf("k1's base after its logged write-back: %+v, want %+v", got[0], v5)
	}
	s, _ := e.b.space(testKS)
	s.wbMu.lock()
	k1, k2 := s.sent["k1"], s.sent["k2"]
	s.wbMu.Unlock()
	if !slices.Equal(k1, []uint64{e.b.digest([]byte("one"), false)}) || k2 != nil {
		t.Fatalf("sent k1 %v k2 %v, want k1's value once, nothing of k2", k1, k2)
	}
	if err := e.b.Check(e.ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSentIsNeverCut: a key rewritten hundreds of times across crashes
// whose write-back never finished (each start killed first) logs many
// priors after the send that landed; all are kept, so the refusal after
// the next replay still recognises the landed one. (A bound of 64 once
// dropped it, and the write-back reported nemo's own write as another
// writer's.)
func TestSentIsNeverCut(t *testing.T) {
	s := &keyspace{}
	s.noteSent("k", 7) // the send that landed
	for d := range uint64(1000) {
		s.noteSent("k", 100+d) // priors logged after it
	}
	if !slices.Contains(s.sent["k"], 7) || len(s.sent["k"]) != 1001 {
		t.Fatalf("%d digests kept, the landed send among them: %v", len(s.sent["k"]), slices.Contains(s.sent["k"], 7))
	}
}
