package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
)

// Concurrent misses of one key share one store read (getMiss, takeoff),
// unless sharing it could answer older than the read may be: a fetch begun
// before a write through the buffer, or longer ago than the staleness
// bound, is not shared.

// gateStore holds every Get until release is closed, counting them; a
// failure set with failNext fails the next Get once it is released.
type gateStore struct {
	adapters.Store
	gets     atomic.Int64
	release  chan struct{}
	failNext atomic.Bool
}

var errGateFail = errors.New("gate: injected read failure")

func (g *gateStore) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	g.gets.Add(1)
	fail := g.failNext.Swap(false)
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if fail {
		return nil, errGateFail
	}
	return g.Store.Get(ctx, ks, keys)
}

func newGateEnv(t *testing.T) (*staleEnv, *gateStore) {
	t.Helper()
	m := newMemStore()
	g := &gateStore{Store: m, release: make(chan struct{})}
	e := newStaleEnv(t, PolicyNemo, testStaleness, g)
	e.m = m
	return e, g
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

type getResult struct {
	val string
	err error
}

// goGet starts a Get of key and returns where its answer arrives.
func (e *staleEnv) goGet(ctx context.Context, key string) <-chan getResult {
	out := make(chan getResult, 1)
	go func() {
		v, ok, err := e.b.Get(ctx, testKS, []byte(key))
		switch {
		case err != nil:
			out <- getResult{err: err}
		case !ok:
			out <- getResult{val: "<absent>"}
		default:
			out <- getResult{val: string(v)}
		}
	}()
	return out
}

func TestCoalescedMisses(t *testing.T) {
	e, g := newGateEnv(t)
	e.other("k", []byte("v1"))
	const n = 8
	var answers []<-chan getResult
	for range n {
		answers = append(answers, e.goGet(e.ctx, "k"))
	}
	waitFor(t, "every read to miss", func() bool { return e.b.Stats().Misses == n })
	waitFor(t, "the first read to reach the store", func() bool { return g.gets.Load() >= 1 })
	time.Sleep(50 * time.Millisecond) // the others reach takeoff and wait
	close(g.release)
	for _, a := range answers {
		if r := <-a; r.err != nil || r.val != "v1" {
			t.Fatalf("got %+v, want v1", r)
		}
	}
	gets, coalesced := g.gets.Load(), e.b.Stats().Coalesced
	t.Logf("%d reads: %d store reads, %d answered by another's", n, gets, coalesced)
	if gets+int64(coalesced) != n || coalesced < n/2 {
		t.Fatalf("%d store reads and %d coalesced for %d concurrent misses; want one read shared by (nearly) all", gets, coalesced, n)
	}
	if got := e.get("k"); got != "v1" || g.gets.Load() != gets {
		t.Fatalf("after the fetch: %s with %d store reads; want a hit on v1", got, g.gets.Load())
	}
	e.check()
}

// Concurrent misses of an absent key share the fetch that found it
// absent, and every one of them answers it absent with a nil value: an
// empty one reads as present and empty where only the value travels (the
// peer API's Read, whose owner answered a replica's read of an absent key
// with it, which the replica's frontend then failed to decode).
func TestCoalescedMissOfAnAbsentKey(t *testing.T) {
	e, g := newGateEnv(t)
	const n = 8
	type answer struct {
		v   []byte
		ok  bool
		err error
	}
	answers := make(chan answer, n)
	for range n {
		go func() {
			v, ok, err := e.b.Get(e.ctx, testKS, []byte("absent"))
			answers <- answer{v, ok, err}
		}()
	}
	waitFor(t, "every read to miss", func() bool { return e.b.Stats().Misses == n })
	time.Sleep(50 * time.Millisecond) // the others reach takeoff and wait
	close(g.release)
	for range n {
		if a := <-answers; a.err != nil || a.ok || a.v != nil {
			t.Fatalf("got (%q, %v, %v), want (nil, false, nil)", a.v, a.ok, a.err)
		}
	}
	if c := e.b.Stats().Coalesced; c == 0 {
		t.Fatalf("no read was answered by another's fetch: the case is not covered")
	}
	e.check()
}

// ownFetch starts a read of k (the store holds val), runs between while
// its fetch is held, and checks that a second read of k then makes a
// store read of its own instead of sharing the first one's.
func ownFetch(t *testing.T, val string, between func(e *staleEnv)) {
	t.Helper()
	e, g := newGateEnv(t)
	e.other("k", []byte(val))
	first := e.goGet(e.ctx, "k")
	waitFor(t, "the first read to reach the store", func() bool { return g.gets.Load() == 1 })
	between(e)
	second := e.goGet(e.ctx, "k")
	waitFor(t, "the second read to make a store read of its own", func() bool { return g.gets.Load() == 2 })
	close(g.release)
	for _, a := range []<-chan getResult{first, second} {
		if r := <-a; r.err != nil || r.val != val {
			t.Fatalf("got %+v, want %s", r, val)
		}
	}
	if c := e.b.Stats().Coalesced; c != 0 {
		t.Fatalf("%d coalesced, want 0", c)
	}
}

// A write through the buffer to another key of the keyspace: a read of k
// begun after it must not take an answer fetched before it.
func TestCoalesceNotAcrossAWrite(t *testing.T) {
	ownFetch(t, "old", func(e *staleEnv) {
		if err := e.b.Apply(e.ctx, testKS, []Write{{Key: []byte("z"), Value: []byte("1")}}); err != nil {
			t.Fatal(err)
		}
	})
}

// The fetch in flight began longer ago than the bound.
func TestCoalesceNotPastTheBound(t *testing.T) {
	ownFetch(t, "v", func(e *staleEnv) { e.clk.add(testStaleness + testStaleness/8) })
}

// As after a forwarded commit of k.
func TestCoalesceAfterForget(t *testing.T) {
	ownFetch(t, "v", func(e *staleEnv) { e.b.Forget(testKS, [][]byte{[]byte("k")}) })
}

// A failed shared fetch fails only its own read: each waiter asks the
// store itself.
func TestCoalescedLeaderFails(t *testing.T) {
	e, g := newGateEnv(t)
	e.other("k", []byte("v"))
	g.failNext.Store(true)
	first := e.goGet(e.ctx, "k")
	waitFor(t, "the first read to reach the store", func() bool { return g.gets.Load() == 1 })
	second := e.goGet(e.ctx, "k")
	waitFor(t, "the second read to miss", func() bool { return e.b.Stats().Misses == 2 })
	time.Sleep(20 * time.Millisecond)
	close(g.release)
	if r := <-first; !errors.Is(r.err, errGateFail) || !errors.Is(r.err, ErrStore) {
		t.Fatalf("first: %+v, want the store's failure", r)
	}
	if r := <-second; r.err != nil || r.val != "v" {
		t.Fatalf("second: %+v, want v read by itself", r)
	}
	if gets := g.gets.Load(); gets != 2 {
		t.Fatalf("%d store reads, want 2", gets)
	}
	e.check()
}

// A waiter whose context ends stops waiting; the fetch goes on for the
// others.
func TestCoalescedWaiterCancelled(t *testing.T) {
	e, g := newGateEnv(t)
	e.other("k", []byte("v"))
	first := e.goGet(e.ctx, "k")
	waitFor(t, "the first read to reach the store", func() bool { return g.gets.Load() == 1 })
	ctx, cancel := context.WithCancel(e.ctx)
	second := e.goGet(ctx, "k")
	waitFor(t, "the second read to miss", func() bool { return e.b.Stats().Misses == 2 })
	time.Sleep(20 * time.Millisecond)
	cancel()
	if r := <-second; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %+v", r)
	}
	close(g.release)
	if r := <-first; r.err != nil || r.val != "v" {
		t.Fatalf("first: %+v", r)
	}
}

// Readers of two keys, each written through by one writer who then
// forgets it (so reads miss and share fetches), under -race: a read never
// answers a value older than one acknowledged before it began.
func TestCoalesceReadsYourWrites(t *testing.T) {
	b, err := New(newMemStore(), Options{Policy: PolicyNemo, Logger: quietLog, MaxStaleness: time.Hour, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.OpenKeyspace(testKS)
	ctx := context.Background()
	keys := [2][]byte{[]byte("a"), []byte("b")}
	var acked [2]atomic.Int64 // the last value acknowledged per key
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 16)
	for w := range keys {
		wg.Go(func() {
			for v := int64(1); ; v++ {
				select {
				case <-stop:
					return
				default:
				}
				val := []byte{byte(v), byte(v >> 8), byte(v >> 16)}
				if err := b.WriteThrough(ctx, testKS, []Write{{Key: keys[w], Value: val}}, false); err != nil {
					errc <- err
					return
				}
				b.Forget(testKS, [][]byte{keys[w]})
				acked[w].Store(v)
			}
		})
	}
	var reads atomic.Int64
	for r := range 6 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := (i + r) % len(keys)
				floor := acked[k].Load()
				v, ok, err := b.Get(ctx, testKS, keys[k])
				if err != nil {
					errc <- err
					return
				}
				reads.Add(1)
				got := int64(0)
				if ok && len(v) == 3 {
					got = int64(v[0]) | int64(v[1])<<8 | int64(v[2])<<16
				}
				if got < floor {
					errc <- fmt.Errorf("read %s = %d, older than %d acknowledged before the read began", keys[k], got, floor)
					return
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	st := b.Stats()
	t.Logf("%d reads, %d misses, %d coalesced", reads.Load(), st.Misses, st.Coalesced)
	if st.Coalesced == 0 {
		t.Fatal("no miss shared a fetch: the test did not exercise coalescing")
	}
	if err := b.Check(ctx); err != nil {
		t.Fatal(err)
	}
}
