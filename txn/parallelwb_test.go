package txn

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/cache"
)

// applied is one write the store applied to a key: a value, or a delete.
type applied struct {
	val string
	del bool
}

// orderLog is what an orderStore saw: per key, the writes the store
// applied, in order; the calls in flight (now and at most); and any key
// written by two calls in flight together.
type orderLog struct {
	mu       sync.Mutex
	keys     map[string][]applied
	busy     map[string]bool
	overlaps []string
	inFlight atomic.Int64
	maxCalls atomic.Int64
}

// orderStore is the embedded store, recording every write it applies in
// an orderLog (it sits under the fault injector, so a write the injector
// lets through before failing the call is recorded as applied).
type orderStore struct {
	*embedded.Store
	log *orderLog
}

func (s orderStore) enter(ws []adapters.Write) {
	n := s.log.inFlight.Add(1)
	for m := s.log.maxCalls.Load(); n > m && !s.log.maxCalls.CompareAndSwap(m, n); m = s.log.maxCalls.Load() {
	}
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	for _, w := range ws {
		if k := string(w.Key); s.log.busy[k] {
			s.log.overlaps = append(s.log.overlaps, keyName(w.Key))
		} else {
			s.log.busy[k] = true
		}
	}
}

// leave records the writes of ws the call applied (all but the refused
// ones, unless it failed otherwise).
func (s orderStore) leave(ws []adapters.Write, del bool, err error) {
	defer s.log.inFlight.Add(-1)
	refused := map[int]bool{}
	var ce *adapters.ConflictError
	if errors.As(err, &ce) {
		for _, c := range ce.Conflicts {
			refused[c.Index] = true
		}
	} else if err != nil {
		refused = nil
	}
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	for i, w := range ws {
		k := string(w.Key)
		delete(s.log.busy, k)
		if refused != nil && !refused[i] {
			s.log.keys[k] = append(s.log.keys[k], applied{val: string(w.Value), del: del})
		}
	}
}

func (s orderStore) Upsert(ctx context.Context, ks adapters.Keyspace, ws []adapters.Write) ([]adapters.Version, error) {
	s.enter(ws)
	vers, err := s.Store.Upsert(ctx, ks, ws)
	s.leave(ws, false, err)
	return vers, err
}

func (s orderStore) Delete(ctx context.Context, ks adapters.Keyspace, ws []adapters.Write) error {
	s.enter(ws)
	err := s.Store.Delete(ctx, ks, ws)
	s.leave(ws, true, err)
	return err
}

// inOrder reports whether got (what the store applied to a key, in
// order) follows want (the key's acknowledged writes, in order): each
// applied write is the same or a later acknowledged one than the write
// before it, never an earlier one.
func inOrder(got, want []applied) bool {
	at := 0
	for _, g := range got {
		for at < len(want) && want[at] != g {
			at++
		}
		if at == len(want) {
			return false
		}
	}
	return true
}

// TestParallelWriteBackKeepsOrderAndCheckpoints runs write-back with up to
// eight store calls in flight (batches of four records) under writers,
// checkpoints and a store that is slow, fails calls and applies part of a
// failing batch, then crashes and replays: each key's writes reach the
// store in the order they were acknowledged, never two calls with one key
// in flight together, and after the replay's flush the store holds every
// key's last acknowledged write. With invariants on (-race or -tags
// invariants) every checkpoint also asserts that it covers no record the
// store has not confirmed (the one durability rule).
func TestParallelWriteBackKeepsOrderAndCheckpoints(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	log := &orderLog{keys: map[string][]applied{}, busy: map[string]bool{}}
	over := func(st *embedded.Store) adapters.Store { return orderStore{st, log} }
	set := func(co *cache.Options, _ *Options) {
		co.WriteBatch, co.WriteBackParallelism = 4, 8
		co.FlushInterval, co.MaxDirtyAge = 5*time.Millisecond, time.Millisecond
	}
	d := openEnvOver(t, dir, nil, over, set)
	slow := fault.OpConfig{Latency: time.Millisecond, Jitter: 3 * time.Millisecond, ErrorRate: 0.15, PartialRate: 0.5}
	d.fault.SetConfig(fault.Config{Seed: 7, Ops: map[adapters.Op]fault.OpConfig{
		adapters.OpUpsert: slow, adapters.OpDelete: slow,
	}})

	const writers, keysEach, enough = 8, 16, 2000
	want := make([]map[string][]applied, writers) // each writer's keys: their acknowledged writes
	var wg sync.WaitGroup
	var stop atomic.Bool
	var acked atomic.Int64
	for g := range writers {
		want[g] = map[string][]applied{}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; !stop.Load(); i++ {
				key := k(rng.IntN(keysEach)*writers + g) // the writers' keys interleave
				w := applied{val: fmt.Sprintf("%d/%d", g, i)}
				var err error
				if rng.IntN(5) == 0 {
					w = applied{del: true}
					_, err = d.eng.Delete(ctx, "t", key)
				} else {
					err = d.eng.Upsert(ctx, "t", key, []byte(w.val))
				}
				if err != nil {
					t.Error(err)
					return
				}
				want[g][string(key)] = append(want[g][string(key)], w)
				acked.Add(1)
			}
		})
	}
	// Until enough writes (a count, not a time: a loaded machine only
	// takes longer), with checkpoints all along.
	checkpoints := 0
	for deadline := time.Now().Add(time.Minute); acked.Load() < enough || checkpoints < 2; {
		if d.eng.Checkpoint(ctx) == nil { // a flush the faults failed is retried by the next one
			checkpoints++
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes and %d checkpoints in a minute", acked.Load(), checkpoints)
		}
	}
	stop.Store(true)
	wg.Wait()
	calls := d.buf.Stats().WritebackCalls
	d.close() // a crash: whatever is dirty is only in the log

	d = openEnvOver(t, dir, nil, over, nil)
	defer d.close()
	if err := d.eng.Flush(ctx); err != nil {
		t.Fatalf("flush after the replay: %v", err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.overlaps) > 0 {
		t.Errorf("keys written by two store calls in flight together: %v", log.overlaps)
	}
	writes := 0
	for _, keys := range want {
		for key, ws := range keys {
			writes += len(ws)
			if got := log.keys[key]; !inOrder(got, ws) {
				t.Errorf("key %s: the store applied %v, out of the acknowledged order %v", keyName([]byte(key)), got, ws)
			}
			v, ok, err := d.eng.Get(ctx, "t", []byte(key), ReadLatest)
			recs, serr := d.store.Get(ctx, "t", [][]byte{[]byte(key)})
			last := ws[len(ws)-1]
			switch {
			case err != nil || serr != nil:
				t.Fatalf("key %s: %v %v", keyName([]byte(key)), err, serr)
			case last.del && (ok || recs[0].Value != nil):
				t.Errorf("key %s: deleted last, yet the engine has it (%v) or the store %q", keyName([]byte(key)), ok, recs[0].Value)
			case !last.del && (string(v) != last.val || string(recs[0].Value) != last.val):
				t.Errorf("key %s: last acknowledged %q, the engine has %q, the store %q", keyName([]byte(key)), last.val, v, recs[0].Value)
			}
		}
	}
	if max := log.maxCalls.Load(); max > 8 {
		t.Errorf("%d store calls in flight at once, over the bound of 8", max)
	}
	if max := log.maxCalls.Load(); writes < enough || calls < 10 || max < 2 {
		t.Fatalf("test did too little: %d writes, %d checkpoints, %d write-back calls, at most %d in flight", writes, checkpoints, calls, max)
	}
	t.Logf("%d writes, %d checkpoints, %d write-back calls before the crash, at most %d store calls in flight", writes, checkpoints, calls, log.maxCalls.Load())
}
