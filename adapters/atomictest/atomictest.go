// Package atomictest is the conformance test of adapters.AtomicWriter that
// every store implementing it runs against a real backend (the embedded
// store, Azurite, the Datastore emulator): each precondition, for upserts
// and deletes, holds and is refused as it should; a group with a refused
// mutation applies nothing; the versions WriteAtomic returns are those a
// Get then reports; malformed groups are refused with adapters.ErrInvalid
// before anything is applied; and of two concurrent ExpectVersion writes of
// one key exactly one wins. A store describes its keys and values with a
// Kit.
package atomictest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/nemocache/nemo/adapters"
)

// Kit describes the store under test.
type Kit struct {
	// Store is the store under test; it must implement
	// adapters.AtomicWriter.
	Store adapters.Store
	// Keyspace returns a fresh, empty keyspace, ready for writes.
	Keyspace func(t *testing.T) adapters.Keyspace
	// Key returns the i-th key (i >= 0) of a keyspace; all of them must be
	// writable in one group (one Azure partition).
	Key func(i int) []byte
	// Value returns a value to store under key, carrying n.
	Value func(key []byte, n int) []byte
	// Payload returns the n of a value read back.
	Payload func(t *testing.T, value []byte) int
	// MaxGroup is the most mutations one group may hold; 0 if there is no
	// limit worth testing. A group of MaxGroup+1 must be ErrInvalid.
	MaxGroup int
	// NoCheck says that the store refuses a group holding a check
	// mutation with ErrInvalid (Azure has no read inside a transaction).
	NoCheck bool
	// NoDeleteAbsent says that the store refuses a group holding an
	// ExpectAbsent delete with ErrInvalid (Azure cannot express it).
	NoDeleteAbsent bool
	// Invalid returns store-specific groups (with keys of their own, not
	// Key(0)) that must be refused with ErrInvalid, applying nothing.
	Invalid func(t *testing.T) [][]adapters.Mutation
}

// Run runs the conformance test as subtests of t.
func Run(t *testing.T, k Kit) {
	if _, ok := k.Store.(adapters.AtomicWriter); !ok {
		t.Fatalf("%T does not implement adapters.AtomicWriter", k.Store)
	}
	t.Run("Conditions", func(t *testing.T) { testConditions(t, k) })
	t.Run("Checks", func(t *testing.T) { testChecks(t, k) })
	t.Run("RangeChecks", func(t *testing.T) { testRangeChecks(t, k) })
	t.Run("AllOrNothing", func(t *testing.T) { testAllOrNothing(t, k) })
	t.Run("Versions", func(t *testing.T) { testVersions(t, k) })
	t.Run("Invalid", func(t *testing.T) { testInvalid(t, k) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, k) })
}

func (k Kit) atomic(ctx context.Context, ks adapters.Keyspace, ms []adapters.Mutation) ([]adapters.Version, error) {
	return k.Store.(adapters.AtomicWriter).WriteAtomic(ctx, ks, ms)
}

// Upsert is an upsert mutation.
func Upsert(key, value []byte, e adapters.Expect) adapters.Mutation {
	return adapters.Mutation{Write: adapters.Write{Key: key, Value: value, Expect: e}}
}

// Check is a check mutation: the group applies only if e holds for key.
func Check(key []byte, e adapters.Expect) adapters.Mutation {
	return adapters.Mutation{Write: adapters.Write{Key: key, Expect: e}, Check: true}
}

// Delete is a delete mutation.
func Delete(key []byte, e adapters.Expect) adapters.Mutation {
	return adapters.Mutation{Write: adapters.Write{Key: key, Expect: e}, Delete: true}
}

var (
	expAny    = adapters.Expect{}
	expAbsent = adapters.Expect{Kind: adapters.ExpectAbsent}
)

func at(v adapters.Version) adapters.Expect {
	return adapters.Expect{Kind: adapters.ExpectVersion, Version: v}
}

// put writes n under key unconditionally and returns its version.
func (k Kit) put(t *testing.T, ks adapters.Keyspace, key []byte, n int) adapters.Version {
	t.Helper()
	vers, err := k.atomic(context.Background(), ks, []adapters.Mutation{Upsert(key, k.Value(key, n), expAny)})
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	if len(vers) != 1 || vers[0] == "" {
		t.Fatalf("put answered versions %q", vers)
	}
	return vers[0]
}

// state is a key as Get reports it.
type state struct {
	exists bool
	n      int
	ver    adapters.Version
}

func (s state) String() string {
	if !s.exists {
		return "absent"
	}
	return fmt.Sprintf("%d@%s", s.n, s.ver)
}

func (k Kit) read(t *testing.T, ks adapters.Keyspace, keys ...[]byte) []state {
	t.Helper()
	recs, err := k.Store.Get(context.Background(), ks, keys)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	out := make([]state, len(keys))
	for i, r := range recs {
		if r.Value != nil {
			out[i] = state{exists: true, n: k.Payload(t, r.Value), ver: r.Version}
		}
	}
	return out
}

func conflictsOf(t *testing.T, err error) []adapters.Conflict {
	t.Helper()
	var ce *adapters.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, adapters.ErrConflict) {
		t.Fatalf("want a *adapters.ConflictError, got %v", err)
	}
	if len(ce.Conflicts) == 0 {
		t.Fatal("ConflictError names no mutation")
	}
	return ce.Conflicts
}

// testConditions runs every precondition of an upsert and a delete,
// holding and not, each in a group with an unconditional upsert of a
// fresh key (the companion) that must be applied exactly when the
// mutation is.
func testConditions(t *testing.T, k Kit) {
	cases := []conditionCase{
		{"upsert/any/absent", false, adapters.ExpectAny, isAbsent, true, false},
		{"upsert/any/present", false, adapters.ExpectAny, isPresent, true, false},
		{"upsert/absent/absent", false, adapters.ExpectAbsent, isAbsent, true, false},
		{"upsert/absent/deleted", false, adapters.ExpectAbsent, wasGone, true, false},
		{"upsert/absent/present", false, adapters.ExpectAbsent, isPresent, false, true},
		{"upsert/version/current", false, adapters.ExpectVersion, isPresent, true, false},
		{"upsert/version/stale", false, adapters.ExpectVersion, isStale, false, true},
		{"upsert/version/deleted", false, adapters.ExpectVersion, wasGone, false, false},
		{"delete/any/absent", true, adapters.ExpectAny, isAbsent, true, false},
		{"delete/any/present", true, adapters.ExpectAny, isPresent, true, false},
		{"delete/absent/absent", true, adapters.ExpectAbsent, isAbsent, true, false},
		{"delete/absent/present", true, adapters.ExpectAbsent, isPresent, false, true},
		{"delete/version/current", true, adapters.ExpectVersion, isPresent, true, false},
		{"delete/version/stale", true, adapters.ExpectVersion, isStale, false, true},
		{"delete/version/deleted", true, adapters.ExpectVersion, wasGone, false, false},
	}
	ks := k.Keyspace(t)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, k, ks, k.Key(2*i), k.Key(2*i+1)) })
	}
}

// history is what was written under a condition case's key before its
// group.
type history int

const (
	isAbsent  history = iota // never written
	isPresent                // written once; ExpectVersion names that version
	isStale                  // written twice; ExpectVersion names the first version
	wasGone                  // written, then deleted; ExpectVersion names its version
)

// conditionCase is one precondition (kind) of an upsert or a delete (del)
// on a key with a history, and whether it holds; with !holds, exists is
// the Conflict.Exists the store must report.
type conditionCase struct {
	name   string
	del    bool
	kind   adapters.ExpectKind
	setup  history
	holds  bool
	exists bool
}

// run writes key's history, then the group of the companion comp and the
// case's mutation on key, and checks the outcome.
func (c conditionCase) run(t *testing.T, k Kit, ks adapters.Keyspace, key, comp []byte) {
	expect := c.expect(t, k, ks, key)
	before := k.read(t, ks, key)[0]
	m := Upsert(key, k.Value(key, 7), expect)
	if c.del {
		m = Delete(key, expect)
	}
	group := []adapters.Mutation{Upsert(comp, k.Value(comp, 8), expAny), m}
	vers, err := k.atomic(context.Background(), ks, group)
	after := k.read(t, ks, key, comp)
	switch {
	case c.del && c.kind == adapters.ExpectAbsent && k.NoDeleteAbsent:
		if !errors.Is(err, adapters.ErrInvalid) {
			t.Fatalf("want ErrInvalid, got %v", err)
		}
		assertUnchanged(t, before, after)
	case !c.holds:
		c.assertRefused(t, key, err, before, after)
	default:
		c.assertApplied(t, vers, err, after)
	}
}

// expect writes key's history and returns the case's precondition:
// ExpectVersion names the version the history gave the key, or one it
// never had if it was never written.
func (c conditionCase) expect(t *testing.T, k Kit, ks adapters.Keyspace, key []byte) adapters.Expect {
	var written adapters.Version
	switch c.setup {
	case isPresent:
		written = k.put(t, ks, key, 1)
	case isStale:
		written = k.put(t, ks, key, 1)
		if v := k.put(t, ks, key, 2); v == written {
			t.Fatalf("rewriting with another value kept version %q", v)
		}
	case wasGone:
		written = k.put(t, ks, key, 1)
		if _, err := k.atomic(context.Background(), ks, []adapters.Mutation{Delete(key, expAny)}); err != nil {
			t.Fatal(err)
		}
	}
	switch {
	case c.kind == adapters.ExpectAny:
		return expAny
	case c.kind == adapters.ExpectAbsent:
		return expAbsent
	case written == "":
		return at("1") // never written: any version is wrong
	}
	return at(written)
}

// assertRefused: the store reports one conflict, for the case's mutation
// (index 1) with the key's existence and current version, and applies
// nothing.
func (c conditionCase) assertRefused(t *testing.T, key []byte, err error, before state, after []state) {
	t.Helper()
	cs := conflictsOf(t, err)
	if len(cs) != 1 || cs[0].Index != 1 || string(cs[0].Key) != string(key) || cs[0].Exists != c.exists {
		t.Fatalf("conflicts %+v, want one for mutation 1 with exists=%v", cs, c.exists)
	}
	if c.exists && cs[0].Current != before.ver {
		t.Fatalf("conflict reports version %q, the key is at %q", cs[0].Current, before.ver)
	}
	assertUnchanged(t, before, after)
}

// assertUnchanged: a refused group left the key as it was (before) and
// did not write the companion (after[1]).
func assertUnchanged(t *testing.T, before state, after []state) {
	t.Helper()
	if after[0] != before || after[1].exists {
		t.Fatalf("refused group applied something: key %v (was %v), companion %v", after[0], before, after[1])
	}
}

// assertApplied: the group succeeded with a version per mutation, the
// companion (after[1]) and the key (after[0]) read back as written at the
// versions answered, a deleted key as absent with no version.
func (c conditionCase) assertApplied(t *testing.T, vers []adapters.Version, err error, after []state) {
	t.Helper()
	if err != nil {
		t.Fatalf("WriteAtomic: %v", err)
	}
	if len(vers) != 2 {
		t.Fatalf("%d versions for 2 mutations", len(vers))
	}
	if want := (state{true, 8, vers[0]}); after[1] != want {
		t.Fatalf("companion is %v, want %v", after[1], want)
	}
	if c.del {
		if after[0].exists || vers[1] != "" {
			t.Fatalf("deleted key is %v (version answered %q)", after[0], vers[1])
		}
		return
	}
	if want := (state{true, 7, vers[1]}); after[0] != want || vers[1] == "" {
		t.Fatalf("key is %v, want %v", after[0], want)
	}
}

// testAllOrNothing: a group with one or two refused mutations among
// several that would apply changes nothing.
func testAllOrNothing(t *testing.T, k Kit) {
	ctx := context.Background()
	ks := k.Keyspace(t)
	keys := [][]byte{k.Key(0), k.Key(1), k.Key(2), k.Key(3), k.Key(4)}
	var vers []adapters.Version
	for i := range 4 {
		vers = append(vers, k.put(t, ks, keys[i], 10+i))
	}
	stale := vers[2]
	vers[2] = k.put(t, ks, keys[2], 99)
	before := k.read(t, ks, keys...)
	for _, tc := range []struct {
		name  string
		group []adapters.Mutation
		bad   []int
	}{
		{"one", []adapters.Mutation{
			Upsert(keys[0], k.Value(keys[0], 20), at(vers[0])),
			Upsert(keys[4], k.Value(keys[4], 24), expAbsent),
			Delete(keys[1], at(vers[1])),
			Upsert(keys[2], k.Value(keys[2], 22), at(stale)), // refused
			Delete(keys[3], expAny),
		}, []int{3}},
		{"two", []adapters.Mutation{
			Delete(keys[3], expAny),
			Upsert(keys[1], k.Value(keys[1], 21), expAbsent), // refused
			Upsert(keys[4], k.Value(keys[4], 24), expAny),
			Delete(keys[2], at(stale)), // refused
			Upsert(keys[0], k.Value(keys[0], 20), expAny),
		}, []int{1, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := k.atomic(ctx, ks, tc.group)
			for _, c := range conflictsOf(t, err) {
				if !slices.Contains(tc.bad, c.Index) || string(c.Key) != string(tc.group[c.Index].Key) {
					t.Fatalf("conflict %+v names a mutation that holds", c)
				}
			}
			if after := k.read(t, ks, keys...); !slices.Equal(after, before) {
				t.Fatalf("refused group changed the store:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// testVersions: the versions WriteAtomic returns are those Get reports,
// and they serve as the next write's precondition.
func testVersions(t *testing.T, k Kit) {
	ctx := context.Background()
	ks := k.Keyspace(t)
	a, b, c, d := k.Key(0), k.Key(1), k.Key(2), k.Key(3)
	k.put(t, ks, d, 1)
	vers, err := k.atomic(ctx, ks, []adapters.Mutation{
		Upsert(a, k.Value(a, 1), expAbsent), Upsert(b, k.Value(b, 2), expAny), Upsert(c, k.Value(c, 3), expAny), Delete(d, expAny),
	})
	if err != nil {
		t.Fatal(err)
	}
	got := k.read(t, ks, a, b, c, d)
	want := []state{{true, 1, vers[0]}, {true, 2, vers[1]}, {true, 3, vers[2]}, {}}
	if !slices.Equal(got, want) || vers[3] != "" {
		t.Fatalf("after the group Get reports %v, want %v (versions answered %q)", got, want, vers)
	}
	next, err := k.atomic(ctx, ks, []adapters.Mutation{
		Upsert(a, k.Value(a, 11), at(vers[0])), Delete(b, at(vers[1])), Upsert(c, k.Value(c, 13), at(vers[2])),
	})
	if err != nil {
		t.Fatalf("writing at the answered versions: %v", err)
	}
	if next[0] == vers[0] || next[2] == vers[2] {
		t.Fatalf("rewrites kept their versions: %q then %q", vers, next)
	}
	got = k.read(t, ks, a, b, c)
	if want := []state{{true, 11, next[0]}, {}, {true, 13, next[2]}}; !slices.Equal(got, want) {
		t.Fatalf("Get reports %v, want %v", got, want)
	}
}

// testInvalid: malformed groups are refused with ErrInvalid and apply
// nothing.
func testInvalid(t *testing.T, k Kit) {
	ctx := context.Background()
	ks := k.Keyspace(t)
	a := k.Key(0)
	groups := map[string][]adapters.Mutation{
		"duplicate key": {Upsert(a, k.Value(a, 1), expAny), Upsert(k.Key(1), k.Value(k.Key(1), 1), expAny), Delete(a, expAny)},
	}
	if k.MaxGroup > 0 {
		var big []adapters.Mutation
		for i := range k.MaxGroup + 1 {
			key := k.Key(i)
			big = append(big, Upsert(key, k.Value(key, i), expAny))
		}
		groups["too many"] = big
	}
	if k.Invalid != nil {
		for i, g := range k.Invalid(t) {
			groups[fmt.Sprintf("store-specific %d", i)] = g
		}
	}
	for name, g := range groups {
		t.Run(name, func(t *testing.T) {
			if _, err := k.atomic(ctx, ks, g); !errors.Is(err, adapters.ErrInvalid) {
				t.Fatalf("want ErrInvalid, got %v", err)
			}
			for i, m := range g {
				recs, err := k.Store.Get(ctx, ks, [][]byte{m.Key})
				if errors.Is(err, adapters.ErrInvalid) {
					continue // the invalid key itself
				}
				if err != nil {
					t.Fatal(err)
				}
				if recs[0].Value != nil {
					t.Fatalf("refused group wrote key %d", i)
				}
			}
		})
	}
	if vers, err := k.atomic(ctx, ks, nil); err != nil || len(vers) != 0 {
		t.Fatalf("empty group: %q, %v", vers, err)
	}
}

// testConcurrent: two goroutines write one key at the same version, each
// with a companion key; exactly one group is applied, the other refused.
func testConcurrent(t *testing.T, k Kit) {
	ctx := context.Background()
	ks := k.Keyspace(t)
	const rounds = 5
	for r := range rounds {
		key := k.Key(3 * r)
		v0 := k.put(t, ks, key, 0)
		type result struct {
			vers []adapters.Version
			err  error
		}
		var res [2]result
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range 2 {
			wg.Go(func() {
				comp := k.Key(3*r + 1 + g)
				<-start
				res[g].vers, res[g].err = k.atomic(ctx, ks, []adapters.Mutation{
					Upsert(key, k.Value(key, 100+g), at(v0)), Upsert(comp, k.Value(comp, 200+g), expAny),
				})
			})
		}
		close(start)
		wg.Wait()
		won := -1
		for g, rs := range res {
			switch {
			case rs.err == nil && won < 0:
				won = g
			case rs.err == nil:
				t.Fatalf("round %d: both ExpectVersion writes of one version won", r)
			case !errors.Is(rs.err, adapters.ErrConflict):
				t.Fatalf("round %d: goroutine %d: %v", r, g, rs.err)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: both writes refused: %v; %v", r, res[0].err, res[1].err)
		}
		got := k.read(t, ks, key, k.Key(3*r+1), k.Key(3*r+2))
		want := []state{{true, 100 + won, res[won].vers[0]}, {}, {}}
		want[1+won] = state{true, 200 + won, res[won].vers[1]}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: goroutine %d won, store holds %v, want %v", r, won, got, want)
		}
	}
}

// testChecks: a check mutation writes nothing; the group (a check and an
// upsert of a companion key) applies when the check holds and not at all
// when it does not, with the conflict naming the checked key.
func testChecks(t *testing.T, k Kit) {
	ctx := context.Background()
	ks := k.Keyspace(t)
	key, comp := k.Key(0), k.Key(1)
	group := func(e adapters.Expect) ([]adapters.Version, error) {
		return k.atomic(ctx, ks, []adapters.Mutation{Upsert(comp, k.Value(comp, 8), expAny), Check(key, e)})
	}
	if k.NoCheck {
		if _, err := group(expAbsent); !errors.Is(err, adapters.ErrInvalid) {
			t.Fatalf("a group with a check: %v, want ErrInvalid", err)
		}
		return
	}
	refused := func(what string, e adapters.Expect, exists bool) {
		t.Helper()
		before := k.read(t, ks, key, comp)
		_, err := group(e)
		cs := conflictsOf(t, err)
		if len(cs) != 1 || cs[0].Index != 1 || cs[0].Exists != exists {
			t.Fatalf("%s: conflicts %+v, want one for the check with exists=%v", what, cs, exists)
		}
		if after := k.read(t, ks, key, comp); after[0] != before[0] || after[1] != before[1] {
			t.Fatalf("%s: the refused group changed something: %v → %v", what, before, after)
		}
	}
	held := func(what string, e adapters.Expect) {
		t.Helper()
		before := k.read(t, ks, key)[0]
		vers, err := group(e)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		after := k.read(t, ks, key, comp)
		if after[0] != before || vers[1] != "" || !after[1].exists {
			t.Fatalf("%s: checked key %v → %v (version %q), companion %v", what, before, after[0], vers[1], after[1])
		}
	}
	held("absent, checked absent", expAbsent)
	refused("absent, checked at a version", at("1"), false)
	v1 := k.put(t, ks, key, 1)
	held("present, checked at its version", at(v1))
	refused("present, checked absent", expAbsent, true)
	v2 := k.put(t, ks, key, 2)
	refused("changed since read", at(v1), true)
	held("changed, checked at the new version", at(v2))
}

// testRangeChecks: a range check writes nothing; the group applies while
// the range holds exactly the keys and versions read, and not at all once
// a key in it was inserted, changed or deleted.
func testRangeChecks(t *testing.T, k Kit) {
	if k.NoCheck {
		return // testChecks covered the refusal
	}
	ctx := context.Background()
	ks := k.Keyspace(t)
	lo, a, b, hi, out, comp := k.Key(10), k.Key(11), k.Key(12), k.Key(13), k.Key(14), k.Key(1)
	va, vb := k.put(t, ks, a, 1), k.put(t, ks, b, 2)
	k.put(t, ks, out, 9) // beyond the range: never matters
	read := []adapters.Record{{Key: a, Version: va}, {Key: b, Version: vb}}
	group := func(recs []adapters.Record) error {
		_, err := k.atomic(ctx, ks, []adapters.Mutation{
			Upsert(comp, k.Value(comp, 8), expAny),
			{Write: adapters.Write{Key: lo}, Check: true, Range: &adapters.RangeCheck{End: hi, Records: recs}},
		})
		return err
	}
	if err := group(read); err != nil {
		t.Fatalf("the range as read: %v", err)
	}
	refused := func(what string, recs []adapters.Record) {
		t.Helper()
		before := k.read(t, ks, comp)[0]
		cs := conflictsOf(t, group(recs))
		if len(cs) != 1 || cs[0].Index != 1 {
			t.Fatalf("%s: conflicts %+v, want one for the range check", what, cs)
		}
		if after := k.read(t, ks, comp)[0]; after != before {
			t.Fatalf("%s: the refused group wrote the companion: %v → %v", what, before, after)
		}
	}
	refused("a key missing from what was read", read[:1])
	vb2 := k.put(t, ks, b, 3)
	refused("a key changed since", read)
	read[1].Version = vb2
	if err := group(read); err != nil {
		t.Fatalf("the range as read again: %v", err)
	}
	k.put(t, ks, lo, 4) // an insert at the range's first key: a phantom
	refused("a key inserted since", read)
}
