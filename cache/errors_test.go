package cache

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/internal/enum"
)

// calls exercises every keyed entry point with one key and value and
// returns their errors by name; writesOnly leaves out the calls that carry
// no value (Get and delete).
func calls(e *env, ks adapters.Keyspace, key, val []byte, writesOnly bool) map[string]error {
	errs := map[string]error{}
	if !writesOnly {
		_, _, errs["Get"] = e.b.Get(e.ctx, ks, key)
		errs["Apply delete"] = e.b.Apply(e.ctx, ks, []Write{{Key: key, Delete: true}})
	}
	errs["Apply"] = e.b.Apply(e.ctx, ks, []Write{{Key: key, Value: val}})
	errs["locked insert"] = condWrite(e.ctx, e.b, ks, Write{Key: key, Value: val}, MustNotExist)
	errs["locked update"] = condWrite(e.ctx, e.b, ks, Write{Key: key, Value: val}, MustExist)
	errs["blind-locked upsert"] = condWrite(e.ctx, e.b, ks, Write{Key: key, Value: val}, Always)
	return errs
}

func TestBadInput(t *testing.T) {
	const maxKey, maxVal = 16, 32
	for _, p := range []Policy{PolicyNemo, PolicyRecord, PolicyNone} {
		t.Run(string(p), func(t *testing.T) {
			e := newEnv(t, p, "a=1", "", func(o *Options) { o.MaxValueBytes = maxVal })
			before := dump(t, e.b, testKS)
			for _, c := range []struct {
				name     string
				key, val []byte
				want     error
			}{
				{"empty key", []byte{}, []byte("v"), ErrInvalidKey},
				{"nil key", nil, []byte("v"), ErrInvalidKey},
				{"key too large", bytes.Repeat([]byte("k"), maxKey+1), []byte("v"), ErrKeyTooLarge},
				{"value too large", []byte("k"), bytes.Repeat([]byte("v"), maxVal+1), ErrValueTooLarge},
			} {
				for name, err := range calls(e, testKS, c.key, c.val, c.want == ErrValueTooLarge) {
					if !errors.Is(err, c.want) {
						t.Errorf("%s %s: %v, want %v", c.name, name, err, c.want)
					}
				}
			}
			// A bad write in a batch rejects the whole batch.
			err := e.b.Apply(e.ctx, testKS, []Write{{Key: []byte("b"), Value: []byte("2")}, {Key: nil}})
			if !errors.Is(err, ErrInvalidKey) {
				t.Errorf("batch with an empty key: %v", err)
			}
			if _, _, err := e.b.Scan(e.ctx, testKS, bytes.Repeat([]byte("k"), maxKey+1), nil, 0); !errors.Is(err, ErrKeyTooLarge) {
				t.Errorf("Scan with a long start: %v", err)
			}
			if _, _, err := e.b.Scan(e.ctx, testKS, nil, bytes.Repeat([]byte("k"), maxKey+2), 0); !errors.Is(err, ErrKeyTooLarge) {
				t.Errorf("Scan with a long end: %v", err)
			}
			if got := dump(t, e.b, testKS); got != before {
				t.Errorf("rejected calls changed the buffer: %s", got)
			}
			if got := dumpStore(t, e.raw, testKS); got != "a=1" {
				t.Errorf("rejected calls changed the store: %s", got)
			}
			e.check()

			// The largest key and value are accepted, and an empty
			// end bound is an empty range.
			bigK, bigV := bytes.Repeat([]byte("k"), maxKey), bytes.Repeat([]byte("v"), maxVal)
			for name, err := range calls(e, testKS, bigK, bigV, false) {
				if err != nil && !errors.Is(err, ErrExists) && !errors.Is(err, ErrNotFound) {
					t.Errorf("limit-sized %s: %v", name, err)
				}
			}
			if recs, next, err := e.b.Scan(e.ctx, testKS, nil, []byte{}, 0); err != nil || recs != nil || next != nil {
				t.Errorf("Scan to an empty end = %v %q %v", recs, next, err)
			}
			e.check()
		})
	}
}

func TestUnknownKeyspace(t *testing.T) {
	e := newEnv(t, PolicyNemo, "", "")
	for name, err := range calls(e, "nope", []byte("k"), []byte("v"), false) {
		if !errors.Is(err, ErrUnknownKeyspace) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, _, err := e.b.Scan(e.ctx, "nope", nil, nil, 0); !errors.Is(err, ErrUnknownKeyspace) {
		t.Errorf("Scan: %v", err)
	}
	if _, err := evictStep(e.ctx, e.b, "nope"); !errors.Is(err, ErrUnknownKeyspace) {
		t.Errorf("EvictStep: %v", err)
	}
	e.check()
}

func TestClosed(t *testing.T) {
	e := newEnv(t, PolicyNemo, "a=1", `a=1 R g1`)
	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for name, err := range calls(e, testKS, []byte("a"), []byte("v"), false) {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, _, err := e.b.Scan(e.ctx, testKS, nil, nil, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Scan: %v", err)
	}
	if _, err := evictStep(e.ctx, e.b, testKS); !errors.Is(err, ErrClosed) {
		t.Errorf("EvictStep: %v", err)
	}
	e.expect(`"" T g1 | a=1 R g1`, "")
}

// TestStoreErrors: with the store down, every call that needs it fails with
// ErrStore wrapping adapters.ErrUnavailable, changes nothing, and leaves
// dirty records dirty; calls the buffer can answer still succeed.
func TestStoreErrors(t *testing.T) {
	storeErr := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrStore) || !errors.Is(err, adapters.ErrUnavailable) || !errors.Is(err, fault.ErrInjected) {
			t.Errorf("%s: %v, want ErrStore wrapping the injected outage", what, err)
		}
	}
	t.Run("nemo", func(t *testing.T) {
		state := `"" T g1 | a=1 R g0 | c=new R g1 d | d T g1 d`
		// Runs of one: EvictStep then writes c back at once, rather than
		// sparing it with the run of a, which the hit below reads.
		e := newEnv(t, PolicyNemo, "a=1 c=old d=4 e=5", state, func(o *Options) { o.EvictRun = 1 })
		e.fs.SetDown(true)
		_, _, err := e.b.Get(e.ctx, testKS, []byte("e"))
		storeErr(t, "Get miss", err)
		e.get("a", "1", true)   // hit
		e.get("b", "", false)   // negative hit
		e.get("c", "new", true) // dirty hit
		_, _, err = e.b.Scan(e.ctx, testKS, nil, nil, 0)
		storeErr(t, "Scan with holes", err)
		storeErr(t, "locked insert in an unknown gap", condWrite(e.ctx, e.b, testKS, put("z", "1"), MustNotExist))
		if err := condWrite(e.ctx, e.b, testKS, put("b", "2"), MustNotExist); err != nil {
			t.Errorf("locked insert in a sealed gap: %v", err)
		}
		_, err = evictStep(e.ctx, e.b, testKS)
		storeErr(t, "EvictStep", err)
		evictUntil(e.ctx, e.b, 0)
		storeErr(t, "Flush", flushAll(e.ctx, e.b))
		e.fs.SetDown(false)
		// EvictUntil removed the clean record; every dirty one is kept.
		e.expectState(`"" T g1 r | b=2 R g0 d | c=new R g1 d | d T g1 d`)
		if err := flushAll(e.ctx, e.b); err != nil {
			t.Fatal(err)
		}
		if got := dumpStore(t, e.raw, testKS); got != "a=1 b=2 c=new e=5" {
			t.Errorf("store after flush: %s", got)
		}
		e.check()
	})
	t.Run("none", func(t *testing.T) {
		e := newEnv(t, PolicyNone, "a=1", "")
		e.fs.SetDown(true)
		_, _, err := e.b.Get(e.ctx, testKS, []byte("a"))
		storeErr(t, "Get", err)
		_, _, err = e.b.Scan(e.ctx, testKS, nil, nil, 0)
		storeErr(t, "Scan", err)
		storeErr(t, "Apply", e.b.Apply(e.ctx, testKS, []Write{put("b", "2")}))
		storeErr(t, "Apply delete", e.b.Apply(e.ctx, testKS, []Write{del("a")}))
		storeErr(t, "locked update", condWrite(e.ctx, e.b, testKS, put("a", "2"), MustExist))
		e.fs.SetDown(false)
		if got := dumpStore(t, e.raw, testKS); got != "a=1" {
			t.Errorf("store: %s", got)
		}
		e.expectState(`"" T g1`)
	})
	t.Run("canceled context is not a store error", func(t *testing.T) {
		e := newEnv(t, PolicyNemo, "a=1", "")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, _, err := e.b.Get(ctx, testKS, []byte("a"))
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrStore) {
			t.Errorf("Get: %v", err)
		}
		e.expect(`"" T g1`, "get:1")
	})
}

func TestOptionsValidate(t *testing.T) {
	_, err := New(newMemStore(), Options{Policy: "lru", MaxBytes: -1, AdmitWait: -1})
	if err == nil {
		t.Fatal("bad options accepted")
	}
	for _, want := range []string{`policy "lru"`, "max bytes -1", "durations"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if _, err := New(newMemStore(), Options{MaxBytes: 100}); err == nil {
		t.Error("a budget smaller than one record of the largest key was accepted")
	}
	b, err := New(newMemStore(), Options{DisableWorkers: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if o := b.Options(); o.Policy != PolicyNemo || o.MaxBytes != 256<<20 || o.RecordOverhead != 64 || o.EvictBatch != 64 {
		t.Errorf("defaults not applied: %+v", o)
	}
}

func TestDropKeyspace(t *testing.T) {
	e := newEnv(t, PolicyNemo, "a=1", `a=1 R g0 | b=2 R g1 d`)
	e.b.OpenKeyspace("u")
	e.b.OpenKeyspace("u") // idempotent
	if got := e.b.Keyspaces(); len(got) != 2 || got[0] != "t" || got[1] != "u" {
		t.Fatalf("Keyspaces = %v", got)
	}
	e.b.DropKeyspace(testKS)
	e.b.DropKeyspace("never-opened")
	if _, _, err := e.b.Get(e.ctx, testKS, []byte("a")); !errors.Is(err, ErrUnknownKeyspace) {
		t.Fatalf("Get after drop: %v", err)
	}
	if st := e.b.Stats(); st.UsedBytes != 64 || st.DirtyBytes != 0 || st.Records != 1 {
		t.Fatalf("after drop: used %d dirty %d records %d, want only u's head", st.UsedBytes, st.DirtyBytes, st.Records)
	}
	if err := flushAll(e.ctx, e.b); err != nil {
		t.Fatal(err)
	}
	if got := dumpStore(t, e.raw, testKS); got != "a=1" {
		t.Fatalf("the dropped dirty record was written back: %s", got)
	}
	if err := e.b.Check(e.ctx); err != nil {
		t.Fatal(err)
	}
}

func TestOptionsEnsureDefaults(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	if o.Policy != PolicyNemo || o.MaxBytes != 256<<20 || o.WriteBatch != 100 || o.AdmitWait != 5*time.Millisecond || o.Logger == nil {
		t.Fatalf("defaults not applied: %+v", o)
	}
	if o.OnConflict != ConflictStoreWins || o.Unstamped == nil {
		t.Fatalf("conflict defaults not applied: %+v", o)
	}
	again := o
	again.EnsureDefaults()
	// Funcs do not compare: compare the rest, and that set funcs stay.
	strip := func(o Options) Options { o.Unstamped, o.Conflicts = nil, nil; return o }
	if !reflect.DeepEqual(strip(again), strip(o)) || again.Unstamped == nil {
		t.Errorf("EnsureDefaults is not idempotent: %+v, then %+v", o, again)
	}
	set := Options{Policy: PolicyNone, MaxBytes: 1 << 30}
	set.EnsureDefaults()
	if set.Policy != PolicyNone || set.MaxBytes != 1<<30 {
		t.Errorf("EnsureDefaults overwrote set fields: %+v", set)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
	// Validate assumes defaults: it checks the fields as given.
	small := Options{MaxBytes: 100}
	if err := small.Validate(); err != nil {
		t.Errorf("Validate consulted defaults: %v", err)
	}
	small.EnsureDefaults()
	if err := small.Validate(); err == nil {
		t.Error("a budget smaller than one record of the largest key was accepted")
	}
	for _, p := range enum.Policies() {
		if !p.Valid() {
			t.Errorf("%q not Valid", p)
		}
	}
	if Policy("lru").Valid() || Policy("").Valid() {
		t.Error("unknown policy Valid")
	}
}
