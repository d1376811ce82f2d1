package cache

import (
	"errors"
	"strings"
	"testing"

	"github.com/nemocache/nemo/adapters"
)

// CheckOptions.OthersWriteKey spares exactly the keys it names: a clean
// record another writer deleted, and a key another writer put into a
// sealed gap, are reported unless named, and a key not named is still
// checked beside named ones.
func TestCheckOthersWriteKey(t *testing.T) {
	e := newEnv(t, PolicyNemo, "a=1 c=3 e=5", "")
	if _, _, err := e.b.Scan(e.ctx, testKS, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	e.expectState(`"" T g0 r | a=1 R g0 | c=3 R g0 | e=5 R g0`)
	// Behind the buffer's back: b appears in the sealed gap after a, c
	// and e disappear.
	if _, err := e.raw.Upsert(e.ctx, testKS, adapters.Puts([]adapters.Record{{Key: []byte("b"), Value: []byte("2")}})); err != nil {
		t.Fatal(err)
	}
	if err := e.raw.Delete(e.ctx, testKS, []adapters.Write{{Key: []byte("c")}, {Key: []byte("e")}}); err != nil {
		t.Fatal(err)
	}
	named := func(keys ...string) func(adapters.Keyspace, []byte) bool {
		return func(ks adapters.Keyspace, k []byte) bool {
			for _, n := range keys {
				if ks == testKS && string(k) == n {
					return true
				}
			}
			return false
		}
	}
	for _, tc := range []struct {
		others []string
		want   []string // the violations, by the text that names each
	}{
		{nil, []string{`gap after "a" is sealed but the store has "b"`, `clean record "c" is absent`, `clean record "e" is absent`}},
		{[]string{"c"}, []string{`gap after "a" is sealed but the store has "b"`, `clean record "e" is absent`}},
		{[]string{"b", "c"}, []string{`clean record "e" is absent`}},
		{[]string{"b", "c", "e"}, nil},
	} {
		o := CheckOptions{}
		if tc.others != nil {
			o.OthersWriteKey = named(tc.others...)
		}
		err := e.b.CheckWith(e.ctx, o)
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("others write %v: %v, want no violation", tc.others, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvariant) {
			t.Fatalf("others write %v: %v, want %v", tc.others, err, ErrInvariant)
		}
		if n := len(strings.Split(err.Error(), "\n")); n != len(tc.want) {
			t.Errorf("others write %v: %d violations, want %d: %v", tc.others, n, len(tc.want), err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("others write %v: %v, want it to report %s", tc.others, err, w)
			}
		}
	}
}
