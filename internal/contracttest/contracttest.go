// Package contracttest holds what the test suites that run nemo under
// contract mode (adapters/contract) share: which seeds to run, from
// NEMO_CONTRACT_SEEDS; the comparison of an adapter's range reads under
// the contract with the same reads made directly; and the adapters' common
// answer to writes whose replies were lost.
package contracttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/contract"
	"github.com/nemocache/nemo/adapters/storetest"
)

// EnvSeeds names the contract seeds the suites run: a count n (seeds 1 to
// n) or a comma-separated list ("3,17"). Unset, DefaultSeeds.
const EnvSeeds = "NEMO_CONTRACT_SEEDS"

// DefaultSeeds is how many seeds CI runs per backend and coherence mode:
// under the race detector the Datastore differential takes about 17 s a
// seed and mode (each against both emulators), the Azure one about 15 s.
// NEMO_CONTRACT_SEEDS=5 is the full check.
const DefaultSeeds = 1

// Seeds returns the contract seeds to run.
func Seeds(tb testing.TB) []uint64 {
	tb.Helper()
	env := strings.TrimSpace(os.Getenv(EnvSeeds))
	if env == "" {
		env = strconv.Itoa(DefaultSeeds)
	}
	if !strings.Contains(env, ",") {
		n, err := strconv.Atoi(env)
		if err != nil || n < 0 {
			tb.Fatalf("%s=%q: want a count or a comma-separated list of seeds", EnvSeeds, env)
		}
		out := make([]uint64, n)
		for i := range out {
			out[i] = uint64(i + 1)
		}
		return out
	}
	var out []uint64
	for _, f := range strings.Split(env, ",") {
		s, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil {
			tb.Fatalf("%s=%q: %q is not a seed", EnvSeeds, env, f)
		}
		out = append(out, s)
	}
	return out
}

// A Read is one range read SameRanges compares.
type Read struct {
	Name       string
	KS         adapters.Keyspace
	Start, End []byte
	Limit      int
}

// SameRanges makes each read on direct and on under (the same backend
// under the contract) and fails t where under's answer differs, or where
// under takes as complete (more false: the whole range; else up to its
// last record) what the backend's own batches did not vouch for
// (adapters.RangeReport).
func SameRanges(t testing.TB, ctx context.Context, direct, under adapters.Store, reads []Read) {
	t.Helper()
	for _, r := range reads {
		want, wantMore, err := direct.GetRange(ctx, r.KS, r.Start, r.End, r.Limit)
		if err != nil {
			t.Fatalf("%s directly: %v", r.Name, err)
		}
		rctx, report := adapters.WithRangeReport(ctx)
		got, more, err := under.GetRange(rctx, r.KS, r.Start, r.End, r.Limit)
		if err != nil {
			t.Fatalf("%s under the contract: %v", r.Name, err)
		}
		if g, w := render(got, more), render(want, wantMore); g != w {
			t.Errorf("%s:\n direct: %s\n under:  %s", r.Name, w, g)
		}
		hi := r.End
		if more && len(got) > 0 {
			hi = adapters.Successor(got[len(got)-1].Key)
		}
		if covers, ok := report.Covers(hi); !ok || !covers {
			t.Errorf("%s: the answer is complete below %q, the batches reported say not (reported: %v)", r.Name, hi, ok)
		}
	}
}

func render(recs []adapters.Record, more bool) string {
	keys := make([]string, len(recs))
	for i, r := range recs {
		keys[i] = fmt.Sprintf("%x@%s", r.Key, r.Version)
	}
	return fmt.Sprint(keys, " more=", more)
}

// Store is a remote adapter with atomic groups, as both are.
type Store interface {
	adapters.Store
	adapters.AtomicWriter
}

// UnknownOutcomes checks how store s, whose backend is under c (with no
// rates of its own), answers writes the backend applied and whose replies
// it lost (Contract.LoseNext). A write that means the same sent twice (an
// upsert or delete without a precondition, a group of them) is sent again
// and succeeds; any other (an insert, a write at a version, a group
// holding one) fails with adapters.ErrUnknownOutcome and nothing that
// reads as a conflict or an invalid request, its own first application
// being what a retry would meet; and it was applied. rec(i, n) is a record
// of key i holding the number n, which number reads it back.
func UnknownOutcomes(t *testing.T, ctx context.Context, s Store, c *contract.Contract, ks adapters.Keyspace, rec func(i, n int) adapters.Record, number func([]byte) int) {
	t.Helper()
	get := func(k []byte) adapters.Record {
		t.Helper()
		recs, err := s.Get(ctx, ks, [][]byte{k})
		if err != nil {
			t.Fatal(err)
		}
		return recs[0]
	}
	holds := func(r adapters.Record) bool {
		cur := get(r.Key)
		return cur.Value != nil && number(cur.Value) == number(r.Value)
	}
	unknown := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, adapters.ErrUnknownOutcome) || errors.Is(err, adapters.ErrConflict) || errors.Is(err, adapters.ErrInvalid) {
			t.Errorf("%s with its reply lost: %v, want only an unknown outcome", what, err)
		}
	}
	at := func(k []byte) adapters.Expect {
		return adapters.Expect{Kind: adapters.ExpectVersion, Version: get(k).Version}
	}
	absent := adapters.Expect{Kind: adapters.ExpectAbsent}
	before := c.Stats().Lost

	r := rec(1, 1)
	c.LoseNext(1)
	if _, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{r})); err != nil || !holds(r) {
		t.Errorf("a plain upsert with its reply lost: %v, want it sent again", err)
	}
	r = rec(2, 2)
	c.LoseNext(1)
	_, err := s.Upsert(ctx, ks, []adapters.Write{{Key: r.Key, Value: r.Value, Expect: absent}})
	unknown("an insert", err)
	if !holds(r) {
		t.Error("the insert was not applied")
	}
	r2 := rec(2, 3)
	c.LoseNext(1)
	_, err = s.Upsert(ctx, ks, []adapters.Write{{Key: r2.Key, Value: r2.Value, Expect: at(r2.Key)}})
	unknown("an update at a version", err)
	if !holds(r2) {
		t.Error("the update was not applied")
	}
	c.LoseNext(1)
	unknown("a delete at a version", s.Delete(ctx, ks, []adapters.Write{{Key: r.Key, Expect: at(r.Key)}}))
	if get(r.Key).Value != nil {
		t.Error("the delete was not applied")
	}
	r = rec(3, 4)
	if _, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{r})); err != nil {
		t.Fatal(err)
	}
	c.LoseNext(1)
	if err := s.Delete(ctx, ks, storetest.Deletes([][]byte{r.Key})); err != nil || get(r.Key).Value != nil {
		t.Errorf("a plain delete with its reply lost: %v, want it sent again", err)
	}
	a, b := rec(4, 5), rec(5, 6)
	c.LoseNext(1)
	_, err = s.WriteAtomic(ctx, ks, []adapters.Mutation{{Write: adapters.Write{Key: a.Key, Value: a.Value, Expect: absent}}, {Write: adapters.Write{Key: b.Key, Value: b.Value}}})
	unknown("a group holding an insert", err)
	if !holds(a) || !holds(b) {
		t.Error("the group was not applied")
	}
	a, b = rec(6, 7), rec(7, 8)
	c.LoseNext(1)
	if _, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{{Write: adapters.Write{Key: a.Key, Value: a.Value}}, {Write: adapters.Write{Key: b.Key, Value: b.Value}}}); err != nil || !holds(a) || !holds(b) {
		t.Errorf("a group of plain upserts with its reply lost: %v, want it sent again", err)
	}
	a, b = rec(8, 9), rec(9, 10)
	c.LoseNext(1)
	_, err = s.Upsert(ctx, ks, []adapters.Write{{Key: a.Key, Value: a.Value, Expect: absent}, {Key: b.Key, Value: b.Value, Expect: absent}})
	unknown("a batch of inserts", err)
	if !holds(a) || !holds(b) {
		t.Error("the batch was not applied")
	}
	if lost := c.Stats().Lost - before; lost != 8 {
		t.Errorf("%d replies lost, want 8", lost)
	}
}
