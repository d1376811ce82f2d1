package cache

import (
	"context"
	"errors"
	"testing"

	"github.com/nemocache/nemo/adapters"
)

// TestLockKeysOneFetch: with FreshLocks (coherence shared) a locking read
// of several keys locks them all, then asks the store for all of them in
// one Get, and reports each one's value and base. When a key's lock is
// held by another owner the call fails with the conflict, having resolved
// the keys it locked before it: called again once the lock is free, it
// answers those from the buffer (what the transaction read) and fetches
// only the rest.
func TestLockKeysOneFetch(t *testing.T) {
	ctx := context.Background()
	st := openEmbedded(t)
	if err := st.CreateKeyspace(ctx, testKS); err != nil {
		t.Fatal(err)
	}
	vers, err := st.Upsert(ctx, testKS, adapters.Puts([]adapters.Record{
		{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}, {Key: []byte("c"), Value: []byte("3")}}))
	if err != nil {
		t.Fatal(err)
	}
	cnt := adapters.Count(st)
	b, err := New(cnt, Options{DisableWorkers: true, Logger: quietLog, FreshLocks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.OpenKeyspace(testKS)
	keys := func(ks ...string) [][]byte {
		var out [][]byte
		for _, k := range ks {
			out = append(out, []byte(k))
		}
		return out
	}
	gets := func() (reqs, keys uint64) {
		s := cnt.Stats()[adapters.OpGet]
		return s.Requests, s.Keys
	}
	o1 := &Owner{ID: 1}
	reads, err := b.LockKeys(ctx, testKS, keys("a", "b", "c", "d"), o1, ModeS)
	if err != nil {
		t.Fatal(err)
	}
	if r, k := gets(); r != 1 || k != 4 {
		t.Fatalf("locking reads of 4 keys made %d store reads of %d keys, want one of 4", r, k)
	}
	want := []KeyRead{{[]byte("1"), true, adapters.Expect{Kind: adapters.ExpectVersion, Version: vers[0]}},
		{[]byte("2"), true, adapters.Expect{Kind: adapters.ExpectVersion, Version: vers[1]}},
		{[]byte("3"), true, adapters.Expect{Kind: adapters.ExpectVersion, Version: vers[2]}},
		{nil, false, adapters.Expect{Kind: adapters.ExpectAbsent}}}
	for i, r := range reads {
		if string(r.Value) != string(want[i].Value) || r.Exists != want[i].Exists || r.Base != want[i].Base {
			t.Errorf("key %d: %+v, want %+v", i, r, want[i])
		}
	}
	b.Release(o1)

	// Another writer changes b; o2 holds c exclusively.
	if _, err := st.Upsert(ctx, testKS, adapters.Puts([]adapters.Record{{Key: []byte("b"), Value: []byte("20")}})); err != nil {
		t.Fatal(err)
	}
	o2, o3 := &Owner{ID: 2}, &Owner{ID: 3}
	if _, _, _, err := b.LockKey(ctx, testKS, []byte("c"), o2, ModeX); err != nil {
		t.Fatal(err)
	}
	cnt.Reset()
	var lc *LockConflict
	if _, err := b.LockKeys(ctx, testKS, keys("a", "b", "c"), o3, ModeS); !errors.As(err, &lc) {
		t.Fatalf("a locking read of a key another owner holds: %v, want a lock conflict", err)
	}
	if r, k := gets(); r != 1 || k != 2 {
		t.Fatalf("the conflicting call fetched %d times, %d keys; want the 2 keys it locked, once", r, k)
	}
	b.Release(o2)
	cnt.Reset()
	reads, err = b.LockKeys(ctx, testKS, keys("a", "b", "c"), o3, ModeS)
	if err != nil {
		t.Fatal(err)
	}
	if r, k := gets(); r != 1 || k != 1 {
		t.Fatalf("called again: %d fetches of %d keys, want one of c alone", r, k)
	}
	if string(reads[1].Value) != "20" || string(reads[2].Value) != "3" {
		t.Fatalf("called again: b=%q c=%q, want b as the other writer left it", reads[1].Value, reads[2].Value)
	}
	b.Release(o3)
	if err := b.Check(ctx); err != nil {
		t.Fatal(err)
	}
}
